// image_postdecode.h: the image CU's post-decode unit, resize -> centre crop -> normalise on a
// pixel stream. It is an RTL blackbox (hls/rtl/image_postdecode.v, descriptor
// hls/rtl/image_postdecode.json); image_postdecode.cpp is its C model, which C simulation runs.
#pragma once
#include <cstdint>

#include "hls_compat.h"
#include "image_types.h"

namespace atoll_image {

// What the unit writes per output pixel: uint8 RGB, or the normalised value as float32 or IEEE half.
enum PostFormat : uint32_t { kPostU8 = 0, kPostF32 = 1, kPostF16 = 2 };

// One output beat: lane k is channel k (the byte, the float32 bits, or the half bits); Vitis HLS
// aggregates the array with lane[0] at the LSB, as the RTL's m_axis_tdata.
struct PostBeat {
  uint32_t lane[kChannels];
};

// One input beat: channel k of the pixel in bits 8k+7..8k.
inline uint32_t pack_pixel(const Pixel& p) {
  return uint32_t{p.c[0]} | (uint32_t{p.c[1]} << 8) | (uint32_t{p.c[2]} << 16);
}

inline Pixel unpack_pixel(uint32_t word) {
  Pixel p;
  for (uint32_t k = 0; k < kChannels; ++k) p.c[k] = static_cast<uint8_t>(word >> (8 * k));
  return p;
}

// Output dims for "shorter side to r": torchvision's int(r * long / short). r * long is exact in
// float64 and the quotient rounds to an integer only when it is one (otherwise it is at least
// 1 / short away), so integer division gives the same result.
inline void resize_dims(uint32_t src_h, uint32_t src_w, uint32_t r, uint32_t& dst_h,
                        uint32_t& dst_w) {
  if (src_h <= src_w) {
    dst_h = r;
    dst_w = static_cast<uint32_t>(uint64_t{r} * src_w / src_h);
  } else {
    dst_w = r;
    dst_h = static_cast<uint32_t>(uint64_t{r} * src_h / src_w);
  }
}

}  // namespace atoll_image

// Consumes src_h rows of src_w pixels, two to a beat (pack_pair: pixel 2p in the low word; an odd
// width's last beat of a row holds one), resizes them to dst_h x dst_w (OpenCV INTER_LINEAR;
// equal dimensions pass through), keeps the centred crop_h x crop_w window (torchvision
// CenterCrop; crop = dst keeps everything) and writes one beat per kept pixel in `format`.
void image_postdecode(hls::stream<uint64_t>& pixels, hls::stream<atoll_image::PostBeat>& beats,
                      uint32_t src_h, uint32_t src_w, uint32_t dst_h, uint32_t dst_w, uint32_t crop_h,
                      uint32_t crop_w, uint32_t format);
