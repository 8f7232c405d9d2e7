// jpeg_decode_core.h: C signature of the jpeg_decode_core RTL blackbox (hls/rtl/jpeg_decode_core.v,
// descriptor hls/rtl/jpeg_decode_core.json: entropy decode at one Huffman symbol a cycle,
// de-zigzag, dequantisation, islow IDCT), its beat types, and what the HLS C++ hands it: the scan's
// arguments and the table writes, from the parsed headers. C simulation runs the C model in
// jpeg_decode_core.cpp.
#pragma once
#include <cstdint>

#include "hls_compat.h"
#include "idct8x8_islow.h"
#include "jpeg_markers.h"

namespace atoll_image {

// Scan bytes, 8 a beat in file order; count 1..8; last on the final beat (the file's end).
struct JpegScanBeat {
  uint8_t byte[8];
  uint8_t count;
  uint8_t last;
};

// One table write: addr bits 12..0 the Huffman tables (table t = {ac, id}: lookahead entries at
// t * 512 + i, symbols at 0x1000 + t * 256 + i, maxcode/valoffset at 0x1800 + t * 8 + len - 10),
// 0x2000 + component * 64 + natural index the quantisation steps; kTableEnd ends the stream.
struct JpegTableWrite {
  uint32_t addr;
  uint32_t data;
};

constexpr uint32_t kTableEnd = 0x80000000u;
constexpr uint32_t kQuantBase = 0x2000;
constexpr uint32_t kSymbolBase = 0x1000;
constexpr uint32_t kMaxcodeBase = 0x1800;
constexpr uint32_t kCoreStatusCorrupt = kCorrupt;

// The core's `components` argument: per component c, bits 6c..6c+5 = {ta, td, v == 2, h == 2}.
inline uint32_t core_components(const JpegFrame& f) {
  uint32_t packed = 0;
core_components_pack:
  for (uint32_t c = 0; c < f.n_components; ++c) {
#pragma HLS LOOP_TRIPCOUNT max = kMaxComponents
    const JpegComponent& k = f.comp[c];
    packed |= ((k.h == 2) | (k.v == 2) << 1 | k.td << 2 | k.ta << 4) << (6 * c);
  }
  return packed;
}

// One Huffman table's writes (t: 0..3 DC, 4..7 AC).
inline void write_huff_table(const HuffTable& h, uint32_t t, hls::stream<JpegTableWrite>& out) {
core_lookahead:
  for (uint32_t i = 0; i < (1u << kLookBits); ++i) {
#pragma HLS PIPELINE II = 1
    out.write({t * 512 + i, (uint32_t{h.look_len[i]} << 8) | h.look_sym[i]});
  }
core_symbols:
  for (uint32_t i = 0; i < 256; ++i) {
#pragma HLS PIPELINE II = 1
    out.write({kSymbolBase + t * 256 + i, h.huffval[i]});
  }
core_maxcode:
  for (int len = kLookBits + 1; len <= kMaxCodeLen; ++len) {
#pragma HLS PIPELINE II = 1
    const uint32_t valoffset = static_cast<uint32_t>(h.valoffset[len]) & 0xFF;  // symbol index mod 256
    out.write({kMaxcodeBase + t * 8 + (len - 10), valoffset << 17 | (static_cast<uint32_t>(h.maxcode[len]) & 0x1FFFF)});
  }
}

// Every defined Huffman table, the components' quantisation steps, the end.
inline void write_core_tables(const JpegFrame& f, hls::stream<JpegTableWrite>& out) {
core_tables:
  for (uint32_t t = 0; t < 8; ++t) {
    const HuffTable& h = t < 4 ? f.dc[t] : f.ac[t - 4];
    if (h.defined) write_huff_table(h, t, out);
  }
core_quant:
  for (uint32_t c = 0; c < f.n_components; ++c) {
#pragma HLS LOOP_TRIPCOUNT max = kMaxComponents
    for (uint32_t i = 0; i < kBlockSize; ++i) {
#pragma HLS PIPELINE II = 1
      out.write({kQuantBase + c * 64 + i, f.comp[c].quant[i]});
    }
  }
  out.write({kTableEnd, 0});
}

}  // namespace atoll_image

// Decodes one scan: reads the table writes up to kTableEnd, then the scan beats up to the last,
// and writes each block's 8 sample rows in scan order: always n_mcus * blocks per MCU blocks (what
// jpeg_mcu_strip reads). status: kOk, or kCorrupt: the blocks before the bad one are decoded, the
// rest are zero rows (the RTL may stop a block or an MCU earlier on data that ran short).
void jpeg_decode_core(hls::stream<atoll_image::JpegTableWrite>& tables, hls::stream<atoll_image::JpegScanBeat>& scan,
                      hls::stream<IdctSampleRow>& rows, uint32_t n_mcus, uint32_t restart_interval,
                      uint32_t n_components, uint32_t components, uint32_t& status);
