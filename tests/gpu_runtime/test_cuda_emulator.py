"""The CUDA emulator itself: block barriers, early exit, warp shuffles and votes (checked against
the lane rules of the CUDA programming guide, written out independently here), dynamic shared
memory, __half conversions and arithmetic against NumPy's float16, math, atomics, vector loads,
deadlock and misuse reports, and launch checks."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.special import erf

from gpu_runtime.kernels.emulator import CXXFLAGS, EmulatedKernel, EmulatorError, KernelCompileError
from gpu_runtime.program import KernelDef

RNG = np.random.default_rng(7)


# The fast x86-64 stack switch and the portable ucontext one run the warp tests.
SWITCHES = {"asm": CXXFLAGS, "ucontext": CXXFLAGS + ("-DATOLL_EMU_UCONTEXT",)}


def emulated(name: str, source: str, switch: str = "asm") -> EmulatedKernel:
    return EmulatedKernel(KernelDef(name, source, numpy_impl=None), SWITCHES[switch])


REVERSE = r"""
extern "C" __global__ void t_reverse(const float* x, float* y) {
  __shared__ float s[64];
  const int t = threadIdx.x + 16 * threadIdx.y, base = blockIdx.x * 64;
  s[t] = x[base + t];
  __syncthreads();
  y[base + t] = s[63 - t];
}
"""


def test_block_barrier_orders_shared_memory_in_a_2d_block():
    x = RNG.standard_normal(3 * 64).astype(np.float32)
    y = np.zeros_like(x)
    emulated("t_reverse", REVERSE).launch(3, (16, 4), (x, y))
    np.testing.assert_array_equal(y.reshape(3, 64), x.reshape(3, 64)[:, ::-1])


EARLY_EXIT = r"""
extern "C" __global__ void t_early(const float* x, float* y, unsigned* votes, int n) {
  __shared__ float s[256];
  const int t = threadIdx.x;
  if (t >= n) return;
  s[t] = x[t];
  __syncthreads();
  const unsigned ballot = __ballot_sync(0xffffffffu, x[t] > 0.f);
  float acc = 0.f;
  for (int i = 0; i < n; ++i) acc += s[i];
  __syncthreads();
  y[t] = acc;
  if (t % 32 == 0) votes[t / 32] = ballot;
}
"""


def test_exited_threads_leave_block_and_warp_barriers():
    n = 45  # warp 1 keeps 13 live lanes; warps 2-7 exit at once
    x = RNG.standard_normal(256).astype(np.float32)
    y = np.full(256, -7.0, np.float32)
    votes = np.zeros(8, np.uint32)
    emulated("t_early", EARLY_EXIT).launch(1, 256, (x, y, votes, n))
    np.testing.assert_allclose(y[:n], x[:n].sum(dtype=np.float64), rtol=1e-5, atol=1e-5)
    assert (y[n:] == -7.0).all()
    bits = (x[:n] > 0).astype(np.uint64) << (np.arange(n) % 32).astype(np.uint64)
    assert votes[0] == bits[:32].sum() and votes[1] == bits[32:].sum()


SHUFFLES = r"""
extern "C" __global__ void t_shuffles(const int* x, int* y, double* d) {
  const int t = threadIdx.x, n = blockDim.x, v = x[t];
  y[0 * n + t] = __shfl_sync(0xffffffffu, v, (t * 7 + 3) % 32);
  y[1 * n + t] = __shfl_sync(0xffffffffu, v, t * 5 + 2, 8);
  y[2 * n + t] = __shfl_up_sync(0xffffffffu, v, 3, 8);
  y[3 * n + t] = __shfl_down_sync(0xffffffffu, v, 5, 16);
  y[4 * n + t] = __shfl_xor_sync(0xffffffffu, v, 6);
  y[5 * n + t] = __shfl_xor_sync(0xffffffffu, v, 8, 8);
  y[6 * n + t] = __shfl_down_sync(0xffffffffu, v, 1);
  d[t] = __shfl_xor_sync(0xffffffffu, (double)v * 0.5, 1);
}
"""


def _expected_shuffles(v: np.ndarray) -> list[np.ndarray]:
    """The programming guide's rules per lane: a width-w group reads within itself (`idx`, `up`,
    `down` keep their own value past its edge); `xor` may read earlier groups, not later ones."""
    out = [[] for _ in range(7)]
    for t in range(v.size):
        base, lane = t - t % 32, t % 32

        def at(src: int) -> int:
            return v[base + src]

        g8, g16 = lane - lane % 8, lane - lane % 16
        out[0].append(at((t * 7 + 3) % 32))
        out[1].append(at(g8 + (t * 5 + 2) % 8))
        out[2].append(at(lane - 3) if lane - g8 >= 3 else v[t])
        out[3].append(at(lane + 5) if lane - g16 + 5 < 16 else v[t])
        out[4].append(at(lane ^ 6))
        out[5].append(at(lane ^ 8) if (lane ^ 8) < g8 + 8 else v[t])
        out[6].append(at(lane + 1) if lane < 31 else v[t])
    return [np.array(o, np.int32) for o in out]


@pytest.mark.parametrize("switch", SWITCHES)
def test_warp_shuffles_follow_the_lane_rules(switch):
    x = RNG.integers(-1000, 1000, 64).astype(np.int32)
    y = np.zeros(7 * 64, np.int32)
    d = np.zeros(64, np.float64)
    emulated("t_shuffles", SHUFFLES, switch).launch(1, 64, (x, y, d))
    for row, want in zip(y.reshape(7, 64), _expected_shuffles(x)):
        np.testing.assert_array_equal(row, want)
    np.testing.assert_array_equal(d, x[np.arange(64) ^ 1] * 0.5)


VOTES = r"""
extern "C" __global__ void t_votes(const float* x, unsigned* y) {
  const int t = threadIdx.x, p = x[t] > 0.f;
  const unsigned b = __ballot_sync(0xffffffffu, p);
  const int any = __any_sync(0xffffffffu, p), all = __all_sync(0xffffffffu, p);
  const int low = t % 32 < 16 ? __any_sync(0x0000ffffu, p) : 0;  // lanes 16-31 skip it
  __syncwarp();
  unsigned* o = y + 5 * (t / 32);
  if (t % 32 == 0) { o[0] = b; o[1] = any; o[2] = all; o[3] = low; o[4] = __activemask(); }
}
"""


def test_votes_over_a_partial_warp():
    x = RNG.standard_normal(48).astype(np.float32)
    x[32:48] = np.abs(x[32:48]) + 1  # the partial warp votes all-true
    y = np.zeros(10, np.uint32)
    emulated("t_votes", VOTES).launch(1, 48, (x, y))
    for o, lanes, active in ((y[:5], x[:32] > 0, 2**32 - 1), (y[5:], x[32:] > 0, 2**16 - 1)):
        assert o[0] == sum(1 << i for i, p in enumerate(lanes) if p)
        assert list(o[1:]) == [lanes.any(), lanes.all(), lanes[:16].any(), active]


MISUSE = r"""
extern "C" __global__ void t_misuse(int* y, int mode) {
  const int t = threadIdx.x;
  int v = t;
  if (mode == 1) v = __shfl_sync(1u, v, 0);  // lanes 1-31 are not in their own mask
  if (mode == 2) {
    if (t >= 16) return;
    v = __shfl_down_sync(0xffffffffu, v, 8);  // lanes 8-15 read exited lanes
  }
  if (mode == 3) {  // a warp split between two collectives under one mask
    if (t % 2) __syncwarp(); else v = __shfl_xor_sync(0xffffffffu, v, 2);
  }
  if (mode == 4) {  // lanes 0-15 at the block barrier, lanes 16-31 wait for them at the warp's
    if (t < 16) __syncthreads(); else __syncwarp();
  }
  y[t] = v + mode;
}
"""


@pytest.mark.parametrize("mode,message", [
    (1, r"thread 1: __shfl_sync mask 0x00000001 does not name the calling lane 1"),
    (2, r"thread 8: __shfl_down_sync \(mask 0xffffffff\) reads lane 16, which has exited"),
    (3, r"different collectives: __shfl_xor_sync mask 0xffffffff and __syncwarp mask"),
    (4, r"block \(0,0,0\): deadlock.* at __syncthreads: threads 0-15; "
        r"at __syncwarp mask 0xffffffff: threads 16-31;"),
])
@pytest.mark.parametrize("switch", SWITCHES)
def test_misuse_and_deadlock_are_reported_and_the_kernel_runs_again(mode, message, switch):
    kernel = emulated("t_misuse", MISUSE, switch)
    y = np.zeros(32, np.int32)
    with pytest.raises(EmulatorError, match=message):
        kernel.launch(1, 32, (y, mode))
    kernel.launch(1, 32, (y, 0))
    np.testing.assert_array_equal(y, np.arange(32))


DYNAMIC = r"""
__device__ int word(int i) { extern __shared__ int words[]; return words[i]; }
extern "C" __global__ void t_dynamic(const float* x, float* y, int* before, int* bits) {
  extern __shared__ __align__(16) float s[];
  const int t = threadIdx.x, n = blockDim.x;
  before[blockIdx.x * n + t] = word(t);
  s[t] = x[blockIdx.x * n + t];
  __syncthreads();
  y[blockIdx.x * n + t] = s[n - 1 - t];
  bits[blockIdx.x * n + t] = word(t);
}
"""


def test_dynamic_shared_memory_is_one_buffer_fresh_per_block():
    n = 96
    x = RNG.standard_normal(2 * n).astype(np.float32)
    y, before, bits = np.zeros_like(x), np.zeros(2 * n, np.int32), np.zeros(2 * n, np.int32)
    kernel = emulated("t_dynamic", DYNAMIC)
    kernel.launch(2, n, (x, y, before, bits), shared_mem=4 * n)
    np.testing.assert_array_equal(y.reshape(2, n), x.reshape(2, n)[:, ::-1])
    np.testing.assert_array_equal(bits, x.view(np.int32))  # `words` and `s` alias
    assert (before == -1).all()  # every block starts from the 0xff fill, not the last block's data
    with pytest.raises(ValueError, match="at most 227 KiB"):
        kernel.launch(1, n, (x, y, before, bits), shared_mem=228 * 1024)


HALF = r"""
extern "C" __global__ void t_half(const float* x, __half* h, float* back, int n) {
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
    h[i] = __float2half(x[i]);
    back[i] = __half2float(h[i]);
  }
}
"""


def _conversion_inputs() -> np.ndarray:
    halves = np.arange(0x7c00, dtype=np.uint16).view(np.float16).astype(np.float64)
    mids = (halves[:-1] + halves[1:]) / 2  # every tie, subnormal and normal
    mids = np.concatenate([mids, [65504 + 8.0]]).astype(np.float32)  # 65520: ties to infinity
    near = np.concatenate([np.nextafter(mids, np.float32(np.inf)),
                           np.nextafter(mids, np.float32(0))])
    random_bits = RNG.integers(0, 2**32, 20000, dtype=np.uint64).astype(np.uint32).view(np.float32)
    special = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 2.0**-25, 3 * 2.0**-26, 2.0**-26,
                        65504, 65519.996, 65536, 1e30, 1e-30, 5.96e-8], np.float32)
    values = np.concatenate([mids, near, random_bits, special, halves.astype(np.float32)])
    return np.concatenate([values, -values])


def test_half_conversions_round_like_numpy_float16():
    x = _conversion_inputs()
    h = np.zeros(x.size, np.float16)
    back = np.zeros_like(x)
    emulated("t_half", HALF).launch(64, 256, (x, h, back, x.size))
    with np.errstate(over="ignore"):
        want = x.astype(np.float16)
    nan = np.isnan(want)
    assert (np.isnan(h) == nan).all()
    np.testing.assert_array_equal(h[~nan].view(np.uint16), want[~nan].view(np.uint16))
    np.testing.assert_array_equal(back[~nan].view(np.uint32),
                                  want[~nan].astype(np.float32).view(np.uint32))


HALF_OPS = r"""
extern "C" __global__ void t_half_ops(const __half* a, const __half* b, __half* y, float* pair,
                                      int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  y[4 * i] = a[i] + b[i];
  y[4 * i + 1] = __hsub(a[i], b[i]);
  __half p = a[i];
  p *= b[i];
  y[4 * i + 2] = p;
  y[4 * i + 3] = -(a[i] / b[i]);
  const float2 f = __half22float2(__hadd2(__floats2half2_rn(a[i], 1.f), make_half2(b[i], b[i])));
  pair[2 * i] = f.x;
  pair[2 * i + 1] = f.y;
}
"""


def test_half_arithmetic_is_correctly_rounded():
    bits = RNG.integers(0, 0x7c00, (2, 30000), dtype=np.uint16)
    bits |= RNG.integers(0, 2, bits.shape, dtype=np.uint16) << 15
    a, b = bits.view(np.float16)
    y = np.zeros(4 * a.size, np.float16)
    pair = np.zeros(2 * a.size, np.float32)
    emulated("t_half_ops", HALF_OPS).launch((a.size + 255) // 256, 256, (a, b, y, pair, a.size))
    with np.errstate(all="ignore"):
        want = np.stack([a + b, a - b, a * b, -(a / b)], axis=1).reshape(-1)
        want_pair = np.stack([a + b, (np.float16(1) + b)], axis=1).reshape(-1).astype(np.float32)
    for got, ref in ((y, want), (pair, want_pair)):
        nan = np.isnan(ref)
        assert (np.isnan(got) == nan).all()
        np.testing.assert_array_equal(got[~nan], ref[~nan])


MATH = r"""
extern "C" __global__ void t_math(const float* x, float* y, float* sum, int* count, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const float v = x[i];
  const float4 q = reinterpret_cast<const float4*>(x)[i / 4];
  float* o = y + 12 * i;
  o[0] = rsqrtf(fabsf(v) + 1.f);
  o[1] = __expf(v);
  o[2] = __fdividef(v, 3.f);
  o[3] = __saturatef(v);
  o[4] = fmaf(v, v, 1.f);
  o[5] = erff(v) + tanhf(v);
  o[6] = powf(fabsf(v), 1.5f);
  o[7] = (float)(max(i, 5) - min(i, 5) + __popc(i) + __clz(i) + __ffs(i));
  o[8] = q.x + q.y + q.z + q.w;
  o[9] = __int_as_float(__float_as_int(v) ^ 0x80000000);
  o[10] = __ldg(x + i) * (float)warpSize;
  float local[64][64];  // 16 KiB of locals on each thread's stack
  for (int r = 0; r < 64; ++r) for (int c = 0; c < 64; ++c) local[r][c] = r == c ? v : 0.f;
  float trace = 0.f;
  for (int r = 0; r < 64; ++r) trace += local[r][r];
  o[11] = __logf(fabsf(v) + 1.f) + sqrtf(fabsf(v)) + trace;
  atomicAdd(sum, v);
  if (atomicAdd(count, 1) == n - 1) atomicExch(count, -n);
  atomicMax(count + 1, i);
  atomicCAS(count + 2, 0, 7);
}
"""


def _bit_terms(i: np.ndarray) -> np.ndarray:
    i = [int(v) for v in i]
    popc = np.array([bin(v).count("1") for v in i])
    clz = np.array([32 - v.bit_length() for v in i])
    ffs = np.array([(v & -v).bit_length() for v in i])
    return (np.maximum(i, 5) - np.minimum(i, 5) + popc + clz + ffs).astype(np.float32)


def test_math_vector_loads_and_atomics():
    n = 203
    x = (RNG.standard_normal(n + 1) * 2).astype(np.float32)  # + 1: the last float4 is whole
    y = np.zeros(12 * n, np.float32)
    total, count = np.zeros(1, np.float32), np.zeros(3, np.int32)
    emulated("t_math", MATH).launch(4, 64, (x, y, total, count, n))
    v, i = x[:n].astype(np.float64), np.arange(n)
    quads = x[:(n + 3) // 4 * 4].reshape(-1, 4).astype(np.float64).sum(axis=1)[i // 4]
    want = np.stack([1 / np.sqrt(np.abs(v) + 1), np.exp(v), v / 3, np.clip(v, 0, 1), v * v + 1,
                     erf(v) + np.tanh(v), np.abs(v) ** 1.5, _bit_terms(i), quads, -v, v * 32,
                     np.log(np.abs(v) + 1) + np.sqrt(np.abs(v)) + 64 * v], axis=1)
    np.testing.assert_allclose(y.reshape(n, 12), want, rtol=3e-6, atol=1e-6)
    np.testing.assert_allclose(total[0], v.sum(), rtol=1e-5, atol=1e-4)
    assert list(count) == [-n, n - 1, 7]


ADD = r"""
extern "C" __global__ void t_add(const int* flag, const float* x, float* y, int n, float a) {
#ifndef ATOLL_EMULATOR
  asm volatile("membar.gl;");  // inline PTX cannot run on the CPU: the emulator skips it
#endif
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = x[i] + a;
}
"""


def test_launch_arguments_and_configuration_are_checked():
    kernel = emulated("t_add", ADD)
    flag, x, y = np.zeros(1, np.int32), np.ones(8, np.float32), np.zeros(8, np.float32)
    assert [(p.pointer, p.const, p.dtype) for p in kernel.params] == [
        (True, True, np.int32), (True, True, np.float32), (True, False, np.float32),
        (False, False, np.int32), (False, False, np.float32)]
    kernel.launch(1, 8, (flag, x, y, 8, 2))  # an int is a valid float
    np.testing.assert_array_equal(y, 3)
    bad = [((flag, x, y, 8), TypeError, "takes 5 arguments"),
           ((flag, x.astype(np.float64), y, 8, 1.0), TypeError, "expected float32 elements"),
           ((flag, x, y[::2], 4, 1.0), TypeError, "C-contiguous"),
           ((flag, x, y, 8.0, 1.0), TypeError, "expected a int32 scalar"),
           ((flag, x, y, 2**31, 1.0), OverflowError, "does not fit int32")]
    for args, error, message in bad:
        with pytest.raises(error, match=message):
            kernel.launch(1, 8, args)
    with pytest.raises(ValueError, match="at most 1024 threads"):
        kernel.launch(1, (64, 32), (flag, x, y, 8, 1.0))
    with pytest.raises(ValueError, match="grid dimensions"):
        kernel.launch((1, 70000), 8, (flag, x, y, 8, 1.0))


SCALE = r"""
extern "C" __global__ void t_scale(const float* x, float* y) { y[threadIdx.x] = 2.f * x[threadIdx.x]; }
"""


def mappings() -> int:
    with open("/proc/self/maps") as f:
        return sum(1 for _ in f)


def test_a_launch_gives_its_fiber_stacks_back():
    """Each kernel library has its own runtime: stacks kept after a launch (a guard and a stack
    mapping per thread) added up over a few dozen kernels past vm.max_map_count, where every mmap
    of the process fails."""
    x = RNG.standard_normal(1024).astype(np.float32)
    y = np.zeros_like(x)
    before = mappings()
    emulated("t_scale", SCALE).launch(1, 1024, (x, y))  # its library's segments, and no stacks
    assert mappings() - before < 100  # not 2 x 1024
    np.testing.assert_array_equal(y, 2 * x)


def test_compile_errors_name_the_kernel_line():
    with pytest.raises(KernelCompileError, match=r"t_broken\.cu:3"):
        emulated("t_broken", 'extern "C" __global__ void t_broken(float* y) {\n'
                             "  y[0] = 1.f;\n  y[1] = undeclared;\n}\n")
