// upsample_color.h: the image CU's upsampling + colour unit, two output pixels a cycle. It is an
// RTL blackbox (hls/rtl/upsample_color.v, descriptor hls/rtl/upsample_color.json);
// upsample_color.cpp is its C model, which C simulation runs. It takes, per output row, the
// component samples that row needs (a column beat per output pixel pair) and writes the row's RGB
// pixels two to a beat, as the post-decode unit reads them.
#pragma once
#include <cstdint>

#include "hls_compat.h"
#include "image_types.h"
#include "jpeg_markers.h"

namespace atoll_image {

// One column beat: lane ci is component ci's samples for output pixels 2p and 2p+1: bytes
// {near a, near b, far a, far b}. A horizontally subsampled component gives column p as `a` (its
// neighbours come from the beats around it); a full-width one gives columns 2p and 2p+1 as a, b.
// `far` is read only for vertically subsampled components (the next-nearest plane row).
struct UpsampleBeat {
  uint32_t lane[kMaxComponents];
};

// The mode word: per component ci, bit 2ci = subsampled horizontally (h < hmax), bit 2ci+1 =
// vertically (v < vmax); kModeGray = one component (R = G = B = Y); kModeRgb = no conversion
// (Adobe RGB); otherwise libjpeg's YCbCr -> RGB.
constexpr uint32_t kModeGray = 1u << 6;
constexpr uint32_t kModeRgb = 1u << 7;

// The mode word for frame f.
inline uint32_t upsample_mode(const JpegFrame& f) {
  uint32_t mode = f.n_components == 1 ? kModeGray : (f.rgb ? kModeRgb : 0u);
upsample_mode_components:
  for (uint32_t ci = 0; ci < kMaxComponents; ++ci) {
    if (ci < f.n_components) {
      // No ?: in a shifted operand (hls/image/README.md).
      mode |= ((f.comp[ci].h < f.hmax) | (f.comp[ci].v < f.vmax) << 1) << (2 * ci);
    }
  }
  return mode;
}

inline uint32_t pixel_pairs(uint32_t width) { return (width + 1) / 2; }

// Two pixels in a 64-bit beat: pixel 2p in bits 31..0 (pack_pixel), 2p+1 in bits 63..32.
inline uint64_t pack_pair(uint32_t first, uint32_t second) { return uint64_t{first} | uint64_t{second} << 32; }

}  // namespace atoll_image

// Consumes height x pixel_pairs(width) column beats, writes height x pixel_pairs(width) pixel-pair
// beats (an odd width's last beat holds one pixel, the other 0).
void upsample_color(hls::stream<atoll_image::UpsampleBeat>& columns, hls::stream<uint64_t>& pixels,
                    uint32_t width, uint32_t height, uint32_t mode);
