// jpeg_mcu_strip.h: C signature of the jpeg_mcu_strip RTL blackbox (hls/rtl/jpeg_mcu_strip.v,
// descriptor hls/rtl/jpeg_mcu_strip.json): the decode core's sample rows (blocks in scan order) in,
// the upsample_color unit's column beats (output rows in raster order) out, one beat a cycle, the
// MCU rows kept on chip instead of the frame store. C simulation runs the C model in
// jpeg_mcu_strip.cpp.
//
// Strips: a ring of kStripSlots MCU rows per component. Output row y needs, per component, its
// plane row (or, vertically subsampled, the nearest and next-nearest rows: libjpeg's fancy
// upsampling context), which lie in at most two adjacent MCU rows; the unit writes MCU row m while
// it emits rows that need nothing before MCU row m - 2, so decoding one MCU row overlaps emitting
// the one before it, and the third slot holds the context row above.
//
// End of the stream: the unit reads exactly n_mcus * blocks_per_mcu * 8 rows and writes exactly
// height * pixel_pairs(width) beats. jpeg_decode_core writes every block of the scan, after a
// CORRUPT one zero rows (its status says so), so a corrupt scan still completes the chain.
#pragma once
#include <cstdint>

#include "hls_compat.h"
#include "idct8x8_islow.h"
#include "image_types.h"
#include "jpeg_markers.h"
#include "upsample_color.h"

namespace atoll_image {

constexpr uint32_t kStripSlots = 3;

// The unit's sampling word: per component c, bit 2c = h is 2, bit 2c+1 = v is 2 (parse_sof has
// made a single component 1x1).
inline uint32_t strip_sampling(const JpegFrame& f) {
  uint32_t packed = 0;
strip_sampling_pack:
  for (uint32_t c = 0; c < f.n_components; ++c) {
#pragma HLS LOOP_TRIPCOUNT max = kMaxComponents
    packed |= ((f.comp[c].h == 2) | (f.comp[c].v == 2) << 1) << (2 * c);  // no ?: (hls/image/README.md)
  }
  return packed;
}

}  // namespace atoll_image

// Reads the scan's sample rows (each block's 8 rows; blocks in MCU order, within an MCU component
// by component, each component's blocks row by row), writes height x pixel_pairs(width) column
// beats as upsample_color takes them (upsample_color.h; `mode` is its mode word, upsample_mode).
// Lane bytes the unit must not read are 0: `far` of a component not vertically subsampled, lanes
// of absent components.
void jpeg_mcu_strip(hls::stream<IdctSampleRow>& rows, hls::stream<atoll_image::UpsampleBeat>& columns,
                    uint32_t width, uint32_t height, uint32_t sampling, uint32_t n_components, uint32_t mode);
