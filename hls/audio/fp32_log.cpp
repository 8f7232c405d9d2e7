// fp32_log.cpp: C model of the fp32_log RTL blackbox, step for step what hls/rtl/fp32_log.v does.
//
// x = m * 2^e with 1 <= m < 2. Three table reciprocals (log_tables.h, from hls/rtl/gen_roms.py)
// reduce m exactly: p1 = m * r1, p2 = p1 * r2, p3 = p2 * r3 = 1 + t3 with 0 <= t3 < 2.5e-7, so
// ln(x) = e ln2 - ln(r1) - ln(r2) - ln(r3) + t3 - t3^2 / 2, summed in 62-bit fixed point (error
// below 2^-59 absolute; the t3^3 / 3 term left out is under 2^-66) and rounded once to float32.
// That is the correctly rounded logarithm except where ln(x) lies within ~2^-59 of a rounding
// boundary. Specials as x86's logf: NaN in gives it back quieted, x < 0 the default NaN
// 0xFFC00000, +-0 gives -inf, +inf itself.
#include <cstdint>
#include <cstring>

#include "audio_rtl_units.h"
#include "log_tables.h"
#include "uint128.h"

namespace {

using i128 = __int128;

constexpr int kP1Frac = 23 + LOG_RECIP1_BITS;  // fraction bits of p1 = m * r1
constexpr int kP2Frac = kP1Frac + LOG_RECIP2_BITS;
constexpr int kP3Frac = kP2Frac + LOG_RECIP3_BITS;

}  // namespace

void fp32_log(float x, float& y) {
  uint32_t bits;
  std::memcpy(&bits, &x, sizeof bits);
  const uint32_t exp = (bits >> 23) & 0xFFu, frac = bits & 0x7FFFFFu;
  uint32_t out;
  if (exp == 0xFF && frac != 0) {
    out = bits | 0x400000u;
  } else if ((bits & 0x7FFFFFFFu) == 0) {
    out = 0xFF800000u;
  } else if (bits >> 31) {
    out = 0xFFC00000u;
  } else if (exp == 0xFF) {
    out = bits;
  } else {
    // m with its leading one in bit 23; a subnormal is normalised here.
    const int lead = exp ? 24 : bit_length(frac);
    const uint32_t m = exp ? frac | 0x800000u : frac << (24 - lead);
    const int e = exp ? static_cast<int>(exp) - 127 : lead - 150;

    const uint32_t i1 = (m >> (23 - LOG_INDEX1_POSITION)) & ((1u << LOG_INDEX1_BITS) - 1);
    const uint64_t p1 = uint64_t{m} * LOG_RECIP1[i1];
    const uint32_t i2 = static_cast<uint32_t>((p1 - (uint64_t{1} << kP1Frac)) >> (kP1Frac - LOG_INDEX2_POSITION));
    const uint128 p2 = uint128{p1} * LOG_RECIP2[i2];
    const uint32_t i3 = static_cast<uint32_t>((p2 - (uint128{1} << kP2Frac)) >> (kP2Frac - LOG_INDEX3_POSITION));
    const uint128 p3 = p2 * LOG_RECIP3[i3];
    const uint128 t3 = (p3 - (uint128{1} << kP3Frac)) >> (kP3Frac - LOG_FRAC_BITS);  // truncated
    const uint128 half_square = (t3 * t3) >> (LOG_FRAC_BITS + 1);

    const i128 ln2 = static_cast<i128>((uint128{LOG_LN2_HI} << 64) | LOG_LN2_LO);
    i128 sum = (e * ln2) >> (LN2_FRAC_BITS - LOG_FRAC_BITS);  // floor, as the RTL's arithmetic shift
    sum += LOG_NEG_LN1[i1];
    sum += LOG_NEG_LN2[i2];
    sum += LOG_NEG_LN3[i3];
    sum += static_cast<i128>(t3) - static_cast<i128>(half_square);

    if (sum == 0) {
      out = 0;  // ln(1)
    } else {
      // Round |sum| * 2^-62 to 24 significant bits, to nearest even.
      const uint32_t sign = sum < 0 ? 0x80000000u : 0;
      const uint128 magnitude = static_cast<uint128>(sum < 0 ? -sum : sum);
      const int drop = bit_length(magnitude) - 24;  // > 0: |ln x| >= 2^-25 has at least 38 bits
      uint64_t q = static_cast<uint64_t>(magnitude >> drop);
      const uint128 rem = magnitude & ((uint128{1} << drop) - 1), half = uint128{1} << (drop - 1);
      if (rem > half || (rem == half && (q & 1))) ++q;
      // q * 2^(drop - 62), q in [2^23, 2^24]: the carry of q = 2^24 moves into the exponent.
      out = sign | ((static_cast<uint32_t>(drop + 88) << 23) + static_cast<uint32_t>(q - 0x800000u));
    }
  }
  std::memcpy(&y, &out, sizeof y);
}
