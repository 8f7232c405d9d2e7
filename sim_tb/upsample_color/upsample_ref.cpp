// upsample_ref.cpp: extern "C" entry point to the upsample_color unit's C model (hls/image), for
// its testbench (ctypes).
#include <cstdint>

#include "upsample_color.h"

using namespace atoll_image;

extern "C" {

// height * ceil(width / 2) column beats (three uint32 lanes each) through upsample_color();
// writes as many pixel-pair beats to pairs.
void upsample_ref(const uint32_t* beats, uint32_t width, uint32_t height, uint32_t mode, uint64_t* pairs) {
  hls::stream<UpsampleBeat> in;
  hls::stream<uint64_t> out;
  const uint64_t n = uint64_t{height} * pixel_pairs(width);
  for (uint64_t i = 0; i < n; ++i) {
    UpsampleBeat beat;
    for (uint32_t k = 0; k < kMaxComponents; ++k) beat.lane[k] = beats[3 * i + k];
    in.write(beat);
  }
  upsample_color(in, out, width, height, mode);
  for (uint64_t i = 0; i < n; ++i) pairs[i] = out.read();
}

}  // extern "C"
