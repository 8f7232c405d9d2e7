// normaliser.h: per-band (x - mean) / (std + 1e-5) over time, with the unbiased std (ddof=1),
// from the sums the mel CU accumulated in double.
#pragma once

#include <cmath>
#include <cstdint>

#include "audio_config.h"

namespace atoll_audio {

static void normalise_bands(const float* mel, const double* stats, uint32_t frames, float* out) {
norm_band_loop:
  for (int m = 0; m < N_MELS; ++m) {
    double mean = stats[m] / frames;
    double var = (stats[N_MELS + m] - stats[m] * mean) / (frames - 1);
    float mean_f = (float)mean;
    float inv = 1.0f / ((float)std::sqrt(var > 0.0 ? var : 0.0) + NORM_EPS);
    const float* x = &mel[(uint64_t)m * frames];
    float* y = &out[(uint64_t)m * frames];
  norm_frame_loop:
    for (uint32_t t = 0; t < frames; ++t) {
#pragma HLS LOOP_TRIPCOUNT min = 2 max = MAX_FRAMES
#pragma HLS PIPELINE II = 1
      y[t] = (x[t] - mean_f) * inv;
    }
  }
}

}  // namespace atoll_audio
