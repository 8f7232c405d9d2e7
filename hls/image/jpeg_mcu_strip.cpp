// jpeg_mcu_strip.cpp: C model of the jpeg_mcu_strip RTL blackbox, used by C simulation. It keeps
// the unit's schedule: MCU row m goes into slot m mod kStripSlots, and after each MCU row every
// output row whose plane rows have all arrived is emitted (in C simulation the processes run one
// after another, so only the order of the beats matters, which this gives).
#include "jpeg_mcu_strip.h"

using namespace atoll_image;

namespace {

struct StripGeometry {
  uint32_t h[kMaxComponents], v[kMaxComponents];  // sampling factors
  uint32_t height[kMaxComponents];                // plane rows
  uint32_t n_components, mcus_x, mcus_y;
};

StripGeometry geometry(uint32_t width, uint32_t height, uint32_t sampling, uint32_t n_components) {
  StripGeometry g{};
  g.n_components = n_components;
  uint32_t hmax = 1, vmax = 1;
  for (uint32_t c = 0; c < n_components; ++c) {
    g.h[c] = 1 + (sampling >> (2 * c) & 1);
    g.v[c] = 1 + (sampling >> (2 * c + 1) & 1);
    hmax = g.h[c] > hmax ? g.h[c] : hmax;
    vmax = g.v[c] > vmax ? g.v[c] : vmax;
  }
  for (uint32_t c = 0; c < n_components; ++c) g.height[c] = (height * g.v[c] + vmax - 1) / vmax;
  g.mcus_x = (width + 8 * hmax - 1) / (8 * hmax);
  g.mcus_y = (height + 8 * vmax - 1) / (8 * vmax);
  return g;
}

// Component c's plane rows for output row y, as load_component_rows picks them: near and far
// (far = near where the component is not vertically subsampled).
void plane_rows(const StripGeometry& g, uint32_t mode, uint32_t c, uint32_t y, uint32_t& near, uint32_t& far) {
  if (!(mode >> (2 * c + 1) & 1)) {
    near = far = y;
    return;
  }
  near = y >> 1;
  far = (y & 1) ? (near + 1 < g.height[c] ? near + 1 : near) : (near > 0 ? near - 1 : 0);
}

// The last MCU row output row y reads.
uint32_t last_mcu_row(const StripGeometry& g, uint32_t mode, uint32_t y) {
  uint32_t last = 0;
  for (uint32_t c = 0; c < g.n_components; ++c) {
    uint32_t near, far;
    plane_rows(g, mode, c, y, near, far);
    const uint32_t m = (near > far ? near : far) / (8 * g.v[c]);
    last = m > last ? m : last;
  }
  return last;
}

}  // namespace

void jpeg_mcu_strip(hls::stream<IdctSampleRow>& rows, hls::stream<UpsampleBeat>& columns, uint32_t width,
                    uint32_t height, uint32_t sampling, uint32_t n_components, uint32_t mode) {
  // Large: off the stack, one per emulated CU thread. Lines are kMaxDim samples plus an MCU of slack.
  static thread_local uint8_t strip[kStripSlots][kMaxComponents][kMaxMcuPixels][kMaxDim + kMaxMcuPixels];
  const StripGeometry g = geometry(width, height, sampling, n_components);
  const uint32_t pairs = pixel_pairs(width);
  uint32_t y = 0;
  for (uint32_t my = 0; my < g.mcus_y; ++my) {
    const uint32_t slot = my % kStripSlots;
    for (uint32_t mx = 0; mx < g.mcus_x; ++mx) {
      for (uint32_t c = 0; c < n_components; ++c) {
        for (uint32_t by = 0; by < g.v[c]; ++by) {
          for (uint32_t bx = 0; bx < g.h[c]; ++bx) {
            for (uint32_t r = 0; r < 8; ++r) {
              const IdctSampleRow row = rows.read();
              for (uint32_t k = 0; k < 8; ++k) strip[slot][c][by * 8 + r][(mx * g.h[c] + bx) * 8 + k] = row.sample[k];
            }
          }
        }
      }
    }
    for (; y < height && (my + 1 == g.mcus_y || last_mcu_row(g, mode, y) <= my); ++y) {
      const uint8_t* near[kMaxComponents];
      const uint8_t* far[kMaxComponents];
      for (uint32_t c = 0; c < n_components; ++c) {
        uint32_t n, f;
        plane_rows(g, mode, c, y, n, f);
        const uint32_t lines = 8 * g.v[c];
        near[c] = strip[n / lines % kStripSlots][c][n % lines];
        far[c] = strip[f / lines % kStripSlots][c][f % lines];
      }
      for (uint32_t p = 0; p < pairs; ++p) {
        UpsampleBeat beat;
        for (uint32_t c = 0; c < kMaxComponents; ++c) {
          const bool h2 = mode >> (2 * c) & 1, v2 = mode >> (2 * c + 1) & 1;
          const uint32_t a = h2 ? p : 2 * p, b = h2 ? p : 2 * p + 1;
          beat.lane[c] = c >= n_components ? 0u
                         : uint32_t{near[c][a]} | uint32_t{near[c][b]} << 8 |
                               (v2 ? uint32_t{far[c][a]} << 16 | uint32_t{far[c][b]} << 24 : 0u);
        }
        columns.write(beat);
      }
    }
  }
}
