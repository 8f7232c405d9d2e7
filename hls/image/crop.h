// crop.h: the crop unit's C model, a centred window as torchvision's CenterCrop places it:
// offset int(round((size - crop) / 2)) with Python's round-half-to-even.
#pragma once
#include <cstdint>

#include "hls_compat.h"
#include "image_types.h"

namespace atoll_image {

inline uint32_t center_offset(uint32_t size, uint32_t crop) {
  const uint32_t d = size - crop;
  const uint32_t half = d >> 1;
  return (d & 1) && (half & 1) ? half + 1 : half;  // x.5 rounds to the even neighbour
}

// Passes the centred out_h x out_w window of an h x w stream (the whole frame when equal).
inline void crop_stream(hls::stream<Pixel>& in, hls::stream<Pixel>& out, uint32_t h, uint32_t w,
                        uint32_t out_h, uint32_t out_w) {
  const uint32_t top = center_offset(h, out_h);
  const uint32_t left = center_offset(w, out_w);
crop_rows:
  for (uint32_t y = 0; y < h; ++y) {
#pragma HLS LOOP_TRIPCOUNT max = kTypicalDim
  crop_cols:
    for (uint32_t x = 0; x < w; ++x) {
#pragma HLS LOOP_TRIPCOUNT max = kTypicalDim
      const Pixel p = in.read();
      if (y - top < out_h && x - left < out_w) out.write(p);  // unsigned: also rejects y < top
    }
  }
}

}  // namespace atoll_image
