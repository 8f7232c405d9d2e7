// audio_config.h: sizes, limits and status codes shared by the audio CUs (see hls/ABI_DPU.md).
#pragma once

#include <cstdint>

#include "hls_compat.h"

namespace atoll_audio {

// Status codes, word 0 of every status buffer.
enum : uint32_t {
  STATUS_OK = 0,
  STATUS_BAD_ARGS = 4,
  STATUS_EMPTY = 5,
  STATUS_TOO_LONG = 6,
  STATUS_NON_FINITE = 7,
  STATUS_BAD_RATE = 8,
};

const int STATUS_WORDS = 8;
const uint32_t FORMAT_INT16 = 0;
const uint32_t FORMAT_FLOAT32 = 1;

const uint32_t OUT_RATE = 16000;
const uint32_t MIN_RATE = 8000;
const uint32_t MAX_RATE = 48000;
const uint32_t MAX_SECONDS = 30;
// Static buffer limits: 30 s at the highest input rate, and 30 s at 16 kHz after resampling.
const uint32_t MAX_IN_SAMPLES = MAX_SECONDS * MAX_RATE;
const uint32_t MAX_OUT_SAMPLES = MAX_SECONDS * OUT_RATE;

const int N_FFT = 512;
const int N_BINS = N_FFT / 2 + 1;
const int HOP = 160;
const int WIN = 400;
const int WIN_OFFSET = (N_FFT - WIN) / 2;  // the window sits centred in the FFT frame
const int PAD = N_FFT / 2;                   // centred framing: zeros before the first sample
const int N_MELS = 80;
const uint32_t MAX_FRAMES = 1 + MAX_OUT_SAMPLES / HOP;
const int STATS_WORDS = 2 * N_MELS;

const float PREEMPHASIS = 0.97f;
const float LOG_FLOOR = 5.9604644775390625e-08f;  // 2**-24
const float NORM_EPS = 1e-5f;

}  // namespace atoll_audio
