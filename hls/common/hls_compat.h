// hls_compat.h: what the DPU kernels need from Vitis HLS headers, so the same sources compile
// with Vitis (synthesis / C simulation) and with plain g++ for the host C-simulation library.
#pragma once

#if defined(__SYNTHESIS__) || defined(ATOLL_USE_VITIS_HEADERS)
#include <ap_int.h>
#include <hls_stream.h>
#include <hls_vector.h>
#else
#include <cstddef>
#include <vector>

namespace hls {

// Unbounded FIFO with the hls::stream interface used by DATAFLOW stages. On the host, stages run
// one after another, so depth is not modelled; the kernels size their FIFOs with STREAM pragmas.
// A vector with a read cursor (reset whenever the FIFO drains) is several times faster than a
// deque for the per-pixel traffic of the image CU.
template <typename T>
class stream {
 public:
  stream() = default;
  explicit stream(const char*) {}
  stream(const stream&) = delete;
  stream& operator=(const stream&) = delete;

  void write(const T& v) { q_.push_back(v); }
  T read() {
    T v = q_[head_++];
    if (head_ == q_.size()) {  // drained: start over, giving back frame-sized storage
      if (q_.capacity() > kKeepCapacity) {
        std::vector<T>().swap(q_);
      } else {
        q_.clear();
      }
      head_ = 0;
    }
    return v;
  }
  bool read_nb(T& v) {
    if (empty()) return false;
    v = read();
    return true;
  }
  bool empty() const { return head_ == q_.size(); }
  bool full() const { return false; }
  std::size_t size() const { return q_.size() - head_; }
  stream& operator<<(const T& v) {
    write(v);
    return *this;
  }
  stream& operator>>(T& v) {
    v = read();
    return *this;
  }

 private:
  static constexpr std::size_t kKeepCapacity = 1 << 16;
  std::vector<T> q_;
  std::size_t head_ = 0;
};

// Fixed-size lanes with hls::vector's element access (Vitis aligns it to its size on the device;
// on the host it has the element's alignment, so any buffer address may hold one).
template <typename T, std::size_t N>
struct vector {
  T data_[N];
  T& operator[](std::size_t i) { return data_[i]; }
  const T& operator[](std::size_t i) const { return data_[i]; }
};

}  // namespace hls
#endif

#include <cstdint>

// On the FPGA a function-scope static array is the CU's own on-chip RAM. In the host C-simulation
// library several emulated CUs run the same code on different threads, so each gets its own copy.
#if defined(__SYNTHESIS__)
#define ATOLL_CU_RAM static
#else
#define ATOLL_CU_RAM static thread_local
#endif

// One beat of a 512-bit m_axi port (the width of the U55C's HBM ports): what streamed data moves
// in. Buffers on such ports hold whole beats (hls/ABI_DPU.md).
constexpr unsigned kBeatBytes = 64;
typedef hls::vector<uint8_t, kBeatBytes> Beat;
