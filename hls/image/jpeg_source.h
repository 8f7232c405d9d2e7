// jpeg_source.h: the JPEG's bytes through an on-chip window of the 512-bit input port. A miss
// refills the window with one burst of kWindowBeats beats (4 KB) from the beat holding the byte,
// so the file is read sequentially a burst at a time; the decoders read bytes from the window.
#pragma once
#include <cstdint>

#include "hls_compat.h"

namespace atoll_image {

constexpr uint32_t kWindowBeats = 64;
constexpr uint32_t kWindowBytes = kWindowBeats * kBeatBytes;
// Bytes the entropy decoder may read past a block's first byte: a block codes at most
// 64 x 27 bits, twice that with byte stuffing, plus the reader's 8-byte lookahead.
constexpr uint32_t kBlockReach = 1024;

struct ByteWindow {
  Beat beats[kWindowBeats];
  uint32_t first;  // beat index of beats[0] in the file
  uint32_t count;  // beats held; 0 before the first fill
};

inline void window_start(ByteWindow& w) {
  w.first = 0;
  w.count = 0;
}

// Loads the window with the beats from the one holding byte `pos` (pos < len).
inline void window_fill(const Beat* jpeg, uint32_t len, ByteWindow& w, uint32_t pos) {
  const uint32_t total = (len + kBeatBytes - 1) / kBeatBytes;
  w.first = pos / kBeatBytes;
  w.count = total - w.first < kWindowBeats ? total - w.first : kWindowBeats;
window_burst:
  for (uint32_t i = 0; i < kWindowBeats; ++i) {
#pragma HLS PIPELINE II = 1
    if (i < w.count) w.beats[i] = jpeg[w.first + i];
  }
}

inline bool window_holds(const ByteWindow& w, uint32_t pos) {
  const uint32_t beat = pos / kBeatBytes;
  return w.count != 0 && beat >= w.first && beat < w.first + w.count;
}

// Byte `pos` of the window (window_holds(w, pos)).
inline uint8_t window_at(const ByteWindow& w, uint32_t pos) {
  return w.beats[pos / kBeatBytes - w.first][pos % kBeatBytes];
}

// Byte `pos` of the file (pos < len), refilling the window on a miss.
inline uint8_t window_byte(const Beat* jpeg, uint32_t len, ByteWindow& w, uint32_t pos) {
  if (!window_holds(w, pos)) window_fill(jpeg, len, w, pos);
  return window_at(w, pos);
}

// Makes the window hold every byte of [pos, pos + reach) that the file has.
inline void window_reach(const Beat* jpeg, uint32_t len, ByteWindow& w, uint32_t pos, uint32_t reach) {
  if (pos >= len) return;
  const uint32_t last = pos + reach < len ? pos + reach - 1 : len - 1;
  if (!window_holds(w, pos) || !window_holds(w, last)) window_fill(jpeg, len, w, pos);
}

}  // namespace atoll_image
