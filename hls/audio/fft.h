// fft.h: 512-point real FFT as a 256-point complex radix-2 FFT of the even/odd-packed frame plus
// the split step. Fixed size, fully bounded loops, twiddles from ROM (audio_tables.h).
#pragma once

#include "../common/hls_compat.h"
#include "audio_config.h"
#include "audio_tables.h"

namespace atoll_audio {

const int FFT_HALF = N_FFT / 2;  // complex points
const int FFT_STAGES = 8;        // log2(FFT_HALF)

struct Bin {
  float re;
  float im;
};

static unsigned bit_reverse8(unsigned v) {
  unsigned r = 0;
bitrev_loop:
  for (int b = 0; b < FFT_STAGES; ++b) {
#pragma HLS UNROLL
    r = (r << 1) | ((v >> b) & 1u);
  }
  return r;
}

static void fft256_in_place(float re[FFT_HALF], float im[FFT_HALF]) {
fft_stage_loop:
  for (int s = 0; s < FFT_STAGES; ++s) {
    int half = 1 << s;
    int tw_stride = FFT_HALF / (2 * half);
  fft_group_loop:
    for (int start = 0; start < FFT_HALF; start += 2 * half) {
    fft_butterfly_loop:
      for (int j = 0; j < half; ++j) {
#pragma HLS LOOP_TRIPCOUNT min = 1 max = FFT_HALF / 2
#pragma HLS PIPELINE II = 1
        float wr = TWIDDLE256_RE[j * tw_stride];
        float wi = TWIDDLE256_IM[j * tw_stride];
        int a = start + j;
        int b = a + half;
        float tr = re[b] * wr - im[b] * wi;
        float ti = re[b] * wi + im[b] * wr;
        re[b] = re[a] - tr;
        im[b] = im[a] - ti;
        re[a] += tr;
        im[a] += ti;
      }
    }
  }
}

// Reads WIN windowed samples per frame, writes N_BINS complex bins per frame.
static void fft_stage(uint32_t frames, hls::stream<float>& in, hls::stream<Bin>& out) {
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
      unsigned k = bit_reverse8((unsigned)i);
      re[k] = frame[2 * i];
      im[k] = frame[2 * i + 1];
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
      Bin x;
      x.re = er + (wr * or_ - wi * oi);
      x.im = ei + (wr * oi + wi * or_);
      out.write(x);
    }
  }
}

}  // namespace atoll_audio
