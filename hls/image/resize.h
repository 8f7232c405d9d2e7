// resize.h: the resize unit, bilinear with the semantics of OpenCV's cv2.resize(INTER_LINEAR) on
// uint8 (verified bit for bit against cv2): source coordinate (d + 0.5) * scale - 0.5 computed in
// double and rounded to float; weights (1 - f, f) scaled by 2^11 and rounded to nearest; columns
// clamped to the edge with the weight moved onto the edge pixel, rows clamped by index only;
// horizontal pass exact in 32 bits, vertical pass as OpenCV's SIMD kernel computes it:
// ((r0 >> 4) * b0 >> 16) + ((r1 >> 4) * b1 >> 16), + 2, >> 2, saturated.
#pragma once
#include <cmath>
#include <cstdint>

#include "hls_compat.h"
#include "image_types.h"

namespace atoll_image {

constexpr int kResizeCoefBits = 11;
constexpr float kResizeCoefScale = 1 << kResizeCoefBits;

struct ResizeTap {
  int32_t src0, src1;  // source indices (already clamped)
  int32_t w0, w1;      // fixed-point weights
};

inline int32_t round_half_even(float v) { return static_cast<int32_t>(std::nearbyint(v)); }

// Output dims for "shorter side to r": torchvision's int(r * long / short).
inline void resize_dims(uint32_t src_h, uint32_t src_w, uint32_t r, uint32_t& dst_h,
                        uint32_t& dst_w) {
  if (src_h <= src_w) {
    dst_h = r;
    dst_w = static_cast<uint32_t>(static_cast<double>(r) * src_w / src_h);
  } else {
    dst_w = r;
    dst_h = static_cast<uint32_t>(static_cast<double>(r) * src_h / src_w);
  }
}

// clamp_weight: columns move the weight of an out-of-range neighbour onto the edge pixel
// (OpenCV's x table); rows keep the weights and only clamp the indices (its y table).
inline ResizeTap resize_tap(uint32_t d, uint32_t src, uint32_t dst, bool clamp_weight) {
  const double scale = 1.0 / (static_cast<double>(dst) / src);
  float fx = static_cast<float>((d + 0.5) * scale - 0.5);
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
inline void resize_row_h(const Pixel* in, const ResizeTap* taps, uint32_t dst_w, int32_t* out) {
resize_h_cols:
  for (uint32_t x = 0; x < dst_w; ++x) {
#pragma HLS LOOP_TRIPCOUNT max = kTypicalDim
#pragma HLS PIPELINE II = 1
    const ResizeTap& t = taps[x];
    const Pixel a = in[t.src0], b = in[t.src1];
    out[x * kChannels + 0] = a.c[0] * t.w0 + b.c[0] * t.w1;
    out[x * kChannels + 1] = a.c[1] * t.w0 + b.c[1] * t.w1;
    out[x * kChannels + 2] = a.c[2] * t.w0 + b.c[2] * t.w1;
  }
}

inline uint8_t resize_v(int32_t r0, int32_t r1, int32_t b0, int32_t b1) {
  int32_t v = ((((r0 >> 4) * b0) >> 16) + (((r1 >> 4) * b1) >> 16) + 2) >> 2;
  if (static_cast<uint32_t>(v) > 255) v = v < 0 ? 0 : 255;  // rare: one predictable test
  return static_cast<uint8_t>(v);
}

// Consumes src_h x src_w pixels, produces dst_h x dst_w. Rows arrive in order and each output row
// needs two consecutive source rows, so two horizontally resized lines are kept (slot = row & 1).
// Disabled, it passes the frame through (dst dims equal src dims then).
inline void resize_stream(hls::stream<Pixel>& in, hls::stream<Pixel>& out, uint32_t src_h,
                          uint32_t src_w, uint32_t dst_h, uint32_t dst_w, bool enable) {
  if (!enable) {
  resize_bypass:
    for (uint64_t i = 0; i < uint64_t{src_h} * src_w; ++i) {
#pragma HLS LOOP_TRIPCOUNT max = kTypicalPixels
#pragma HLS PIPELINE II = 1
      out.write(in.read());
    }
    return;
  }
  ResizeTap xtaps[kMaxDim];
  Pixel line[kMaxDim];
  int32_t hrows[2][kMaxDim * kChannels];
resize_taps:
  for (uint32_t x = 0; x < dst_w; ++x) xtaps[x] = resize_tap(x, src_w, dst_w, true);
  uint32_t next_row = 0;
resize_out_rows:
  for (uint32_t y = 0; y < dst_h; ++y) {
#pragma HLS LOOP_TRIPCOUNT max = kTypicalOut
    const ResizeTap t = resize_tap(y, src_h, dst_h, false);
  resize_in_rows:
    for (; next_row <= static_cast<uint32_t>(t.src1); ++next_row) {
#pragma HLS LOOP_TRIPCOUNT max = 2
    resize_read:
      for (uint32_t x = 0; x < src_w; ++x) {
#pragma HLS LOOP_TRIPCOUNT max = kTypicalDim
#pragma HLS PIPELINE II = 1
        line[x] = in.read();
      }
      if (next_row >= static_cast<uint32_t>(t.src0)) {
        resize_row_h(line, xtaps, dst_w, hrows[next_row & 1]);
      }
    }
    const int32_t* r0 = hrows[t.src0 & 1];
    const int32_t* r1 = hrows[t.src1 & 1];
  resize_out_cols:
    for (uint32_t x = 0; x < dst_w; ++x) {
#pragma HLS LOOP_TRIPCOUNT max = kTypicalOut
#pragma HLS PIPELINE II = 1
      Pixel p;
      for (uint32_t k = 0; k < kChannels; ++k) {
        p.c[k] = resize_v(r0[x * kChannels + k], r1[x * kChannels + k], t.w0, t.w1);
      }
      out.write(p);
    }
  }
resize_drain:
  for (; next_row < src_h; ++next_row) {
#pragma HLS LOOP_TRIPCOUNT max = 2
    for (uint32_t x = 0; x < src_w; ++x) in.read();
  }
}

}  // namespace atoll_image
