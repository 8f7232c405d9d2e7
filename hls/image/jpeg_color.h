// jpeg_color.h: YCbCr -> RGB with libjpeg's fixed-point arithmetic (16 fraction bits, constants
// rounded to nearest, ONE_HALF rounding folded into the Cr->R, Cb->B and Cb->G terms, an
// arithmetic right shift, then saturation to 0..255).
#pragma once
#include <cstdint>

#include "image_types.h"

namespace atoll_image {

constexpr int kColorScaleBits = 16;
constexpr int32_t kColorOneHalf = 1 << (kColorScaleBits - 1);

// libjpeg's FIX(x) = round(x * 2^16) of the four conversion constants.
constexpr int32_t kFix1402 = 91881;   // 1.40200: Cr -> R
constexpr int32_t kFix1772 = 116130;  // 1.77200: Cb -> B
constexpr int32_t kFix0714 = 46802;   // 0.71414: Cr -> G
constexpr int32_t kFix0344 = 22554;   // 0.34414: Cb -> G

// The four per-value terms, precomputed once per run (a 256-entry ROM each in hardware).
struct ColorTables {
  int32_t cr_r[256];
  int32_t cb_b[256];
  int32_t cr_g[256];
  int32_t cb_g[256];
};

inline void build_color_tables(ColorTables& t) {
color_table:
  for (int i = 0; i < 256; ++i) {
    const int32_t x = i - 128;
    t.cr_r[i] = (kFix1402 * x + kColorOneHalf) >> kColorScaleBits;
    t.cb_b[i] = (kFix1772 * x + kColorOneHalf) >> kColorScaleBits;
    t.cr_g[i] = -kFix0714 * x;
    t.cb_g[i] = -kFix0344 * x + kColorOneHalf;
  }
}

inline uint8_t clamp_u8(int32_t v) {
  if (static_cast<uint32_t>(v) > 255) v = v < 0 ? 0 : 255;  // rare: one predictable test
  return static_cast<uint8_t>(v);
}

inline Pixel ycc_to_rgb(const ColorTables& t, int32_t y, uint8_t cb, uint8_t cr) {
  Pixel p;
  p.c[0] = clamp_u8(y + t.cr_r[cr]);
  p.c[1] = clamp_u8(y + ((t.cb_g[cb] + t.cr_g[cr]) >> kColorScaleBits));
  p.c[2] = clamp_u8(y + t.cb_b[cb]);
  return p;
}

}  // namespace atoll_image
