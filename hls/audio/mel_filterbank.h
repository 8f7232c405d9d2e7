// mel_filterbank.h: 80 Slaney-normalised triangular mel bands (0..8000 Hz) over 257 power bins,
// with the sparse weights of audio_tables.h (each band touches at most MEL_MAX_BINS bins). The
// multiply-accumulate is the mel_mac RTL blackbox (a multiply and an add, rounded separately).
#pragma once

#include <cstdint>

#include "hls_compat.h"
#include "audio_config.h"
#include "audio_rtl_units.h"
#include "audio_tables.h"

namespace atoll_audio {

static void mel_filterbank_stage(uint32_t frames, hls::stream<float>& in, hls::stream<float>& out) {
  float power[N_BINS];
mel_frame_loop:
  for (uint32_t t = 0; t < frames; ++t) {
#pragma HLS LOOP_TRIPCOUNT min = 1 max = MAX_FRAMES
  mel_read_loop:
    for (int k = 0; k < N_BINS; ++k) {
#pragma HLS PIPELINE II = 1
      power[k] = in.read();
    }
  mel_band_loop:
    for (int m = 0; m < N_MELS; ++m) {
      const float* w = &MEL_WEIGHTS[MEL_WEIGHT_OFFSET[m]];
      const float* p = &power[MEL_FIRST_BIN[m]];
      float acc = 0.0f;
    mel_bin_loop:
      for (int j = 0; j < MEL_BIN_COUNT[m]; ++j) {
#pragma HLS LOOP_TRIPCOUNT min = 1 max = MEL_MAX_BINS
        mel_mac(acc, w[j], p[j], acc);
      }
      out.write(acc);
    }
  }
}

}  // namespace atoll_audio
