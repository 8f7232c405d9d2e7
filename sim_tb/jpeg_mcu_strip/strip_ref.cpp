// strip_ref.cpp: extern "C" entry points for the jpeg_mcu_strip testbench (ctypes): a file's column
// beats as the image CU builds them today (decode_scan into a frame store, emit_upsample_columns)
// and as the chain jpeg_decode_core -> jpeg_mcu_strip gives them (both C models), with the strip's
// input rows and arguments for the RTL; and the whole datapath's output (image_cu_datapath.v's
// reference: the four units' C models in a chain).
#include <cstdint>
#include <cstring>
#include <vector>

#include "image_postdecode.h"
#include "jpeg_decode_core.h"
#include "jpeg_mcu_strip.h"
#include "upsample_feed.h"

using namespace atoll_image;

namespace {

std::vector<Beat> beats_of(const uint8_t* file, uint32_t len) {
  std::vector<Beat> beats((len + kBeatBytes - 1) / kBeatBytes + 1);
  for (uint32_t i = 0; i < len; ++i) beats[i / kBeatBytes][i % kBeatBytes] = file[i];
  return beats;
}

// The scan's bytes [from, len) as the decode core's 8-byte beats, the last one flagged.
void write_scan(const uint8_t* file, uint32_t from, uint32_t len, hls::stream<JpegScanBeat>& scan) {
  for (uint32_t at = from; at < len; at += 8) {
    JpegScanBeat b{};
    b.count = static_cast<uint8_t>(len - at < 8 ? len - at : 8);
    std::memcpy(b.byte, file + at, b.count);
    b.last = at + 8 >= len;
    scan.write(b);
  }
}

void copy_out(hls::stream<UpsampleBeat>& columns, uint32_t* out, uint64_t max_beats, uint64_t* n) {
  for (*n = 0; !columns.empty() && *n < max_beats; ++*n) {
    const UpsampleBeat b = columns.read();
    for (uint32_t c = 0; c < kMaxComponents; ++c) out[3 * *n + c] = b.lane[c];
  }
}

}  // namespace

