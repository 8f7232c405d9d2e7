// resampler.h: polyphase FIR sample-rate converter to 16 kHz (rational L/M from the gcd).
//
// Each output sample n sits at input time n*M/L = q + r/L. The coefficients for every fraction
// r/L are precomputed per request into a phase bank, from one of two ROM responses:
// - at 22.05 and 44.1 kHz, soxr's own measured response (soxr_tables.h): there soxr interpolates
//   its coefficients and is up to ~1.2e-4 of full scale away from any closed-form filter. The bank
//   holds the L exact phases read straight from the table (both rates land on its 1/441 grid) plus
//   two start-up rows for outputs 0 and 1, which soxr computes from a transient of its own.
//   Agreement with soxr: ~2e-7 on every output sample;
// - at every other rate, the continuous prototype in audio_tables.h (a Kaiser-windowed sinc matching
//   soxr's HQ recipe where soxr runs one exact polyphase filter: 8, 12, 24, 32, 48 kHz, ~1e-7),
//   scaled to the lower of the two Nyquist rates. When L divides BANK_PHASES the bank holds exactly
//   those L phases; otherwise (unusual rates such as 44099 Hz) it holds BANK_PHASES+1 uniformly
//   spaced phases and each output interpolates linearly between the two nearest ones. At rates
//   where soxr interpolates (11.025, 37.8 kHz, ...) it is ~1e-4 of full scale away from this.
// Output length follows librosa: round(n*L/M) filtered samples (soxr's length), zero-filled up to
// ceil(n*16000/sr) (librosa's fix_length).
#pragma once

#include <cstdint>

#include "hls_compat.h"
#include "audio_config.h"
#include "audio_tables.h"
#include "soxr_tables.h"

