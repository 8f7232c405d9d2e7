// cuda_emu.h: enough of CUDA C++ for a kernel source written for NVRTC to compile unchanged with
// g++ and run on the CPU. The Python driver (__init__.py) includes it before the kernel source and
// appends ATOLL_EMU_EXPORT(kernel, ...), which exports the launcher and the parameter signature.
//
// Execution model. A launch runs its blocks one after another (x fastest, then y, then z) on the
// calling OS thread. The threads of a block are fibers (each on its own stack, switched by a few
// instructions on x86-64 and by ucontext elsewhere), resumed in a fixed order (linear thread index)
// and each running until it reaches a barrier or returns, so a run is deterministic.
//   - __syncthreads() completes when every thread of the block that has not exited waits there
//     (exited threads leave every barrier, as on the GPU).
//   - Warp collectives (__shfl*_sync, __ballot_sync, __any_sync, __all_sync, __syncwarp) complete
//     when every non-exited lane named in the mask waits at the same collective with the same mask;
//     the values are then exchanged with the PTX shfl.sync lane rules.
//   - When no thread can run and no barrier can complete, the launch fails with a description of
//     where each thread waits (deadlock). So do misuse errors: a mask without the calling lane, a
//     lane reading from one that exited or is not in the mask, lanes of one mask at different
//     collectives. A thread spinning without a barrier cannot be detected and hangs the launch.
// Shared memory: __shared__ is thread_local, which at block scope is also static: one instance per
// OS thread, used by one block at a time. `extern __shared__` arrays are aliased by the driver to
// one dynamic buffer, filled with 0xff bytes (NaN floats) at the start of every block.
// Floating point is the host's IEEE arithmetic (the driver compiles without fast-math and without
// contraction); math functions come from libm, so they may differ from CUDA's by an ulp or two.
// ATOLL_EMULATOR is defined, for the rare code that must differ (inline PTX cannot run here).
#pragma once

#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <ucontext.h>

#include <type_traits>
#include <utility>

#define ATOLL_EMULATOR 1

// ---- declaration specifiers (__restrict__ is native to g++) ----
#define __global__
#define __device__
#define __host__
#define __constant__
#define __forceinline__ inline
#define __noinline__ __attribute__((noinline))
#define __launch_bounds__(...)
#define __align__(n) __attribute__((aligned(n)))
#define __shared__ thread_local

// ---- vector types ----
#define ATOLL_EMU_VEC2(T, V, A) \
  struct alignas(A) V { T x, y; }; \
  inline V make_##V(T x, T y) { return V{x, y}; }
#define ATOLL_EMU_VEC3(T, V) \
  struct V { T x, y, z; }; \
  inline V make_##V(T x, T y, T z) { return V{x, y, z}; }
#define ATOLL_EMU_VEC4(T, V, A) \
  struct alignas(A) V { T x, y, z, w; }; \
  inline V make_##V(T x, T y, T z, T w) { return V{x, y, z, w}; }
ATOLL_EMU_VEC2(float, float2, 8) ATOLL_EMU_VEC3(float, float3)
ATOLL_EMU_VEC4(float, float4, 16)
ATOLL_EMU_VEC2(int, int2, 8) ATOLL_EMU_VEC3(int, int3) ATOLL_EMU_VEC4(int, int4, 16)
ATOLL_EMU_VEC2(unsigned, uint2, 8) ATOLL_EMU_VEC3(unsigned, uint3)
ATOLL_EMU_VEC4(unsigned, uint4, 16)

struct dim3 {
  unsigned x, y, z;
  constexpr dim3(unsigned x = 1, unsigned y = 1, unsigned z = 1) : x(x), y(y), z(z) {}
  constexpr dim3(uint3 v) : x(v.x), y(v.y), z(v.z) {}
  constexpr operator uint3() const { return uint3{x, y, z}; }
};

// The running fiber's indices: set by the scheduler before it resumes a thread.
inline uint3 threadIdx, blockIdx;
inline dim3 blockDim, gridDim;
constexpr int warpSize = 32;

