// entropy_ref.cpp: extern "C" entry points for the jpeg_entropy_decode testbench (ctypes): the image
// CU's own header parser and entropy decoder (jpeg_markers.h, jpeg_huffman.h, jpeg_decode.h) on a
// JPEG file, giving the RTL's inputs (scan arguments, table writes) and its reference output.
#include <cstdint>
#include <cstring>
#include <vector>

#include "jpeg_decode.h"

using namespace atoll_image;

namespace {

std::vector<Beat> beats_of(const uint8_t* file, uint32_t len) {
  std::vector<Beat> beats((len + kBeatBytes - 1) / kBeatBytes);
  for (uint32_t i = 0; i < len; ++i) beats[i / kBeatBytes][i % kBeatBytes] = file[i];
  return beats;
}

// The table port's writes for one HuffTable t (0..3 DC, 4..7 AC), as jpeg_huff_decoder documents.
uint32_t table_writes(const HuffTable& h, uint32_t t, uint32_t* addr, uint32_t* data) {
  uint32_t n = 0;
  for (uint32_t i = 0; i < (1u << kLookBits); ++i, ++n) {
    addr[n] = t * 512 + i;
    data[n] = (uint32_t{h.look_len[i]} << 8) | h.look_sym[i];
  }
  for (uint32_t i = 0; i < 256; ++i, ++n) {
    addr[n] = 0x1000 + t * 256 + i;
    data[n] = h.huffval[i];
  }
  for (int len = kLookBits + 1; len <= kMaxCodeLen; ++len, ++n) {
    addr[n] = 0x1800 + t * 8 + (len - 10);
    data[n] = ((static_cast<uint32_t>(h.valoffset[len]) & 0xFF) << 17) | (static_cast<uint32_t>(h.maxcode[len]) & 0x1FFFF);
  }
  return n;
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
  uint32_t packed = 0, blocks = 0;
  for (uint32_t c = 0; c < f.n_components; ++c) {
    const JpegComponent& k = f.comp[c];
    packed |= ((k.h == 2) | (k.v == 2) << 1 | k.td << 2 | k.ta << 4) << (6 * c);
    blocks += k.h * k.v;
  }
  args[0] = f.mcus_x * f.mcus_y;
  args[1] = f.restart_interval;
  args[2] = f.n_components;
  args[3] = packed;
  args[4] = f.scan_start;
  args[5] = blocks;
  for (uint32_t t = 0; t < 8; ++t) {
    const HuffTable& h = t < 4 ? f.dc[t] : f.ac[t - 4];
    if (h.defined) *n_writes += table_writes(h, t, addr + *n_writes, data + *n_writes);
  }
  // jpeg_decode_core's quantisation steps (0x2000 + component * 64 + natural index).
  for (uint32_t c = 0; c < f.n_components; ++c) {
    for (uint32_t i = 0; i < kBlockSize; ++i, ++*n_writes) {
      addr[*n_writes] = 0x2000 + c * 64 + i;
      data[*n_writes] = f.comp[c].quant[i];
    }
  }
  return kOk;
}

// Decodes the scan as decode_scan does (same bit reader, restart handling and block decoder) into
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
    if (f.restart_interval) {
      if (to_restart == 0) {
        if (br.overran() || !read_restart_marker(beats.data(), br, restart_index)) return kCorrupt;
        ++restart_index;
        to_restart = f.restart_interval;
        for (uint32_t c = 0; c < kMaxComponents; ++c) pred[c] = 0;
      }
      --to_restart;
    }
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

}  // extern "C"