namespace atoll_audio {

const int BANK_PHASES = 640;   // a multiple of L for 8, 11.025, 12, 22.05, 24, 32, 44.1 and 48 kHz
const int START_ROW = BANK_PHASES + 1;   // bank rows for soxr's start-up outputs 0 and 1
const int TAPS_MAX = 608;      // 2 * (floor(PROTO_HALF * 3) + 2) rounded up to DOT_LANES: 48 kHz in
const uint32_t PROTO_HALF_QUARTERS = (uint32_t)(PROTO_HALF * 4.0f);  // 97.25 prototype units, exactly
const int RING = 1024;         // input history, >= TAPS_MAX
const int DOT_LANES = 32;
const int DOT_DEPTH = 4;       // partial sums per lane, at least the float adder's latency

struct ResamplePlan {
  uint32_t up;          // L
  uint32_t down;        // M
  uint32_t half_taps;   // tap k reads input q - half_taps + 1 + k; covers the prototype's support
  int taps;             // multiple of DOT_LANES, <= TAPS_MAX
  uint32_t row_step;    // bank row stride per unit of r when exact, else 0 (interpolated bank)
  bool measured;        // soxr's measured response (22.05 / 44.1 kHz) instead of the prototype
  uint32_t n_in;
  uint32_t n_filtered;  // round(n_in * L / M)
  uint32_t n_out;       // ceil(n_in * 16000 / sr), as librosa computes it in float64
  uint32_t nyquist;     // the lower Nyquist rate times 2: max(rate, 16000); the prototype's unit is 1/nyquist s
};

const int GCD_STEPS = 24;      // Euclid on numbers below 2^16 ends within 24 steps (Lame's bound)

static uint32_t gcd_u32(uint32_t a, uint32_t b) {
gcd_loop:
  for (int i = 0; i < GCD_STEPS; ++i) {
    if (b != 0) {
      uint32_t t = a % b;
      a = b;
      b = t;
    }
  }
  return a;
}

const int F64_MANT_BITS = 52;   // float64 significand bits after the leading one
const int RATIO_STEPS = 56;     // 16000 / rate >= 1/3 reaches a 53-bit significand within 54 doublings

// librosa: n_samples = int(np.ceil(n * (float(target_sr) / orig_sr))), in float64. The exact
// quotient v = n * 16000 / rate decides it unless v is an integer: then the product rounds to v or
// to the float64 above it, depending on how 16000 / rate rounded. Integer arithmetic reproduces
// both roundings: the ratio's 53-bit significand M = RNE(16000 * 2^s / rate) has error
// err = M * rate - 16000 * 2^s, the product equals v * (1 + err / (16000 * 2^s)) exactly, and it
// rounds above v (ties stay at v, whose significand is even) iff v * err / (16000 * 2^s) exceeds
// half a unit in the last place of v, 2^(e - 53) with e = floor(log2 v).
static uint32_t resampled_length(uint32_t n_in, uint32_t rate) {
  if (rate == OUT_RATE) return n_in;
  const uint64_t scaled = (uint64_t)n_in * OUT_RATE;
  const uint32_t v = (uint32_t)(scaled / rate);
  if (scaled % rate != 0) return v + 1;
  uint64_t q = OUT_RATE / rate, r = OUT_RATE % rate;
  int s = 0;
ratio_bits_loop:
  for (int i = 0; i < RATIO_STEPS; ++i) {
    if (q < (1ull << F64_MANT_BITS)) {
      r <<= 1;
      q = (q << 1) | (r >= rate ? 1u : 0u);
      if (r >= rate) r -= rate;
      ++s;
    }
  }
  const bool round_up = 2 * r > rate || (2 * r == rate && (q & 1));
  const int64_t err = round_up ? (int64_t)(rate - r) : -(int64_t)r;
  int e = 0;
log2_loop:
  for (int i = 0; i < 32; ++i) e += (v >> i) > 1 ? 1 : 0;
  // v * err * 2^(53 - e) > 16000 * 2^s  <=>  4 * v * err > 16000 * 2^(s + e - 51), and s >= 51
  return (int64_t)v * err * 4 > ((int64_t)OUT_RATE << (s + e - 51)) ? v + 1 : v;
}

static ResamplePlan make_resample_plan(uint32_t n_in, uint32_t rate) {
  ResamplePlan p;
  uint32_t g = gcd_u32(OUT_RATE, rate);
  p.up = OUT_RATE / g;
  p.down = rate / g;
  p.nyquist = rate > OUT_RATE ? rate : OUT_RATE;
  p.measured = rate == 22050 || rate == 44100;
  // floor(span * nyquist / 16000) + 2 taps each side; the prototype's span is 97.25 = 389 / 4 units.
  p.half_taps = (p.measured ? (uint32_t)SOXR441_SPAN * p.nyquist / OUT_RATE
                            : PROTO_HALF_QUARTERS * p.nyquist / (4 * OUT_RATE)) + 2;
  p.taps = (int)((2 * p.half_taps + DOT_LANES - 1) / DOT_LANES * DOT_LANES);
  p.row_step = (BANK_PHASES % p.up == 0) ? BANK_PHASES / p.up : 0;
  p.n_in = n_in;
  p.n_filtered = (uint32_t)((2ull * n_in * p.up + p.down) / (2ull * p.down));
  p.n_out = resampled_length(n_in, rate);
  return p;
}

// Prototype at table position i + f (i >= 1, 0 <= f < 1): 4-point cubic Lagrange on the table.
static float prototype_at(int i, float f) {
  if (i + 2 >= PROTO_LEN) return 0.0f;
  float wm1 = -f * (f - 1.0f) * (f - 2.0f) * (1.0f / 6.0f);
  float w0 = (f + 1.0f) * (f - 1.0f) * (f - 2.0f) * 0.5f;
  float w1 = -(f + 1.0f) * f * (f - 2.0f) * 0.5f;
  float w2 = (f + 1.0f) * f * (f - 1.0f) * (1.0f / 6.0f);
  return wm1 * PROTO_TABLE[i - 1] + w0 * PROTO_TABLE[i] + w1 * PROTO_TABLE[i + 1] + w2 * PROTO_TABLE[i + 2];
}

// Row for bank phase `phase` (fraction phase / BANK_PHASES of an input sample): tap k multiplies
// input sample q - half_taps + 1 + k. Its distance from the output instant, in units of
// 1 / (BANK_PHASES * rate) s, is the integer d below; the table position |d| * PROTO_STEPS *
// 16000 / (BANK_PHASES * nyquist) is split exactly into an integer and a fraction
// (PROTO_STEPS * 16000 / BANK_PHASES = 3200 is an integer), so the interpolation sees the fraction
// rounded once to float32.
static void build_bank_row(const ResamplePlan& p, uint32_t phase, float row[TAPS_MAX]) {
#pragma HLS ARRAY_PARTITION variable = PROTO_TABLE cyclic factor = 4
  const uint64_t per_phase = (uint64_t)PROTO_STEPS * OUT_RATE / BANK_PHASES;
  const float gain = (float)OUT_RATE / (float)p.nyquist;
  // position = |d| * per_phase as quotient and remainder by nyquist, stepped by |d|'s change of
  // BANK_PHASES per tap: down while d >= 0 (taps below `turn`), up after; divides only out here.
  const int turn = (int)p.half_taps + (phase >= (uint32_t)BANK_PHASES ? 1 : 0);
  const int64_t d0 = (int64_t)phase + (int64_t)BANK_PHASES * ((int64_t)p.half_taps - 1);
  const int64_t d_turn = (int64_t)phase + (int64_t)BANK_PHASES * ((int64_t)p.half_taps - 1 - turn);
  const uint64_t step = (uint64_t)BANK_PHASES * per_phase;
  const int64_t step_q = (int64_t)(step / p.nyquist), step_r = (int64_t)(step % p.nyquist);
  int64_t q = (int64_t)((uint64_t)d0 * per_phase / p.nyquist), r = (int64_t)((uint64_t)d0 * per_phase % p.nyquist);
  const int64_t turn_q = (int64_t)((uint64_t)(-d_turn) * per_phase / p.nyquist);
  const int64_t turn_r = (int64_t)((uint64_t)(-d_turn) * per_phase % p.nyquist);
bank_tap_loop:
  for (int k = 0; k < p.taps; ++k) {
#pragma HLS LOOP_TRIPCOUNT min = 200 max = TAPS_MAX
#pragma HLS PIPELINE II = 1
    if (k == turn) {
      q = turn_q;
      r = turn_r;
    }
    const float f = (float)(uint32_t)r / (float)p.nyquist;
    row[k] = prototype_at((int)q + 1, f) * gain;
    if (k + 1 < turn) {
      q -= step_q;
      r -= step_r;
      if (r < 0) {
        r += p.nyquist;
        --q;
      }
    } else {
      q += step_q;
      r += step_r;
      if (r >= (int64_t)p.nyquist) {
        r -= p.nyquist;
        ++q;
      }
    }
  }
}

// Row for phase r of soxr's measured response: tap k sits at r/L + half_taps - 1 - k input samples,
// which is (r + (half_taps - 1 - k) * L) / M output samples: an exact point of the 1/441 grid
// (M = 441 at both rates).
static void build_measured_row(const ResamplePlan& p, uint32_t r, float row[TAPS_MAX]) {
  float gain = (float)p.up / (float)p.down;   // the table is normalised to 16 kHz: times 16000 / rate
measured_tap_loop:
  for (int k = 0; k < p.taps; ++k) {
#pragma HLS LOOP_TRIPCOUNT min = 200 max = TAPS_MAX
#pragma HLS PIPELINE II = 1
    int32_t tau = (int32_t)r + ((int32_t)p.half_taps - 1 - k) * (int32_t)p.up;
    uint32_t i = (uint32_t)(tau < 0 ? -tau : tau);
    row[k] = i < (uint32_t)SOXR441_LEN ? SOXR441_RESPONSE[i] * gain : 0.0f;
  }
}

// Output s in {0, 1} (input position q_s): soxr's start-up row, stored on the 44.1 kHz input grid.
static void build_start_row(const ResamplePlan& p, uint32_t s, uint32_t q_s, float row[TAPS_MAX]) {
  uint32_t stride = 44100 / (p.down * OUT_RATE / p.up);
  float gain = (float)p.up / (float)p.down;
start_tap_loop:
  for (int k = 0; k < p.taps; ++k) {
#pragma HLS LOOP_TRIPCOUNT min = 200 max = TAPS_MAX
#pragma HLS PIPELINE II = 1
    int32_t j = (int32_t)q_s - (int32_t)p.half_taps + 1 + k;   // input sample under tap k
    uint32_t i = (uint32_t)j * stride;
    row[k] = j >= 0 && i < (uint32_t)SOXR441_START_LEN ? SOXR441_START[s * SOXR441_START_LEN + i] * gain : 0.0f;
  }
}

// Host builds of the C simulation get an AVX2 clone of the hot loop, picked at load time when the
// CPU has it (same arithmetic order, so results do not depend on which clone runs).
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__SYNTHESIS__) && !defined(__clang__)
#define ATOLL_HOST_SIMD_CLONES __attribute__((target_clones("avx2", "default")))
#else
#define ATOLL_HOST_SIMD_CLONES
#endif

