// image_cu_fuzz: a bounded mutation fuzzer for image_cu, built with AddressSanitizer and
// UndefinedBehaviorSanitizer by test_image_fuzz.py.
//
//   image_cu_fuzz <iterations> <seconds> <rng seed> <crash file> <seed.jpg>...
//   image_cu_fuzz replay <input.jpg>...
//
// Each iteration mutates a seed file (bit flips, random bytes, inserted or deleted runs,
// truncation, header-field, frame-dimension and sampling-factor patches), copies it into a buffer
// of exactly its size (so any read past the end is reported by ASan), runs a random stage, and
// checks the status.
// The input under test is written to <crash file> first, so a crash or hang leaves it behind.
// An input that runs longer than kInputSeconds raises SIGALRM, which aborts. Exit 0 when every
// iteration ran cleanly; sanitizer reports abort the process (-fno-sanitize-recover).
// `replay` runs each input unmutated through every stage (resize 256, crop 224, float32) and
// prints `<input> <stage> <status words>` a line: the regression inputs' test.
#include <chrono>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <random>
#include <vector>

#include <unistd.h>

extern "C" {
void image_cu(const uint8_t* jpeg, uint32_t jpeg_len, uint8_t* scratch, uint32_t scratch_bytes,
              uint8_t* out, uint32_t out_bytes, uint32_t* status, uint32_t stage,
              uint32_t resize_short, uint32_t crop, uint32_t out_fp16, uint32_t max_dim);
uint64_t image_cu_scratch_bytes(uint32_t max_dim);
}

