// idct8x8_islow.cpp: C model of the idct8x8_islow RTL blackbox, used by C simulation: the image
// CU's own idct_islow behind the blackbox's stream interface.
#include "idct8x8_islow.h"

using namespace atoll_image;

void idct8x8_islow(hls::stream<IdctCoefRow>& coef_in, hls::stream<IdctSampleRow>& samples_out) {
  int16_t coef[kBlockSize];
  uint16_t quant[kBlockSize];
  uint8_t samples[kBlockSize];
  bool dc_only = true;
idct_bb_read:
  for (int r = 0; r < 8; ++r) {
    const IdctCoefRow row = coef_in.read();
    for (int c = 0; c < 8; ++c) {
      coef[8 * r + c] = static_cast<int16_t>(row.lane[c] & 0xFFFFu);
      quant[8 * r + c] = static_cast<uint16_t>(row.lane[c] >> 16);
      dc_only = dc_only && (r + c == 0 || coef[8 * r + c] == 0);
    }
  }
  // dc_only only selects idct_islow's closed form, which the full transform equals.
  idct_islow(coef, quant, dc_only, samples, 8u);
idct_bb_write:
  for (int r = 0; r < 8; ++r) {
    IdctSampleRow row;
    for (int c = 0; c < 8; ++c) row.sample[c] = samples[8 * r + c];
    samples_out.write(row);
  }
}
