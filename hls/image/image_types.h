// image_types.h: constants, status codes and data types shared by the image CU's functional units.
#pragma once
#include <cstdint>

namespace atoll_image {

// Status word 0, as in hls/ABI_DPU.md.
enum Status : uint32_t { kOk = 0, kUnsupported = 1, kCorrupt = 2, kTooLarge = 3, kBadArgs = 4 };

// Stage selector: the CU stops after this unit and writes its output.
enum Stage : uint32_t { kStageDecode = 0, kStageResize = 1, kStageCrop = 2, kStageNormalize = 3 };

constexpr uint32_t kStatusWords = 8;
constexpr uint32_t kChannels = 3;
// Widest line the hardware buffers hold; the max_dim argument is clamped to it.
constexpr uint32_t kMaxDim = 8192;
constexpr uint32_t kMaxComponents = 3;
constexpr uint32_t kMaxSampling = 2;                // h and v sampling factors are 1 or 2
constexpr uint32_t kMaxMcuPixels = 8 * kMaxSampling;  // an MCU is at most 16x16 pixels
constexpr uint32_t kBlockSize = 64;

// Trip counts for LOOP_TRIPCOUNT pragmas (synthesis reports only): a typical 500x375 photo.
constexpr uint32_t kTypicalDim = 500;
constexpr uint32_t kTypicalPixels = 500 * 375;
constexpr uint32_t kTypicalBlocks = kTypicalPixels * 3 / 128;  // 4:2:0 averages 1.5 blocks per 64 px
constexpr uint32_t kTypicalSegmentBytes = 64;
constexpr uint32_t kMaxSegments = 1024;  // marker segments examined before the scan
constexpr uint32_t kTypicalOut = 224;

// One RGB pixel per stream beat; 32-bit aligned so the host model moves it as one word.
struct alignas(4) Pixel {
  uint8_t c[kChannels];
};

}  // namespace atoll_image
