// The scan beats hls/image/jpeg_scan_feed.h's feed_scan sends the decode core for a file, as the
// core's 80-bit input words (bytes in 63..0, count in 71..64, last in bit 72), and the core's C
// model on those beats (the kernel's first three DATAFLOW processes), for the RTL test.
#include <cstdint>
#include <cstring>
#include <vector>

#include "jpeg_decode_core.h"
#include "jpeg_markers.h"
#include "jpeg_scan_feed.h"

namespace {

std::vector<Beat> beats_of(const uint8_t* file, uint32_t len) {
  std::vector<Beat> beats(len / kBeatBytes + 1);
  for (uint32_t i = 0; i < len; ++i) beats[i / kBeatBytes][i % kBeatBytes] = file[i];
  return beats;
}

}  // namespace

extern "C" {

// The core's C model fed as the kernel feeds it: status, and up to max_rows sample rows.
uint32_t scan_feed_core(const uint8_t* file, uint32_t len, uint8_t* samples, uint32_t max_rows, uint32_t* n_rows) {
  const std::vector<Beat> beats = beats_of(file, len);
  static atoll_image::JpegFrame f;  // large: off the stack
  *n_rows = 0;
  if (atoll_image::parse_headers(beats.data(), len, atoll_image::kMaxDim, f) != atoll_image::kOk) return 255;
  hls::stream<atoll_image::JpegScanBeat> scan;
  hls::stream<atoll_image::JpegTableWrite> tables;
  hls::stream<IdctSampleRow> rows;
  atoll_image::feed_scan(beats.data(), len, f.scan_start, scan);
  atoll_image::write_core_tables(f, tables);
  uint32_t status = 0;
  jpeg_decode_core(tables, scan, rows, f.mcus_x * f.mcus_y, f.restart_interval, f.n_components,
                   atoll_image::core_components(f), status);
  for (; !rows.empty() && *n_rows < max_rows; ++*n_rows) std::memcpy(samples + 8 * *n_rows, rows.read().sample, 8);
  return status;
}

// Writes up to max beats into lo (bytes) and hi (count | last << 8); returns how many were sent.
uint32_t scan_feed_beats(const uint8_t* file, uint32_t len, uint32_t scan_start, uint64_t* lo, uint32_t* hi,
                         uint32_t max) {
  const std::vector<Beat> beats = beats_of(file, len);
  hls::stream<atoll_image::JpegScanBeat> out;
  atoll_image::feed_scan(beats.data(), len, scan_start, out);
  uint32_t n = 0;
  for (; !out.empty() && n < max; ++n) {
    const atoll_image::JpegScanBeat b = out.read();
    lo[n] = 0;
    for (int k = 0; k < 8; ++k) lo[n] |= uint64_t{b.byte[k]} << (8 * k);
    hi[n] = b.count | uint32_t{b.last} << 8;
  }
  return n;
}

}  // extern "C"
