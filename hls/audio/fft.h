// fft.h: 512-point real FFT as a 256-point complex radix-2 FFT of the even/odd-packed frame plus
// the split step. Fixed size, fully bounded loops, twiddles from ROM (audio_tables.h).
#pragma once

#include "hls_compat.h"
#include "audio_config.h"
#include "audio_rtl_units.h"
#include "audio_tables.h"
#include "power.h"

namespace atoll_audio {

const int FFT_HALF = N_FFT / 2;  // complex points
const int FFT_STAGES = 8;        // log2(FFT_HALF)


// Stage s of a radix-2 decimation-in-time FFT from one buffer to the other: two butterflies per
// cycle (two fft_butterfly RTL blackboxes), n and n + 1. Their points a, a + 1 (or a + 2 at stage 0)
// and b = a + half, b + 1 fall two in each bank of a buffer partitioned cyclically by 2, the two
// ports of its RAM, so the loop runs at II = 1. Stage twiddles are contiguous.
static void fft256_stage(const float src_re[FFT_HALF], const float src_im[FFT_HALF], float dst_re[FFT_HALF],
                         float dst_im[FFT_HALF], int s) {
  const int half = 1 << s;
fft_butterfly_loop:
  for (int n = 0; n < FFT_HALF / 2; n += 2) {
#pragma HLS PIPELINE II = 1
  fft_butterfly_pair_loop:
    for (int u = 0; u < 2; ++u) {
      const int j = (n + u) & (half - 1);
      const int a = (((n + u) >> s) << (s + 1)) | j;
      const int b = a + half;
      fft_butterfly(src_re[a], src_im[a], src_re[b], src_im[b], TWIDDLE256_RE[half - 1 + j],
                    TWIDDLE256_IM[half - 1 + j], dst_re[a], dst_im[a], dst_re[b], dst_im[b]);
    }
  }
}

// The 256-point complex FFT of bit-reversed input, eight stages back and forth between (re, im)
// and a second buffer pair: the result is back in (re, im).
static void fft256_in_place(float re[FFT_HALF], float im[FFT_HALF]) {
  float re_odd[FFT_HALF], im_odd[FFT_HALF];
#pragma HLS ARRAY_PARTITION variable = re_odd cyclic factor = 2
#pragma HLS ARRAY_PARTITION variable = im_odd cyclic factor = 2
fft_stage_loop:
  for (int s = 0; s < FFT_STAGES; s += 2) {
    fft256_stage(re, im, re_odd, im_odd, s);
    fft256_stage(re_odd, im_odd, re, im, s + 1);
  }
}

// Reads WIN windowed samples per frame, writes the N_BINS bin powers of each frame (the power
// unit sits on the FFT's output so bins never travel as complex pairs).
static void fft_stage(uint32_t frames, hls::stream<float>& in, hls::stream<float>& out) {
  float frame[N_FFT];
  float re[FFT_HALF], im[FFT_HALF];
#pragma HLS ARRAY_PARTITION variable = re cyclic factor = 2
#pragma HLS ARRAY_PARTITION variable = im cyclic factor = 2
  // The window fills the same WIN samples of every frame: the zeros around it are set once.
fft_clear_loop:
  for (int i = 0; i < N_FFT; ++i) frame[i] = 0.0f;
fft_frame_loop:
  for (uint32_t t = 0; t < frames; ++t) {
#pragma HLS LOOP_TRIPCOUNT min = 1 max = MAX_FRAMES
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
