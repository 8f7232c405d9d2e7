// image_writer.h: the image CU's writer, the last DATAFLOW process: the post-decode unit's beats to
// the output buffer, uint8 HWC or float32 / float16 CHW planes.
#pragma once
#include <cstdint>

#include "hls_compat.h"
#include "image_postdecode.h"
#include "image_types.h"

namespace atoll_image {

// Little-endian stores into the byte-addressed output port (no pointer casts on an interface).
inline void store_le16(uint8_t* p, uint32_t v) {
  p[0] = static_cast<uint8_t>(v);
  p[1] = static_cast<uint8_t>(v >> 8);
}
inline void store_le32(uint8_t* p, uint32_t v) {
  p[0] = static_cast<uint8_t>(v);
  p[1] = static_cast<uint8_t>(v >> 8);
  p[2] = static_cast<uint8_t>(v >> 16);
  p[3] = static_cast<uint8_t>(v >> 24);
}

inline void write_output(hls::stream<PostBeat>& in, uint8_t* out, uint32_t n_pixels, uint32_t format) {
write_pixels:
  for (uint32_t i = 0; i < n_pixels; ++i) {
#pragma HLS LOOP_TRIPCOUNT max = kTypicalPixels
#pragma HLS PIPELINE II = 1
    const PostBeat beat = in.read();
    for (uint32_t k = 0; k < kChannels; ++k) {
      const uint64_t plane = uint64_t{k} * n_pixels + i;
      if (format == kPostU8) {
        out[uint64_t{i} * kChannels + k] = static_cast<uint8_t>(beat.lane[k]);
      } else if (format == kPostF16) {
        store_le16(out + 2 * plane, beat.lane[k]);
      } else {
        store_le32(out + 4 * plane, beat.lane[k]);
      }
    }
  }
}

}  // namespace atoll_image
