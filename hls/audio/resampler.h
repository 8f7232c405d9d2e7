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

#include <cmath>
#include <cstdint>

#include "hls_compat.h"
#include "audio_config.h"
#include "audio_tables.h"
#include "pcm_reader.h"
#include "soxr_tables.h"

namespace atoll_audio {

const int BANK_PHASES = 640;   // a multiple of L for 8, 11.025, 12, 22.05, 24, 32, 44.1 and 48 kHz
const int START_ROW = BANK_PHASES + 1;   // bank rows for soxr's start-up outputs 0 and 1
const int TAPS_MAX = 608;      // 2 * (floor(PROTO_HALF * 3) + 2) rounded up to DOT_LANES: 48 kHz in
const int RING = 1024;         // input history, >= TAPS_MAX
const int DOT_LANES = 32;

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
  double scale;         // input samples per prototype unit
};

static uint32_t gcd_u32(uint32_t a, uint32_t b) {
gcd_loop:
  while (b != 0) {
#pragma HLS LOOP_TRIPCOUNT min = 1 max = 32
    uint32_t t = a % b;
    a = b;
    b = t;
  }
  return a;
}

// librosa: n_samples = int(np.ceil(n * (float(target_sr) / orig_sr))).
static uint32_t resampled_length(uint32_t n_in, uint32_t rate) {
  if (rate == OUT_RATE) return n_in;
  return (uint32_t)std::ceil((double)n_in * ((double)OUT_RATE / (double)rate));
}

static ResamplePlan make_resample_plan(uint32_t n_in, uint32_t rate) {
  ResamplePlan p;
  uint32_t g = gcd_u32(OUT_RATE, rate);
  p.up = OUT_RATE / g;
  p.down = rate / g;
  p.scale = rate > OUT_RATE ? (double)rate / OUT_RATE : 1.0;
  p.measured = rate == 22050 || rate == 44100;
  p.half_taps = (uint32_t)std::floor((p.measured ? SOXR441_SPAN : PROTO_HALF) * p.scale) + 2;
  p.taps = (int)((2 * p.half_taps + DOT_LANES - 1) / DOT_LANES * DOT_LANES);
  p.row_step = (BANK_PHASES % p.up == 0) ? BANK_PHASES / p.up : 0;
  p.n_in = n_in;
  p.n_filtered = (uint32_t)((2ull * n_in * p.up + p.down) / (2ull * p.down));
  p.n_out = resampled_length(n_in, rate);
  return p;
}

// Prototype at |u| (units of 1/(2 * lower Nyquist)), 4-point cubic Lagrange on the table.
// The position is kept in double: tap offsets reach ~300 units and the fraction needs 1e-7.
static float prototype_at(double u) {
  double x = std::fabs(u) * PROTO_STEPS + 1.0;
  int i = (int)x;
  if (i + 2 >= PROTO_LEN) return 0.0f;
  float f = (float)(x - (double)i);
  float wm1 = -f * (f - 1.0f) * (f - 2.0f) * (1.0f / 6.0f);
  float w0 = (f + 1.0f) * (f - 1.0f) * (f - 2.0f) * 0.5f;
  float w1 = -(f + 1.0f) * f * (f - 2.0f) * 0.5f;
  float w2 = (f + 1.0f) * f * (f - 1.0f) * (1.0f / 6.0f);
  return wm1 * PROTO_TABLE[i - 1] + w0 * PROTO_TABLE[i] + w1 * PROTO_TABLE[i + 1] + w2 * PROTO_TABLE[i + 2];
}

// Row for fraction phi in [0, 1]: tap k multiplies input sample q - half_taps + 1 + k.
static void build_bank_row(const ResamplePlan& p, double phi, float* row) {
  double inv_scale = 1.0 / p.scale;
bank_tap_loop:
  for (int k = 0; k < p.taps; ++k) {
#pragma HLS LOOP_TRIPCOUNT min = 200 max = TAPS_MAX
#pragma HLS PIPELINE II = 1
    double tau = phi + (double)p.half_taps - 1.0 - (double)k;
    row[k] = (float)(prototype_at(tau * inv_scale) * inv_scale);
  }
}

