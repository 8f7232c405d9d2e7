// jpeg_upsample.h: chroma upsampling to full resolution with the rounding of libjpeg(-turbo)'s
// default "fancy" (triangular, centred) filters: h2v1 (4:2:2), h2v2 (4:2:0) and h1v2 (4:4:0).
// Each output row is built from the nearest input row and the next-nearest one (the first and
// last rows stand in for the missing neighbours at the image edges). Components 2 or fewer
// samples wide use box replication for h2, as libjpeg does.
#pragma once
#include <cstdint>

#include "image_types.h"

namespace atoll_image {

// Horizontal 2x with weights 3/4 and 1/4; biases 1 (left output) and 2 (right output).
inline void upsample_h2_row(const uint8_t* in, uint32_t n, uint8_t* out) {
  if (n <= 2) {
  h2_box:
    for (uint32_t i = 0; i < n; ++i) {
#pragma HLS LOOP_TRIPCOUNT max = 2
      out[2 * i] = out[2 * i + 1] = in[i];
    }
    return;
  }
  out[0] = in[0];
  out[1] = static_cast<uint8_t>((in[0] * 3 + in[1] + 2) >> 2);
h2_mid:
  for (uint32_t i = 1; i + 1 < n; ++i) {
#pragma HLS LOOP_TRIPCOUNT max = kTypicalDim / 2
    const uint32_t c = in[i] * 3u;
    out[2 * i] = static_cast<uint8_t>((c + in[i - 1] + 1) >> 2);
    out[2 * i + 1] = static_cast<uint8_t>((c + in[i + 1] + 2) >> 2);
  }
  out[2 * n - 2] = static_cast<uint8_t>((in[n - 1] * 3 + in[n - 2] + 1) >> 2);
  out[2 * n - 1] = in[n - 1];
}

// Vertical 2x: near row weighted 3/4, far row 1/4; bias 1 for the upper output of a pair, 2 for
// the lower one.
inline void upsample_v2_row(const uint8_t* near, const uint8_t* far, bool lower, uint32_t n,
                            uint8_t* out) {
  const uint32_t bias = lower ? 2 : 1;
v2_cols:
  for (uint32_t i = 0; i < n; ++i) {
#pragma HLS LOOP_TRIPCOUNT max = kTypicalDim
    out[i] = static_cast<uint8_t>((near[i] * 3u + far[i] + bias) >> 2);
  }
}

// 2x in both directions: vertical sums near*3 + far (kept at 4x scale), then horizontal 3:1 with
// biases 8 (left) and 7 (right) on the 16x-scaled sum.
inline void upsample_h2v2_row(const uint8_t* near, const uint8_t* far, uint32_t n,
                              uint8_t* out) {
  if (n <= 2) {
  h2v2_box:
    for (uint32_t i = 0; i < n; ++i) {
#pragma HLS LOOP_TRIPCOUNT max = 2
      out[2 * i] = out[2 * i + 1] = near[i];
    }
    return;
  }
  uint32_t last = 0;
  uint32_t cur = near[0] * 3u + far[0];
  uint32_t next = near[1] * 3u + far[1];
  out[0] = static_cast<uint8_t>((cur * 4 + 8) >> 4);
  out[1] = static_cast<uint8_t>((cur * 3 + next + 7) >> 4);
h2v2_mid:
  for (uint32_t i = 1; i + 1 < n; ++i) {
#pragma HLS LOOP_TRIPCOUNT max = kTypicalDim / 2
    last = cur;
    cur = next;
    next = near[i + 1] * 3u + far[i + 1];
    out[2 * i] = static_cast<uint8_t>((cur * 3 + last + 8) >> 4);
    out[2 * i + 1] = static_cast<uint8_t>((cur * 3 + next + 7) >> 4);
  }
  last = cur;
  cur = next;
  out[2 * n - 2] = static_cast<uint8_t>((cur * 3 + last + 8) >> 4);
  out[2 * n - 1] = static_cast<uint8_t>((cur * 4 + 7) >> 4);
}

}  // namespace atoll_image
