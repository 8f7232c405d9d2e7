// jpeg_huffman.h: entropy decoding of baseline JPEG (ITU T.81 F.2.2): Huffman tables with a
// lookahead table, the bit reader over the entropy-coded segment (byte stuffing, markers,
// bounds-checked reads), and decoding of one 8x8 block of quantised coefficients.
#pragma once
#include <cstdint>

#include "image_types.h"
#include "jpeg_source.h"

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
  // AC fast path: where a code and its magnitude bits both fit in the lookahead, the run and the
  // signed value are decoded by one table read. fast_bits 0: take the general path.
  uint8_t fast_bits[1 << kLookBits];
  uint8_t fast_run[1 << kLookBits];
  int16_t fast_value[1 << kLookBits];
};

// T.81 F.12: a magnitude category s and its s raw bits give a signed value.
inline int32_t extend(uint32_t v, int s) {
  return v < (1u << (s - 1)) ? static_cast<int32_t>(v) - (1 << s) + 1 : static_cast<int32_t>(v);
}

// The AC fast path's entries from the lookahead table (look_len, look_sym).
inline void build_fast_table(HuffTable& t) {
huff_fast:
  for (uint32_t i = 0; i < (1u << kLookBits); ++i) {
    const int len = t.look_len[i];
    const int size = t.look_sym[i] & 15;
    t.fast_bits[i] = 0;
    if (len && size && len + size <= kLookBits) {
      const uint32_t bits = (i >> (kLookBits - len - size)) & ((1u << size) - 1);
      t.fast_bits[i] = static_cast<uint8_t>(len + size);
      t.fast_run[i] = t.look_sym[i] >> 4;
      t.fast_value[i] = static_cast<int16_t>(extend(bits, size));
    }
  }
}

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
  build_fast_table(t);
  t.defined = true;
  return true;
}

// MSB-first bit reader over the entropy-coded segment, reading the on-chip window; `reach` keeps
// the window ahead of it (before each block). At a marker or at the end of the input it feeds
// zero bits, counting them: consuming any of them means the scan data ran short (corrupt).
struct BitReader {
  ByteWindow win;
  uint32_t len;
  uint32_t pos;
  uint64_t acc;  // valid bits are left-aligned
  int bits;
  uint32_t pad_bits;
  bool at_marker;

  void start(uint32_t n, uint32_t p) {
    window_start(win);
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
        const uint8_t b = window_at(win, pos);
        if (b != 0xFF) {
          byte = b;
          ++pos;
        } else if (pos + 1 < len && window_at(win, pos + 1) == 0) {
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
  void reach(const Beat* jpeg) { window_reach(jpeg, len, win, pos, kBlockReach); }
  uint8_t byte_at(uint32_t p) const { return window_at(win, p); }
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

// Decodes one block (natural order) into coef, updating the component's DC predictor; dc_only
// tells whether no AC coefficient was coded. Returns false on an invalid code or a coefficient
// index past 63.
inline bool decode_block(BitReader& br, const HuffTable& dc, const HuffTable& ac, int32_t& pred,
                         int16_t coef[kBlockSize], bool& dc_only) {
block_clear:
  for (uint32_t i = 0; i < kBlockSize; ++i) {
#pragma HLS UNROLL
    coef[i] = 0;  // registers (the caller partitions coef): one cycle
  }
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
    br.ensure(kMaxCodeLen);
    const uint32_t look = br.peek(kLookBits);
    if (ac.fast_bits[look]) {
      k += ac.fast_run[look];
      if (k > 63) return false;
      coef[kZigzag[k]] = ac.fast_value[look];
      dc_only = false;
      br.skip(ac.fast_bits[look]);
      ++k;
      continue;
    }
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
