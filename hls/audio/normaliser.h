// normaliser.h: per-band (x - mean) / (std + 1e-5) over time, with the unbiased std (ddof=1),
// computed the way the reference computes it: NumPy float32 arithmetic, NumPy's summation order.
//
// Why the order matters: in a band that holds only the log floor (a silent 8 kHz clip above 4 kHz)
// the values differ by one float32 ulp and the std is ~1e-6, so the normalised value is decided by
// the rounding of the mean. Summing exactly (or in double) changes it by up to 0.4; following
// numpy.add.reduce's pairwise order makes the CU equal to the reference bit for bit.
#pragma once

#include <cmath>
#include <cstdint>

#include "audio_config.h"
#include "beat_io.h"

namespace atoll_audio {

const uint32_t PAIRWISE_BLOCK = 128;   // numpy's PW_BLOCKSIZE: runs up to this are summed directly
const int PAIRWISE_DEPTH = 8;          // log2(MAX_FRAMES / 64) + 2 levels of halving suffice
const int PAIRWISE_RUNS = 64;          // leaves of that tree: a run cut from a split holds >= 64 terms

// Term i of a sum: x[i], or (x[i] - mean)^2 rounded to float32 as NumPy forms it.
static float sum_term(const float x[MAX_FRAMES], uint32_t i, bool squares, float mean) {
  float d = x[i] - mean;
  return squares ? d * d : x[i];
}

// One run of n <= PAIRWISE_BLOCK terms: eight interleaved accumulators combined as
// ((r0 + r1) + (r2 + r3)) + ((r4 + r5) + (r6 + r7)), then the n % 8 leftovers in order; runs
// below 8 are summed in order from -0.
static float run_sum(const float x[MAX_FRAMES], uint32_t start, uint32_t n, bool squares, float mean) {
  float res = -0.0f;
  if (n < 8) {
  run_short_loop:
    for (uint32_t i = 0; i < n; ++i) {
#pragma HLS LOOP_TRIPCOUNT min = 0 max = 7
      res += sum_term(x, start + i, squares, mean);
    }
    return res;
  }
  float r[8];
#pragma HLS ARRAY_PARTITION variable = r complete
run_init_loop:
  for (int l = 0; l < 8; ++l) r[l] = sum_term(x, start + l, squares, mean);
  uint32_t body = n - n % 8;
  // Term j goes to accumulator j % 8, NumPy's order; an accumulator is touched every 8 cycles.
run_body_loop:
  for (uint32_t j = 8; j < body; ++j) {
#pragma HLS LOOP_TRIPCOUNT min = 0 max = 120
#pragma HLS PIPELINE II = 1
#pragma HLS DEPENDENCE variable = r inter distance = 8 true
    r[j % 8] += sum_term(x, start + j, squares, mean);
  }
  res = ((r[0] + r[1]) + (r[2] + r[3])) + ((r[4] + r[5]) + (r[6] + r[7]));
run_tail_loop:
  for (uint32_t i = body; i < n; ++i) {
#pragma HLS LOOP_TRIPCOUNT min = 0 max = 7
    res += sum_term(x, start + i, squares, mean);
  }
  return res;
}

// numpy.add.reduce over n float32 terms: a run when n <= 128, else the sum of the two halves split
// at n / 2 rounded down to a multiple of 8. Without recursion: the runs are visited left to right
// with a stack of pending right halves, and each finished subtree is added to its left sibling
// (the stack top at the same depth) as soon as it completes. Every loop has a fixed bound: a tree
// over MAX_FRAMES terms has at most PAIRWISE_RUNS leaves and PAIRWISE_DEPTH levels.
static float pairwise_sum(const float x[MAX_FRAMES], uint32_t n, bool squares, float mean) {
  uint32_t todo_start[PAIRWISE_DEPTH], todo_n[PAIRWISE_DEPTH], todo_depth[PAIRWISE_DEPTH];
  float done_sum[PAIRWISE_DEPTH + 1];
  uint32_t done_depth[PAIRWISE_DEPTH + 1];
  int todo = 0, done = 0;
  uint32_t start = 0, len = n, depth = 0;
  bool finished = false;
pairwise_run_loop:
  for (int run = 0; run < PAIRWISE_RUNS && !finished; ++run) {
  pairwise_split_loop:
    for (int level = 0; level < PAIRWISE_DEPTH && len > PAIRWISE_BLOCK; ++level) {
      uint32_t half = len / 2;
      half -= half % 8;
      todo_start[todo] = start + half;
      todo_n[todo] = len - half;
      todo_depth[todo] = depth + 1;
      ++todo;
      len = half;
      ++depth;
    }
    float s = run_sum(x, start, len, squares, mean);
  pairwise_merge_loop:
    for (int level = 0; level < PAIRWISE_DEPTH && done > 0 && done_depth[done - 1] == depth; ++level) {
      s = done_sum[done - 1] + s;
      --done;
      --depth;
    }
    done_sum[done] = s;
    done_depth[done] = depth;
    ++done;
    finished = todo == 0;
    if (!finished) {
      --todo;
      start = todo_start[todo];
      len = todo_n[todo];
      depth = todo_depth[todo];
    }
  }
  return done_sum[0];
}

// The (80, T) input is read into on-chip memory in whole beats; each band's row is copied out of
// it, and mean, variance and output are three passes over the row, the output going back in
// place; then the array leaves in whole beats. Division, not multiplication by a reciprocal, as
// the reference divides (one pipelined float divider).
static void normalise_bands(const Beat* mel, uint32_t frames, Beat* out) {
  ATOLL_CU_RAM float buf[N_MELS * MAX_FRAMES];
#pragma HLS BIND_STORAGE variable = buf type = ram_2p impl = uram
#pragma HLS ARRAY_PARTITION variable = buf cyclic factor = FLOATS_PER_BEAT
  float row[MAX_FRAMES];
  read_rows(mel, frames, buf);
norm_band_loop:
  for (int m = 0; m < N_MELS; ++m) {
  norm_read_loop:
    for (uint32_t t = 0; t < frames; ++t) {
#pragma HLS LOOP_TRIPCOUNT min = 2 max = MAX_FRAMES
#pragma HLS PIPELINE II = 1
      row[t] = buf[m * frames + t];
    }
    float mean = pairwise_sum(row, frames, false, 0.0f) / (float)frames;
    float var = pairwise_sum(row, frames, true, mean) / (float)(frames - 1);
    float denom = std::sqrt(var) + NORM_EPS;
  norm_frame_loop:
    for (uint32_t t = 0; t < frames; ++t) {
#pragma HLS LOOP_TRIPCOUNT min = 2 max = MAX_FRAMES
#pragma HLS PIPELINE II = 1
      buf[m * frames + t] = (row[t] - mean) / denom;
    }
  }
  write_rows(buf, frames, out);
}

}  // namespace atoll_audio
