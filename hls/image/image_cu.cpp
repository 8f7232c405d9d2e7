// image_cu: one image request, JPEG bytes in, model input out (ABI_DPU.md).
//
// Arguments (each pointer an m_axi port on its own bundle, each scalar and the return on
// s_axilite):
//   jpeg           in     the JPEG file bytes, read in whole 512-bit beats
//   jpeg_len              their count
//   scratch        inout  not read or written: the decode keeps its MCU rows on chip (the frame
//                         store it once held is in frame_store.h, for the tests)
//   scratch_bytes         its capacity; TOO_LARGE when the frame's planes would not fit, as before
//   out            out    stage output: 0 decode / 1 resize / 2 crop: uint8 HWC RGB;
//                         3 normalize: float32 CHW, or float16 CHW when out_fp16; untouched
//                         unless the headers and arguments pass, then written whole even
//                         where the scan turns out CORRUPT (status says so, bytes_written 0)
//   out_bytes             capacity of out; BAD_ARGS when the stage output, rounded up to whole
//                         64-byte beats (what the 512-bit port writes), would not fit
//   status         out    8 words: code, c, h, w, src_h, src_w, n_components, bytes_written
//   stage                 last unit to run (0..3)
//   resize_short          R: the shorter side is resized to R, the longer to int(R * long / short)
//   crop                  C: centre crop C x C
//   out_fp16              nonzero: normalize writes IEEE half
//   max_dim               TOO_LARGE when width or height exceeds it (clamped to kMaxDim), decided
//                         from the frame header before the frame store is touched
//
// The decode equals libjpeg-turbo's default decode (what cv2.imdecode returns, in RGB order);
// EXIF orientation is not applied, so the reference is cv2.imdecode with
// IMREAD_COLOR | IMREAD_IGNORE_ORIENTATION. Grayscale files come out as R = G = B.
//
// Structure: the marker parser reads the headers and the arguments are checked; then one DATAFLOW
// region streams the scan through the decode core -> MCU strip -> upsample+colour -> post-decode
// unit (resize, crop, normalize) -> writer, each RTL unit a blackbox (hls/image_cu.cfg).
#include <cstdint>

#include "hls_compat.h"
#include "image_postdecode.h"
#include "image_types.h"
#include "image_writer.h"
#include "jpeg_decode.h"
#include "jpeg_decode_core.h"
#include "jpeg_markers.h"
#include "jpeg_mcu_strip.h"
#include "jpeg_scan_feed.h"
#include "upsample_color.h"

using namespace atoll_image;

namespace {

struct OutputShape {
  uint32_t h, w;          // output image dims
  uint32_t resized_h, resized_w;
  uint64_t bytes;
};

// Output dims of the requested stage: BAD_ARGS for parameters that make no sense, TOO_LARGE
// when the resized frame would exceed the line buffers (extreme aspect ratios).
Status output_shape(const JpegFrame& f, uint32_t stage, uint32_t r, uint32_t crop, bool fp16,
                    OutputShape& s) {
  if (stage > kStageNormalize) return kBadArgs;
  s.h = f.height;
  s.w = f.width;
  s.resized_h = f.height;
  s.resized_w = f.width;
  if (stage >= kStageResize) {
    if (r == 0) return kBadArgs;
    resize_dims(f.height, f.width, r, s.resized_h, s.resized_w);
    if (r > kMaxDim || s.resized_h > kMaxDim || s.resized_w > kMaxDim) return kTooLarge;
    s.h = s.resized_h;
    s.w = s.resized_w;
  }
  if (stage >= kStageCrop) {
    if (crop == 0 || crop > s.h || crop > s.w) return kBadArgs;
    s.h = s.w = crop;
  }
  const uint64_t elem = stage == kStageNormalize ? (fp16 ? 2 : 4) : 1;
  s.bytes = uint64_t{s.h} * s.w * kChannels * elem;
  return kOk;
}

// The decode and everything after it, one DATAFLOW region in canonical form: every process always
// runs, once. The scan's beats off the input port and the parsed tables go to the decode core (an
// RTL blackbox: entropy decode, dequantisation, IDCT), whose blocks the MCU strip unit turns into
// column beats on chip; upsampling and colour, then the post-decode unit (resize, crop, normalise:
// the stage selector turns resize and crop into the identity and picks the output format), then the
// writer. On a CORRUPT scan the core still writes every block (zero rows after the bad one) and
// drains the scan, so every process completes; `core_status` says CORRUPT.
void pipeline(const Beat* jpeg, uint32_t jpeg_len, const JpegFrame& f, const OutputShape& s, uint32_t stage,
              bool fp16, Beat* out, uint32_t& core_status) {
#pragma HLS DATAFLOW
  hls::stream<JpegScanBeat> scan("scan");
  hls::stream<JpegTableWrite> tables("tables");
  hls::stream<IdctSampleRow> rows("rows");
  hls::stream<UpsampleBeat> columns("columns");
  hls::stream<uint64_t> decoded("decoded");
  hls::stream<PostBeat> processed("processed");
  hls::stream<PlacedBeat> planes[kChannels];
#pragma HLS STREAM variable = scan depth = 64
#pragma HLS STREAM variable = tables depth = 16
#pragma HLS STREAM variable = rows depth = 64
#pragma HLS STREAM variable = columns depth = 64
#pragma HLS STREAM variable = decoded depth = 64
#pragma HLS STREAM variable = processed depth = 64
#pragma HLS STREAM variable = planes depth = 8
  const uint32_t format = stage == kStageNormalize ? (fp16 ? kPostF16 : kPostF32) : kPostU8;
  const uint32_t mode = upsample_mode(f);
  feed_scan(jpeg, jpeg_len, f.scan_start, scan);
  write_core_tables(f, tables);
  jpeg_decode_core(tables, scan, rows, f.mcus_x * f.mcus_y, f.restart_interval, f.n_components, core_components(f),
                   core_status);
  jpeg_mcu_strip(rows, columns, f.width, f.height, strip_sampling(f), f.n_components, mode);
  upsample_color(columns, decoded, f.width, f.height, mode);
  image_postdecode(decoded, processed, f.height, f.width, s.resized_h, s.resized_w, s.h, s.w, format);
  pack_planes(processed, planes, s.h * s.w, format);
  write_beats(planes, out, output_beats(s.h * s.w, format));
}

}  // namespace

