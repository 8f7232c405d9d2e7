// power.h: power spectrum |X|^2 of one FFT bin.
#pragma once

namespace atoll_audio {

static inline float bin_power(float re, float im) { return re * re + im * im; }

}  // namespace atoll_audio
