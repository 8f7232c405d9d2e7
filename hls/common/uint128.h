// uint128.h: the 128-bit unsigned integer of the C models that carry float64 or long fixed-point
// arithmetic on integers (host and Vitis C simulation only: these models stand in for RTL).
#pragma once

using uint128 = unsigned __int128;

// Number of significant bits of v (a binary search over the 128).
inline int bit_length(uint128 v) {
  int n = 0;
bit_length_loop:
  for (int step = 64; step > 0; step >>= 1) {
    if (v >> step) {
      v >>= step;
      n += step;
    }
  }
  return n + (v != 0 ? 1 : 0);
}