extern "C" {

// The strip's arguments: width, height, sampling, n_components, mode, rows it reads. Returns the
// header status.
uint32_t strip_ref_args(const uint8_t* file, uint32_t len, uint32_t* args) {
  const std::vector<Beat> beats = beats_of(file, len);
  static JpegFrame f;
  const Status st = parse_headers(beats.data(), len, kMaxDim, f);
  if (st != kOk) return st;
  uint32_t blocks = 0;
  for (uint32_t c = 0; c < f.n_components; ++c) blocks += f.comp[c].h * f.comp[c].v;
  args[0] = f.width;
  args[1] = f.height;
  args[2] = strip_sampling(f);
  args[3] = f.n_components;
  args[4] = upsample_mode(f);
  args[5] = f.mcus_x * f.mcus_y * blocks * 8;
  return kOk;
}

// Today's path: decode_scan into a frame store, emit_upsample_columns. Returns the decode status.
uint32_t strip_ref_frame_store(const uint8_t* file, uint32_t len, uint32_t* out, uint64_t max_beats, uint64_t* n) {
  const std::vector<Beat> beats = beats_of(file, len);
  static JpegFrame f;
  *n = 0;
  Status st = parse_headers(beats.data(), len, kMaxDim, f);
  if (st != kOk) return st;
  std::vector<Beat> frame(frame_store_bytes(f) / kBeatBytes + 1);
  st = decode_scan(beats.data(), len, f, frame.data());
  if (st != kOk) return st;
  hls::stream<UpsampleBeat> columns;
  emit_upsample_columns(frame.data(), f, columns);
  copy_out(columns, out, max_beats, n);
  return kOk;
}

// jpeg_mcu_strip's C model alone on n_rows sample rows (8 bytes each): its column beats.
void strip_ref_rows(const uint8_t* rows_in, uint64_t n_rows, uint32_t width, uint32_t height, uint32_t sampling,
                    uint32_t n_components, uint32_t mode, uint32_t* out, uint64_t max_beats, uint64_t* n) {
  hls::stream<IdctSampleRow> rows;
  hls::stream<UpsampleBeat> columns;
  for (uint64_t i = 0; i < n_rows; ++i) {
    IdctSampleRow row;
    std::memcpy(row.sample, rows_in + 8 * i, 8);
    rows.write(row);
  }
  jpeg_mcu_strip(rows, columns, width, height, sampling, n_components, mode);
  copy_out(columns, out, max_beats, n);
}

// The four C models chained (decode core, strip, upsample_color, image_postdecode with post[] =
// dst_h, dst_w, crop_h, crop_w, format): the output beats (3 lanes each) and the core's status.
uint32_t strip_ref_datapath(const uint8_t* file, uint32_t len, const uint32_t* post, uint32_t* out,
                            uint64_t max_beats, uint64_t* n) {
  const std::vector<Beat> beats = beats_of(file, len);
  static JpegFrame f;
  *n = 0;
  const Status st = parse_headers(beats.data(), len, kMaxDim, f);
  if (st != kOk) return st;
  hls::stream<JpegTableWrite> tables;
  hls::stream<JpegScanBeat> scan;
  hls::stream<IdctSampleRow> rows;
  hls::stream<UpsampleBeat> columns;
  hls::stream<uint64_t> pixels;
  hls::stream<PostBeat> processed;
  write_core_tables(f, tables);
  write_scan(file, f.scan_start, len, scan);
  uint32_t status = 0;
  jpeg_decode_core(tables, scan, rows, f.mcus_x * f.mcus_y, f.restart_interval, f.n_components,
                   core_components(f), status);
  jpeg_mcu_strip(rows, columns, f.width, f.height, strip_sampling(f), f.n_components, upsample_mode(f));
  upsample_color(columns, pixels, f.width, f.height, upsample_mode(f));
  image_postdecode(pixels, processed, f.height, f.width, post[0], post[1], post[2], post[3], post[4]);
  for (*n = 0; !processed.empty() && *n < max_beats; ++*n) {
    const PostBeat b = processed.read();
    for (uint32_t c = 0; c < kChannels; ++c) out[3 * *n + c] = b.lane[c];
  }
  return status;
}

// The new path: jpeg_decode_core's C model, its rows (8 bytes each) to `rows`, then
// jpeg_mcu_strip's. Returns the core's status.
uint32_t strip_ref_chain(const uint8_t* file, uint32_t len, uint8_t* rows_out, uint64_t max_rows, uint32_t* out,
                         uint64_t max_beats, uint64_t* n) {
  const std::vector<Beat> beats = beats_of(file, len);
  static JpegFrame f;
  *n = 0;
  const Status st = parse_headers(beats.data(), len, kMaxDim, f);
  if (st != kOk) return st;
  hls::stream<JpegTableWrite> tables;
  hls::stream<JpegScanBeat> scan;
  hls::stream<IdctSampleRow> rows, strip_in;
  write_core_tables(f, tables);
  write_scan(file, f.scan_start, len, scan);
  uint32_t status = 0;
  jpeg_decode_core(tables, scan, rows, f.mcus_x * f.mcus_y, f.restart_interval, f.n_components,
                   core_components(f), status);
  for (uint64_t i = 0; !rows.empty(); ++i) {
    const IdctSampleRow row = rows.read();
    if (i < max_rows) std::memcpy(rows_out + 8 * i, row.sample, 8);
    strip_in.write(row);
  }
  hls::stream<UpsampleBeat> columns;
  jpeg_mcu_strip(strip_in, columns, f.width, f.height, strip_sampling(f), f.n_components, upsample_mode(f));
  if (!strip_in.empty()) return kBadArgs;  // the strip must read every row
  copy_out(columns, out, max_beats, n);
  return status;
}

}  // extern "C"
