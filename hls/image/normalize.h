// normalize.h: the normalise unit's C model. Normalisation is (px / 255 - mean[c]) / std[c]
// evaluated in float32 exactly as NumPy evaluates it (one rounding per operation, no fused
// multiply-add), tabulated per channel for the 256 possible inputs, optionally converted to IEEE
// half (round to nearest even, as numpy's astype(float16)). The RTL unit holds the same two tables
// as ROMs (hls/rtl/gen_norm_rom.py writes them with NumPy).
#pragma once
#include <cstdint>
#include <cstring>

#include "hls_compat.h"
#include "image_postdecode.h"
#include "image_types.h"

namespace atoll_image {

constexpr float kMean[kChannels] = {0.485f, 0.456f, 0.406f};
constexpr float kStd[kChannels] = {0.229f, 0.224f, 0.225f};

struct NormTables {
  float value[kChannels][256];
};

inline void build_norm_tables(NormTables& t) {
norm_table:
  for (uint32_t c = 0; c < kChannels; ++c) {
    for (uint32_t i = 0; i < 256; ++i) {
      // Three separately rounded float32 operations (no multiply-add for a compiler to fuse).
      const float scaled = static_cast<float>(i) / 255.0f;
      const float centred = scaled - kMean[c];
      t.value[c][i] = centred / kStd[c];
    }
  }
}

// float32 -> binary16, round to nearest even, with subnormals, infinities and NaN.
inline uint16_t float_to_half(float f) {
  uint32_t x;
  std::memcpy(&x, &f, sizeof x);
  const uint32_t sign = (x >> 16) & 0x8000u;
  const uint32_t exp = (x >> 23) & 0xFFu;
  uint32_t mant = x & 0x7FFFFFu;
  if (exp == 0xFF) return static_cast<uint16_t>(sign | 0x7C00u | (mant ? 0x200u : 0));
  const int32_t e = static_cast<int32_t>(exp) - 127 + 15;
  if (e >= 31) return static_cast<uint16_t>(sign | 0x7C00u);
  if (e <= 0) {
    if (e < -10) return static_cast<uint16_t>(sign);
    mant |= 0x800000u;  // implicit bit
    const uint32_t shift = static_cast<uint32_t>(14 - e);
    uint32_t h = mant >> shift;
    const uint32_t rem = mant & ((1u << shift) - 1);
    const uint32_t halfway = 1u << (shift - 1);
    if (rem > halfway || (rem == halfway && (h & 1))) ++h;
    return static_cast<uint16_t>(sign | h);
  }
  uint32_t h = (static_cast<uint32_t>(e) << 10) | (mant >> 13);
  const uint32_t rem = mant & 0x1FFFu;
  if (rem > 0x1000u || (rem == 0x1000u && (h & 1))) ++h;  // may carry into the exponent: correct
  return static_cast<uint16_t>(sign | h);
}

inline uint32_t float_bits(float f) {
  uint32_t v;
  std::memcpy(&v, &f, sizeof v);
  return v;
}

// One beat per pixel: the bytes themselves, or each channel's table entry in float32 or half.
inline void normalize_beats(hls::stream<Pixel>& in, hls::stream<PostBeat>& out, uint32_t n_pixels,
                            uint32_t format) {
  NormTables t;
  build_norm_tables(t);
norm_pixels:
  for (uint32_t i = 0; i < n_pixels; ++i) {
#pragma HLS LOOP_TRIPCOUNT max = kTypicalOut * kTypicalOut
    const Pixel p = in.read();
    PostBeat beat;
    for (uint32_t k = 0; k < kChannels; ++k) {
      const float v = t.value[k][p.c[k]];
      beat.lane[k] = format == kPostU8 ? p.c[k] : format == kPostF16 ? float_to_half(v) : float_bits(v);
    }
    out.write(beat);
  }
}

}  // namespace atoll_image