extern "C" {

// Frame-store bytes that suffice for any frame up to max_dim x max_dim (three full-resolution
// planes padded to whole 16x16 MCUs, their rows to whole 64-byte beats).
uint64_t image_cu_scratch_bytes(uint32_t max_dim) {
  const uint64_t d = max_dim > kMaxDim ? kMaxDim : max_dim;
  const uint64_t rows = (d + kMaxMcuPixels - 1) / kMaxMcuPixels * kMaxMcuPixels;
  const uint64_t stride = (rows + kBeatBytes - 1) / kBeatBytes * kBeatBytes;  // rows of whole beats
  return kMaxComponents * stride * rows;
}

void image_cu(const Beat* jpeg, uint32_t jpeg_len, Beat* scratch, uint32_t scratch_bytes,
              Beat* out, uint32_t out_bytes, uint32_t* status, uint32_t stage,
              uint32_t resize_short, uint32_t crop, uint32_t out_fp16, uint32_t max_dim) {
#pragma HLS INTERFACE m_axi port = jpeg offset = slave bundle = gmem_jpeg max_read_burst_length = 64
#pragma HLS INTERFACE m_axi port = scratch offset = slave bundle = gmem_scratch
#pragma HLS INTERFACE m_axi port = out offset = slave bundle = gmem_out
#pragma HLS INTERFACE m_axi port = status offset = slave bundle = gmem_status
#pragma HLS INTERFACE s_axilite port = jpeg_len
#pragma HLS INTERFACE s_axilite port = scratch_bytes
#pragma HLS INTERFACE s_axilite port = out_bytes
#pragma HLS INTERFACE s_axilite port = stage
#pragma HLS INTERFACE s_axilite port = resize_short
#pragma HLS INTERFACE s_axilite port = crop
#pragma HLS INTERFACE s_axilite port = out_fp16
#pragma HLS INTERFACE s_axilite port = max_dim
#pragma HLS INTERFACE s_axilite port = return
  uint32_t words[kStatusWords] = {kBadArgs, 0, 0, 0, 0, 0, 0, 0};
  JpegFrame f;
  OutputShape s;
  const bool fp16 = out_fp16 != 0;
  Status code = parse_headers(jpeg, jpeg_len, max_dim > kMaxDim ? kMaxDim : max_dim, f);
  if (code == kOk || code == kTooLarge) {
    words[4] = f.height;
    words[5] = f.width;
    words[6] = f.n_components;
  }
  if (code == kOk && frame_store_bytes(f) > scratch_bytes) code = kTooLarge;
  if (code == kOk) code = output_shape(f, stage, resize_short, crop, fp16, s);
  if (code == kOk && (s.bytes + kBeatBytes - 1) / kBeatBytes * kBeatBytes > out_bytes) code = kBadArgs;
  if (code == kOk) {
    uint32_t core_status = kOk;
    pipeline(jpeg, jpeg_len, f, s, stage, fp16, out, core_status);
    if (core_status != kOk) code = kCorrupt;
  }
  if (code == kOk) {
    words[1] = kChannels;
    words[2] = s.h;
    words[3] = s.w;
    words[7] = static_cast<uint32_t>(s.bytes);
  }
  words[0] = code;
status_write:
  for (uint32_t i = 0; i < kStatusWords; ++i) status[i] = words[i];
}

}  // extern "C"
