// jpeg_upsample.h: chroma upsampling to full resolution with the rounding of libjpeg(-turbo)'s
// default "fancy" (triangular, centred) filters: h2v1 (4:2:2), h2v2 (4:2:0) and h1v2 (4:4:0),
// one output sample at a time so the colour stage takes a pixel per cycle. Output row y of a
// vertically subsampled component is built from its nearest input row (`near`) and the
// next-nearest one (`far`; the first and last rows stand in for the missing neighbours at the
// image edges). Components 2 or fewer samples wide use box replication for h2, as libjpeg does.
#pragma once
#include <cstdint>

#include "image_types.h"

namespace atoll_image {

// Horizontal 2x, output x of n input samples: weights 3/4 and 1/4, bias 1 (even x) or 2 (odd x);
// the first and last outputs copy the edge samples.
inline uint8_t upsample_h2_at(const uint8_t* in, uint32_t n, uint32_t x) {
  const uint32_t i = x >> 1;
  if (n <= 2 || x == 0 || x == 2 * n - 1) return in[i];
  const uint32_t c = in[i] * 3u;
  return static_cast<uint8_t>((x & 1) ? (c + in[i + 1] + 2) >> 2 : (c + in[i - 1] + 1) >> 2);
}

// Vertical 2x: near row weighted 3/4, far row 1/4; bias 1 for the upper output of a pair, 2 for
// the lower one.
inline uint8_t upsample_v2_at(const uint8_t* near, const uint8_t* far, bool lower, uint32_t x) {
  return static_cast<uint8_t>((near[x] * 3u + far[x] + (lower ? 2u : 1u)) >> 2);
}

// 2x in both directions: vertical sums near*3 + far (kept at 4x scale), then horizontal 3:1 with
// biases 8 (even x) and 7 (odd x) on the 16x-scaled sum; the edges weight their own sum 4x.
inline uint8_t upsample_h2v2_at(const uint8_t* near, const uint8_t* far, uint32_t n, uint32_t x) {
  const uint32_t i = x >> 1;
  if (n <= 2) return near[i];
  const uint32_t cur = near[i] * 3u + far[i];
  if (x == 0) return static_cast<uint8_t>((cur * 4 + 8) >> 4);
  if (x == 2 * n - 1) return static_cast<uint8_t>((cur * 4 + 7) >> 4);
  if (x & 1) return static_cast<uint8_t>((cur * 3 + near[i + 1] * 3u + far[i + 1] + 7) >> 4);
  return static_cast<uint8_t>((cur * 3 + near[i - 1] * 3u + far[i - 1] + 8) >> 4);
}

}  // namespace atoll_image