// ---- binary16 ----
namespace atoll_emu {

// Round to nearest even (the FPU's default mode, used by nearbyint); exact for float and double.
inline unsigned short half_bits(double v) {
  if (isnan(v)) return 0x7fff;  // the canonical NaN of cvt.rn.f16
  const unsigned short sign = signbit(v) ? 0x8000 : 0;
  const double a = fabs(v);
  if (a >= 65520.0) return sign | 0x7c00;  // 65520 is halfway from 65504 to 2^16: even is inf
  if (a < 0x1p-14) return sign | (unsigned short)nearbyint(a * 0x1p24);  // subnormals, step 2^-24
  int e;
  frexp(a, &e);  // a in [2^(e-1), 2^e): biased exponent e + 14, step 2^(e-11)
  const int steps = (int)nearbyint(ldexp(a, 11 - e));  // 1024..2048; 2048 carries into the exponent
  return sign | (unsigned short)(((e + 14) << 10) + steps - 1024);
}

inline float half_value(unsigned short h) {
  const int e = (h >> 10) & 0x1f, m = h & 0x3ff;
  const float v = e == 0 ? ldexpf((float)m, -24)
                : e == 31 ? (m ? NAN : INFINITY)
                : ldexpf((float)(m | 0x400), e - 25);
  return (h & 0x8000) ? -v : v;
}

}  // namespace atoll_emu

// Conversions are implicit both ways, as in cuda_fp16.h (so `h + 1.f` is ambiguous there too).
// Arithmetic rounds the float result once more: for + - * / of two halves that equals one correct
// rounding, because float has more than 2 * 11 + 2 significand bits.
struct __half {
  unsigned short __x;
  __half() = default;
  template <class T, class = std::enable_if_t<std::is_arithmetic_v<T>>>
  __half(T v) : __x(atoll_emu::half_bits((double)v)) {}
  operator float() const { return atoll_emu::half_value(__x); }
};
#define ATOLL_EMU_HALF_OP(op) \
  inline __half operator op(__half a, __half b) { return __half(float(a) op float(b)); } \
  inline __half& operator op##=(__half& a, __half b) { return a = a op b; }
ATOLL_EMU_HALF_OP(+) ATOLL_EMU_HALF_OP(-) ATOLL_EMU_HALF_OP(*) ATOLL_EMU_HALF_OP(/)
inline __half operator+(__half a) { return a; }
inline __half __ushort_as_half(unsigned short x) { __half h; h.__x = x; return h; }
inline unsigned short __half_as_ushort(__half h) { return h.__x; }
inline __half operator-(__half a) { return __ushort_as_half(a.__x ^ 0x8000); }
inline __half __float2half(float f) { return __half(f); }
inline __half __float2half_rn(float f) { return __half(f); }
inline float __half2float(__half h) { return float(h); }
inline __half __hadd(__half a, __half b) { return a + b; }
inline __half __hsub(__half a, __half b) { return a - b; }
inline __half __hmul(__half a, __half b) { return a * b; }
inline __half __hdiv(__half a, __half b) { return a / b; }
inline __half __hneg(__half a) { return -a; }
// The product of two halves is exact in double, and double is wide enough for one rounding.
inline __half __hfma(__half a, __half b, __half c) {
  return __half(fma((double)float(a), (double)float(b), (double)float(c)));
}

struct alignas(4) __half2 { __half x, y; };
typedef __half half;
typedef __half2 half2;
inline __half2 make_half2(__half x, __half y) { return __half2{x, y}; }
inline __half2 __floats2half2_rn(float a, float b) { return __half2{__half(a), __half(b)}; }
inline __half2 __float2half2_rn(float a) { return __half2{__half(a), __half(a)}; }
inline float2 __half22float2(__half2 h) { return float2{float(h.x), float(h.y)}; }
inline float __low2float(__half2 h) { return float(h.x); }
inline float __high2float(__half2 h) { return float(h.y); }
inline __half2 __hadd2(__half2 a, __half2 b) { return __half2{a.x + b.x, a.y + b.y}; }
inline __half2 __hmul2(__half2 a, __half2 b) { return __half2{a.x * b.x, a.y * b.y}; }

