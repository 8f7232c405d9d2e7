// normalize.h: the normalize unit and the output writers. Normalisation is
// (px / 255 - mean[c]) / std[c] evaluated in float32 exactly as NumPy evaluates it (one rounding
// per operation, no fused multiply-add), tabulated per channel for the 256 possible inputs, with
// CHW output in float32 or IEEE half (round to nearest even, as numpy's astype(float16)).
#pragma once
#include <cstdint>
#include <cstring>

#include "hls_compat.h"
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

// uint8 HWC writer for the decode, resize and crop stages.
inline void write_hwc(hls::stream<Pixel>& in, uint8_t* out, uint32_t n_pixels) {
write_hwc_pixels:
  for (uint32_t i = 0; i < n_pixels; ++i) {
#pragma HLS LOOP_TRIPCOUNT max = kTypicalPixels
#pragma HLS PIPELINE II = 1
    const Pixel p = in.read();
    for (uint32_t k = 0; k < kChannels; ++k) out[uint64_t{i} * kChannels + k] = p.c[k];
  }
}

// Little-endian stores into the byte-addressed output port (no pointer casts on an interface).
inline void store_le16(uint8_t* p, uint16_t v) {
  p[0] = static_cast<uint8_t>(v);
  p[1] = static_cast<uint8_t>(v >> 8);
}
inline void store_le32(uint8_t* p, float f) {
  uint32_t v;
  std::memcpy(&v, &f, sizeof v);
  p[0] = static_cast<uint8_t>(v);
  p[1] = static_cast<uint8_t>(v >> 8);
  p[2] = static_cast<uint8_t>(v >> 16);
  p[3] = static_cast<uint8_t>(v >> 24);
}

// Normalises an h x w pixel stream into CHW planes of float32 or float16.
inline void normalize_chw(hls::stream<Pixel>& in, uint8_t* out, uint32_t n_pixels, bool fp16) {
  NormTables t;
  build_norm_tables(t);
norm_pixels:
  for (uint32_t i = 0; i < n_pixels; ++i) {
#pragma HLS LOOP_TRIPCOUNT max = kTypicalOut * kTypicalOut
#pragma HLS PIPELINE II = 1
    const Pixel p = in.read();
    for (uint32_t k = 0; k < kChannels; ++k) {
      const float v = t.value[k][p.c[k]];
      const uint64_t index = uint64_t{k} * n_pixels + i;
      if (fp16) {
        store_le16(out + 2 * index, float_to_half(v));
      } else {
        store_le32(out + 4 * index, v);
      }
    }
  }
}

// The writer process: normalised CHW for the normalize stage, uint8 HWC otherwise.
inline void write_output(hls::stream<Pixel>& in, uint8_t* out, uint32_t n_pixels, bool normalize,
                         bool fp16) {
  if (normalize) {
    normalize_chw(in, out, n_pixels, fp16);
  } else {
    write_hwc(in, out, n_pixels);
  }
}

}  // namespace atoll_image
