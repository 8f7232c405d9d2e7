// log_mel.h: log(S + 2^-24), written to the (80, T) row-major output. The logarithm is the fp32_log
// RTL blackbox (fixed point, rounded once: the correctly rounded float32 log but for two inputs).
#pragma once

#include <cstdint>

#include "hls_compat.h"
#include "audio_config.h"
#include "audio_rtl_units.h"

namespace atoll_audio {

static void log_mel_stage(uint32_t frames, hls::stream<float>& in, float* mel) {
log_frame_loop:
  for (uint32_t t = 0; t < frames; ++t) {
#pragma HLS LOOP_TRIPCOUNT min = 1 max = MAX_FRAMES
  log_band_loop:
    for (int m = 0; m < N_MELS; ++m) {
#pragma HLS PIPELINE II = 1
      float y;
      fp32_log(in.read() + LOG_FLOOR, y);
      mel[(uint64_t)m * frames + t] = y;
    }
  }
}

}  // namespace atoll_audio