// ---- math and bit functions beyond libm (glibc declares the __-names noexcept) ----
inline float rsqrtf(float x) { return 1.f / sqrtf(x); }
inline float __expf(float x) noexcept { return expf(x); }
inline float __logf(float x) noexcept { return logf(x); }
inline float __log2f(float x) noexcept { return log2f(x); }
inline float __sinf(float x) noexcept { return sinf(x); }
inline float __cosf(float x) noexcept { return cosf(x); }
inline float __tanf(float x) noexcept { return tanf(x); }
inline float __powf(float x, float y) noexcept { return powf(x, y); }
inline float __fdividef(float a, float b) { return a / b; }
inline float __frcp_rn(float x) { return 1.f / x; }
inline float __fsqrt_rn(float x) { return sqrtf(x); }
inline float __fadd_rn(float a, float b) { return a + b; }
inline float __fmul_rn(float a, float b) { return a * b; }
inline float __fmaf_rn(float a, float b, float c) { return fmaf(a, b, c); }
inline float __saturatef(float x) { return x > 0.f ? (x < 1.f ? x : 1.f) : 0.f; }  // NaN -> 0
inline int min(int a, int b) { return a < b ? a : b; }
inline int max(int a, int b) { return a > b ? a : b; }
inline unsigned min(unsigned a, unsigned b) { return a < b ? a : b; }
inline unsigned max(unsigned a, unsigned b) { return a > b ? a : b; }
inline long long min(long long a, long long b) { return a < b ? a : b; }
inline long long max(long long a, long long b) { return a > b ? a : b; }
inline float min(float a, float b) { return fminf(a, b); }
inline float max(float a, float b) { return fmaxf(a, b); }
inline int __float_as_int(float f) { int i; memcpy(&i, &f, 4); return i; }
inline unsigned __float_as_uint(float f) { unsigned u; memcpy(&u, &f, 4); return u; }
inline float __int_as_float(int i) { float f; memcpy(&f, &i, 4); return f; }
inline float __uint_as_float(unsigned u) { float f; memcpy(&f, &u, 4); return f; }
inline int __popc(unsigned x) { return __builtin_popcount(x); }
inline int __popcll(unsigned long long x) { return __builtin_popcountll(x); }
inline int __clz(int x) { return x ? __builtin_clz((unsigned)x) : 32; }
inline int __ffs(int x) { return __builtin_ffs(x); }
template <class T> T __ldg(const T* p) { return *p; }

// ---- memory ordering and atomics ----
// Fibers switch only inside barriers and a launch holds its library's lock, so a plain
// read-modify-write is atomic and a fence only has to stop the compiler.
inline void __threadfence_block() { __atomic_signal_fence(__ATOMIC_SEQ_CST); }
inline void __threadfence() { __atomic_signal_fence(__ATOMIC_SEQ_CST); }
inline void __threadfence_system() { __atomic_signal_fence(__ATOMIC_SEQ_CST); }
namespace atoll_emu {
template <class T> struct same { using type = T; };  // keeps an operand out of deduction
}
#define ATOLL_EMU_ATOMIC(name, update) \
  template <class T> T name(T* p, typename atoll_emu::same<T>::type v) { \
    const T old = *p; *p = (update); return old; }
ATOLL_EMU_ATOMIC(atomicAdd, old + v)
ATOLL_EMU_ATOMIC(atomicSub, old - v)
ATOLL_EMU_ATOMIC(atomicExch, v)
ATOLL_EMU_ATOMIC(atomicMax, v > old ? v : old)
ATOLL_EMU_ATOMIC(atomicMin, v < old ? v : old)
template <class T>
T atomicCAS(T* p, typename atoll_emu::same<T>::type compare, typename atoll_emu::same<T>::type v) {
  const T old = *p;
  if (old == compare) *p = v;
  return old;
}

