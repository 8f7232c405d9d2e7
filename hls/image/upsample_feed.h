// upsample_feed.h: the frame store's plane rows to the upsample_color unit's column beats: per
// output row, the plane rows each component needs (load_component_rows), then a column beat per
// output pixel pair. What the kernel fed the unit before jpeg_mcu_strip; now the reference of the
// strip unit's tests (frame_store.h).
#pragma once
#include <cstdint>

#include "hls_compat.h"
#include "frame_store.h"
#include "upsample_color.h"

namespace atoll_image {

inline uint32_t column_lane(const uint8_t* near, const uint8_t* far, uint32_t a, uint32_t b) {
  return uint32_t{near[a]} | uint32_t{near[b]} << 8 | uint32_t{far[a]} << 16 | uint32_t{far[b]} << 24;
}

inline void emit_upsample_columns(const Beat* frame, const JpegFrame& f, hls::stream<UpsampleBeat>& out) {
  uint8_t near[kMaxComponents][kMaxStride], far[kMaxComponents][kMaxStride];
#pragma HLS ARRAY_PARTITION variable = near cyclic factor = 64 dim = 2
#pragma HLS ARRAY_PARTITION variable = far cyclic factor = 64 dim = 2
  const uint32_t mode = upsample_mode(f);
  const uint32_t pairs = pixel_pairs(f.width);
feed_rows:
  for (uint32_t y = 0; y < f.height; ++y) {
#pragma HLS LOOP_TRIPCOUNT max = kTypicalDim
  feed_loads:
    for (uint32_t ci = 0; ci < f.n_components; ++ci) {
#pragma HLS LOOP_TRIPCOUNT max = kMaxComponents
      load_component_rows(frame, f, f.comp[ci], y, near[ci], far[ci]);
    }
  feed_columns:
    for (uint32_t p = 0; p < pairs; ++p) {
#pragma HLS LOOP_TRIPCOUNT max = kTypicalDim / 2
#pragma HLS PIPELINE II = 1
      UpsampleBeat beat;
    feed_lanes:
      for (uint32_t ci = 0; ci < kMaxComponents; ++ci) {
        const bool h2 = (mode >> (2 * ci)) & 1;
        // A full-width row's column 2p + 1 past an odd width is padding (the plane row has it).
        beat.lane[ci] = ci < f.n_components ? column_lane(near[ci], far[ci], h2 ? p : 2 * p, h2 ? p : 2 * p + 1) : 0;
      }
      out.write(beat);
    }
  }
}

}  // namespace atoll_image
