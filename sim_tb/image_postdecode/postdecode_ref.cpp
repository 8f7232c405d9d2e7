// postdecode_ref.cpp: extern "C" entry points to the post-decode unit's C model and to its resize
// taps (hls/image), for the image_postdecode and resize_tap_gen testbenches (ctypes).
#include <cstdint>

#include "image_postdecode.h"
#include "resize.h"
#include "upsample_color.h"

using namespace atoll_image;

extern "C" {

// src_h x src_w RGB pixels (row-major, 3 bytes each) through image_postdecode(); writes
// crop_h * crop_w beats of three uint32 lanes to beats.
void postdecode_ref(const uint8_t* rgb, uint32_t src_h, uint32_t src_w, uint32_t dst_h, uint32_t dst_w,
                    uint32_t crop_h, uint32_t crop_w, uint32_t format, uint32_t* beats) {
  hls::stream<uint64_t> pixels;
  hls::stream<PostBeat> out;
  for (uint32_t y = 0; y < src_h; ++y) {
    for (uint32_t x = 0; x < src_w; x += 2) {
      const uint8_t* p = rgb + 3 * (uint64_t{y} * src_w + x);
      const uint32_t second = x + 1 < src_w ? uint32_t{p[3]} | uint32_t{p[4]} << 8 | uint32_t{p[5]} << 16 : 0;
      pixels.write(pack_pair(uint32_t{p[0]} | uint32_t{p[1]} << 8 | uint32_t{p[2]} << 16, second));
    }
  }
  image_postdecode(pixels, out, src_h, src_w, dst_h, dst_w, crop_h, crop_w, format);
  for (uint64_t i = 0; i < uint64_t{crop_h} * crop_w; ++i) {
    const PostBeat beat = out.read();
    for (uint32_t k = 0; k < kChannels; ++k) beats[3 * i + k] = beat.lane[k];
  }
}

// For n rows {src, dst, d}: the column tap then the row tap, each {src0, src1, w0, w1}.
void resize_taps_ref(const uint16_t* vectors, long n, uint16_t* taps) {
  for (long i = 0; i < n; ++i) {
    const uint16_t* v = vectors + 3 * i;
    const ResizeTap column = resize_tap(v[2], v[0], v[1], true), row = resize_tap(v[2], v[0], v[1], false);
    const int32_t fields[8] = {column.src0, column.src1, column.w0, column.w1, row.src0, row.src1, row.w0, row.w1};
    for (int k = 0; k < 8; ++k) taps[8 * i + k] = static_cast<uint16_t>(fields[k]);
  }
}

}  // extern "C"
