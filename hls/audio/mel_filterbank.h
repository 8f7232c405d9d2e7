// mel_filterbank.h: 80 Slaney-normalised triangular mel bands (0..8000 Hz) over 257 power bins,
// with the sparse weights of audio_tables.h (each band touches at most MEL_MAX_BINS bins). The
// multiply-accumulate is the mel_mac RTL blackbox (a multiply and an add, rounded separately), the
// partial sums' tree the fp32_add one.
#pragma once

#include <cstdint>

#include "hls_compat.h"
#include "audio_config.h"
#include "audio_rtl_units.h"
#include "audio_tables.h"

namespace atoll_audio {

const int MEL_LANES = 8;  // partial sums per band: at least mel_mac's latency (6)
const int MEL_PAIRS = 500;  // (band, bin) weights of the 80 bands, audio_tables.h

// Per frame: the 257 bin powers on chip, then one pipelined pass over all MEL_PAIRS weights in
// band order, weight j of a band adding into partial sum j % MEL_LANES of that band (a partial is
// touched every MEL_LANES cycles: II=1 through the MAC's latency), then per band the partials
// added in a tree.
static void mel_filterbank_stage(uint32_t frames, hls::stream<float>& in, hls::stream<float>& out) {
  float power[N_BINS];
  float part[N_MELS * MEL_LANES];
#pragma HLS ARRAY_PARTITION variable = part cyclic factor = MEL_LANES
mel_frame_loop:
  for (uint32_t t = 0; t < frames; ++t) {
#pragma HLS LOOP_TRIPCOUNT min = 1 max = MAX_FRAMES
  mel_read_loop:
    for (int k = 0; k < N_BINS; ++k) {
#pragma HLS PIPELINE II = 1
      power[k] = in.read();
    }
  mel_clear_loop:
    for (int i = 0; i < N_MELS * MEL_LANES; ++i) part[i] = 0.0f;
    int m = 0, j = 0;
  mel_pair_loop:
    for (int idx = 0; idx < MEL_PAIRS; ++idx) {
#pragma HLS PIPELINE II = 1
#pragma HLS DEPENDENCE variable = part inter distance = MEL_LANES true
      const int lane = m * MEL_LANES + idx % MEL_LANES;
      mel_mac(part[lane], MEL_WEIGHTS[idx], power[MEL_FIRST_BIN[m] + j], part[lane]);
      if (++j == MEL_BIN_COUNT[m]) {
        j = 0;
        ++m;
      }
    }
  mel_band_loop:
    for (int b = 0; b < N_MELS; ++b) {
#pragma HLS PIPELINE II = 1
      const int q = b * MEL_LANES;  // the band's partials: one per bank
      float s01, s23, s45, s67, s03, s47, sum;
      fp32_add(part[q], part[q + 1], s01);
      fp32_add(part[q + 2], part[q + 3], s23);
      fp32_add(part[q + 4], part[q + 5], s45);
      fp32_add(part[q + 6], part[q + 7], s67);
      fp32_add(s01, s23, s03);
      fp32_add(s45, s67, s47);
      fp32_add(s03, s47, sum);
      out.write(sum);
    }
  }
}

}  // namespace atoll_audio