// The DOT_LANES window samples of taps k.. : the window starts at a runtime offset of a ring
// partitioned cyclically by DOT_LANES, so bank l reads the one of them it holds (from the block at
// or after the window's), and a rotation by start % DOT_LANES in log2(DOT_LANES) stages of 2:1
// multiplexers puts them in tap order (a barrel shifter, not a DOT_LANES:1 multiplexer per lane).
static void window_block(const float ring[2 * RING], uint32_t start, int k, float out[DOT_LANES]) {
  const uint32_t a = start % DOT_LANES;
  const uint32_t block = (start + (uint32_t)k) / DOT_LANES;
  float lane[DOT_LANES];
#pragma HLS ARRAY_PARTITION variable = lane complete
window_bank_loop:
#pragma GCC unroll 32
  for (uint32_t l = 0; l < DOT_LANES; ++l) lane[l] = ring[(block + (l < a ? 1 : 0)) * DOT_LANES + l];
window_rotate_loop:
  for (uint32_t bit = 1; bit < (uint32_t)DOT_LANES; bit <<= 1) {
    float rotated[DOT_LANES];
#pragma HLS ARRAY_PARTITION variable = rotated complete
  window_rotate_lane_loop:
#pragma GCC unroll 32
    for (uint32_t m = 0; m < DOT_LANES; ++m) rotated[m] = (a & bit) ? lane[(m + bit) % DOT_LANES] : lane[m];
  window_rotate_copy_loop:
#pragma GCC unroll 32
    for (uint32_t m = 0; m < DOT_LANES; ++m) lane[m] = rotated[m];
  }
window_out_loop:
#pragma GCC unroll 32
  for (uint32_t m = 0; m < DOT_LANES; ++m) out[m] = lane[m];
}

