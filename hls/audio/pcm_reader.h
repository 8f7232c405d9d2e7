// pcm_reader.h: little-endian int16 (scaled by 1/32768) or float32 mono PCM from the input buffer,
// and the finiteness check that runs before any output is written.
#pragma once

#include <cstdint>
#include <cstring>

#include "hls_compat.h"
#include "audio_config.h"

namespace atoll_audio {

static float pcm_sample(const uint8_t* pcm, uint32_t i, uint32_t format) {
  if (format == FORMAT_INT16) {
    int16_t v = (int16_t)((uint16_t)pcm[2 * i] | ((uint16_t)pcm[2 * i + 1] << 8));
    return (float)v * (1.0f / 32768.0f);
  }
  uint32_t bits = (uint32_t)pcm[4 * i] | ((uint32_t)pcm[4 * i + 1] << 8) | ((uint32_t)pcm[4 * i + 2] << 16) |
                  ((uint32_t)pcm[4 * i + 3] << 24);
  float v;
  std::memcpy(&v, &bits, sizeof v);
  return v;
}

// True when every float32 sample is finite (exponent field not all ones); int16 is always finite.
static bool pcm_all_finite(const uint8_t* pcm, uint32_t n, uint32_t format) {
  if (format == FORMAT_INT16) return true;
  bool finite = true;
finite_loop:
  for (uint32_t i = 0; i < n; ++i) {
#pragma HLS LOOP_TRIPCOUNT min = 1 max = MAX_IN_SAMPLES
#pragma HLS PIPELINE II = 1
    uint32_t exponent = (uint32_t)pcm[4 * i + 3] << 1 | (uint32_t)pcm[4 * i + 2] >> 7;
    finite &= (exponent & 0xffu) != 0xffu;
  }
  return finite;
}

static void pcm_reader_stage(const uint8_t* pcm, uint32_t n, uint32_t format, hls::stream<float>& out) {
pcm_read_loop:
  for (uint32_t i = 0; i < n; ++i) {
#pragma HLS LOOP_TRIPCOUNT min = 1 max = MAX_IN_SAMPLES
#pragma HLS PIPELINE II = 1
    out.write(pcm_sample(pcm, i, format));
  }
}

}  // namespace atoll_audio
