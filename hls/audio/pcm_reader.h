// pcm_reader.h: little-endian int16 (scaled by 1/32768) or float32 mono PCM from the input buffer,
// and the finiteness check that runs before any output is written.
#pragma once

#include <cstdint>
#include <cstring>

#include "hls_compat.h"
#include "audio_config.h"
#include "beat_io.h"

namespace atoll_audio {

const uint32_t INT16_PER_BEAT = kBeatBytes / 2;

// Sample `lane` of a beat: int16 (scaled by 1/32768) or float32, little-endian.
static float beat_sample(const Beat& beat, uint32_t lane, uint32_t format) {
  if (format == FORMAT_INT16) {
    int16_t v = (int16_t)((uint16_t)beat[2 * lane] | ((uint16_t)beat[2 * lane + 1] << 8));
    return (float)v * (1.0f / 32768.0f);
  }
  return beat_float(beat, lane);
}

// Beats holding n samples: the PCM buffer is read in whole 512-bit beats.
static uint32_t pcm_beats(uint32_t n, uint32_t format) {
  const uint32_t per_beat = format == FORMAT_INT16 ? INT16_PER_BEAT : FLOATS_PER_BEAT;
  return (n + per_beat - 1) / per_beat;
}

// True when every float32 sample is finite (exponent field not all ones); int16 is always finite.
// One beat (16 samples) per cycle.
static bool pcm_all_finite(const Beat* pcm, uint32_t n, uint32_t format) {
  if (format == FORMAT_INT16) return true;
  bool finite = true;
  const uint32_t beats = pcm_beats(n, format);
finite_loop:
  for (uint32_t b = 0; b < beats; ++b) {
#pragma HLS LOOP_TRIPCOUNT min = 1 max = MAX_IN_SAMPLES / FLOATS_PER_BEAT
#pragma HLS PIPELINE II = 1
    const Beat beat = pcm[b];
  finite_lane_loop:
    for (uint32_t l = 0; l < FLOATS_PER_BEAT; ++l) {
      uint32_t exponent = (uint32_t)beat[4 * l + 3] << 1 | (uint32_t)beat[4 * l + 2] >> 7;
      finite &= (exponent & 0xffu) != 0xffu || b * FLOATS_PER_BEAT + l >= n;
    }
  }
  return finite;
}

// The n samples in order, one per cycle: a beat is read every 16 (float32) or 32 (int16) samples.
static void pcm_reader_stage(const Beat* pcm, uint32_t n, uint32_t format, hls::stream<float>& out) {
  const uint32_t shift = format == FORMAT_INT16 ? 5 : 4;
  const uint32_t mask = (1u << shift) - 1;
  Beat beat;
pcm_read_loop:
  for (uint32_t i = 0; i < n; ++i) {
#pragma HLS LOOP_TRIPCOUNT min = 1 max = MAX_IN_SAMPLES
#pragma HLS PIPELINE II = 1
    if ((i & mask) == 0) beat = pcm[i >> shift];
    out.write(beat_sample(beat, i & mask, format));
  }
}

}  // namespace atoll_audio
