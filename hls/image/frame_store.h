// frame_store.h: the decoded planes through a frame store (one plane per component, each row whole
// 512-bit beats), the path the image CU took before jpeg_mcu_strip kept the MCU rows on chip. The
// kernel no longer calls it: it is the reference the strip unit's tests compare with
// (sim_tb/jpeg_mcu_strip: decode_scan, then upsample_feed.h's column beats from the planes).
#pragma once
#include <cstdint>

#include "hls_compat.h"
#include "idct8x8_islow.h"
#include "image_types.h"
#include "jpeg_decode.h"
#include "jpeg_decode_core.h"
#include "jpeg_markers.h"
#include "jpeg_scan_feed.h"

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

// The decode core's sample rows (each block's 8 rows, blocks in scan order) into an MCU row of
// every plane, stored to the frame store when complete.
inline void store_core_rows(hls::stream<IdctSampleRow>& rows, const JpegFrame& f, Beat* frame) {
  ATOLL_CU_RAM uint8_t strip[kMaxComponents][kStripLines][kMaxStride];
  for (uint32_t my = 0; my < f.mcus_y; ++my) {
    for (uint32_t mx = 0; mx < f.mcus_x; ++mx) {
      for (uint32_t ci = 0; ci < f.n_components; ++ci) {
        const JpegComponent& c = f.comp[ci];
        for (uint32_t b = 0; b < uint32_t{c.h} * c.v * 8; ++b) {  // block rows, blocks row by row
          const IdctSampleRow row = rows.read();
          const uint32_t line = b / 8 / c.h * 8 + b % 8, col = (mx * c.h + b / 8 % c.h) * 8;
          for (uint32_t k = 0; k < 8; ++k) strip[ci][line][col + k] = row.sample[k];
        }
      }
    }
    for (uint32_t ci = 0; ci < f.n_components; ++ci) store_strip(strip[ci], f.comp[ci], my, frame);
  }
}

// The scan into the frame store through the decode core, fed as the kernel feeds it.
inline Status decode_scan(const Beat* jpeg, uint32_t len, const JpegFrame& f, Beat* frame) {
  hls::stream<JpegScanBeat> scan;
  hls::stream<JpegTableWrite> tables;
  hls::stream<IdctSampleRow> rows;
  uint32_t status = kOk;
  feed_scan(jpeg, len, f.scan_start, scan);
  write_core_tables(f, tables);
  jpeg_decode_core(tables, scan, rows, f.mcus_x * f.mcus_y, f.restart_interval, f.n_components,
                   core_components(f), status);
  store_core_rows(rows, f, frame);
  return status == kOk ? kOk : kCorrupt;
}

// Loads the plane rows that output row y of component c needs: row y, or (vertically
// subsampled) the nearest and next-nearest rows.
inline void load_component_rows(const Beat* frame, const JpegFrame& f, const JpegComponent& c, uint32_t y,
                                uint8_t near[kMaxStride], uint8_t far[kMaxStride]) {
  if (c.v == f.vmax) {
    load_row(frame, c, y, near);
    return;
  }
  const uint32_t i = y >> 1;
  const uint32_t j = (y & 1) ? (i + 1 < c.height ? i + 1 : i) : (i > 0 ? i - 1 : 0);
  load_row(frame, c, i, near);
  load_row(frame, c, j, far);
}

}  // namespace atoll_image
