// jpeg_huffman.h: entropy decoding of baseline JPEG (ITU T.81 F.2.2): Huffman tables with a
// lookahead table, the bit reader over the entropy-coded segment (byte stuffing, markers,
// bounds-checked reads), and decoding of one 8x8 block of quantised coefficients.
#pragma once
#include <cstdint>

#include "image_types.h"

namespace atoll_image {

constexpr int kLookBits = 9;  // codes this short decode with one table read
constexpr int kMaxCodeLen = 16;

// Zigzag scan index -> natural (row-major) coefficient index.
constexpr uint8_t kZigzag[64] = {0,  1,  8,  16, 9,  2,  3,  10, 17, 24, 32, 25, 18, 11, 4,  5,
                                 12, 19, 26, 33, 40, 48, 41, 34, 27, 20, 13, 6,  7,  14, 21, 28,
                                 35, 42, 49, 56, 57, 50, 43, 36, 29, 22, 15, 23, 30, 37, 44, 51,
                                 58, 59, 52, 45, 38, 31, 39, 46, 53, 60, 61, 54, 47, 55, 62, 63};

struct HuffTable {
  bool defined;
  uint8_t look_len[1 << kLookBits];  // 0: the code is longer than kLookBits
  uint8_t look_sym[1 << kLookBits];
  int32_t maxcode[kMaxCodeLen + 1];    // largest code of each length, -1 when none
  int32_t valoffset[kMaxCodeLen + 1];  // symbol index = code + valoffset[length]
  uint8_t huffval[256];
};

// Builds the canonical code from the 16 code-length counts (T.81 C.2). Returns false for a table
// whose codes do not fit their lengths or that lists more than 256 symbols.
inline bool build_huff_table(const uint8_t counts[kMaxCodeLen], const uint8_t* symbols,
                             uint32_t n_symbols, HuffTable& t) {
  if (n_symbols > 256) return false;
  for (int i = 0; i < (1 << kLookBits); ++i) t.look_len[i] = 0;
  uint32_t code = 0;
  uint32_t k = 0;
huff_lengths:
  for (int len = 1; len <= kMaxCodeLen; ++len) {
    const uint32_t n = counts[len - 1];
    t.valoffset[len] = static_cast<int32_t>(k) - static_cast<int32_t>(code);
  huff_codes:
    for (uint32_t i = 0; i < n; ++i) {
#pragma HLS LOOP_TRIPCOUNT max = 256
      if (code >= (1u << len)) return false;
      t.huffval[k] = symbols[k];
      if (len <= kLookBits) {
        const uint32_t shift = kLookBits - len;
      huff_fill:
        for (uint32_t j = 0; j < (1u << shift); ++j) {
#pragma HLS LOOP_TRIPCOUNT max = 256
          t.look_len[(code << shift) | j] = static_cast<uint8_t>(len);
          t.look_sym[(code << shift) | j] = symbols[k];
        }
      }
      ++code;
      ++k;
    }
    t.maxcode[len] = n ? static_cast<int32_t>(code) - 1 : -1;
    code <<= 1;
  }
  t.defined = true;
  return true;
}

// MSB-first bit reader over the entropy-coded segment. At a marker or at the end of the input it
// feeds zero bits, counting them: consuming any of them means the scan data ran short (corrupt).
struct BitReader {
  const uint8_t* data;
  uint32_t len;
  uint32_t pos;
  uint64_t acc;  // valid bits are left-aligned
  int bits;
  uint32_t pad_bits;
  bool at_marker;

  void start(const uint8_t* d, uint32_t n, uint32_t p) {
    data = d;
    len = n;
    pos = p;
    acc = 0;
    bits = 0;
    pad_bits = 0;
    at_marker = false;
  }

  void fill() {
  bits_fill:
    for (int i = 0; i < 8 && bits <= 56; ++i) {
#pragma HLS LOOP_TRIPCOUNT max = 8
      uint64_t byte = 0;
      if (!at_marker && pos < len) {
        const uint8_t b = data[pos];
        if (b != 0xFF) {
          byte = b;
          ++pos;
        } else if (pos + 1 < len && data[pos + 1] == 0) {
          byte = 0xFF;  // stuffed byte
          pos += 2;
        } else {
          at_marker = true;
        }
      } else {
        at_marker = true;
      }
      if (at_marker) pad_bits += 8;
      acc |= byte << (56 - bits);
      bits += 8;
    }
  }
  void ensure(int n) {
    if (bits < n) fill();
  }
  uint32_t peek(int n) const { return static_cast<uint32_t>(acc >> (64 - n)); }
  void skip(int n) {
    acc <<= n;
    bits -= n;
  }
  uint32_t get(int n) {  // 1 <= n <= 16
    ensure(n);
    const uint32_t v = peek(n);
    skip(n);
    return v;
  }
  bool overran() const { return pad_bits > static_cast<uint32_t>(bits); }
  // Drops the bits left in the current byte-aligned segment (before a restart marker).
  void reset_bits() {
    acc = 0;
    bits = 0;
    pad_bits = 0;
    at_marker = false;
  }
};

// Returns the decoded symbol, or -1 for a bit pattern that is no code of the table.
inline int decode_symbol(BitReader& br, const HuffTable& t) {
  br.ensure(kMaxCodeLen);
  const uint32_t look = br.peek(kLookBits);
  const int n = t.look_len[look];
  if (n) {
    br.skip(n);
    return t.look_sym[look];
  }
  const uint32_t code16 = br.peek(kMaxCodeLen);
huff_slow:
  for (int len = kLookBits + 1; len <= kMaxCodeLen; ++len) {
    const int32_t code = static_cast<int32_t>(code16 >> (kMaxCodeLen - len));
    if (code <= t.maxcode[len]) {
      br.skip(len);
      return t.huffval[(code + t.valoffset[len]) & 0xFF];
    }
  }
  return -1;
}

// T.81 F.12: a magnitude category s and its s raw bits give a signed value.
inline int32_t extend(uint32_t v, int s) {
  return v < (1u << (s - 1)) ? static_cast<int32_t>(v) - (1 << s) + 1 : static_cast<int32_t>(v);
}

// Decodes one block (natural order) into coef, updating the component's DC predictor; dc_only
// tells whether no AC coefficient was coded. Returns false on an invalid code or a coefficient
// index past 63.
inline bool decode_block(BitReader& br, const HuffTable& dc, const HuffTable& ac, int32_t& pred,
                         int16_t coef[kBlockSize], bool& dc_only) {
block_clear:
  for (uint32_t i = 0; i < kBlockSize; ++i) coef[i] = 0;
  const int s = decode_symbol(br, dc);
  if (s < 0 || s > kMaxCodeLen) return false;
  const int32_t diff = s ? extend(br.get(s), s) : 0;
  // libjpeg keeps the predictor as int and truncates the stored coefficient to 16 bits.
  pred = static_cast<int32_t>(static_cast<uint32_t>(pred) + static_cast<uint32_t>(diff));
  coef[0] = static_cast<int16_t>(pred);
  dc_only = true;
block_ac:
  for (int k = 1; k < 64;) {
#pragma HLS LOOP_TRIPCOUNT max = 63
    const int rs = decode_symbol(br, ac);
    if (rs < 0) return false;
    const int run = rs >> 4;
    const int size = rs & 15;
    if (size == 0) {
      if (run != 15) break;  // end of block
      k += 16;               // sixteen zeros
      continue;
    }
    k += run;
    if (k > 63) return false;
    coef[kZigzag[k]] = static_cast<int16_t>(extend(br.get(size), size));
    dc_only = false;
    ++k;
  }
  return true;
}

}  // namespace atoll_image
