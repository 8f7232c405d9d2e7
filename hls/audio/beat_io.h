// beat_io.h: the (80, T) float arrays of the audio CUs to and from 512-bit beats: row-major,
// packed without gaps, moved one beat (16 floats) per cycle between the port and on-chip memory.
#pragma once

#include <cstdint>
#include <cstring>

#include "hls_compat.h"
#include "audio_config.h"

namespace atoll_audio {

const uint32_t FLOATS_PER_BEAT = kBeatBytes / 4;

// Beats holding the (80, T) output: it is written in whole 512-bit beats.
static uint32_t mel_beats(uint32_t frames) {
  return (N_MELS * frames + FLOATS_PER_BEAT - 1) / FLOATS_PER_BEAT;
}

// Float lanes of a beat, little-endian.
static Beat pack_floats(const float v[FLOATS_PER_BEAT]) {
  Beat beat;
pack_float_loop:
  for (uint32_t l = 0; l < FLOATS_PER_BEAT; ++l) {
    uint32_t bits;
    std::memcpy(&bits, &v[l], sizeof bits);
  pack_byte_loop:
    for (uint32_t j = 0; j < 4; ++j) beat[4 * l + j] = (uint8_t)(bits >> (8 * j));
  }
  return beat;
}

// The (80, T) array from on-chip memory to `out`, one beat per cycle; lanes past the last value
// are zero.
static void write_rows(const float buf[N_MELS * MAX_FRAMES], uint32_t frames, Beat* out) {
  const uint32_t n = N_MELS * frames;
write_rows_loop:
  for (uint32_t b = 0; b < mel_beats(frames); ++b) {
#pragma HLS LOOP_TRIPCOUNT min = 1 max = N_MELS * MAX_FRAMES / FLOATS_PER_BEAT
#pragma HLS PIPELINE II = 1
    float v[FLOATS_PER_BEAT];
#pragma HLS ARRAY_PARTITION variable = v complete
  write_lane_loop:
    for (uint32_t l = 0; l < FLOATS_PER_BEAT; ++l) {
      const uint32_t i = b * FLOATS_PER_BEAT + l;
      v[l] = i < n ? buf[i] : 0.0f;
    }
    out[b] = pack_floats(v);
  }
}

// Float lane l of a beat, little-endian.
static float beat_float(const Beat& beat, uint32_t l) {
  const uint32_t bits = (uint32_t)beat[4 * l] | ((uint32_t)beat[4 * l + 1] << 8) |
                        ((uint32_t)beat[4 * l + 2] << 16) | ((uint32_t)beat[4 * l + 3] << 24);
  float v;
  std::memcpy(&v, &bits, sizeof v);
  return v;
}

// The (80, T) array from `in` into on-chip memory, one beat per cycle.
static void read_rows(const Beat* in, uint32_t frames, float buf[N_MELS * MAX_FRAMES]) {
  const uint32_t n = N_MELS * frames;
read_rows_loop:
  for (uint32_t b = 0; b < mel_beats(frames); ++b) {
#pragma HLS LOOP_TRIPCOUNT min = 1 max = N_MELS * MAX_FRAMES / FLOATS_PER_BEAT
#pragma HLS PIPELINE II = 1
    const Beat beat = in[b];
  read_lane_loop:
    for (uint32_t l = 0; l < FLOATS_PER_BEAT; ++l) {
      if (b * FLOATS_PER_BEAT + l < n) buf[b * FLOATS_PER_BEAT + l] = beat_float(beat, l);
    }
  }
}

}  // namespace atoll_audio
