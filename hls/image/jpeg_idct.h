// jpeg_idct.h: dequantisation and the 8x8 inverse DCT with the integer arithmetic of libjpeg's
// "islow" method (its default, used by cv2.imdecode): the Loeffler-Ligtenberg-Moschytz
// factorisation with 13-bit constants, a column pass descaled by 11 bits (2 guard bits kept), a
// row pass descaled by 18 bits, +128 level shift and saturation to 0..255 (as its SIMD code does).
// Intermediates are 64-bit so hostile coefficients cannot overflow; legal data never needs it.
#pragma once
#include <cstdint>

#include "image_types.h"

namespace atoll_image {

constexpr int kIdctConstBits = 13;
constexpr int kIdctPass1Bits = 2;

// round(c * 2^13) for the rotation constants of the factorisation.
constexpr int64_t kFix0298631336 = 2446;
constexpr int64_t kFix0390180644 = 3196;
constexpr int64_t kFix0541196100 = 4433;
constexpr int64_t kFix0765366865 = 6270;
constexpr int64_t kFix0899976223 = 7373;
constexpr int64_t kFix1175875602 = 9633;
constexpr int64_t kFix1501321110 = 12299;
constexpr int64_t kFix1847759065 = 15137;
constexpr int64_t kFix1961570560 = 16069;
constexpr int64_t kFix2053119869 = 16819;
constexpr int64_t kFix2562915447 = 20995;
constexpr int64_t kFix3072711026 = 25172;

inline int64_t descale(int64_t x, int n) { return (x + (int64_t{1} << (n - 1))) >> n; }

// One 8-point 1-D IDCT on in[0..7] (already scaled), results before descaling in out[0..7].
inline void idct_1d(const int64_t in[8], int64_t out[8]) {
  // Even part: inputs 0, 2, 4, 6.
  const int64_t z1 = (in[2] + in[6]) * kFix0541196100;
  const int64_t t2 = z1 - in[6] * kFix1847759065;
  const int64_t t3 = z1 + in[2] * kFix0765366865;
  const int64_t t0 = (in[0] + in[4]) * (int64_t{1} << kIdctConstBits);
  const int64_t t1 = (in[0] - in[4]) * (int64_t{1} << kIdctConstBits);
  const int64_t e10 = t0 + t3, e13 = t0 - t3, e11 = t1 + t2, e12 = t1 - t2;
  // Odd part: inputs 7, 5, 3, 1.
  int64_t o0 = in[7], o1 = in[5], o2 = in[3], o3 = in[1];
  int64_t p1 = o0 + o3, p2 = o1 + o2, p3 = o0 + o2, p4 = o1 + o3;
  const int64_t p5 = (p3 + p4) * kFix1175875602;
  o0 *= kFix0298631336;
  o1 *= kFix2053119869;
  o2 *= kFix3072711026;
  o3 *= kFix1501321110;
  p1 *= -kFix0899976223;
  p2 *= -kFix2562915447;
  p3 = p3 * -kFix1961570560 + p5;
  p4 = p4 * -kFix0390180644 + p5;
  o0 += p1 + p3;
  o1 += p2 + p4;
  o2 += p2 + p3;
  o3 += p1 + p4;
  out[0] = e10 + o3;
  out[7] = e10 - o3;
  out[1] = e11 + o2;
  out[6] = e11 - o2;
  out[2] = e12 + o1;
  out[5] = e12 - o1;
  out[3] = e13 + o0;
  out[4] = e13 - o0;
}

// coef: quantised coefficients, natural order; quant: table, natural order. Writes the 8x8
// samples to dst with the given row stride. Columns and rows whose AC inputs are all zero take
// the closed form of the same arithmetic (a shortcut for speed, equal results).
inline void idct_islow(const int16_t coef[kBlockSize], const uint16_t quant[kBlockSize],
                       uint8_t* dst, uint32_t stride) {
  int64_t ws[kBlockSize];
  int64_t in[8], out[8];
idct_columns:
  for (int c = 0; c < 8; ++c) {
    bool ac_zero = true;
  idct_col_load:
    for (int k = 0; k < 8; ++k) {
      in[k] = int64_t{coef[8 * k + c]} * quant[8 * k + c];
      if (k && in[k]) ac_zero = false;
    }
    if (ac_zero) {
      for (int k = 0; k < 8; ++k) ws[8 * k + c] = in[0] * (1 << kIdctPass1Bits);
      continue;
    }
    idct_1d(in, out);
  idct_col_store:
    for (int k = 0; k < 8; ++k) ws[8 * k + c] = descale(out[k], kIdctConstBits - kIdctPass1Bits);
  }
idct_rows:
  for (int r = 0; r < 8; ++r) {
    bool ac_zero = true;
  idct_row_load:
    for (int k = 0; k < 8; ++k) {
      in[k] = ws[8 * r + k];
      if (k && in[k]) ac_zero = false;
    }
    if (ac_zero) {
      const int64_t dc = descale(in[0], kIdctPass1Bits + 3) + 128;
      const uint8_t v = static_cast<uint8_t>(dc < 0 ? 0 : (dc > 255 ? 255 : dc));
      for (int k = 0; k < 8; ++k) dst[r * stride + k] = v;
      continue;
    }
    idct_1d(in, out);
  idct_row_store:
    for (int k = 0; k < 8; ++k) {
      int64_t v = descale(out[k], kIdctConstBits + kIdctPass1Bits + 3) + 128;
      v = v < 0 ? 0 : (v > 255 ? 255 : v);
      dst[r * stride + k] = static_cast<uint8_t>(v);
    }
  }
}

}  // namespace atoll_image
