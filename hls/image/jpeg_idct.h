// jpeg_idct.h: dequantisation and the 8x8 inverse DCT with the integer arithmetic of libjpeg's
// "islow" method (its default, used by cv2.imdecode): the Loeffler-Ligtenberg-Moschytz
// factorisation with 13-bit constants, a column pass descaled by 11 bits (2 guard bits kept), a
// row pass descaled by 18 bits, +128 level shift and saturation to 0..255 (as its SIMD code does).
// The datapath is 32 bits wide and wraps modulo 2^32 (unsigned arithmetic, so hostile
// coefficients are defined behaviour); legal 8-bit data never comes near the limit.
#pragma once
#include <cstdint>
#include <cstring>

#include "image_types.h"

namespace atoll_image {

constexpr int kIdctConstBits = 13;
constexpr int kIdctPass1Bits = 2;
using IdctWord = uint32_t;  // two's-complement 32-bit datapath word

// round(c * 2^13) for the rotation constants of the factorisation.
constexpr IdctWord kFix0298631336 = 2446;
constexpr IdctWord kFix0390180644 = 3196;
constexpr IdctWord kFix0541196100 = 4433;
constexpr IdctWord kFix0765366865 = 6270;
constexpr IdctWord kFix0899976223 = 7373;
constexpr IdctWord kFix1175875602 = 9633;
constexpr IdctWord kFix1501321110 = 12299;
constexpr IdctWord kFix1847759065 = 15137;
constexpr IdctWord kFix1961570560 = 16069;
constexpr IdctWord kFix2053119869 = 16819;
constexpr IdctWord kFix2562915447 = 20995;
constexpr IdctWord kFix3072711026 = 25172;

// Rounding arithmetic right shift of a datapath word read as signed.
inline int32_t descale(IdctWord x, int n) {
  return static_cast<int32_t>(x + (IdctWord{1} << (n - 1))) >> n;
}

// One 8-point 1-D IDCT on in[0..7], results before descaling in out[0..7].
inline void idct_1d(const IdctWord in[8], IdctWord out[8]) {
  // Even part: inputs 0, 2, 4, 6.
  const IdctWord z1 = (in[2] + in[6]) * kFix0541196100;
  const IdctWord t2 = z1 - in[6] * kFix1847759065;
  const IdctWord t3 = z1 + in[2] * kFix0765366865;
  const IdctWord t0 = (in[0] + in[4]) << kIdctConstBits;
  const IdctWord t1 = (in[0] - in[4]) << kIdctConstBits;
  const IdctWord e10 = t0 + t3, e13 = t0 - t3, e11 = t1 + t2, e12 = t1 - t2;
  // Odd part: inputs 7, 5, 3, 1.
  IdctWord o0 = in[7], o1 = in[5], o2 = in[3], o3 = in[1];
  const IdctWord p1 = (o0 + o3) * (0u - kFix0899976223);
  const IdctWord p2 = (o1 + o2) * (0u - kFix2562915447);
  const IdctWord p5 = (o0 + o2 + o1 + o3) * kFix1175875602;
  const IdctWord p3 = (o0 + o2) * (0u - kFix1961570560) + p5;
  const IdctWord p4 = (o1 + o3) * (0u - kFix0390180644) + p5;
  o0 = o0 * kFix0298631336 + p1 + p3;
  o1 = o1 * kFix2053119869 + p2 + p4;
  o2 = o2 * kFix3072711026 + p2 + p3;
  o3 = o3 * kFix1501321110 + p1 + p4;
  out[0] = e10 + o3;
  out[7] = e10 - o3;
  out[1] = e11 + o2;
  out[6] = e11 - o2;
  out[2] = e12 + o1;
  out[5] = e12 - o1;
  out[3] = e13 + o0;
  out[4] = e13 - o0;
}

inline uint8_t idct_sample(int32_t v) {
  v += 128;
  if (static_cast<uint32_t>(v) > 255) v = v < 0 ? 0 : 255;  // rare: one predictable test
  return static_cast<uint8_t>(v);
}

// Writes one sample value to the 8 samples of a block row (one 64-bit store).
inline void fill_row8(uint8_t* dst, uint8_t v) {
  const uint64_t word = 0x0101010101010101ull * v;
  std::memcpy(dst, &word, sizeof word);
}

// coef: quantised coefficients, natural order; quant: table, natural order; dc_only: no AC
// coefficient is set. Writes the 8x8 samples to dst with the given row stride. Columns and rows
// whose AC inputs are all zero take the closed form of the same arithmetic (equal results).
// The GCC unroll pragmas only speed up the host model; synthesis pipelines these loops anyway.
inline void idct_islow(const int16_t coef[kBlockSize], const uint16_t quant[kBlockSize],
                       bool dc_only, uint8_t* dst, uint32_t stride) {
  if (dc_only) {
    const IdctWord dc = static_cast<IdctWord>(int32_t{coef[0]}) * quant[0];
    const uint8_t v = idct_sample(descale(dc << kIdctPass1Bits, kIdctPass1Bits + 3));
  idct_dc_rows:
    for (int r = 0; r < 8; ++r) fill_row8(dst + r * stride, v);
    return;
  }
  IdctWord ws[kBlockSize];
  IdctWord in[8], out[8];
idct_columns:
  for (int c = 0; c < 8; ++c) {
    IdctWord ac = 0;
  idct_col_load:
#pragma GCC unroll 8
    for (int k = 0; k < 8; ++k) {
      in[k] = static_cast<IdctWord>(int32_t{coef[8 * k + c]}) * quant[8 * k + c];
      if (k) ac |= in[k];
    }
    if (ac == 0) {
#pragma GCC unroll 8
      for (int k = 0; k < 8; ++k) ws[8 * k + c] = in[0] << kIdctPass1Bits;
      continue;
    }
    idct_1d(in, out);
  idct_col_store:
#pragma GCC unroll 8
    for (int k = 0; k < 8; ++k)
      ws[8 * k + c] = static_cast<IdctWord>(descale(out[k], kIdctConstBits - kIdctPass1Bits));
  }
idct_rows:
  for (int r = 0; r < 8; ++r) {
    IdctWord ac = 0;
  idct_row_load:
#pragma GCC unroll 8
    for (int k = 0; k < 8; ++k) {
      in[k] = ws[8 * r + k];
      if (k) ac |= in[k];
    }
    if (ac == 0) {
      fill_row8(dst + r * stride, idct_sample(descale(in[0], kIdctPass1Bits + 3)));
      continue;
    }
    idct_1d(in, out);
  idct_row_store:
#pragma GCC unroll 8
    for (int k = 0; k < 8; ++k)
      dst[r * stride + k] = idct_sample(descale(out[k], kIdctConstBits + kIdctPass1Bits + 3));
  }
}

}  // namespace atoll_image