// DOT_LANES x DOT_DEPTH partial sums: each block of DOT_LANES taps adds into the partial sums of
// its block index mod DOT_DEPTH, so a sum is touched every DOT_DEPTH cycles (the adder's latency)
// and the loop runs at II=1; then the DOT_DEPTH sums of a lane, then the lanes, are added in a
// tree. SIMD lanes on the host. The caller partitions coef and ring cyclically by DOT_LANES.
ATOLL_HOST_SIMD_CLONES static float dot_taps(const float coef[TAPS_MAX], const float ring[2 * RING],
                                             uint32_t start, int taps) {
  float acc[DOT_DEPTH][DOT_LANES];
#pragma HLS ARRAY_PARTITION variable = acc complete dim = 0
dot_clear_loop:
  for (int d = 0; d < DOT_DEPTH; ++d) {
#pragma GCC unroll 32
    for (int l = 0; l < DOT_LANES; ++l) acc[d][l] = 0.0f;
  }
dot_loop:
  for (int k = 0; k < taps; k += DOT_LANES) {
#pragma HLS LOOP_TRIPCOUNT min = 25 max = TAPS_MAX / DOT_LANES
#pragma HLS PIPELINE II = 1
#pragma HLS DEPENDENCE variable = acc inter distance = DOT_DEPTH true
    float window[DOT_LANES];
#pragma HLS ARRAY_PARTITION variable = window complete
    window_block(ring, start, k, window);
  dot_lane_loop:
#pragma GCC unroll 32
    for (int l = 0; l < DOT_LANES; ++l) acc[(k / DOT_LANES) % DOT_DEPTH][l] += coef[k + l] * window[l];
  }
dot_depth_loop:
#pragma GCC unroll 32
  for (int l = 0; l < DOT_LANES; ++l) acc[0][l] = (acc[0][l] + acc[1][l]) + (acc[2][l] + acc[3][l]);
dot_tree_loop:
#pragma GCC unroll 5
  for (int width = DOT_LANES / 2; width > 0; width /= 2) {
  dot_tree_level_loop:
#pragma GCC unroll 16
    for (int l = 0; l < DOT_LANES / 2; ++l) {
      if (l < width) acc[0][l] += acc[0][l + width];
    }
  }
  return acc[0][0];
}

const uint32_t MAX_ADVANCE = MAX_RATE / OUT_RATE;  // input samples one output moves on, at most

// Input history: logical index i holds input sample i - (half_taps - 1) (zeros before 0 and past
// n_in), stored twice so that any TAPS_MAX window is contiguous.
struct History {
  float ring[2 * RING];
  uint64_t pushed;
  uint32_t consumed;
};

