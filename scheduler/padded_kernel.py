"""Dynamic kernel padding on CUDA: one launch that runs an RT kernel's blocks and BE kernels' blocks.

Source transformation: each kernel's `extern "C" __global__ void name(params)` becomes a
`__device__` function `body(atoll_bid, atoll_gdim, params)` in its own namespace, with `blockIdx`
and `gridDim` replaced by those virtual indices and the kernel's macros #undef'd after it (so two
kernels' preludes cannot collide). A generated dispatcher kernel takes every part's parameters
(prefixed) plus its block count and grid shape, and sends each block of a 1-D grid to one body: the
first blocks to the RT kernel, the rest to the BE kernels in turn. Only kernels with the same block
size are padded together (a body runs with the dispatcher's blockDim).

Proxy variants: the dispatcher is compiled with `__launch_bounds__(threads, b)` where b is the RT
kernel's resident blocks per SM (its occupancy level), so register use is capped to keep the RT
kernel's occupancy; a variant whose compiled resource use would still lower that occupancy (static
shared memory of the bodies adds up) is refused and the RT kernel runs unpadded.

Every body gets the never-set flag: the BE kernels were preempted through the shared flag, and a
padded launch must run them anyway.
"""

from __future__ import annotations

import math
import re
import threading
from typing import Any, Callable, Sequence

from gpu_runtime.compiler.program import KernelDef
from scheduler.profiler import DeviceLimits, occupancy

NVRTC_OPTIONS = ("--std=c++14",)
_HEAD = re.compile(r'extern\s+"C"\s+__global__\s+void\s+(\w+)\s*\(')
_DEFINE = re.compile(r"^\s*#\s*define\s+(\w+)", re.M)


def _split_params(text: str) -> list[str]:
    out, depth, cur = [], 0, []
    for ch in text:
        if ch in "(<[":
            depth += 1
        elif ch in ")>]":
            depth -= 1
        if ch == "," and depth == 0:
            out.append("".join(cur).strip())
            cur = []
        else:
            cur.append(ch)
    if "".join(cur).strip():
        out.append("".join(cur).strip())
    return out


def _macros(src: str) -> dict[str, tuple[list[str] | None, str]]:
    """Single- and continued-line #defines: name -> (parameters or None, replacement)."""
    out = {}
    for m in re.finditer(r"^\s*#\s*define\s+(\w+)(\(([^)]*)\))?[ \t]*((?:.*\\\n)*.*)$", src, re.M):
        params = [p.strip() for p in m.group(3).split(",")] if m.group(2) else None
        out[m.group(1)] = (params, m.group(4).replace("\\\n", " "))
    return out


def _expand_macros(text: str, macros: dict) -> str:
    """Enough of the preprocessor for parameter lists written with macros (`X(p)` -> `int p##0`)."""
    for _ in range(4):
        changed = False
        for name, (params, body) in macros.items():
            if params is None:
                new = re.sub(rf"\b{name}\b(?!\s*\()", body, text)
            else:
                def call(m, params=params, body=body):
                    args = [a.strip() for a in m.group(1).split(",")]
                    out = body
                    for p, a in zip(params, args):
                        out = re.sub(rf"\b{p}\b", a, out)
                    return re.sub(r"\s*##\s*", "", out)
                new = re.sub(rf"\b{name}\s*\(([^()]*)\)", call, text)
            changed |= new != text
            text = new
        if not changed:
            break
    return text


def device_form(kernel: KernelDef, namespace: str) -> tuple[str, list[str]]:
    """(source of `namespace::body`, the kernel's parameter declarations)."""
    src = kernel.cuda_source
    m = _HEAD.search(src)
    if m is None or m.group(1) != kernel.name:
        raise ValueError(f"{kernel.name}: no extern \"C\" __global__ definition to transform")
    depth, end = 1, m.end()
    while depth:
        depth += {"(": 1, ")": -1}.get(src[end], 0)
        end += 1
    params = _split_params(_expand_macros(src[m.end():end - 1], _macros(src)))
    head = "__device__ __forceinline__ void body(const uint3 atoll_bid, const dim3 atoll_gdim, "
    body = src[:m.start()] + head + src[m.end():]
    body = re.sub(r"\bblockIdx\b", "atoll_bid", body)
    body = re.sub(r"\bgridDim\b", "atoll_gdim", body)
    undefs = "".join(f"#undef {name}\n" for name in dict.fromkeys(_DEFINE.findall(src)))
    return f"namespace {namespace} {{  // {kernel.name}\n{body}\n}}\n{undefs}", params


def _param_name(decl: str) -> str:
    return re.findall(r"\w+", decl)[-1]


