// preemphasis.h: y[n] = x[n] - 0.97 x[n-1], with librosa.effects.preemphasis's default initial
// state zi = 2 x[0] - x[1] (linear extrapolation), which makes y[0] = x[0] + (2 x[0] - x[1]).
// For a single sample (where librosa raises) x[1] is taken as 0.
#pragma once

#include <cstdint>

#include "hls_compat.h"
#include "audio_config.h"

namespace atoll_audio {

static void preemphasis_stage(uint32_t n, hls::stream<float>& in, hls::stream<float>& out) {
  float x0 = in.read();
  float x1 = n > 1 ? in.read() : 0.0f;
  out.write(x0 + (2.0f * x0 - x1));
  if (n < 2) return;
  out.write(x1 - PREEMPHASIS * x0);
  float prev = x1;
preemphasis_loop:
  for (uint32_t i = 2; i < n; ++i) {
#pragma HLS LOOP_TRIPCOUNT min = 0 max = MAX_OUT_SAMPLES
#pragma HLS PIPELINE II = 1
    float x = in.read();
    out.write(x - PREEMPHASIS * prev);
    prev = x;
  }
}

}  // namespace atoll_audio
