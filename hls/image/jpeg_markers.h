// jpeg_markers.h: the marker parser. Walks the segments from SOI to the first SOS, collecting the
// frame header (SOF0/SOF1), quantisation tables (DQT), Huffman tables (DHT), the restart
// interval (DRI) and the colour-transform hints (JFIF APP0, Adobe APP14), and classifies the file:
// UNSUPPORTED for coding processes the CU does not implement, CORRUPT for malformed segments,
// TOO_LARGE as soon as the frame header declares a dimension above max_dim. Every read is checked
// against the input length and the segment length.
#pragma once
#include <cstdint>

#include "image_types.h"
#include "jpeg_huffman.h"
#include "jpeg_source.h"

namespace atoll_image {

struct JpegComponent {
  uint8_t id;
  uint8_t h, v;        // sampling factors
  uint8_t tq;          // quantisation table selector
  uint8_t td, ta;      // DC / AC Huffman table selectors (from SOS)
  uint32_t width;      // samples per line at this component's resolution
  uint32_t height;
  uint32_t stride;     // bytes per plane row in the frame store (whole MCUs)
  uint32_t rows;       // plane rows in the frame store
  uint64_t offset;     // plane offset in the frame store
  uint16_t quant[kBlockSize];  // natural order, latched at SOS
};

struct JpegFrame {
  uint32_t width, height;
  uint32_t n_components;
  uint32_t hmax, vmax;
  uint32_t mcus_x, mcus_y;
  uint32_t restart_interval;
  bool rgb;             // components are R, G, B (Adobe transform 0 or ids 'R','G','B')
  bool saw_jfif, saw_adobe;
  uint8_t adobe_transform;
  uint32_t scan_start;  // offset of the first entropy-coded byte
  JpegComponent comp[kMaxComponents];
  bool quant_defined[4];
  uint16_t quant[4][kBlockSize];
  HuffTable dc[4], ac[4];
};

// Big-endian 16-bit read; the caller has checked that two bytes remain.
inline uint32_t read_u16(const uint8_t* p, uint32_t at) { return (uint32_t{p[at]} << 8) | p[at + 1]; }

enum Marker : uint8_t {
  kSof0 = 0xC0, kSof1 = 0xC1, kDht = 0xC4, kSoi = 0xD8, kEoi = 0xD9, kSos = 0xDA, kDqt = 0xDB,
  kDri = 0xDD, kApp0 = 0xE0, kApp14 = 0xEE,
};

inline bool is_unsupported_sof(uint8_t m) {
  // SOF2/3 (progressive, lossless), SOF5-7 (hierarchical), SOF9-11/13-15 (arithmetic), DAC.
  return m >= 0xC2 && m <= 0xCF && m != kDht && m != 0xC8;
}

inline Status parse_sof(const uint8_t* seg, uint32_t n, uint32_t max_dim, JpegFrame& f) {
  if (n < 6) return kCorrupt;
  if (seg[0] != 8) return kUnsupported;  // 12-bit samples
  f.height = read_u16(seg, 1);
  f.width = read_u16(seg, 3);
  f.n_components = seg[5];
  if (f.width == 0 || f.height == 0) return kCorrupt;  // DNL-defined height: libjpeg refuses too
  if (f.n_components == 2 || f.n_components > kMaxComponents) return kUnsupported;  // e.g. CMYK
  if (f.n_components == 0 || n < 6 + 3 * f.n_components) return kCorrupt;
  if (f.width > max_dim || f.height > max_dim) return kTooLarge;
  f.hmax = f.vmax = 1;
sof_components:
  for (uint32_t i = 0; i < f.n_components; ++i) {
#pragma HLS LOOP_TRIPCOUNT max = kMaxComponents
    JpegComponent& c = f.comp[i];
    c.id = seg[6 + 3 * i];
    c.h = seg[7 + 3 * i] >> 4;
    c.v = seg[7 + 3 * i] & 15;
    c.tq = seg[8 + 3 * i];
    if (c.h == 0 || c.v == 0 || c.tq > 3) return kCorrupt;
    if (c.h > kMaxSampling || c.v > kMaxSampling) return kUnsupported;
  sof_unique_ids:
    for (uint32_t j = 0; j < i; ++j) {
#pragma HLS LOOP_TRIPCOUNT max = kMaxComponents - 1
      if (f.comp[j].id == c.id) return kCorrupt;
    }
  }
  if (f.n_components == 1) {
    f.comp[0].h = f.comp[0].v = 1;  // a single-component scan is never interleaved
  }
sof_max:
  for (uint32_t i = 0; i < f.n_components; ++i) {
#pragma HLS LOOP_TRIPCOUNT max = kMaxComponents
    if (f.comp[i].h > f.hmax) f.hmax = f.comp[i].h;
    if (f.comp[i].v > f.vmax) f.vmax = f.comp[i].v;
  }
  f.mcus_x = (f.width + 8 * f.hmax - 1) / (8 * f.hmax);
  f.mcus_y = (f.height + 8 * f.vmax - 1) / (8 * f.vmax);
  uint64_t offset = 0;
sof_planes:
  for (uint32_t i = 0; i < f.n_components; ++i) {
#pragma HLS LOOP_TRIPCOUNT max = kMaxComponents
    JpegComponent& c = f.comp[i];
    c.width = (f.width * c.h + f.hmax - 1) / f.hmax;
    c.height = (f.height * c.v + f.vmax - 1) / f.vmax;
    c.stride = (f.mcus_x * c.h * 8 + kBeatBytes - 1) / kBeatBytes * kBeatBytes;  // whole beats
    c.rows = f.mcus_y * c.v * 8;
    c.offset = offset;
    offset += uint64_t{c.stride} * c.rows;
  }
  return kOk;
}

inline Status parse_dqt(const uint8_t* seg, uint32_t n, JpegFrame& f) {
  uint32_t at = 0;
dqt_tables:
  for (int t = 0; t < 4 && at < n; ++t) {
    const uint32_t precision = seg[at] >> 4;
    const uint32_t id = seg[at] & 15;
    const uint32_t bytes = precision ? 128 : 64;
    if (precision > 1 || id > 3 || at + 1 + bytes > n) return kCorrupt;
  dqt_values:
    for (uint32_t k = 0; k < kBlockSize; ++k) {
      const uint32_t v = precision ? read_u16(seg, at + 1 + 2 * k) : seg[at + 1 + k];
      f.quant[id][kZigzag[k]] = static_cast<uint16_t>(v);
    }
    f.quant_defined[id] = true;
    at += 1 + bytes;
  }
  return at == n ? kOk : kCorrupt;
}

inline Status parse_dht(const uint8_t* seg, uint32_t n, JpegFrame& f) {
  uint32_t at = 0;
dht_tables:
  for (int t = 0; t < 8 && at < n; ++t) {
    if (at + 17 > n) return kCorrupt;
    const uint32_t cls = seg[at] >> 4;
    const uint32_t id = seg[at] & 15;
    if (cls > 1 || id > 3) return kCorrupt;
    uint32_t total = 0;
    for (int i = 0; i < kMaxCodeLen; ++i) total += seg[at + 1 + i];
    if (at + 17 + total > n) return kCorrupt;
    HuffTable& table = cls ? f.ac[id] : f.dc[id];
    if (!build_huff_table(seg + at + 1, seg + at + 17, total, table)) return kCorrupt;
    at += 17 + total;
  }
  return at == n ? kOk : kCorrupt;
}

// seg points after the length field; n is the payload length.
inline Status parse_sos(const uint8_t* seg, uint32_t n, JpegFrame& f) {
  if (f.n_components == 0) return kCorrupt;  // scan before frame header
  if (n < 1) return kCorrupt;
  const uint32_t ns = seg[0];
  if (n != 4 + 2 * ns || ns == 0 || ns > 4) return kCorrupt;
  // Only one interleaved scan holding every component is implemented (what encoders write).
  if (ns != f.n_components) return kUnsupported;
sos_components:
  for (uint32_t i = 0; i < ns; ++i) {
#pragma HLS LOOP_TRIPCOUNT max = kMaxComponents
    if (seg[1 + 2 * i] != f.comp[i].id) return kUnsupported;  // scan order differs from frame
    JpegComponent& c = f.comp[i];
    c.td = seg[2 + 2 * i] >> 4;
    c.ta = seg[2 + 2 * i] & 15;
    if (c.td > 3 || c.ta > 3 || !f.dc[c.td].defined || !f.ac[c.ta].defined) return kCorrupt;
    if (!f.quant_defined[c.tq]) return kCorrupt;
    for (uint32_t k = 0; k < kBlockSize; ++k) c.quant[k] = f.quant[c.tq][k];
  }
  const uint32_t ss = seg[1 + 2 * ns], se = seg[2 + 2 * ns], a = seg[3 + 2 * ns];
  if (ss != 0 || se != 63 || a != 0) return kCorrupt;
  // libjpeg's colour-space guess, made once all header segments are seen.
  if (f.n_components == 3 && !f.saw_jfif) {
    f.rgb = f.saw_adobe ? f.adobe_transform == 0
                        : f.comp[0].id == 'R' && f.comp[1].id == 'G' && f.comp[2].id == 'B';
  }
  return kOk;
}

inline void parse_app(uint8_t marker, const uint8_t* seg, uint32_t n, JpegFrame& f) {
  if (marker == kApp0 && n >= 5 && seg[0] == 'J' && seg[1] == 'F' && seg[2] == 'I' &&
      seg[3] == 'F' && seg[4] == 0) {
    f.saw_jfif = true;
  }
  if (marker == kApp14 && n >= 12 && seg[0] == 'A' && seg[1] == 'd' && seg[2] == 'o' &&
      seg[3] == 'b' && seg[4] == 'e') {
    f.saw_adobe = true;
    f.adobe_transform = seg[11];
  }
}

// Parses everything up to and including the first SOS. On kOk, f.scan_start is set.
constexpr uint32_t kMaxSegmentBytes = 65535 - 2;  // a marker segment's 16-bit length counts itself
constexpr uint32_t kAppBytes = 12;  // what parse_app reads of the segments it does not parse fully

// Copies n bytes of the file from `at` into the on-chip segment buffer (through the window).
inline void copy_segment(const Beat* jpeg, uint32_t len, ByteWindow& w, uint32_t at, uint32_t n,
                         uint8_t seg[kMaxSegmentBytes]) {
segment_copy:
  for (uint32_t i = 0; i < n; ++i) {
#pragma HLS LOOP_TRIPCOUNT max = kTypicalSegmentBytes
    seg[i] = window_byte(jpeg, len, w, at + i);  // not pipelined: a miss runs the window's burst
  }
}

// Walks the marker segments up to the scan. Each segment is copied on chip before it is parsed
// (APPn, COM and other segments only as far as parse_app reads).
inline Status parse_headers(const Beat* jpeg, uint32_t len, uint32_t max_dim, JpegFrame& f) {
  f.n_components = 0;
  f.width = f.height = 0;
  f.restart_interval = 0;
  f.rgb = f.saw_jfif = f.saw_adobe = false;
  f.adobe_transform = 1;
  for (int i = 0; i < 4; ++i) f.quant_defined[i] = f.dc[i].defined = f.ac[i].defined = false;
  ByteWindow w;
  window_start(w);
  uint8_t seg[kMaxSegmentBytes];
  if (len < 4 || window_byte(jpeg, len, w, 0) != 0xFF || window_byte(jpeg, len, w, 1) != kSoi) return kCorrupt;
  uint32_t at = 2;
  bool have_frame = false;
segments:
  for (uint32_t s = 0; s < kMaxSegments; ++s) {
#pragma HLS LOOP_TRIPCOUNT max = 16
    // Fill bytes (0xFF) may precede a marker.
    if (at >= len || window_byte(jpeg, len, w, at) != 0xFF) return kCorrupt;
  fill_bytes:
    for (uint32_t i = 0; i < kMaxSegments && at < len && window_byte(jpeg, len, w, at) == 0xFF; ++i) ++at;
    if (at >= len) return kCorrupt;
    const uint8_t marker = window_byte(jpeg, len, w, at++);
    if (marker == kEoi || marker == kSoi || marker == 0) return kCorrupt;
    if (marker >= 0xD0 && marker <= 0xD7) continue;  // stray RSTn carries no length
    if (at + 2 > len) return kCorrupt;
    const uint32_t seg_len = uint32_t{window_byte(jpeg, len, w, at)} << 8 | window_byte(jpeg, len, w, at + 1);
    if (seg_len < 2 || at + seg_len > len) return kCorrupt;
    const uint32_t n = seg_len - 2;
    const bool parsed = marker == kSof0 || marker == kSof1 || marker == kDht || marker == kDqt ||
                        marker == kDri || marker == kSos;
    copy_segment(jpeg, len, w, at + 2, parsed || n <= kAppBytes ? n : kAppBytes, seg);
    at += seg_len;
    Status st = kOk;
    if (marker == kSof0 || marker == kSof1) {
      if (have_frame) return kCorrupt;
      have_frame = true;
      st = parse_sof(seg, n, max_dim, f);
    } else if (is_unsupported_sof(marker)) {
      st = kUnsupported;
    } else if (marker == kDht) {
      st = parse_dht(seg, n, f);
    } else if (marker == kDqt) {
      st = parse_dqt(seg, n, f);
    } else if (marker == kDri) {
      if (n != 2) return kCorrupt;
      f.restart_interval = read_u16(seg, 0);
    } else if (marker == kSos) {
      st = parse_sos(seg, n, f);
      if (st == kOk) f.scan_start = at;
      return st;
    } else {
      parse_app(marker, seg, n, f);
    }
    if (st != kOk) return st;
  }
  return kUnsupported;  // more segments than the CU walks before a scan
}

}  // namespace atoll_image
