// fft.h: 512-point real FFT as a 256-point complex radix-2 FFT of the even/odd-packed frame plus
// the split step. Fixed size, fully bounded loops, twiddles from ROM (audio_tables.h).
#pragma once

#include "hls_compat.h"
#include "audio_config.h"
#include "audio_tables.h"
#include "power.h"

namespace atoll_audio {

const int FFT_HALF = N_FFT / 2;  // complex points
const int FFT_STAGES = 8;        // log2(FFT_HALF)


// Iterative radix-2 decimation in time on bit-reversed input. Stage twiddles are contiguous, so
// the butterfly loop is a plain streaming loop (II = 1 in hardware, SIMD on the host).
static void fft256_in_place(float re[FFT_HALF], float im[FFT_HALF]) {
fft_stage_loop:
  for (int s = 0; s < FFT_STAGES; ++s) {
    const int half = 1 << s;
    const float* wre = &TWIDDLE256_RE[half - 1];
    const float* wim = &TWIDDLE256_IM[half - 1];
  fft_group_loop:
    for (int start = 0; start < FFT_HALF; start += 2 * half) {
#pragma HLS LOOP_TRIPCOUNT min = 1 max = FFT_HALF / 2
      float* ar = &re[start];
      float* ai = &im[start];
      float* br = &re[start + half];
      float* bi = &im[start + half];
    fft_butterfly_loop:
      for (int j = 0; j < half; ++j) {
#pragma HLS LOOP_TRIPCOUNT min = 1 max = FFT_HALF / 2
#pragma HLS PIPELINE II = 1
        float tr = br[j] * wre[j] - bi[j] * wim[j];
        float ti = br[j] * wim[j] + bi[j] * wre[j];
        br[j] = ar[j] - tr;
        bi[j] = ai[j] - ti;
        ar[j] += tr;
        ai[j] += ti;
      }
    }
  }
}

// Reads WIN windowed samples per frame, writes the N_BINS bin powers of each frame (the power
// unit sits on the FFT's output so bins never travel as complex pairs).
static void fft_stage(uint32_t frames, hls::stream<float>& in, hls::stream<float>& out) {
  float frame[N_FFT];
  float re[FFT_HALF], im[FFT_HALF];
fft_frame_loop:
  for (uint32_t t = 0; t < frames; ++t) {
#pragma HLS LOOP_TRIPCOUNT min = 1 max = MAX_FRAMES
  fft_clear_loop:
    for (int i = 0; i < N_FFT; ++i) frame[i] = 0.0f;
  fft_read_loop:
    for (int i = 0; i < WIN; ++i) {
#pragma HLS PIPELINE II = 1
      frame[WIN_OFFSET + i] = in.read();
    }
  fft_pack_loop:
    for (int i = 0; i < FFT_HALF; ++i) {
#pragma HLS PIPELINE II = 1
      re[BITREV256[i]] = frame[2 * i];
      im[BITREV256[i]] = frame[2 * i + 1];
    }
    fft256_in_place(re, im);
    // Split: X[k] = E[k] + W512^k O[k], E = (Z[k] + conj Z[256-k]) / 2, O = (Z[k] - conj Z[256-k]) / 2i.
  fft_split_loop:
    for (int k = 0; k < N_BINS; ++k) {
#pragma HLS PIPELINE II = 1
      int a = k & (FFT_HALF - 1);
      int b = (FFT_HALF - k) & (FFT_HALF - 1);
      float er = 0.5f * (re[a] + re[b]);
      float ei = 0.5f * (im[a] - im[b]);
      float or_ = 0.5f * (im[a] + im[b]);
      float oi = -0.5f * (re[a] - re[b]);
      float wr = TWIDDLE512_RE[k];
      float wi = TWIDDLE512_IM[k];
      out.write(bin_power(er + (wr * or_ - wi * oi), ei + (wr * oi + wi * or_)));
    }
  }
}

}  // namespace atoll_audio
