// upsample_color.cpp: C model of the upsample_color RTL blackbox, used by C simulation: each row's
// column beats back into plane rows, then jpeg_upsample.h's fancy upsampling and jpeg_color.h's
// fixed-point conversion per pixel, as the decoder's own sample functions compute them.
#include "upsample_color.h"

#include "image_postdecode.h"
#include "jpeg_color.h"
#include "jpeg_upsample.h"

using namespace atoll_image;

namespace {

uint8_t lane_byte(uint32_t lane, uint32_t k) { return static_cast<uint8_t>(lane >> (8 * k)); }

// Sample x of a component at full resolution from its near and far rows of n samples.
uint8_t full_sample(uint32_t mode, uint32_t ci, const uint8_t* near, const uint8_t* far, uint32_t n, bool lower,
                    uint32_t x) {
  const bool h2 = (mode >> (2 * ci)) & 1, v2 = (mode >> (2 * ci + 1)) & 1;
  if (!v2) return h2 ? upsample_h2_at(near, n, x) : near[x];
  return h2 ? upsample_h2v2_at(near, far, n, x) : upsample_v2_at(near, far, lower, x);
}

}  // namespace

void upsample_color(hls::stream<UpsampleBeat>& columns, hls::stream<uint64_t>& pixels, uint32_t width,
                    uint32_t height, uint32_t mode) {
  static thread_local uint8_t near[kMaxComponents][kMaxDim + 1], far[kMaxComponents][kMaxDim + 1];
  static thread_local uint32_t row[kMaxDim + 1];
  ColorTables tables;
  build_color_tables(tables);
  const uint32_t pairs = pixel_pairs(width);
  for (uint32_t y = 0; y < height; ++y) {
    for (uint32_t p = 0; p < pairs; ++p) {
      const UpsampleBeat beat = columns.read();
      for (uint32_t ci = 0; ci < kMaxComponents; ++ci) {
        const bool h2 = (mode >> (2 * ci)) & 1;
        const uint32_t at = h2 ? p : 2 * p;
        near[ci][at] = lane_byte(beat.lane[ci], 0);
        far[ci][at] = lane_byte(beat.lane[ci], 2);
        if (!h2) {
          near[ci][at + 1] = lane_byte(beat.lane[ci], 1);
          far[ci][at + 1] = lane_byte(beat.lane[ci], 3);
        }
      }
    }
    for (uint32_t x = 0; x < width; ++x) {
      uint8_t s[kMaxComponents];
      for (uint32_t ci = 0; ci < kMaxComponents; ++ci) {
        const uint32_t n = (mode >> (2 * ci)) & 1 ? pairs : width;
        s[ci] = full_sample(mode, ci, near[ci], far[ci], n, y & 1, x);
      }
      Pixel px;
      if (mode & kModeGray) {
        px.c[0] = px.c[1] = px.c[2] = s[0];
      } else if (mode & kModeRgb) {
        px.c[0] = s[0];
        px.c[1] = s[1];
        px.c[2] = s[2];
      } else {
        px = ycc_to_rgb(tables, s[0], s[1], s[2]);
      }
      row[x] = pack_pixel(px);
    }
    row[width] = 0;
    for (uint32_t p = 0; p < pairs; ++p) pixels.write(pack_pair(row[2 * p], row[2 * p + 1]));
  }
}
