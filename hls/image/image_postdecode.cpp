// image_postdecode.cpp: C model of the image_postdecode RTL blackbox, used by C simulation: the
// resize, crop and normalise units of this folder chained on host FIFOs.
#include "image_postdecode.h"

#include "crop.h"
#include "normalize.h"
#include "resize.h"

using namespace atoll_image;

void image_postdecode(hls::stream<uint32_t>& pixels, hls::stream<PostBeat>& beats, uint32_t src_h,
                      uint32_t src_w, uint32_t dst_h, uint32_t dst_w, uint32_t crop_h, uint32_t crop_w,
                      uint32_t format) {
  hls::stream<Pixel> decoded, resized, cropped;
postdecode_unpack:
  for (uint64_t i = 0; i < uint64_t{src_h} * src_w; ++i) {
#pragma HLS LOOP_TRIPCOUNT max = kTypicalPixels
    decoded.write(unpack_pixel(pixels.read()));
  }
  resize_stream(decoded, resized, src_h, src_w, dst_h, dst_w);
  crop_stream(resized, cropped, dst_h, dst_w, crop_h, crop_w);
  normalize_beats(cropped, beats, crop_h * crop_w, format);
}
