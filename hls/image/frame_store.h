// frame_store.h: the image CU's frame store on its 512-bit port: one plane per component, each
// row whole beats (stride a multiple of 64 bytes). The decoder builds an MCU row of every plane on
// chip (a strip) and stores it a beat per cycle; the colour stage loads the plane rows it needs a
// beat per cycle into on-chip line buffers. Nothing else touches the port.
#pragma once
#include <cstdint>

#include "hls_compat.h"
#include "image_types.h"
#include "jpeg_markers.h"

namespace atoll_image {

constexpr uint32_t kMaxStride = (kMaxDim + kBeatBytes - 1) / kBeatBytes * kBeatBytes;
constexpr uint32_t kStripLines = kMaxMcuPixels;  // an MCU row is at most 16 lines of a plane

// Stores MCU row `my` of component c from its strip, a beat per cycle.
inline void store_strip(const uint8_t strip[kStripLines][kMaxStride], const JpegComponent& c,
                        uint32_t my, Beat* frame) {
  const uint32_t lines = c.v * 8;
  const uint32_t beats = c.stride / kBeatBytes;
  const uint64_t first = (c.offset + uint64_t{my} * lines * c.stride) / kBeatBytes;
strip_lines:
  for (uint32_t r = 0; r < lines; ++r) {
#pragma HLS LOOP_TRIPCOUNT max = kStripLines
  strip_beats:
    for (uint32_t b = 0; b < beats; ++b) {
#pragma HLS LOOP_TRIPCOUNT max = kTypicalDim / kBeatBytes
#pragma HLS PIPELINE II = 1
      Beat beat;
    strip_lanes:
      for (uint32_t l = 0; l < kBeatBytes; ++l) beat[l] = strip[r][b * kBeatBytes + l];
      frame[first + uint64_t{r} * beats + b] = beat;
    }
  }
}

// Loads row `row` of component c's plane into `line`, a beat per cycle.
inline void load_row(const Beat* frame, const JpegComponent& c, uint32_t row, uint8_t line[kMaxStride]) {
  const uint32_t beats = c.stride / kBeatBytes;
  const uint64_t first = (c.offset + uint64_t{row} * c.stride) / kBeatBytes;
row_beats:
  for (uint32_t b = 0; b < beats; ++b) {
#pragma HLS LOOP_TRIPCOUNT max = kTypicalDim / kBeatBytes
#pragma HLS PIPELINE II = 1
    const Beat beat = frame[first + b];
  row_lanes:
    for (uint32_t l = 0; l < kBeatBytes; ++l) line[b * kBeatBytes + l] = beat[l];
  }
}

}  // namespace atoll_image
