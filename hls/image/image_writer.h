// image_writer.h: the image CU's writer, the last DATAFLOW processes: the post-decode unit's beats
// to the output buffer as whole 512-bit beats, uint8 HWC or float32 / float16 CHW planes.
//
// pack_planes puts each plane's bytes (HWC: one plane of 3 bytes per pixel) into beats at that
// plane's position in the buffer, one stream per plane, so a pixel costs one iteration whatever
// number of planes completes a beat in it. write_beats writes one beat per cycle.
#pragma once
#include <cstdint>

#include "hls_compat.h"
#include "image_postdecode.h"
#include "image_types.h"

namespace atoll_image {

// Where a beat goes: its index in the output buffer.
struct PlacedBeat {
  Beat data;
  uint32_t index;
};

// One plane's beat under construction. A plane that starts inside a beat keeps that first beat
// (`held`) until the end, where it is merged with the other planes' bytes of the same beat.
struct PlanePacker {
  Beat cur;
  Beat next;  // HWC: a pixel's 3 bytes may run past the current beat
  uint32_t fill;
  uint32_t index;
  bool held;
  Beat head;  // the first beat, once complete, while held
  uint32_t head_index;
  bool head_done;
};

inline void clear_beat(Beat& b) {
clear_lanes:
  for (uint32_t l = 0; l < kBeatBytes; ++l) b[l] = 0;
}

inline void packer_start(PlanePacker& p, uint64_t base) {
  clear_beat(p.cur);
  clear_beat(p.next);
  clear_beat(p.head);
  p.fill = static_cast<uint32_t>(base % kBeatBytes);
  p.index = static_cast<uint32_t>(base / kBeatBytes);
  p.held = p.fill != 0;
  p.head_index = p.index;
  p.head_done = false;
}

// Appends the low `n` bytes of `value` (little-endian); a completed beat goes to `out`, or is
// kept when it is the plane's shared first beat.
inline void packer_put(PlanePacker& p, uint32_t value, uint32_t n, hls::stream<PlacedBeat>& out) {
put_bytes:
  for (uint32_t j = 0; j < 4; ++j) {
    const uint32_t at = p.fill + j;
    const uint8_t byte = static_cast<uint8_t>(value >> (8 * j));
    if (j < n && at < kBeatBytes) p.cur[at] = byte;
    if (j < n && at >= kBeatBytes) p.next[at - kBeatBytes] = byte;
  }
  p.fill += n;
  if (p.fill >= kBeatBytes) {
    if (p.held) {
      p.head = p.cur;
      p.head_done = true;
      p.held = false;
    } else {
      out.write(PlacedBeat{p.cur, p.index});
    }
    p.cur = p.next;
    clear_beat(p.next);
    p.fill -= kBeatBytes;
    ++p.index;
  }
}

// Beats of every plane, then the beats two or three planes share (each plane's kept first beat
// and unfinished last beat, merged by index: their lanes are disjoint).
inline void pack_planes(hls::stream<PostBeat>& in, hls::stream<PlacedBeat> beats[kChannels],
                        uint32_t n_pixels, uint32_t format) {
  const bool hwc = format == kPostU8;
  const uint32_t bytes = hwc ? kChannels : (format == kPostF16 ? 2 : 4);
  PlanePacker p[kChannels];
#pragma HLS ARRAY_PARTITION variable = p complete
start_planes:
  for (uint32_t k = 0; k < kChannels; ++k) packer_start(p[k], hwc ? 0 : uint64_t{k} * n_pixels * bytes);
pack_pixels:
  for (uint32_t i = 0; i < n_pixels; ++i) {
#pragma HLS LOOP_TRIPCOUNT max = kTypicalPixels
#pragma HLS PIPELINE II = 1
    const PostBeat beat = in.read();
    if (hwc) {
      packer_put(p[0], beat.lane[0] | beat.lane[1] << 8 | beat.lane[2] << 16, kChannels, beats[0]);
    } else {
    pack_channels:
      for (uint32_t k = 0; k < kChannels; ++k) packer_put(p[k], beat.lane[k], bytes, beats[k]);
    }
  }
  const uint32_t planes = hwc ? 1 : kChannels;
  PlacedBeat pending[2 * kChannels];
  bool valid[2 * kChannels];
#pragma HLS ARRAY_PARTITION variable = pending complete
#pragma HLS ARRAY_PARTITION variable = valid complete
collect_pending:
  for (uint32_t k = 0; k < kChannels; ++k) {
    pending[2 * k] = PlacedBeat{p[k].head, p[k].head_index};
    valid[2 * k] = k < planes && p[k].head_done;
    pending[2 * k + 1] = PlacedBeat{p[k].cur, p[k].index};
    valid[2 * k + 1] = k < planes && p[k].fill != 0;
  }
merge_pending:
  for (uint32_t a = 0; a < 2 * kChannels; ++a) {
  merge_into:
    for (uint32_t b = a + 1; b < 2 * kChannels; ++b) {
      if (valid[a] && valid[b] && pending[a].index == pending[b].index) {
      merge_lanes:
        for (uint32_t l = 0; l < kBeatBytes; ++l) pending[a].data[l] |= pending[b].data[l];
        valid[b] = false;
      }
    }
    if (valid[a]) beats[0].write(pending[a]);
  }
}

// One beat per cycle, from whichever plane has one, until `total` beats are written.
inline void write_beats(hls::stream<PlacedBeat> beats[kChannels], Beat* out, uint32_t total) {
write_beat:
  for (uint32_t b = 0; b < total;) {
#pragma HLS LOOP_TRIPCOUNT max = kTypicalPixels * 12 / kBeatBytes
#pragma HLS PIPELINE II = 1
    PlacedBeat beat;
    const bool got = beats[0].read_nb(beat) || beats[1].read_nb(beat) || beats[2].read_nb(beat);
    if (got) {
      out[beat.index] = beat.data;
      ++b;
    }
  }
}

// Beats the output of `n_pixels` pixels in `format` spans (each written once).
inline uint32_t output_beats(uint32_t n_pixels, uint32_t format) {
  const uint64_t bytes = uint64_t{n_pixels} * kChannels * (format == kPostU8 ? 1 : format == kPostF16 ? 2 : 4);
  return static_cast<uint32_t>((bytes + kBeatBytes - 1) / kBeatBytes);
}

}  // namespace atoll_image
