// hls_compat.h: what the DPU kernels need from Vitis HLS headers, so the same sources compile
// with Vitis (synthesis / C simulation) and with plain g++ for the host C-simulation library.
#pragma once

#if defined(__SYNTHESIS__) || defined(ATOLL_USE_VITIS_HEADERS)
#include <ap_int.h>
#include <hls_stream.h>
#else
#include <cstddef>
#include <deque>

namespace hls {

// Unbounded FIFO with the hls::stream interface used by DATAFLOW stages. On the host, stages run
// one after another, so depth is not modelled; the kernels size their FIFOs with STREAM pragmas.
template <typename T>
class stream {
 public:
  stream() = default;
  explicit stream(const char*) {}
  stream(const stream&) = delete;
  stream& operator=(const stream&) = delete;

  void write(const T& v) { q_.push_back(v); }
  T read() {
    T v = q_.front();
    q_.pop_front();
    return v;
  }
  bool read_nb(T& v) {
    if (q_.empty()) return false;
    v = read();
    return true;
  }
  bool empty() const { return q_.empty(); }
  bool full() const { return false; }
  std::size_t size() const { return q_.size(); }
  stream& operator<<(const T& v) {
    write(v);
    return *this;
  }
  stream& operator>>(T& v) {
    v = read();
    return *this;
  }

 private:
  std::deque<T> q_;
};

}  // namespace hls
#endif
