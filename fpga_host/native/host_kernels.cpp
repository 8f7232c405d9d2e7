// The CPU path's per-image steps that Python would otherwise run while holding the GIL, or with
// several hand-backs of it (fpga_host/host_kernels.py calls them through ctypes).
// Each computes exactly what its Python reference computes: jpeg_header.scan_count and the
// table lookup of cpu_backend.normalize_bgr.
#include <cstddef>
#include <cstdint>
#include <cstring>

namespace {

// A byte after 0xFF that makes no marker where libjpeg looks for one: a stuffed zero, TEM, RSTn
// (they belong to the scan), SOI, and a fill byte (the next FF is looked at instead).
inline bool marker_byte(uint8_t b) {
  return b != 0x00 && b != 0x01 && !(b >= 0xD0 && b <= 0xD8) && b != 0xFF;
}

// The position of the next marker's FF at or after `pos`, or n when there is none.
size_t next_marker(const uint8_t* d, size_t n, size_t pos) {
  while (pos + 1 < n) {
    const void* hit = std::memchr(d + pos, 0xFF, n - 1 - pos);  // an FF with a byte after it
    if (hit == nullptr) return n;
    pos = static_cast<size_t>(static_cast<const uint8_t*>(hit) - d);
    if (marker_byte(d[pos + 1])) return pos;
    pos += 1;
  }
  return n;
}

}  // namespace

extern "C" {

// The number of scans (SOS markers) libjpeg would decode from d[0:n], counted no further than
// stop_after + 1 (jpeg_header.scan_count, whose comments say why each rule is there).
int64_t atoll_jpeg_scan_count(const uint8_t* d, size_t n, int64_t stop_after) {
  int64_t count = 0;
  size_t pos = 2;
  while (count <= stop_after && pos < n) {
    size_t at = next_marker(d, n, pos);
    if (at >= n) break;
    uint8_t marker = d[at + 1];
    pos = at + 2;
    if (marker == 0xD9) break;  // EOI
    count += marker == 0xDA;
    // the segment's length, big-endian, from what bytes are left (one byte: its value alone)
    size_t length = pos + 1 < n ? (size_t{d[pos]} << 8 | d[pos + 1]) : pos < n ? d[pos] : 0;
    if (length < 2) break;
    pos += length;
  }
  return count;
}

// HWC uint8 BGR rows (`row_stride` bytes apart, pixels 3 bytes apart) -> CHW float32 RGB:
// dst[c][y][x] = table[c][pixel's channel 2 - c], `table` 3 x 256 floats.
void atoll_normalize_bgr(const uint8_t* src, size_t h, size_t w, size_t row_stride, const float* table,
                         float* dst) {
  const size_t plane = h * w;
  const float* red = table;
  const float* green = table + 256;
  const float* blue = table + 512;
  for (size_t y = 0; y < h; ++y) {
    const uint8_t* row = src + y * row_stride;
    float* r = dst + y * w;
    float* g = r + plane;
    float* b = g + plane;
    for (size_t x = 0; x < w; ++x) {
      b[x] = blue[row[3 * x]];
      g[x] = green[row[3 * x + 1]];
      r[x] = red[row[3 * x + 2]];
    }
  }
}

}  // extern "C"
