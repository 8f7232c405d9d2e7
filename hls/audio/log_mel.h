// log_mel.h: log(S + 2^-24), written to the (80, T) row-major output. The logarithm is the fp32_log
// RTL blackbox (fixed point, rounded once: the correctly rounded float32 log but for two inputs).
#pragma once

#include <cstdint>

#include "hls_compat.h"
#include "audio_config.h"
#include "audio_rtl_units.h"
#include "beat_io.h"

namespace atoll_audio {

// The frames arrive band by band within a frame; the output is band-major, so it is gathered on
// chip and written in sequential beats once the last frame is in.
static void log_mel_stage(uint32_t frames, hls::stream<float>& in, Beat* mel) {
  ATOLL_CU_RAM float buf[N_MELS * MAX_FRAMES];
#pragma HLS BIND_STORAGE variable = buf type = ram_2p impl = uram
#pragma HLS ARRAY_PARTITION variable = buf cyclic factor = FLOATS_PER_BEAT
log_frame_loop:
  for (uint32_t t = 0; t < frames; ++t) {
#pragma HLS LOOP_TRIPCOUNT min = 1 max = MAX_FRAMES
  log_band_loop:
    for (int m = 0; m < N_MELS; ++m) {
#pragma HLS PIPELINE II = 1
      float y;
      fp32_log(in.read() + LOG_FLOOR, y);
      buf[m * frames + t] = y;
    }
  }
  write_rows(buf, frames, mel);
}

}  // namespace atoll_audio
