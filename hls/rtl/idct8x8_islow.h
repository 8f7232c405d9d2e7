// idct8x8_islow.h: C signature of the idct8x8_islow RTL blackbox (hls/rtl/idct8x8_islow.v with
// its default parameters), for kernels that call it and for C simulation.
#pragma once
#include <cstdint>

#include "../common/hls_compat.h"
#include "../image/jpeg_idct.h"

// One input beat: a row of the block (natural order, row 0 first, 8 beats per block). Lane k is
// column k: bits 15..0 the quantised coefficient (two's complement), bits 31..16 its quantisation
// step. Vitis HLS aggregates the struct with lane[0] at the LSB, as the RTL's s_axis_tdata.
struct IdctCoefRow {
  uint32_t lane[8];
};

// One output beat: a row of 8 samples, sample[k] at bits 8k+7..8k as the RTL's m_axis_tdata.
struct IdctSampleRow {
  uint8_t sample[8];
};

inline uint32_t idct_pack_lane(int16_t coef, uint16_t quant) {
  return static_cast<uint32_t>(static_cast<uint16_t>(coef)) | (static_cast<uint32_t>(quant) << 16);
}

// Reads one block (8 rows) from coef_in, writes its 8 sample rows to samples_out.
void idct8x8_islow(hls::stream<IdctCoefRow>& coef_in, hls::stream<IdctSampleRow>& samples_out);

namespace idct_blackbox_detail {

// hls/image's idct_islow takes a dc_only flag in its 32-bit-datapath form and none in its 64-bit
// form; the model calls whichever the tree has (the flag only selects an equal shortcut, so it
// is derived here from the coefficients). The int/long tag prefers the first when both compile.
template <typename Coef>
auto idct_islow_any(const Coef* coef, const uint16_t* quant, uint8_t* samples, int)
    -> decltype(atoll_image::idct_islow(coef, quant, false, samples, 8u), void()) {
  bool dc_only = true;
  for (int k = 1; k < 64; ++k) dc_only = dc_only && coef[k] == 0;
  atoll_image::idct_islow(coef, quant, dc_only, samples, 8u);
}

template <typename Coef>
void idct_islow_any(const Coef* coef, const uint16_t* quant, uint8_t* samples, long) {
  atoll_image::idct_islow(coef, quant, samples, 8u);
}

}  // namespace idct_blackbox_detail

// One block through the image CU's idct_islow: natural-order coefficients and steps, 8x8 samples.
inline void idct_islow_block(const int16_t coef[64], const uint16_t quant[64], uint8_t samples[64]) {
  idct_blackbox_detail::idct_islow_any(coef, quant, samples, 0);
}
