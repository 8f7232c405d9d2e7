// log_mel.h: log(S + 2^-24), written to the (80, T) row-major output, plus the per-band sum and
// sum of squares (double) that let the norm CU normalise in one pass.
#pragma once

#include <cmath>
#include <cstdint>

#include "hls_compat.h"
#include "audio_config.h"

namespace atoll_audio {

static void log_mel_stage(uint32_t frames, hls::stream<float>& in, float* mel, double* stats) {
  double sum[N_MELS], sumsq[N_MELS];
log_clear_loop:
  for (int m = 0; m < N_MELS; ++m) {
    sum[m] = 0.0;
    sumsq[m] = 0.0;
  }
log_frame_loop:
  for (uint32_t t = 0; t < frames; ++t) {
#pragma HLS LOOP_TRIPCOUNT min = 1 max = MAX_FRAMES
  log_band_loop:
    for (int m = 0; m < N_MELS; ++m) {
#pragma HLS PIPELINE II = 1
      float v = std::log(in.read() + LOG_FLOOR);
      mel[(uint64_t)m * frames + t] = v;
      sum[m] += (double)v;
      sumsq[m] += (double)v * (double)v;
    }
  }
log_stats_loop:
  for (int m = 0; m < N_MELS; ++m) {
    stats[m] = sum[m];
    stats[N_MELS + m] = sumsq[m];
  }
}

}  // namespace atoll_audio
