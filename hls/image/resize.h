// resize.h: the resize unit's C model, bilinear with the semantics of OpenCV's
// cv2.resize(INTER_LINEAR) on uint8 (verified bit for bit against cv2): source coordinate
// (d + 0.5) * scale - 0.5 as OpenCV computes it in float64 and rounds to float32; weights
// (1 - f, f) scaled by 2^11 and rounded to nearest; columns clamped to the edge with the weight
// moved onto the edge pixel, rows clamped by index only; horizontal pass exact in 32 bits,
// vertical pass as OpenCV's SIMD kernel computes it:
// ((r0 >> 4) * b0 >> 16) + ((r1 >> 4) * b1 >> 16), + 2, >> 2, saturated.
//
// The float64 steps are carried out on their integer significands (every rounding of the four
// float64 operations reproduced), which is what the RTL unit (hls/rtl/resize_tap_gen.v) does too.
#pragma once
#include <cmath>
#include <cstdint>

#include "hls_compat.h"
#include "image_postdecode.h"
#include "uint128.h"
#include "image_types.h"

namespace atoll_image {

constexpr int kResizeCoefBits = 11;
constexpr float kResizeCoefScale = 1 << kResizeCoefBits;

struct ResizeTap {
  int32_t src0, src1;  // source indices (already clamped)
  int32_t w0, w1;      // fixed-point weights
};

inline int32_t round_half_even(float v) { return static_cast<int32_t>(std::nearbyint(v)); }

// A positive float64 as significand * 2^exponent, significand in [2^52, 2^53).
struct Float64Parts {
  uint64_t significand;
  int exponent;
};

constexpr int kF64Bits = 53;
constexpr int kF32Bits = 24;
constexpr int kQuotientSteps = 128;  // doublings that bring any quotient of two 53-bit values to 53 bits

// Round-to-nearest-even division num / den (num, den < 2^53, den > 0) to a float64.
inline Float64Parts f64_divide(uint64_t num, uint64_t den) {
  uint64_t q = num / den, r = num % den;
  int exponent = 0;
f64_divide_bits:
  for (int i = 0; i < kQuotientSteps; ++i) {
    if (q < (uint64_t{1} << (kF64Bits - 1))) {
      r <<= 1;
      q = (q << 1) | (r >= den ? 1u : 0u);
      if (r >= den) r -= den;
      --exponent;
    }
  }
  if (2 * r > den || (2 * r == den && (q & 1))) ++q;
  if (q >> kF64Bits) {
    q >>= 1;
    ++exponent;
  }
  return {q, exponent};
}

// v rounded to nearest even at `bits` significant bits (v stays on its own integer grid).
inline uint128 round_significant(uint128 v, int bits) {
  const int drop = bit_length(v) - bits;
  if (drop <= 0) return v;
  const uint128 unit = uint128{1} << drop;
  const uint128 rem = v & (unit - 1), half = unit >> 1;
  v -= rem;
  if (rem > half || (rem == half && (v & unit))) v += unit;
  return v;
}

// (float)((d + 0.5) * (1.0 / ((double)dst / src)) - 0.5), as OpenCV's resize computes the source
// coordinate of destination index d, without float64 hardware: the scale's significand comes
// from two rounded divisions, the product (2d + 1) * scale / 2 is exact in 128 bits and rounded,
// the subtraction of 0.5 is exact on that grid and rounded, and the float32 cast rounds again.
inline float resize_coordinate(uint32_t d, uint32_t src, uint32_t dst) {
  const Float64Parts ratio = f64_divide(dst, src);
  const Float64Parts scale = f64_divide(1, ratio.significand);  // times 2^-ratio.exponent
  const int scale_exp = scale.exponent - ratio.exponent;
  // t = (2d + 1) * scale / 2 = product * 2^(scale_exp - 1), then t - 0.5 on that grid.
  const uint128 product =
      round_significant(uint128{2 * d + 1} * scale.significand, kF64Bits);
  const int grid = scale_exp - 1;  // < -1: t < 2^14 has at least 39 fraction bits
  const uint128 half = uint128{1} << (-1 - grid);
  const bool negative = product < half;
  uint128 x = negative ? half - product : product - half;
  x = round_significant(round_significant(x, kF64Bits), kF32Bits);
  const int shift = bit_length(x) > kF32Bits ? bit_length(x) - kF32Bits : 0;  // x is 24 bits << shift
  const float magnitude = std::ldexp(static_cast<float>(static_cast<uint32_t>(x >> shift)), grid + shift);
  return negative ? -magnitude : magnitude;
}

// clamp_weight: columns move the weight of an out-of-range neighbour onto the edge pixel
// (OpenCV's x table); rows keep the weights and only clamp the indices (its y table).
inline ResizeTap resize_tap(uint32_t d, uint32_t src, uint32_t dst, bool clamp_weight) {
  float fx = resize_coordinate(d, src, dst);
  int32_t sx = static_cast<int32_t>(std::floor(fx));
  fx -= static_cast<float>(sx);
  const int32_t last = static_cast<int32_t>(src) - 1;
  if (clamp_weight) {
    if (sx < 0) {
      sx = 0;
      fx = 0.f;
    }
    if (sx >= last) {
      sx = last;
      fx = 0.f;
    }
  }
  ResizeTap t;
  t.w0 = round_half_even((1.f - fx) * kResizeCoefScale);
  t.w1 = round_half_even(fx * kResizeCoefScale);
  t.src0 = sx < 0 ? 0 : (sx > last ? last : sx);
  t.src1 = sx + 1 < 0 ? 0 : (sx + 1 > last ? last : sx + 1);
  return t;
}

// Horizontal pass of one row: 3 channels, 32-bit sums at 2^11 scale.
inline void resize_row_h(const Pixel line[kMaxDim], const ResizeTap xtaps[kMaxDim], uint32_t dst_w,
                         int32_t out[kMaxDim * kChannels]) {
resize_h_cols:
  for (uint32_t x = 0; x < dst_w; ++x) {
#pragma HLS LOOP_TRIPCOUNT max = kTypicalDim
    const ResizeTap& t = xtaps[x];
    const Pixel a = line[t.src0], b = line[t.src1];
    for (uint32_t k = 0; k < kChannels; ++k) out[x * kChannels + k] = a.c[k] * t.w0 + b.c[k] * t.w1;
  }
}

inline uint8_t resize_v(int32_t r0, int32_t r1, int32_t b0, int32_t b1) {
  int32_t v = ((((r0 >> 4) * b0) >> 16) + (((r1 >> 4) * b1) >> 16) + 2) >> 2;
  if (static_cast<uint32_t>(v) > 255) v = v < 0 ? 0 : 255;  // rare: one predictable test
  return static_cast<uint8_t>(v);
}

// Consumes src_h x src_w pixels, produces dst_h x dst_w. Rows arrive in order; input row r is
// transformed horizontally when the next output row reads it, and every output row whose lower
// source row is r follows it (two horizontally resized lines are kept: slot = row & 1). Equal
// dimensions are the identity (weights 2048 and 0), passed through directly.
inline void resize_stream(hls::stream<Pixel>& in, hls::stream<Pixel>& out, uint32_t src_h,
                          uint32_t src_w, uint32_t dst_h, uint32_t dst_w) {
  if (src_h == dst_h && src_w == dst_w) {
  resize_bypass:
    for (uint64_t i = 0; i < uint64_t{src_h} * src_w; ++i) {
#pragma HLS LOOP_TRIPCOUNT max = kTypicalPixels
      out.write(in.read());
    }
    return;
  }
  ResizeTap xtaps[kMaxDim];
  Pixel line[kMaxDim];
  int32_t hrows[2][kMaxDim * kChannels];
resize_taps:
  for (uint32_t x = 0; x < dst_w; ++x) {
#pragma HLS LOOP_TRIPCOUNT max = kTypicalOut
    xtaps[x] = resize_tap(x, src_w, dst_w, true);
  }
  uint32_t y = 0;
  ResizeTap t = resize_tap(0, src_h, dst_h, false);
resize_in_rows:
  for (uint32_t row = 0; row < src_h; ++row) {
#pragma HLS LOOP_TRIPCOUNT max = kTypicalDim
  resize_read:
    for (uint32_t x = 0; x < src_w; ++x) {
#pragma HLS LOOP_TRIPCOUNT max = kTypicalDim
      line[x] = in.read();
    }
    if (y < dst_h && row >= static_cast<uint32_t>(t.src0)) resize_row_h(line, xtaps, dst_w, hrows[row & 1]);
  resize_out_rows:
    for (uint32_t n = 0; n < dst_h && y < dst_h && static_cast<uint32_t>(t.src1) == row; ++n) {
#pragma HLS LOOP_TRIPCOUNT max = 2
      const int32_t* r0 = hrows[t.src0 & 1];
      const int32_t* r1 = hrows[t.src1 & 1];
    resize_out_cols:
      for (uint32_t x = 0; x < dst_w; ++x) {
#pragma HLS LOOP_TRIPCOUNT max = kTypicalOut
        Pixel p;
        for (uint32_t k = 0; k < kChannels; ++k) {
          p.c[k] = resize_v(r0[x * kChannels + k], r1[x * kChannels + k], t.w0, t.w1);
        }
        out.write(p);
      }
      if (++y < dst_h) t = resize_tap(y, src_h, dst_h, false);
    }
  }
}

}  // namespace atoll_image
