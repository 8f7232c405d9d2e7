// framer.h: centred framing (n_fft/2 = 256 zeros of constant padding on each side), hop 160, and
// the periodic Hann window of 400 samples centred in the 512-sample FFT frame. Only the 400
// windowed samples travel on; the FFT stage puts them at offset 56 of its zero frame.
// Frame t covers samples 160 t - 200 .. 160 t + 199 of the 16 kHz signal.
#pragma once

#include <cstdint>

#include "hls_compat.h"
#include "audio_config.h"
#include "audio_tables.h"

namespace atoll_audio {

static void framer_stage(uint32_t n, uint32_t frames, hls::stream<float>& in, hls::stream<float>& out) {
  float line[WIN];
  int64_t next = -(int64_t)(PAD - WIN_OFFSET);  // index of the next sample to enter the line
framer_prefill_loop:
  for (int i = 0; i < WIN; ++i) {
#pragma HLS PIPELINE II = 1
    line[i] = (next >= 0 && next < (int64_t)n) ? in.read() : 0.0f;
    ++next;
  }
framer_frame_loop:
  for (uint32_t t = 0; t < frames; ++t) {
#pragma HLS LOOP_TRIPCOUNT min = 1 max = MAX_FRAMES
    if (t > 0) {
    framer_shift_loop:
      for (int i = 0; i < WIN - HOP; ++i) {
#pragma HLS PIPELINE II = 1
        line[i] = line[i + HOP];
      }
    framer_fill_loop:
      for (int i = WIN - HOP; i < WIN; ++i) {
#pragma HLS PIPELINE II = 1
        line[i] = (next >= 0 && next < (int64_t)n) ? in.read() : 0.0f;
        ++next;
      }
    }
  framer_window_loop:
    for (int i = 0; i < WIN; ++i) {
#pragma HLS PIPELINE II = 1
      out.write(line[i] * HANN_WINDOW[i]);
    }
  }
}

}  // namespace atoll_audio