// ---- fiber context switch ----
namespace atoll_emu {

#if defined(__x86_64__) && !defined(ATOLL_EMU_UCONTEXT)
// Pushes the callee-saved registers on the old stack and loads the new stack pointer. Unlike
// swapcontext it makes no signal-mask system call and leaves the FP control state alone (kernels
// never change it), which makes a switch about 30 times cheaper.
extern "C" void atoll_emu_switch(void** save_sp, void* load_sp);
asm(R"(
  .text
  .p2align 4
  .type atoll_emu_switch, @function
atoll_emu_switch:
  pushq %rbp
  pushq %rbx
  pushq %r12
  pushq %r13
  pushq %r14
  pushq %r15
  movq %rsp, (%rdi)
  movq %rsi, %rsp
  popq %r15
  popq %r14
  popq %r13
  popq %r12
  popq %rbx
  popq %rbp
  ret
  .size atoll_emu_switch, .-atoll_emu_switch
)");
struct Context { void* sp; };
inline void switch_context(Context& from, const Context& to) { atoll_emu_switch(&from.sp, to.sp); }
// A stack that atoll_emu_switch "returns" into `entry`, as if `entry` had just been called.
inline void start_context(Context& c, char* stack, size_t size, void (*entry)()) {
  void** top = (void**)((uintptr_t)(stack + size) & ~(uintptr_t)15);
  *--top = nullptr;  // entry's return address: it never returns
  *--top = (void*)entry;
  for (int i = 0; i < 6; ++i) *--top = nullptr;  // the six registers the switch pops
  c.sp = top;
}
#else
// Portable: ucontext (one system call per switch); ATOLL_EMU_UCONTEXT selects it on x86-64 too.
struct Context { ucontext_t uc; };
inline void switch_context(Context& from, const Context& to) { swapcontext(&from.uc, &to.uc); }
inline void start_context(Context& c, char* stack, size_t size, void (*entry)()) {
  getcontext(&c.uc);
  c.uc.uc_stack.ss_sp = stack;
  c.uc.uc_stack.ss_size = size;
  c.uc.uc_link = nullptr;
  makecontext(&c.uc, entry, 0);
}
#endif

// ---- the block scheduler ----

constexpr unsigned kMaxThreads = 1024;
constexpr size_t kStackBytes = 128 << 10;  // per thread, above a guard page
constexpr size_t kGuardBytes = 4096;
constexpr size_t kMaxDynamicShared = 227 << 10;  // an H100 block's opt-in limit

enum class State : unsigned char { Ready, AtSyncthreads, AtWarp, Exited };
enum class Op : unsigned char { Syncwarp, ShflIdx, ShflUp, ShflDown, ShflXor, Ballot, Any, All };
constexpr const char* kOpNames[] = {"__syncwarp", "__shfl_sync", "__shfl_up_sync",
                                    "__shfl_down_sync", "__shfl_xor_sync", "__ballot_sync",
                                    "__any_sync", "__all_sync"};

struct Fiber {
  Context context;
  char* stack;  // null until first used
  uint3 tid;
  State state;
  Op op;         // at a warp collective: which, with what mask and operands
  unsigned mask;
  int b, segmask, clamp;  // shfl.sync's b, c[12:8] and c[4:0]
  uint64_t value, result;
};

// One launch at a time per library (the lock); zero-initialised.
struct Runtime {
  Fiber* fibers;  // kMaxThreads slots; their stacks live for one launch (release_fibers)
  unsigned count, live;
  Fiber* current;
  Context scheduler;
  void (*body)(void*);
  void* call;
  bool failed;
  char* error;
  size_t error_size;
};
inline Runtime rt;
inline pthread_mutex_t launch_lock = PTHREAD_MUTEX_INITIALIZER;

inline void vreport(const char* fmt, va_list ap) {
  if (rt.failed) return;  // the first error explains the launch
  rt.failed = true;
  int n = snprintf(rt.error, rt.error_size, "block (%u,%u,%u): ", blockIdx.x, blockIdx.y,
                   blockIdx.z);
  if (n >= 0 && (size_t)n < rt.error_size) vsnprintf(rt.error + n, rt.error_size - n, fmt, ap);
}
__attribute__((format(printf, 1, 2))) inline void report(const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vreport(fmt, ap);
  va_end(ap);
}
__attribute__((format(printf, 1, 2))) inline void append(const char* fmt, ...) {
  const size_t used = strlen(rt.error);
  va_list ap;
  va_start(ap, fmt);
  if (used + 1 < rt.error_size) vsnprintf(rt.error + used, rt.error_size - used, fmt, ap);
  va_end(ap);
}

inline unsigned linear(const Fiber& f) {
  return f.tid.x + blockDim.x * (f.tid.y + blockDim.y * f.tid.z);
}

// Back to the scheduler; returns when the scheduler resumes this fiber.
inline void yield() { switch_context(rt.current->context, rt.scheduler); }

// Misuse seen by a running thread: the launch stops here (the scheduler never resumes it).
__attribute__((format(printf, 1, 2), noreturn)) inline void fail(const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vreport(fmt, ap);
  va_end(ap);
  yield();
  __builtin_unreachable();
}

inline void fiber_main() {
  rt.body(rt.call);
  rt.current->state = State::Exited;
  --rt.live;
  yield();
}

inline uint64_t warp_collective(Op op, unsigned mask, uint64_t value, int b, int width) {
  Fiber& f = *rt.current;
  const unsigned lane = linear(f) % 32;
  if (!(mask >> lane & 1))
    fail("thread %u: %s mask 0x%08x does not name the calling lane %u", linear(f),
         kOpNames[(int)op], mask, lane);
  if (width < 1 || width > 32 || (width & (width - 1)))
    fail("thread %u: %s width %d is not a power of two in 1..32", linear(f), kOpNames[(int)op],
         width);
  f.state = State::AtWarp;
  f.op = op;
  f.mask = mask;
  f.value = value;
  f.b = b & 31;
  f.segmask = (32 - width) & 31;
  f.clamp = op == Op::ShflUp ? 0 : 31;
  yield();
  return f.result;
}

// The lane whose value `lane` receives (PTX shfl.sync: out-of-segment sources give its own).
inline int source_lane(const Fiber& f, int lane) {
  const int max_lane = (lane & f.segmask) | (f.clamp & ~f.segmask);
  int j = lane;
  bool in_range = false;
  switch (f.op) {
    case Op::ShflUp: j = lane - f.b; in_range = j >= max_lane; break;
    case Op::ShflDown: j = lane + f.b; in_range = j <= max_lane; break;
    case Op::ShflXor: j = lane ^ f.b; in_range = j <= max_lane; break;
    case Op::ShflIdx: j = (lane & f.segmask) | (f.b & ~f.segmask); in_range = j <= max_lane; break;
    default: break;
  }
  return in_range ? j : lane;
}

// Completes one warp's collectives whose non-exited lanes have all arrived; false on misuse.
inline bool release_warp(Fiber* w, unsigned lanes, bool& released) {
  unsigned live = 0;
  for (unsigned l = 0; l < lanes; ++l) live |= (unsigned)(w[l].state != State::Exited) << l;
  unsigned done = 0;
  for (unsigned l = 0; l < lanes; ++l) {
    const Fiber& first = w[l];
    if (first.state != State::AtWarp || (done >> l & 1)) continue;
    const unsigned group = first.mask & live;
    bool complete = true;
    for (unsigned k = 0; k < lanes; ++k) {
      if (!(group >> k & 1)) continue;
      if (w[k].state != State::AtWarp) { complete = false; continue; }
      if (w[k].op != first.op || w[k].mask != first.mask) {
        report("threads %u and %u of one warp meet at different collectives: %s mask 0x%08x and "
               "%s mask 0x%08x", linear(first), linear(w[k]), kOpNames[(int)first.op],
               first.mask, kOpNames[(int)w[k].op], w[k].mask);
        return false;
      }
    }
    if (!complete) continue;
    unsigned votes = 0;
    for (unsigned k = 0; k < lanes; ++k) votes |= (unsigned)(group >> k & 1 && w[k].value) << k;
    for (unsigned k = 0; k < lanes; ++k) {
      if (!(group >> k & 1)) continue;
      Fiber& f = w[k];
      switch (f.op) {
        case Op::Syncwarp: break;
        case Op::Ballot: f.result = votes; break;
        case Op::Any: f.result = votes != 0; break;
        case Op::All: f.result = votes == group; break;
        default: {
          const int j = source_lane(f, (int)k);
          if (!(group >> j & 1)) {
            const bool gone = (unsigned)j >= lanes || w[j].state == State::Exited;
            report("thread %u: %s (mask 0x%08x) reads lane %d, which %s", linear(f),
                   kOpNames[(int)f.op], f.mask, j,
                   gone ? "has exited or does not exist" : "is not in the mask");
            return false;
          }
          f.result = w[j].value;
        }
      }
      f.state = State::Ready;
    }
    done |= group;
    released = true;
  }
  return true;
}

inline void describe(const Fiber& f, char* buf, size_t n) {
  if (f.state == State::AtSyncthreads) snprintf(buf, n, "__syncthreads");
  else snprintf(buf, n, "%s mask 0x%08x", kOpNames[(int)f.op], f.mask);
}

// Lists every waiting thread by where it waits, as ranges of linear thread indices.
inline void report_deadlock() {
  report("deadlock: no thread can run and no barrier can complete. Waiting:");
  bool listed[kMaxThreads] = {};
  char key[64], other[64];
  for (unsigned i = 0; i < rt.count; ++i) {
    if (listed[i] || rt.fibers[i].state == State::Exited) continue;
    describe(rt.fibers[i], key, sizeof key);
    append(" at %s: threads", key);
    unsigned run_start = 0;
    bool in_run = false;
    for (unsigned k = i; k <= rt.count; ++k) {
      bool same = k < rt.count && rt.fibers[k].state != State::Exited && !listed[k];
      if (same) {
        describe(rt.fibers[k], other, sizeof other);
        same = !strcmp(other, key);
      }
      if (same) {
        listed[k] = true;
        if (!in_run) run_start = k;
        in_run = true;
      } else if (in_run) {
        if (run_start + 1 == k) append(" %u", run_start);
        else append(" %u-%u", run_start, k - 1);
        in_run = false;
      }
    }
    append(";");
  }
}

// Runs every thread of the current block to its end; false when the launch must stop.
inline bool run_block() {
  for (unsigned i = 0; i < rt.count; ++i) {
    Fiber& f = rt.fibers[i];
    f.tid = uint3{i % blockDim.x, i / blockDim.x % blockDim.y, i / (blockDim.x * blockDim.y)};
    f.state = State::Ready;
    start_context(f.context, f.stack + kGuardBytes, kStackBytes, fiber_main);
  }
  rt.live = rt.count;
  for (;;) {
    for (unsigned i = 0; i < rt.count; ++i) {
      Fiber& f = rt.fibers[i];
      if (f.state != State::Ready) continue;
      rt.current = &f;
      threadIdx = f.tid;
      switch_context(rt.scheduler, f.context);
      if (rt.failed) return false;
    }
    if (rt.live == 0) return true;
    bool released = false;
    for (unsigned base = 0; base < rt.count; base += 32)
      if (!release_warp(rt.fibers + base, rt.count - base < 32 ? rt.count - base : 32, released))
        return false;
    if (released) continue;
    bool all_at_barrier = true;
    for (unsigned i = 0; i < rt.count; ++i)
      all_at_barrier &= rt.fibers[i].state == State::Exited ||
                        rt.fibers[i].state == State::AtSyncthreads;
    if (!all_at_barrier) {
      report_deadlock();
      return false;
    }
    for (unsigned i = 0; i < rt.count; ++i)
      if (rt.fibers[i].state == State::AtSyncthreads) rt.fibers[i].state = State::Ready;
  }
}

inline bool allocate_fibers(unsigned count) {
  if (!rt.fibers) rt.fibers = static_cast<Fiber*>(calloc(kMaxThreads, sizeof(Fiber)));
  if (!rt.fibers) return false;
  for (unsigned i = 0; i < count; ++i) {
    Fiber& f = rt.fibers[i];
    if (f.stack) continue;
    void* p = mmap(nullptr, kGuardBytes + kStackBytes, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED) return false;
    mprotect(p, kGuardBytes, PROT_NONE);  // an overflowing stack faults instead of corrupting
    f.stack = (char*)p;
  }
  return true;
}

// Every kernel library holds its own runtime, so stacks kept between launches add up: two mappings
// (guard and stack) per thread per library, and a process with a few dozen kernels loaded passed
// the kernel's limit of mappings (vm.max_map_count, 65530), where any mmap fails, its own included.
inline void release_fibers() {
  for (unsigned i = 0; i < kMaxThreads && rt.fibers && rt.fibers[i].stack; ++i) {
    munmap(rt.fibers[i].stack, kGuardBytes + kStackBytes);
    rt.fibers[i].stack = nullptr;
  }
}

// Launch status: 0 done, 1 invalid configuration (nothing ran), 2 the kernel failed.
enum Status { kOk = 0, kBadLaunch = 1, kKernelError = 2 };

inline int check_config(const unsigned* g, const unsigned* b, unsigned long long shared,
                        char* error, size_t error_size) {
  const char* what = nullptr;
  if (!b[0] || !b[1] || !b[2] || b[0] > 1024 || b[1] > 1024 || b[2] > 64)
    what = "block dimensions must be 1..1024, 1..1024, 1..64";
  else if ((unsigned long long)b[0] * b[1] * b[2] > kMaxThreads)
    what = "a block has at most 1024 threads";
  else if (!g[0] || !g[1] || !g[2] || g[0] > 0x7fffffffu || g[1] > 65535 || g[2] > 65535)
    what = "grid dimensions must be 1..2^31-1, 1..65535, 1..65535";
  else if (shared > kMaxDynamicShared)
    what = "dynamic shared memory is at most 227 KiB per block";
  if (!what) return kOk;
  snprintf(error, error_size, "grid (%u,%u,%u) block (%u,%u,%u) shared %llu: %s", g[0], g[1], g[2],
           b[0], b[1], b[2], shared, what);
  return kBadLaunch;
}

template <class... P, size_t... I>
void invoke(void (*kernel)(P...), void** args, std::index_sequence<I...>) {
  kernel(*static_cast<std::remove_cv_t<P>*>(args[I])...);
}

// args[i] points to the i-th argument's value (as in cuLaunchKernel's kernelParams).
template <class... P>
int launch(void (*kernel)(P...), const unsigned* grid, const unsigned* block,
           unsigned long long shared, void** args, unsigned char* dynamic_shared, char* error,
           size_t error_size) {
  error[0] = 0;
  if (int status = check_config(grid, block, shared, error, error_size)) return status;
  struct Call { void (*kernel)(P...); void** args; } call{kernel, args};
  const unsigned threads = block[0] * block[1] * block[2];
  pthread_mutex_lock(&launch_lock);
  if (!allocate_fibers(threads)) {
    release_fibers();
    pthread_mutex_unlock(&launch_lock);
    snprintf(error, error_size, "out of memory for %u fiber stacks", threads);
    return kBadLaunch;
  }
  int status = kOk;
  rt.count = threads;
  rt.body = [](void* c) {
    const Call& k = *static_cast<const Call*>(c);
    invoke(k.kernel, k.args, std::index_sequence_for<P...>{});
  };
  rt.call = &call;
  rt.failed = false;
  rt.error = error;
  rt.error_size = error_size;
  blockDim = dim3(block[0], block[1], block[2]);
  gridDim = dim3(grid[0], grid[1], grid[2]);
  for (unsigned z = 0; z < grid[2] && status == kOk; ++z)
    for (unsigned y = 0; y < grid[1] && status == kOk; ++y)
      for (unsigned x = 0; x < grid[0] && status == kOk; ++x) {
        blockIdx = uint3{x, y, z};
        if (dynamic_shared) memset(dynamic_shared, 0xff, shared);
        if (!run_block()) status = kKernelError;
      }
  release_fibers();
  pthread_mutex_unlock(&launch_lock);
  return status;
}

// ---- the kernel's signature, for the driver: numpy dtype names, "*" for pointers ----
template <class T> struct scalar { static constexpr const char* name = "?"; };
#define ATOLL_EMU_SCALAR(T, N) \
  template <> struct scalar<T> { static constexpr const char* name = N; };
ATOLL_EMU_SCALAR(bool, "bool") ATOLL_EMU_SCALAR(signed char, "int8")
ATOLL_EMU_SCALAR(unsigned char, "uint8")
ATOLL_EMU_SCALAR(char, std::is_signed_v<char> ? "int8" : "uint8")
ATOLL_EMU_SCALAR(short, "int16") ATOLL_EMU_SCALAR(unsigned short, "uint16")
ATOLL_EMU_SCALAR(int, "int32") ATOLL_EMU_SCALAR(unsigned, "uint32")
ATOLL_EMU_SCALAR(long, "int64") ATOLL_EMU_SCALAR(unsigned long, "uint64")
ATOLL_EMU_SCALAR(long long, "int64") ATOLL_EMU_SCALAR(unsigned long long, "uint64")
ATOLL_EMU_SCALAR(__half, "float16") ATOLL_EMU_SCALAR(float, "float32")
ATOLL_EMU_SCALAR(double, "float64") ATOLL_EMU_SCALAR(void, "void")
// A pointer to a vector type is passed as an array of its components.
template <class T> struct component { using type = T; };
template <> struct component<float2> { using type = float; };
template <> struct component<float3> { using type = float; };
template <> struct component<float4> { using type = float; };
template <> struct component<int2> { using type = int; };
template <> struct component<int3> { using type = int; };
template <> struct component<int4> { using type = int; };
template <> struct component<uint2> { using type = unsigned; };
template <> struct component<uint3> { using type = unsigned; };
template <> struct component<uint4> { using type = unsigned; };
template <> struct component<__half2> { using type = __half; };

template <class P> void describe_param(char* out) {
  if constexpr (std::is_pointer_v<P>) {
    using T = std::remove_pointer_t<P>;
    if (std::is_const_v<T>) strcat(out, "const ");
    strcat(out, scalar<typename component<std::remove_cv_t<T>>::type>::name);
    strcat(out, "*,");
  } else {
    strcat(out, scalar<P>::name);
    strcat(out, ",");
  }
}

template <class... P> const char* signature(void (*)(P...)) {
  static char text[48 * sizeof...(P) + 1];
  if (!text[0]) (describe_param<P>(text), ...);
  return text;
}

}  // namespace atoll_emu

