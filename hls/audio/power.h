// power.h: power spectrum |X|^2 of each bin.
#pragma once

#include <cstdint>

#include "../common/hls_compat.h"
#include "audio_config.h"
#include "fft.h"

namespace atoll_audio {

static void power_stage(uint32_t frames, hls::stream<Bin>& in, hls::stream<float>& out) {
power_loop:
  for (uint32_t i = 0; i < frames * N_BINS; ++i) {
#pragma HLS LOOP_TRIPCOUNT min = N_BINS max = MAX_FRAMES * N_BINS
#pragma HLS PIPELINE II = 1
    Bin x = in.read();
    out.write(x.re * x.re + x.im * x.im);
  }
}

}  // namespace atoll_audio
