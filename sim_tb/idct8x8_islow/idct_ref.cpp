// idct_ref.cpp: extern "C" entry points to the IDCT C models, for the cocotb testbench (ctypes).
#include <cstdint>

#include "idct8x8_islow.h"

using namespace atoll_image;

extern "C" {

int idct_ref_word_bits() { return 8 * static_cast<int>(sizeof(IdctWord)); }

// n blocks of 64 coefficients and 64 quantisation steps (natural order) to n blocks of 64 samples,
// straight through idct_islow (the full transform: its closed forms give the same samples).
void idct_ref_islow(const int16_t* coef, const uint16_t* quant, uint8_t* samples, int n) {
  for (int b = 0; b < n; ++b) idct_islow(coef + 64 * b, quant + 64 * b, false, samples + 64 * b, 8u);
}

// The same through the blackbox's C model and its packed stream beats.
void idct_ref_blackbox(const int16_t* coef, const uint16_t* quant, uint8_t* samples, int n) {
  hls::stream<IdctCoefRow> in;
  hls::stream<IdctSampleRow> out;
  for (int b = 0; b < n; ++b) {
    for (int r = 0; r < 8; ++r) {
      IdctCoefRow row;
      for (int c = 0; c < 8; ++c) {
        const int i = 64 * b + 8 * r + c;
        row.lane[c] = idct_pack_lane(coef[i], quant[i]);
      }
      in.write(row);
    }
    idct8x8_islow(in, out);
    for (int r = 0; r < 8; ++r) {
      const IdctSampleRow row = out.read();
      for (int c = 0; c < 8; ++c) samples[64 * b + 8 * r + c] = row.sample[c];
    }
  }
}

}  // extern "C"