def dispatcher_source(kernels: Sequence[KernelDef], threads: int, min_blocks: int) -> str:
    """Parts are `kernels` in launch order (RT first); a kernel used twice gets one body."""
    spaces: dict[str, str] = {}
    bodies, params, dispatch = [], [], []
    for k, kernel in enumerate(kernels):
        if kernel.name not in spaces:
            spaces[kernel.name] = f"atoll_k{len(spaces)}"
            src, decls = device_form(kernel, spaces[kernel.name])
            bodies.append(src)
        _, decls = device_form(kernel, spaces[kernel.name])
        names = [f"p{k}_{_param_name(d)}" for d in decls]
        params.append(f"int p{k}_blocks, int p{k}_gx, int p{k}_gy")
        params += [re.sub(r"(\w+)\s*$", lambda mm, n=n: n, d) for d, n in zip(decls, names)]
        dispatch.append(
            f"  if (b < (unsigned)p{k}_blocks) {{\n"
            f"    {spaces[kernel.name]}::body(make_uint3(b % p{k}_gx, (b / p{k}_gx) % p{k}_gy, "
            f"b / (p{k}_gx * p{k}_gy)), dim3(p{k}_gx, p{k}_gy, p{k}_blocks / (p{k}_gx * p{k}_gy)), "
            f"{', '.join(names)});\n    return;\n  }}\n  b -= p{k}_blocks;\n")
    return ("".join(bodies)
            + f'extern "C" __global__ void __launch_bounds__({threads}, {min_blocks}) '
            + f"atoll_padded({', '.join(params)}) {{\n  unsigned b = blockIdx.x;\n"
            + "".join(dispatch) + "}\n")


class Padder:
    """Compiles and caches dispatcher variants and launches padded kernels on a stream."""

    def __init__(self, cp: Any, zero_flag: Any, limits: DeviceLimits,
                 resources: Callable[[KernelDef], tuple[int, int]]):
        self._cp = cp
        self._zero = zero_flag.device
        self._limits = limits
        self._resources = resources
        self._variants: dict[tuple, Any] = {}
        self._lock = threading.Lock()
        self.refused: set[tuple] = set()
        self.errors: dict[tuple, str] = {}  # compile failures, for diagnosis
        self._info_cache: dict[int, tuple] = {}

    def _occupancy(self, launch) -> float:
        regs, static_shared = self._resources(launch.kernel)
        return occupancy(math.prod(launch.block), regs, static_shared + launch.shared_bytes, self._limits)

    def _info(self, launch) -> tuple[str, int, int]:
        """(kernel name, block threads, resident blocks per SM), cached: keys are computed on
        the RT submission path."""
        cached = self._info_cache.get(id(launch))
        if cached is None or cached[0] is not launch:
            threads = math.prod(launch.block)
            warps = math.ceil(threads / self._limits.warp_size)
            level = max(1, round(self._occupancy(launch) * self._limits.max_warps_per_sm / warps))
            cached = (launch, (launch.kernel.name, threads, level))
            self._info_cache[id(launch)] = cached
        return cached[1]

    def key(self, launches: Sequence[Any]) -> tuple:
        infos = [self._info(l) for l in launches]
        return tuple(i[0] for i in infos), tuple(i[1] for i in infos), infos[0][2]

    def ready(self, launches: Sequence[Any]) -> bool:
        return self._variants.get(self.key(launches)) is not None

    def variant(self, launches: Sequence[Any]) -> Any | None:
        """The compiled dispatcher for these launches (RT first), or None if it may not be used."""
        key = self.key(launches)
        with self._lock:
            if key in self._variants:
                return self._variants[key]
        _, blocks, level = key
        fn = None
        if len(set(blocks)) == 1:
            try:
                fn = self._compile(launches, blocks[0], level)
            except Exception as e:  # NVRTC rejected the combination: run those kernels unpadded
                self.errors[key] = f"{type(e).__name__}: {e}"[:2000]
                fn = None
        with self._lock:
            self._variants[key] = fn
            if fn is None:
                self.refused.add(key)
        return fn

    def _compile(self, launches: Sequence[Any], threads: int, level: int) -> Any | None:
        src = dispatcher_source([l.kernel for l in launches], threads, level)
        fn = self._cp.RawKernel(src, "atoll_padded", options=NVRTC_OPTIONS)
        attrs = fn.attributes  # compiles
        shared = attrs["shared_size_bytes"] + max(l.shared_bytes for l in launches)
        if attrs["max_threads_per_block"] < threads:
            return None
        if occupancy(threads, attrs["num_regs"], shared, self._limits) < self._occupancy(launches[0]):
            return None
        return fn

    def launch(self, parts: Sequence[tuple[Any, int]], stream: Any) -> bool:
        """Run parts [(state, launch index)] (RT first) as one kernel; False if not paddable."""
        launches = [state.program.launches[i] for state, i in parts]
        fn = self.variant(launches)
        if fn is None:
            return False
        args, blocks = [], 0
        for (state, i), launch in zip(parts, launches):
            gx, gy, gz = launch.grid
            n = gx * gy * gz
            blocks += n
            args += [self._np_int(n), self._np_int(gx), self._np_int(gy), self._zero]
            args += list(state.args[i][1:])  # the executor's converted args minus its flag
        shared = max(l.shared_bytes for l in launches)
        with stream:
            fn((blocks, 1, 1), launches[0].block, tuple(args), shared_mem=shared)
        return True

    @staticmethod
    def _np_int(v: int):
        import numpy as np

        return np.int32(v)