// Row for phase r of soxr's measured response: tap k sits at r/L + half_taps - 1 - k input samples,
// which is (r + (half_taps - 1 - k) * L) / M output samples: an exact point of the 1/441 grid
// (M = 441 at both rates).
static void build_measured_row(const ResamplePlan& p, uint32_t r, float* row) {
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
static void build_start_row(const ResamplePlan& p, uint32_t s, uint32_t q_s, float* row) {
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

// DOT_LANES independent partial sums: one pipelined adder chain each in hardware, SIMD lanes on
// the host. Signed indices keep the lanes provably contiguous for the host vectoriser.
ATOLL_HOST_SIMD_CLONES static float dot_taps(const float* c, const float* x, int taps) {
  float acc[DOT_LANES];
#pragma HLS ARRAY_PARTITION variable = acc complete
dot_clear_loop:
#pragma GCC unroll 32
  for (int l = 0; l < DOT_LANES; ++l) acc[l] = 0.0f;
dot_loop:
  for (int k = 0; k < taps; k += DOT_LANES) {
#pragma HLS LOOP_TRIPCOUNT min = 25 max = TAPS_MAX / DOT_LANES
#pragma HLS PIPELINE II = 1
  dot_lane_loop:
#pragma GCC unroll 32
    for (int l = 0; l < DOT_LANES; ++l) acc[l] += c[k + l] * x[k + l];
  }
dot_tree_loop:
#pragma GCC unroll 5
  for (int width = DOT_LANES / 2; width > 0; width /= 2) {
  dot_tree_level_loop:
#pragma GCC unroll 16
    for (int l = 0; l < width; ++l) acc[l] += acc[l + width];
  }
  return acc[0];
}

// Reads the p.n_in PCM samples in order (a sequential burst from the m_axi port), produces p.n_out
// samples on `out`.
static void resample_stage(const ResamplePlan& p, const uint8_t* pcm, uint32_t format, hls::stream<float>& out) {
  ATOLL_CU_RAM float bank[START_ROW + SOXR441_START_ROWS][TAPS_MAX];
  float ring[2 * RING];  // every sample stored twice so any TAPS_MAX window is contiguous
#pragma HLS BIND_STORAGE variable = bank type = ram_2p impl = uram

  uint32_t rows = p.row_step ? p.up : BANK_PHASES + 1;
bank_row_loop:
  for (uint32_t j = 0; j < rows; ++j) {
#pragma HLS LOOP_TRIPCOUNT min = 1 max = BANK_PHASES + 1
    uint32_t row = p.row_step ? j * p.row_step : j;
    if (p.measured) {
      build_measured_row(p, j, bank[row]);
    } else {
      build_bank_row(p, (double)row / BANK_PHASES, bank[row]);
    }
  }
  if (p.measured) {
  start_row_loop:
    for (uint32_t s = 0; s < (uint32_t)SOXR441_START_ROWS; ++s) {
      build_start_row(p, s, s * p.down / p.up, bank[START_ROW + s]);
    }
  }

  // Logical history index i holds input sample i - (half_taps - 1); before 0 and past n_in: zeros.
  uint64_t pushed = 0;
  uint32_t consumed = 0;
  uint32_t q = 0, r = 0;
resample_out_loop:
  for (uint32_t n = 0; n < p.n_filtered; ++n) {
#pragma HLS LOOP_TRIPCOUNT min = 1 max = MAX_OUT_SAMPLES
  resample_fill_loop:
    while (pushed < (uint64_t)q + (uint64_t)p.taps) {
#pragma HLS LOOP_TRIPCOUNT min = 0 max = 4
      float v = 0.0f;
      if (pushed >= p.half_taps - 1 && consumed < p.n_in) {
        v = pcm_sample(pcm, consumed, format);
        ++consumed;
      }
      uint32_t w = (uint32_t)(pushed & (RING - 1));
      ring[w] = v;
      ring[w + RING] = v;
      ++pushed;
    }
    const float* window = &ring[q & (RING - 1)];
    float y;
    if (p.measured && n < (uint32_t)SOXR441_START_ROWS) {
      y = dot_taps(bank[START_ROW + n], window, p.taps);
    } else if (p.row_step) {
      y = dot_taps(bank[r * p.row_step], window, p.taps);
    } else {
      uint64_t pos = (uint64_t)r * BANK_PHASES;
      uint32_t row = (uint32_t)(pos / p.up);
      float a = (float)(pos % p.up) / (float)p.up;
      float y0 = dot_taps(bank[row], window, p.taps);
      y = a == 0.0f ? y0 : y0 + a * (dot_taps(bank[row + 1], window, p.taps) - y0);
    }
    out.write(y);
    uint32_t next = r + p.down;
    q += next / p.up;
    r = next % p.up;
  }
resample_zero_loop:
  for (uint32_t n = p.n_filtered; n < p.n_out; ++n) {
#pragma HLS LOOP_TRIPCOUNT min = 0 max = 1
    out.write(0.0f);
  }
}

}  // namespace atoll_audio
