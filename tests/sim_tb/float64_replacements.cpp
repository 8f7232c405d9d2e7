// float64_replacements.cpp: the integer arithmetic that replaced float64 in the kernels, against
// the float64 expressions it replaces (OpenCV's resize coordinate, librosa's resampled length),
// evaluated here with the host's IEEE double. Called through ctypes by test_float64_replacements.py.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>

#include "../../hls/audio/resampler.h"
#include "../../hls/image/resize.h"

extern "C" {

// Destination indices of every (src, dst) with both <= all_up_to, of `pairs` random pairs up to
// 8192, and of `pairs` random pairs whose dst is a multiple of 2048 (float32 ties there). Returns
// how many coordinates differ in any bit; *compared receives how many were compared.
long resize_coordinate_mismatches(uint32_t all_up_to, uint32_t pairs, uint32_t seed, long* compared) {
  long bad = 0;
  *compared = 0;
  auto check = [&](uint32_t src, uint32_t dst) {
    const double scale = 1.0 / (static_cast<double>(dst) / src);
    for (uint32_t d = 0; d < dst; ++d) {
      const float want = static_cast<float>((d + 0.5) * scale - 0.5);
      const float got = atoll_image::resize_coordinate(d, src, dst);
      bad += std::memcmp(&want, &got, sizeof want) != 0;
    }
    *compared += dst;
  };
  for (uint32_t src = 1; src <= all_up_to; ++src)
    for (uint32_t dst = 1; dst <= all_up_to; ++dst) check(src, dst);
  std::mt19937 rng(seed);
  for (uint32_t i = 0; i < pairs; ++i) check(1 + rng() % 8192, 1 + rng() % 8192);
  for (uint32_t i = 0; i < pairs; ++i) check(1 + rng() % 8192, 2048 * (1 + rng() % 4));
  return bad;
}

// Every rate from 8 to 48 kHz: the first `multiples` lengths n whose n * 16000 / rate is an
// integer (where float64 rounding decides the result), plus `randoms` random lengths up to 30 s.
long resampled_length_mismatches(uint32_t multiples, uint32_t randoms, uint32_t seed, long* compared) {
  long bad = 0;
  *compared = 0;
  std::mt19937 rng(seed);
  for (uint32_t rate = 8000; rate <= 48000; ++rate) {
    const double ratio = 16000.0 / rate;
    const uint32_t step = rate / atoll_audio::gcd_u32(16000, rate);
    auto check = [&](uint32_t n) {
      const uint32_t want = rate == 16000 ? n : static_cast<uint32_t>(std::ceil(n * ratio));
      bad += atoll_audio::resampled_length(n, rate) != want;
      ++*compared;
    };
    for (uint32_t j = 1; j <= multiples; ++j) check(j * step);
    for (uint32_t j = 0; j < randoms; ++j) check(rng() % (30 * rate + 1));
  }
  return bad;
}

}  // extern "C"