namespace {

constexpr uint32_t kMaxDim = 1024;  // keeps each sanitized run short
constexpr unsigned kInputSeconds = 10;
using Bytes = std::vector<uint8_t>;

void on_alarm(int) {
  static const char msg[] = "image_cu_fuzz: input timed out (hang)\n";
  (void)!write(2, msg, sizeof msg - 1);
  std::abort();
}

// Offset of the SOF0/SOF1 segment or 0.
size_t find_sof(const Bytes& d) {
  for (size_t i = 2; i + 9 < d.size(); ++i)
    if (d[i] == 0xFF && (d[i + 1] == 0xC0 || d[i + 1] == 0xC1)) return i;
  return 0;
}

// Offset of the SOS segment or the file size.
size_t find_sos(const Bytes& d) {
  for (size_t i = 2; i + 1 < d.size(); ++i)
    if (d[i] == 0xFF && d[i + 1] == 0xDA) return i;
  return d.size();
}

void mutate(Bytes& d, std::mt19937_64& rng) {
  auto pick = [&](size_t n) { return n ? static_cast<size_t>(rng() % n) : 0; };
  const uint16_t dims[] = {0, 1, 2, 7, 8, 9, 15, 16, 17, 255, 1023, 1024, 1025, 60000, 65535};
  switch (rng() % 8) {
    case 0:  // bit flips anywhere
      for (int i = 0, n = 1 + pick(8); i < n && !d.empty(); ++i) d[pick(d.size())] ^= 1u << pick(8);
      break;
    case 1:  // random bytes anywhere
      for (int i = 0, n = 1 + pick(8); i < n && !d.empty(); ++i) d[pick(d.size())] = rng();
      break;
    case 2: {  // insert a run of random bytes (sometimes 0xFF-rich, to fake markers)
      const size_t at = pick(d.size() + 1), n = 1 + pick(32);
      Bytes run(n);
      for (auto& b : run) b = rng() % 3 == 0 ? 0xFF : rng();
      d.insert(d.begin() + at, run.begin(), run.end());
      break;
    }
    case 3: {  // delete a run
      if (d.empty()) break;
      const size_t at = pick(d.size()), n = 1 + pick(std::min<size_t>(64, d.size() - at));
      d.erase(d.begin() + at, d.begin() + at + n);
      break;
    }
    case 4:  // truncate
      d.resize(pick(d.size() + 1));
      break;
    case 5: {  // header field mutation: bytes before the scan data
      const size_t end = find_sos(d) + 14;
      for (int i = 0, n = 1 + pick(4); i < n && !d.empty(); ++i) {
        const size_t at = pick(std::min(end, d.size()));
        d[at] = rng() % 4 == 0 ? 0xFF : (rng() % 2 ? d[at] + 1 - 2 * (rng() % 2) : rng());
      }
      break;
    }
    case 6: {  // frame dimension / sampling / component count patch
      const size_t sof = find_sof(d);
      if (!sof) break;
      const uint16_t v = dims[pick(sizeof dims / sizeof dims[0])];
      const size_t field = sof + 5 + 2 * pick(2);  // height or width
      d[field] = v >> 8;
      d[field + 1] = v & 0xFF;
      if (rng() % 4 == 0) {  // one component's sampling factors: the CU's 1 and 2, then 3, 4 and 0
        const uint8_t factors[] = {0x11, 0x12, 0x21, 0x22, 0x13, 0x31, 0x14, 0x41, 0x44, 0x10, 0x01};
        const size_t at = sof + 11 + 3 * pick(3);
        if (at < d.size()) d[at] = rng() % 4 ? factors[pick(sizeof factors)] : rng();
      }
      if (rng() % 8 == 0) d[sof + 9] = rng() % 5;
      break;
    }
    default: {  // duplicate a chunk (repeats segments, MCUs, restart markers)
      if (d.size() < 2) break;
      const size_t at = pick(d.size()), n = 1 + pick(std::min<size_t>(256, d.size() - at));
      Bytes chunk(d.begin() + at, d.begin() + at + n);
      d.insert(d.begin() + pick(d.size()), chunk.begin(), chunk.end());
      break;
    }
  }
}

Bytes read_file(const char* path) {
  std::ifstream in(path, std::ios::binary);
  return Bytes(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

// The CU's buffers: a frame store for kMaxDim, and an output buffer of exactly kOutBytes (whole
// beats) that holds any stage output that is not TOO_LARGE.
constexpr uint32_t kMaxShort = 8 + 299;  // largest resize_short drawn below
constexpr uint32_t kOutBytes = 3 * 8192 * kMaxShort;

struct CuBuffers {
  std::vector<uint8_t> scratch = std::vector<uint8_t>(image_cu_scratch_bytes(kMaxDim));
  uint8_t* out = static_cast<uint8_t*>(std::malloc(kOutBytes));  // malloc: ASan bounds it exactly
  ~CuBuffers() { std::free(out); }
};

// Runs image_cu on d within the per-input alarm, from a heap copy of whole 64-byte beats (what the
// CU's 512-bit port reads, hls/ABI_DPU.md), so ASan flags any access past them.
void run_cu(const Bytes& d, CuBuffers& b, uint32_t stage, uint32_t r, uint32_t crop, uint32_t out_fp16,
            uint32_t status[8]) {
  const size_t beats = (d.size() + 63) / 64;
  uint8_t* jpeg = static_cast<uint8_t*>(std::calloc(beats ? beats : 1, 64));
  if (!d.empty()) std::memcpy(jpeg, d.data(), d.size());
  alarm(kInputSeconds);
  image_cu(jpeg, static_cast<uint32_t>(d.size()), b.scratch.data(), static_cast<uint32_t>(b.scratch.size()), b.out,
           kOutBytes, status, stage, r, crop, out_fp16, kMaxDim);
  alarm(0);
  std::free(jpeg);
}

int replay(int n, char** paths) {
  CuBuffers b;
  for (int i = 0; i < n; ++i) {
    const Bytes d = read_file(paths[i]);
    for (uint32_t stage = 0; stage < 4; ++stage) {
      uint32_t status[8];
      run_cu(d, b, stage, 256, 224, 0, status);
      std::printf("%s %u", paths[i], stage);
      for (uint32_t w : status) std::printf(" %u", w);
      std::printf("\n");
    }
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  std::signal(SIGALRM, on_alarm);
  if (argc >= 2 && std::strcmp(argv[1], "replay") == 0) return replay(argc - 2, argv + 2);
  if (argc < 6) {
    std::fprintf(stderr, "usage: %s iterations seconds rng_seed crash_file seed.jpg...\n       %s replay input.jpg...\n",
                 argv[0], argv[0]);
    return 2;
  }
  const long iterations = std::atol(argv[1]);
  const double seconds = std::atof(argv[2]);
  std::mt19937_64 rng(std::strtoull(argv[3], nullptr, 10));
  const char* crash_file = argv[4];
  std::vector<Bytes> seeds;
  for (int i = 5; i < argc; ++i) seeds.push_back(read_file(argv[i]));
  CuBuffers buffers;
  long counts[8] = {0};
  const auto start = std::chrono::steady_clock::now();
  long it = 0;
  for (; it < iterations; ++it) {
    const std::chrono::duration<double> elapsed = std::chrono::steady_clock::now() - start;
    if (elapsed.count() > seconds) break;
    Bytes d = seeds[rng() % seeds.size()];
    for (int m = 0, n = 1 + rng() % 4; m < n; ++m) mutate(d, rng);
    {
      std::ofstream(crash_file, std::ios::binary).write(reinterpret_cast<const char*>(d.data()),
                                                         static_cast<std::streamsize>(d.size()));
    }
    const uint32_t stage = rng() % 4;
    const uint32_t out_fp16 = rng() % 2;
    const uint32_t r = 8 + rng() % (kMaxShort - 7);
    const uint32_t crop = 1 + rng() % r;
    uint32_t status[8];
    run_cu(d, buffers, stage, r, crop, out_fp16, status);
    if (status[0] > 3) {  // OK, UNSUPPORTED, CORRUPT, TOO_LARGE are the only answers to media
      std::fprintf(stderr, "image_cu_fuzz: status %u outside {0,1,2,3}\n", status[0]);
      return 1;
    }
    if (status[0] == 0 && status[7] > kOutBytes) {
      std::fprintf(stderr, "image_cu_fuzz: bytes_written %u > capacity\n", status[7]);
      return 1;
    }
    ++counts[status[0]];
  }
  std::printf("iterations %ld ok %ld unsupported %ld corrupt %ld too_large %ld\n", it, counts[0],
              counts[1], counts[2], counts[3]);
  std::remove(crash_file);
  return 0;
}
