// entropy_ref.cpp: extern "C" entry points for the jpeg_entropy_decode and jpeg_decode_core
// testbenches (ctypes): the image CU's own header parser and entropy decoder (jpeg_markers.h,
// jpeg_huffman.h, jpeg_decode.h) on a JPEG file, giving the RTL's inputs (scan arguments, table
// writes, from jpeg_decode_core.h) and its reference outputs (coefficients; the core's C model).
#include <cstdint>
#include <cstring>
#include <vector>

#include "jpeg_decode.h"
#include "jpeg_decode_core.h"

using namespace atoll_image;

namespace {

std::vector<Beat> beats_of(const uint8_t* file, uint32_t len) {
  std::vector<Beat> beats((len + kBeatBytes - 1) / kBeatBytes);
  for (uint32_t i = 0; i < len; ++i) beats[i / kBeatBytes][i % kBeatBytes] = file[i];
  return beats;
}

}  // namespace

extern "C" {

// Parses the headers. args: n_mcus, restart_interval, n_components, components (the RTL's packed
// word), scan_start, blocks per MCU. Table writes go to addr/data (room for 8 * 775 + 3 * 64):
// the Huffman tables', then the quantisation steps'. Returns the
// header status, the number of table writes in *n_writes.
uint32_t entropy_ref_setup(const uint8_t* file, uint32_t len, uint32_t* args, uint32_t* addr, uint32_t* data,
                           uint32_t* n_writes) {
  const std::vector<Beat> beats = beats_of(file, len);
  static JpegFrame f;
  const Status st = parse_headers(beats.data(), len, kMaxDim, f);
  *n_writes = 0;
  if (st != kOk) return st;
  uint32_t blocks = 0;
  for (uint32_t c = 0; c < f.n_components; ++c) blocks += f.comp[c].h * f.comp[c].v;
  args[0] = f.mcus_x * f.mcus_y;
  args[1] = f.restart_interval;
  args[2] = f.n_components;
  args[3] = core_components(f);
  args[4] = f.scan_start;
  args[5] = blocks;
  hls::stream<JpegTableWrite> writes;
  write_core_tables(f, writes);
  for (JpegTableWrite w = writes.read(); w.addr != kTableEnd; w = writes.read(), ++*n_writes) {
    addr[*n_writes] = w.addr;
    data[*n_writes] = w.data;
  }
  return kOk;
}

// Decodes the scan as decode_scan does (same bit reader, restart_if_due and block decoder) into
// coef (room for max_blocks blocks of 64, natural order, scan order), each block's component in
// comp. Returns the status; the blocks decoded before a CORRUPT one are in coef, their number in *n_blocks.
uint32_t entropy_ref_decode(const uint8_t* file, uint32_t len, int16_t* coef, uint8_t* comp,
                            uint32_t max_blocks, uint32_t* n_blocks) {
  const std::vector<Beat> beats = beats_of(file, len);
  static JpegFrame f;
  *n_blocks = 0;
  const Status st = parse_headers(beats.data(), len, kMaxDim, f);
  if (st != kOk) return st;
  BitReader br;
  br.start(len, f.scan_start);
  int32_t pred[kMaxComponents] = {0, 0, 0};
  uint32_t to_restart = f.restart_interval, restart_index = 0;
  for (uint32_t m = 0; m < f.mcus_x * f.mcus_y; ++m) {
    if (!restart_if_due(beats.data(), br, f.restart_interval, to_restart, restart_index, pred)) return kCorrupt;
    for (uint32_t ci = 0; ci < f.n_components; ++ci) {
      const JpegComponent& c = f.comp[ci];
      for (uint32_t b = 0; b < uint32_t{c.h} * c.v; ++b) {
        if (*n_blocks == max_blocks) return kTooLarge;
        bool dc_only;
        br.reach(beats.data());
        if (!decode_block(br, f.dc[c.td], f.ac[c.ta], pred[ci], coef + 64 * *n_blocks, dc_only)) return kCorrupt;
        comp[*n_blocks] = static_cast<uint8_t>(ci);
        ++*n_blocks;
      }
    }
    if (br.overran()) return kCorrupt;
  }
  return kOk;
}

// The samples idct_islow gives n blocks (coefficients and quantisation steps in natural order).
void entropy_ref_idct(const int16_t* coef, const uint16_t* quant, uint8_t* samples, uint32_t n) {
  for (uint32_t b = 0; b < n; ++b) idct_islow(coef + 64 * b, quant + 64 * b, false, samples + 64 * b, 8u);
}

// The core's C model on the file's scan (table writes from setup): its status, and its sample rows
// (8 bytes each, room for max_rows) in samples, their number in *n_rows.
uint32_t entropy_ref_core(const uint8_t* file, uint32_t len, const uint32_t* args, const uint32_t* addr,
                          const uint32_t* data, uint32_t n_writes, uint8_t* samples, uint32_t max_rows,
                          uint32_t* n_rows) {
  hls::stream<JpegTableWrite> tables;
  hls::stream<JpegScanBeat> scan;
  hls::stream<IdctSampleRow> rows;
  for (uint32_t i = 0; i < n_writes; ++i) tables.write({addr[i], data[i]});
  tables.write({kTableEnd, 0});
  for (uint32_t at = args[4]; at < len; at += 8) {
    JpegScanBeat b{};
    b.count = static_cast<uint8_t>(len - at < 8 ? len - at : 8);
    std::memcpy(b.byte, file + at, b.count);
    b.last = at + 8 >= len;
    scan.write(b);
  }
  uint32_t status = 0;
  jpeg_decode_core(tables, scan, rows, args[0], args[1], args[2], args[3], status);
  for (*n_rows = 0; !rows.empty() && *n_rows < max_rows; ++*n_rows) {
    const IdctSampleRow row = rows.read();
    std::memcpy(samples + 8 * *n_rows, row.sample, 8);
  }
  return status;
}

}  // extern "C"