// ---- device-side API over the scheduler ----
inline void __syncthreads() {
  atoll_emu::rt.current->state = atoll_emu::State::AtSyncthreads;
  atoll_emu::yield();
}
inline void __syncwarp(unsigned mask = 0xffffffffu) {
  atoll_emu::warp_collective(atoll_emu::Op::Syncwarp, mask, 0, 0, 32);
}
template <class T> T atoll_emu_shuffle(atoll_emu::Op op, unsigned mask, T var, int b, int width) {
  static_assert(std::is_trivially_copyable_v<T> && sizeof(T) <= 8, "shuffle values of <= 8 bytes");
  uint64_t bits = 0;
  memcpy(&bits, &var, sizeof(T));
  bits = atoll_emu::warp_collective(op, mask, bits, b, width);
  memcpy(&var, &bits, sizeof(T));
  return var;
}
template <class T> T __shfl_sync(unsigned mask, T var, int src_lane, int width = warpSize) {
  return atoll_emu_shuffle(atoll_emu::Op::ShflIdx, mask, var, src_lane, width);
}
template <class T> T __shfl_up_sync(unsigned mask, T var, unsigned delta, int width = warpSize) {
  return atoll_emu_shuffle(atoll_emu::Op::ShflUp, mask, var, (int)delta, width);
}
template <class T> T __shfl_down_sync(unsigned mask, T var, unsigned delta, int width = warpSize) {
  return atoll_emu_shuffle(atoll_emu::Op::ShflDown, mask, var, (int)delta, width);
}
template <class T> T __shfl_xor_sync(unsigned mask, T var, int lane_mask, int width = warpSize) {
  return atoll_emu_shuffle(atoll_emu::Op::ShflXor, mask, var, lane_mask, width);
}
inline unsigned __ballot_sync(unsigned mask, int predicate) {
  return (unsigned)atoll_emu::warp_collective(atoll_emu::Op::Ballot, mask, predicate != 0, 0, 32);
}
inline int __any_sync(unsigned mask, int predicate) {
  return (int)atoll_emu::warp_collective(atoll_emu::Op::Any, mask, predicate != 0, 0, 32);
}
inline int __all_sync(unsigned mask, int predicate) {
  return (int)atoll_emu::warp_collective(atoll_emu::Op::All, mask, predicate != 0, 0, 32);
}
// The lanes of the caller's warp that have not exited.
inline unsigned __activemask() {
  using namespace atoll_emu;
  const unsigned base = linear(*rt.current) / 32 * 32;
  unsigned mask = 0;
  for (unsigned l = 0; l < 32 && base + l < rt.count; ++l)
    mask |= (unsigned)(rt.fibers[base + l].state != State::Exited) << l;
  return mask;
}

// ---- what the driver puts around the kernel source ----
// The buffer behind every `extern __shared__` array (declared only when the source has one).
#define ATOLL_EMU_DYNAMIC_SHARED_BUFFER \
  extern "C" { \
    alignas(16) thread_local unsigned char \
        atoll_emu_dynamic_shared[atoll_emu::kMaxDynamicShared]; \
  }
#define ATOLL_EMU_ALIAS_DYNAMIC_SHARED __attribute__((alias("atoll_emu_dynamic_shared")))
// `dynamic_shared` is atoll_emu_dynamic_shared or nullptr.
#define ATOLL_EMU_EXPORT(kernel, dynamic_shared) \
  extern "C" __attribute__((visibility("default"))) const char* atoll_emu_signature() { \
    return atoll_emu::signature(&kernel); } \
  extern "C" __attribute__((visibility("default"))) int atoll_emu_launch( \
      const unsigned* grid, const unsigned* block, unsigned long long shared, void** args, \
      char* error, unsigned long error_size) { \
    return atoll_emu::launch(&kernel, grid, block, shared, args, dynamic_shared, error, \
                             error_size); }