static void history_push(History& h, const ResamplePlan& p, hls::stream<float>& in) {
  float v = 0.0f;
  if (h.pushed >= p.half_taps - 1 && h.consumed < p.n_in) {
    v = in.read();
    ++h.consumed;
  }
  uint32_t w = (uint32_t)(h.pushed & (RING - 1));
  h.ring[w] = v;
  h.ring[w + RING] = v;
  ++h.pushed;
}

// Reads the p.n_in input samples in order from `in`, produces p.n_out samples on `out`.
static void resample_stage(const ResamplePlan& p, hls::stream<float>& in, hls::stream<float>& out) {
  ATOLL_CU_RAM float bank[START_ROW + SOXR441_START_ROWS][TAPS_MAX];
#pragma HLS BIND_STORAGE variable = bank type = ram_2p impl = uram
#pragma HLS ARRAY_PARTITION variable = bank cyclic factor = DOT_LANES dim = 2
  History h;
#pragma HLS ARRAY_PARTITION variable = h.ring cyclic factor = DOT_LANES
  h.pushed = 0;
  h.consumed = 0;

  uint32_t rows = p.row_step ? p.up : BANK_PHASES + 1;
bank_row_loop:
  for (uint32_t j = 0; j < rows; ++j) {
#pragma HLS LOOP_TRIPCOUNT min = 1 max = BANK_PHASES + 1
    uint32_t row = p.row_step ? j * p.row_step : j;
    if (p.measured) {
      build_measured_row(p, j, bank[row]);
    } else {
      build_bank_row(p, row, bank[row]);
    }
  }
  if (p.measured) {
  start_row_loop:
    for (uint32_t s = 0; s < (uint32_t)SOXR441_START_ROWS; ++s) {
      build_start_row(p, s, s * p.down / p.up, bank[START_ROW + s]);
    }
  }

  // Output n reads the window of taps samples from logical index q; it holds them before the first
  // output, and each output moves q on by at most MAX_ADVANCE samples.
history_fill_loop:
  for (int k = 0; k < p.taps; ++k) {
#pragma HLS LOOP_TRIPCOUNT min = 200 max = TAPS_MAX
    history_push(h, p, in);
  }
  // r is the output's phase (input time q + r / L); for the interpolated bank, r * BANK_PHASES / L
  // as row + rem / L, stepped by down * BANK_PHASES / L per output: no divide per output.
  uint32_t q = 0, r = 0, row = 0, rem = 0;
  const uint32_t row_step = (uint32_t)((uint64_t)p.down * BANK_PHASES / p.up);
  const uint32_t rem_step = (uint32_t)((uint64_t)p.down * BANK_PHASES % p.up);
resample_out_loop:
  for (uint32_t n = 0; n < p.n_filtered; ++n) {
#pragma HLS LOOP_TRIPCOUNT min = 1 max = MAX_OUT_SAMPLES
    const uint32_t start = q & (RING - 1);
    float y;
    if (p.measured && n < (uint32_t)SOXR441_START_ROWS) {
      y = dot_taps(bank[START_ROW + n], h.ring, start, p.taps);
    } else if (p.row_step) {
      y = dot_taps(bank[r * p.row_step], h.ring, start, p.taps);
    } else {
      float a = (float)rem / (float)p.up;
      float y0 = dot_taps(bank[row], h.ring, start, p.taps);
      y = a == 0.0f ? y0 : y0 + a * (dot_taps(bank[row + 1], h.ring, start, p.taps) - y0);
    }
    out.write(y);
    uint32_t next = r + p.down;  // below up + down <= (MAX_ADVANCE + 1) * up
    row += row_step;
    rem += rem_step;
    if (rem >= p.up) {
      rem -= p.up;
      ++row;
    }
  history_advance_loop:
    for (uint32_t j = 0; j < MAX_ADVANCE; ++j) {
      if (next >= p.up) {
        next -= p.up;
        row -= BANK_PHASES;
        ++q;
        history_push(h, p, in);
      }
    }
    r = next;
  }
  // Inputs past the last window still leave the stream.
resample_drain_loop:
  for (uint32_t i = h.consumed; i < p.n_in; ++i) {
#pragma HLS LOOP_TRIPCOUNT min = 0 max = TAPS_MAX
    in.read();
  }
resample_zero_loop:
  for (uint32_t n = p.n_filtered; n < p.n_out; ++n) {
#pragma HLS LOOP_TRIPCOUNT min = 0 max = 1
    out.write(0.0f);
  }
}

}  // namespace atoll_audio
