// jpeg_decode_core.cpp: C model of the jpeg_decode_core RTL blackbox, used by C simulation: the
// image CU's own entropy decoder (BitReader, decode_block, restart_if_due) and idct_islow behind
// the blackbox's streams. The tables are rebuilt from the writes the RTL takes.
#include "jpeg_decode_core.h"

#include <vector>

#include "jpeg_decode.h"

using namespace atoll_image;

namespace {

struct CoreTables {
  HuffTable huff[8];  // 0..3 DC, 4..7 AC
  uint16_t quant[kMaxComponents][kBlockSize];
};

void apply(const JpegTableWrite& w, CoreTables& t) {
  if (w.addr >= kQuantBase) {
    t.quant[(w.addr - kQuantBase) / 64 % kMaxComponents][w.addr % 64] = static_cast<uint16_t>(w.data);
  } else if (w.addr >= kMaxcodeBase) {
    HuffTable& h = t.huff[(w.addr - kMaxcodeBase) / 8 % 8];
    const int len = static_cast<int>(w.addr % 8) + 10;
    if (len > kMaxCodeLen) return;
    h.maxcode[len] = static_cast<int32_t>(w.data << 15) >> 15;  // 17-bit two's complement
    h.valoffset[len] = static_cast<int32_t>(w.data >> 17);      // used modulo 256
  } else if (w.addr >= kSymbolBase) {
    t.huff[(w.addr - kSymbolBase) / 256].huffval[w.addr % 256] = static_cast<uint8_t>(w.data);
  } else {
    HuffTable& h = t.huff[w.addr / 512];
    h.look_len[w.addr % 512] = static_cast<uint8_t>(w.data >> 8 & 15);
    h.look_sym[w.addr % 512] = static_cast<uint8_t>(w.data);
    h.defined = true;
  }
}

}  // namespace

void jpeg_decode_core(hls::stream<JpegTableWrite>& tables, hls::stream<JpegScanBeat>& scan,
                      hls::stream<IdctSampleRow>& rows, uint32_t n_mcus, uint32_t restart_interval,
                      uint32_t n_components, uint32_t components, uint32_t& status) {
  static thread_local CoreTables t;  // large: off the stack, one per emulated CU thread
  for (JpegTableWrite w = tables.read(); w.addr != kTableEnd; w = tables.read()) apply(w, t);
  for (HuffTable& h : t.huff) build_fast_table(h);
  std::vector<uint8_t> bytes;
  for (bool last = false; !last;) {
    const JpegScanBeat b = scan.read();
    bytes.insert(bytes.end(), b.byte, b.byte + b.count);
    last = b.last;
  }
  std::vector<Beat> beats(bytes.size() / kBeatBytes + 1);
  for (size_t i = 0; i < bytes.size(); ++i) beats[i / kBeatBytes][i % kBeatBytes] = bytes[i];
  BitReader br;
  br.start(static_cast<uint32_t>(bytes.size()), 0);
  int32_t pred[kMaxComponents] = {0, 0, 0};
  int16_t coef[kBlockSize];
  uint8_t samples[kBlockSize];
  uint32_t to_restart = restart_interval, restart_index = 0;
  uint32_t blocks_per_mcu = 0;
  for (uint32_t ci = 0; ci < n_components; ++ci) {
    const uint32_t c = components >> (6 * ci);
    blocks_per_mcu += ((c & 1) + 1) * ((c >> 1 & 1) + 1);
  }
  uint64_t written = 0;
  status = kOk;
  for (uint32_t m = 0; m < n_mcus && status == kOk; ++m) {
    if (!restart_if_due(beats.data(), br, restart_interval, to_restart, restart_index, pred)) status = kCorrupt;
    for (uint32_t ci = 0; ci < n_components && status == kOk; ++ci) {
      const uint32_t c = components >> (6 * ci);
      const uint32_t blocks = ((c & 1) + 1) * ((c >> 1 & 1) + 1);
      for (uint32_t b = 0; b < blocks && status == kOk; ++b) {
        bool dc_only;
        br.reach(beats.data());
        if (!decode_block(br, t.huff[c >> 2 & 3], t.huff[4 + (c >> 4 & 3)], pred[ci], coef, dc_only)) {
          status = kCorrupt;
          break;
        }
        idct_islow(coef, t.quant[ci], dc_only, samples, 8u);
        for (int r = 0; r < 8; ++r) {
          IdctSampleRow row;
          for (int k = 0; k < 8; ++k) row.sample[k] = samples[8 * r + k];
          rows.write(row);
        }
        ++written;
      }
    }
    if (status == kOk && br.overran()) status = kCorrupt;
  }
  // After a CORRUPT block, zero rows for every block not decoded: the MCU strip downstream reads
  // the whole scan's rows, so the chain always completes.
  for (; written < uint64_t{n_mcus} * blocks_per_mcu; ++written) {
    for (int r = 0; r < 8; ++r) rows.write(IdctSampleRow{});
  }
}
