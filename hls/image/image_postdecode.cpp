// image_postdecode.cpp: C model of the image_postdecode RTL blackbox, used by C simulation: the
// resize, crop and normalise units of this folder chained on host FIFOs.
#include "image_postdecode.h"

#include "crop.h"
#include "normalize.h"
#include "resize.h"

using namespace atoll_image;

void image_postdecode(hls::stream<uint64_t>& pixels, hls::stream<PostBeat>& beats, uint32_t src_h,
                      uint32_t src_w, uint32_t dst_h, uint32_t dst_w, uint32_t crop_h, uint32_t crop_w,
                      uint32_t format) {
  hls::stream<Pixel> decoded, resized, cropped;
postdecode_unpack:
  for (uint32_t y = 0; y < src_h; ++y) {
    for (uint32_t x = 0; x < src_w; x += 2) {
      const uint64_t pair = pixels.read();
      decoded.write(unpack_pixel(static_cast<uint32_t>(pair)));
      if (x + 1 < src_w) decoded.write(unpack_pixel(static_cast<uint32_t>(pair >> 32)));
    }
  }
  resize_stream(decoded, resized, src_h, src_w, dst_h, dst_w);
  crop_stream(resized, cropped, dst_h, dst_w, crop_h, crop_w);
  normalize_beats(cropped, beats, crop_h * crop_w, format);
}
