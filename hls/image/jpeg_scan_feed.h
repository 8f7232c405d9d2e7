// jpeg_scan_feed.h: the scan's bytes, from the first entropy-coded byte to the file's end, off the
// 512-bit input port as the decode core's 8-byte beats (JpegScanBeat), one beat a cycle. Beats
// follow the file's 8-byte groups, so each lies within one port beat: the first holds the bytes
// from scan_start to its group's end, the last the bytes up to len. The core needs the file's end
// (`last`) to drain a scan that stops early, so every byte goes, markers after the scan included.
#pragma once
#include <cstdint>

#include "hls_compat.h"
#include "jpeg_decode_core.h"

namespace atoll_image {

constexpr uint32_t kScanBeatBytes = 8;
constexpr uint32_t kScanBeatsPerPort = kBeatBytes / kScanBeatBytes;

// Writes the scan beats of bytes [scan_start, len). An empty scan (headers up to the file's end)
// is one beat with count 0 and last set, so the core still sees the end.
inline void feed_scan(const Beat* jpeg, uint32_t len, uint32_t scan_start, hls::stream<JpegScanBeat>& out) {
  const uint32_t first = scan_start / kScanBeatBytes;
  const uint32_t end = (len + kScanBeatBytes - 1) / kScanBeatBytes;
  if (first >= end) {
    out.write(JpegScanBeat{{0, 0, 0, 0, 0, 0, 0, 0}, 0, 1});
    return;
  }
  Beat port;
  // Trip count: 8-byte groups of a 500x375 file of up to ~94 KB.
scan_beats:
  for (uint32_t g = first; g < end; ++g) {
#pragma HLS LOOP_TRIPCOUNT max = kTypicalPixels / 16
#pragma HLS PIPELINE II = 1
    if (g == first || g % kScanBeatsPerPort == 0) port = jpeg[g / kScanBeatsPerPort];
    const uint32_t base = g * kScanBeatBytes;
    const uint32_t lo = g == first ? scan_start - base : 0;
    const uint32_t hi = g + 1 == end ? len - base : kScanBeatBytes;
    uint8_t group[kScanBeatBytes];  // the port beat's 8-byte group g (an 8-way select), then shifted
#pragma HLS ARRAY_PARTITION variable = group complete
  scan_group_bytes:
    for (uint32_t k = 0; k < kScanBeatBytes; ++k) group[k] = port[(g % kScanBeatsPerPort) * kScanBeatBytes + k];
    JpegScanBeat beat;
  scan_beat_bytes:
    for (uint32_t k = 0; k < kScanBeatBytes; ++k) beat.byte[k] = lo + k < kScanBeatBytes ? group[lo + k] : uint8_t{0};
    beat.count = static_cast<uint8_t>(hi - lo);
    beat.last = g + 1 == end;
    out.write(beat);
  }
}

}  // namespace atoll_image
