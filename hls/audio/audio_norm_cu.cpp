// audio_norm_cu.cpp: per-band normalisation over time of audio_mel_cu's output, the second CU.
#include <cstdint>

#include "audio_config.h"
#include "normaliser.h"

using namespace atoll_audio;

/*
 * audio_norm_cu: (L - mean) / (std + 1e-5) per mel band, std unbiased (ddof=1), as in
 * ARCHITECTURE.md 4.2.
 *   mel       (m_axi in)  (80, T) log-mel from audio_mel_cu, in whole 512-bit beats
 *   n_frames  (s_axilite) T; T < 2 -> EMPTY (the unbiased std of one frame is undefined: numpy
 *                         returns NaN), out is then zero-filled; T above the static maximum
 *                         (1 + 30 s * 16000 / 160) -> BAD_ARGS
 *   out       (m_axi out) (80, T) normalised, written in whole beats (the buffer holds them)
 *   status    (m_axi out) 8 words: code, 80, T, 0, 0, 0, 0, 0
 */
extern "C" void audio_norm_cu(const Beat* mel, uint32_t n_frames, Beat* out, uint32_t* status) {
#pragma HLS INTERFACE m_axi port = mel bundle = gmem0 offset = slave
#pragma HLS INTERFACE m_axi port = out bundle = gmem2 offset = slave
#pragma HLS INTERFACE m_axi port = status bundle = gmem3 offset = slave
#pragma HLS INTERFACE s_axilite port = n_frames
#pragma HLS INTERFACE s_axilite port = return
  uint32_t code = STATUS_OK;
  if (n_frames > MAX_FRAMES) {
    code = STATUS_BAD_ARGS;
  } else if (n_frames < 2) {
    code = STATUS_EMPTY;
    Beat zero;
  norm_zero_lane_loop:
    for (uint32_t l = 0; l < kBeatBytes; ++l) zero[l] = 0;
  norm_zero_loop:
    for (uint32_t b = 0; b < mel_beats(n_frames); ++b) {
#pragma HLS LOOP_TRIPCOUNT min = 0 max = N_MELS / FLOATS_PER_BEAT
      out[b] = zero;
    }
  } else {
    normalise_bands(mel, n_frames, out);
  }
  uint32_t words[STATUS_WORDS] = {code, (uint32_t)N_MELS, n_frames, 0, 0, 0, 0, 0};
status_write_loop:
  for (int i = 0; i < STATUS_WORDS; ++i) status[i] = words[i];
}
