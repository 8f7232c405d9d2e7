// jpeg_decode.h: what the decode core's C model (jpeg_decode_core.cpp) takes from the CU's entropy
// decoder besides jpeg_huffman.h: restart intervals (the RSTn markers, the DC predictors' reset);
// and the frame-store size the kernel still checks its scratch buffer against.
#pragma once
#include <cstdint>

#include "hls_compat.h"
#include "image_types.h"
#include "jpeg_huffman.h"
#include "jpeg_markers.h"

namespace atoll_image {

// Bytes of frame store a frame needs (the planes laid out by parse_sof).
inline uint64_t frame_store_bytes(const JpegFrame& f) {
  const JpegComponent& last = f.comp[f.n_components - 1];
  return last.offset + uint64_t{last.stride} * last.rows;
}

// Skips an RSTn marker (optionally preceded by fill bytes) at br.pos; false if it is absent or
// out of sequence.
inline bool read_restart_marker(const Beat* jpeg, BitReader& br, uint32_t expected) {
  br.reach(jpeg);
  uint32_t p = br.pos;
  if (p >= br.len || br.byte_at(p) != 0xFF) return false;
rst_fill:
  for (uint32_t i = 0; i < kMaxSegments && p < br.len && br.byte_at(p) == 0xFF; ++i) ++p;
  if (p >= br.len || br.byte_at(p) != 0xD0 + (expected & 7)) return false;
  br.pos = p + 1;
  br.reset_bits();
  return true;
}

// Before an MCU: counts down the restart interval and, where one ends, reads the RSTn marker and
// resets the DC predictors. False where the data ran short or the marker is absent or out of order.
inline bool restart_if_due(const Beat* jpeg, BitReader& br, uint32_t interval, uint32_t& to_restart,
                           uint32_t& restart_index, int32_t pred[kMaxComponents]) {
  if (interval == 0) return true;
  if (to_restart == 0) {
    if (br.overran() || !read_restart_marker(jpeg, br, restart_index)) return false;
    ++restart_index;
    to_restart = interval;
    for (uint32_t c = 0; c < kMaxComponents; ++c) pred[c] = 0;
  }
  --to_restart;
  return true;
}

}  // namespace atoll_image
