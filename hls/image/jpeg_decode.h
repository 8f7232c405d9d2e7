// jpeg_decode.h: the JPEG decode unit. decode_scan runs the entropy decoder over the interleaved
// scan (MCU order, DC prediction, restart intervals), dequantises and inverse-transforms each
// block into per-component planes in the frame store; load_component_rows gives the plane rows an
// output row needs to the upsampling + colour unit's feed (upsample_feed.h).
#pragma once
#include <cstdint>

#include "hls_compat.h"
#include "idct8x8_islow.h"
#include "image_postdecode.h"
#include "image_types.h"
#include "frame_store.h"
#include "jpeg_color.h"
#include "jpeg_huffman.h"
#include "jpeg_idct.h"
#include "jpeg_markers.h"
#include "jpeg_upsample.h"

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

// One block through the IDCT unit (an RTL blackbox): 8 coefficient rows in, 8 sample rows out to
// the frame store. A DC-only block keeps idct_islow's closed form here (the unit would give the
// same samples): most blocks of a photo are, and a fill costs less than a trip through the unit.
inline void transform_block(const int16_t coef[kBlockSize], const uint16_t quant[kBlockSize], bool dc_only,
                            uint8_t* dst, uint32_t stride) {
  if (dc_only) {
    idct_islow(coef, quant, true, dst, stride);
    return;
  }
  hls::stream<IdctCoefRow> rows_in("idct_rows_in");
  hls::stream<IdctSampleRow> rows_out("idct_rows_out");
#pragma HLS STREAM variable = rows_in depth = 8
#pragma HLS STREAM variable = rows_out depth = 8
idct_rows_write:
  for (int r = 0; r < 8; ++r) {
    IdctCoefRow row;
    for (int k = 0; k < 8; ++k) row.lane[k] = idct_pack_lane(coef[8 * r + k], quant[8 * r + k]);
    rows_in.write(row);
  }
  idct8x8_islow(rows_in, rows_out);
idct_rows_read:
  for (int r = 0; r < 8; ++r) {
    const IdctSampleRow row = rows_out.read();
    for (int k = 0; k < 8; ++k) dst[r * stride + k] = row.sample[k];
  }
}

inline Status decode_scan(const Beat* jpeg, uint32_t len, const JpegFrame& f, Beat* frame) {
  ATOLL_CU_RAM uint8_t strip[kMaxComponents][kStripLines][kMaxStride];
#pragma HLS BIND_STORAGE variable = strip type = ram_2p impl = uram
#pragma HLS ARRAY_PARTITION variable = strip cyclic factor = 64 dim = 3
  BitReader br;
  br.start(len, f.scan_start);
  int32_t pred[kMaxComponents] = {0, 0, 0};
  int16_t coef[kBlockSize];
#pragma HLS ARRAY_PARTITION variable = coef complete
  const uint32_t n_mcus = f.mcus_x * f.mcus_y;
  uint32_t mx = 0, my = 0;
  uint32_t to_restart = f.restart_interval;
  uint32_t restart_index = 0;
mcus:
  for (uint32_t m = 0; m < n_mcus; ++m) {
#pragma HLS LOOP_TRIPCOUNT max = kTypicalBlocks / 6
    if (!restart_if_due(jpeg, br, f.restart_interval, to_restart, restart_index, pred)) return kCorrupt;
  mcu_components:
    for (uint32_t ci = 0; ci < f.n_components; ++ci) {
#pragma HLS LOOP_TRIPCOUNT max = kMaxComponents
      const JpegComponent& c = f.comp[ci];
    mcu_block_rows:
      for (uint32_t by = 0; by < c.v; ++by) {
#pragma HLS LOOP_TRIPCOUNT max = kMaxSampling
      mcu_block_cols:
        for (uint32_t bx = 0; bx < c.h; ++bx) {
#pragma HLS LOOP_TRIPCOUNT max = kMaxSampling
          bool dc_only;
          br.reach(jpeg);
          if (!decode_block(br, f.dc[c.td], f.ac[c.ta], pred[ci], coef, dc_only)) return kCorrupt;
          const uint32_t col = (mx * c.h + bx) * 8;
          transform_block(coef, c.quant, dc_only, &strip[ci][by * 8][col], kMaxStride);
        }
      }
    }
    // The bit reader feeds zeros past the data; stop as soon as a block used them.
    if (br.overran()) return kCorrupt;
    if (++mx == f.mcus_x) {  // an MCU row is complete: into the frame store
    strip_components:
      for (uint32_t ci = 0; ci < f.n_components; ++ci) {
#pragma HLS LOOP_TRIPCOUNT max = kMaxComponents
        store_strip(strip[ci], f.comp[ci], my, frame);
      }
      mx = 0;
      ++my;
    }
  }
  return kOk;
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
