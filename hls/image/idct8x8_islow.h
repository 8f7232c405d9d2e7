// idct8x8_islow.h: C signature of the idct8x8_islow RTL blackbox (hls/rtl/idct8x8_islow.v with
// its default parameters, descriptor hls/rtl/idct8x8_islow.json), for the image CU and for C
// simulation, which runs the C model in idct8x8_islow.cpp.
#pragma once
#include <cstdint>

#include "hls_compat.h"
#include "jpeg_idct.h"

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
