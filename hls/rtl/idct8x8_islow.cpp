// idct8x8_islow.cpp: C model of the idct8x8_islow RTL blackbox, used by Vitis HLS for C
// simulation: the image CU's own idct_islow behind the blackbox's stream interface.
#include "idct8x8_islow.h"

void idct8x8_islow(hls::stream<IdctCoefRow>& coef_in, hls::stream<IdctSampleRow>& samples_out) {
  int16_t coef[atoll_image::kBlockSize];
  uint16_t quant[atoll_image::kBlockSize];
  uint8_t samples[atoll_image::kBlockSize];
idct_bb_read:
  for (int r = 0; r < 8; ++r) {
    const IdctCoefRow row = coef_in.read();
    for (int c = 0; c < 8; ++c) {
      coef[8 * r + c] = static_cast<int16_t>(row.lane[c] & 0xFFFFu);
      quant[8 * r + c] = static_cast<uint16_t>(row.lane[c] >> 16);
    }
  }
  idct_islow_block(coef, quant, samples);
idct_bb_write:
  for (int r = 0; r < 8; ++r) {
    IdctSampleRow row;
    for (int c = 0; c < 8; ++c) row.sample[c] = samples[8 * r + c];
    samples_out.write(row);
  }
}
