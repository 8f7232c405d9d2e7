"""CUDA kernels on the CPU: a kernel's CUDA C source, exactly as NVRTC gets it, compiled with g++
against `cuda_emu.h` (threads as fibers, block and warp barriers, shared memory, warp shuffles,
__half) so its CUDA side can be checked against its NumPy reference without a GPU.

`EmulatedKernel(kernel_def).launch(grid, block, args, shared_mem)` runs one launch synchronously,
like `cupy.RawKernel`: the guard flag (an int32 array) first, NumPy arrays for pointers (dtype as the
pointee: float32, float16 for __half, int32 for int) and Python numbers for scalars. Parameter types
come from the compiled kernel, so no parameter list is parsed here. Libraries are built once per
source, cached under build/cuda_emu/; a compile error raises `KernelCompileError` with g++'s
output, a deadlock or warp misuse inside a launch `EmulatorError`.
"""

from __future__ import annotations

import ctypes
import functools
import hashlib
import numbers
import os
import re
import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from gpu_runtime.native import BUILD_ROOT as NATIVE_BUILD
from gpu_runtime.native import NativeBuildError, build_library
from gpu_runtime.program import KernelDef

HEADER = Path(__file__).with_name("cuda_emu.h")
BUILD_ROOT = NATIVE_BUILD / "cuda_emu"
CXX = os.environ.get("CXX", "g++")
# IEEE float math with no contraction (the NumPy references do not fuse either; NVRTC does, so
# results may differ from a GPU's in the last bits), and no aliasing assumptions that CUDA code
# breaks with vector loads through casted pointers.
CXXFLAGS = ("-O1", "-std=c++17", "-shared", "-fPIC", "-fvisibility=hidden", "-fno-fast-math",
            "-ffp-contract=off", "-fno-strict-aliasing", "-fno-extern-tls-init")
ERROR_BYTES = 4096
_EXTERN_SHARED = re.compile(r"extern\s+__shared__\s[^;{}]*?\b(\w+)\s*\[\s*\]")
_STATUS_BAD_LAUNCH, _STATUS_KERNEL_ERROR = 1, 2


class KernelCompileError(RuntimeError):
    """g++ rejected a kernel source under the emulator; `stderr` is its output verbatim."""

    def __init__(self, kernel: str, stderr: str):
        super().__init__(f"{kernel} does not compile under the CUDA emulator:\n{stderr}")
        self.stderr = stderr


class EmulatorError(RuntimeError):
    """A launch stopped: deadlock at a barrier, or a warp collective used wrongly."""


@dataclass(frozen=True)
class Param:
    """One kernel parameter as the compiler sees it; dtype None for a void pointer."""

    pointer: bool
    const: bool
    dtype: np.dtype | None


def translation_unit(name: str, source: str) -> str:
    """The C++ file g++ compiles: header, dynamic shared memory aliases, source, exports."""
    decls = {m.group(1): m.group(0) for m in _EXTERN_SHARED.finditer(source)}
    dynamic = "".join(f"{d} ATOLL_EMU_ALIAS_DYNAMIC_SHARED;\n" for d in decls.values())
    if dynamic:
        dynamic = "ATOLL_EMU_DYNAMIC_SHARED_BUFFER\n" + dynamic
    buffer = "atoll_emu_dynamic_shared" if decls else "nullptr"
    return (f'#include "{HEADER.name}"\n{dynamic}#line 1 "{name}.cu"\n{source}\n'
            f"ATOLL_EMU_EXPORT({name}, {buffer})\n")


def _write_once(path: Path, text: str) -> None:
    """Content-addressed files are written under a private name and renamed into place."""
    if path.exists():
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    with os.fdopen(fd, "w") as f:
        f.write(text)
    os.replace(tmp, path)


def _parse_signature(kernel: str, text: str) -> tuple[Param, ...]:
    params = []
    for i, token in enumerate(t for t in text.split(",") if t):
        const, pointer = token.startswith("const "), token.endswith("*")
        name = token.removeprefix("const ").removesuffix("*")
        if name == "?":
            raise KernelCompileError(kernel, f"parameter {i} has a type the emulator cannot pass")
        params.append(Param(pointer, const, None if name == "void" else np.dtype(name)))
    return tuple(params)


@functools.cache
def _library(name: str, source: str,
             cxxflags: tuple[str, ...]) -> tuple[ctypes.CDLL, tuple[Param, ...]]:
    text = translation_unit(name, source)
    unit = BUILD_ROOT / "src" / f"{name}-{hashlib.sha256(text.encode()).hexdigest()[:16]}.cpp"
    _write_once(unit, text)
    try:
        path = build_library([unit, HEADER], cxxflags, f"{name}.so", "cuda_emu", CXX)
    except NativeBuildError as e:
        raise KernelCompileError(name, e.stderr) from e
    lib = ctypes.CDLL(str(path))
    lib.atoll_emu_signature.restype = ctypes.c_char_p
    lib.atoll_emu_launch.restype = ctypes.c_int
    lib.atoll_emu_launch.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_ulonglong,
                                     ctypes.c_void_p, ctypes.c_char_p, ctypes.c_ulong]
    return lib, _parse_signature(name, lib.atoll_emu_signature().decode())


def _dim3(value) -> np.ndarray:
    dims = (value,) if isinstance(value, numbers.Integral) else tuple(value)
    if not 1 <= len(dims) <= 3 or any(int(d) < 0 for d in dims):
        raise ValueError(f"not a launch dimension: {value!r}")
    return np.array([*map(int, dims), 1, 1][:3], np.uint32)


class EmulatedKernel:
    """One kernel compiled for the CPU; `params` are its parameters, the guard flag first.
    `cxxflags` replaces the compiler flags, e.g. CXXFLAGS + ("-O0", "-g") to step through a kernel
    in gdb (a later -O wins)."""

    def __init__(self, kernel: KernelDef, cxxflags: tuple[str, ...] = CXXFLAGS):
        self.name = kernel.name
        self._lib, self.params = _library(kernel.name, kernel.cuda_source, tuple(cxxflags))

    def _pack(self, i: int, param: Param, arg) -> np.ndarray:
        """The argument's value as a one-element array (its address goes in the argument list)."""
        where = f"{self.name} argument {i}"
        if param.pointer:
            if not isinstance(arg, np.ndarray) or not arg.flags.c_contiguous:
                raise TypeError(f"{where}: expected a C-contiguous array, got {type(arg).__name__}")
            if param.dtype is not None and arg.dtype != param.dtype:
                raise TypeError(f"{where}: expected {param.dtype} elements, got {arg.dtype}")
            if not param.const and not arg.flags.writeable:
                raise TypeError(f"{where}: the kernel may write it, the array is read-only")
            return np.array([arg.ctypes.data], np.uintp)
        integral = param.dtype.kind in "iu"
        if not isinstance(arg, numbers.Integral if integral else numbers.Real):
            raise TypeError(f"{where}: expected a {param.dtype} scalar, got {arg!r}")
        if integral and not np.iinfo(param.dtype).min <= int(arg) <= np.iinfo(param.dtype).max:
            raise OverflowError(f"{where}: {arg} does not fit {param.dtype}")
        return np.array([arg], param.dtype)

    def launch(self, grid, block, args, shared_mem: int = 0) -> None:
        if len(args) != len(self.params):
            raise TypeError(f"{self.name} takes {len(self.params)} arguments, got {len(args)}")
        packed = [self._pack(i, p, a) for i, (p, a) in enumerate(zip(self.params, args))]
        addresses = np.array([v.ctypes.data for v in packed], np.uintp)
        grid3, block3 = _dim3(grid), _dim3(block)
        error = ctypes.create_string_buffer(ERROR_BYTES)
        status = self._lib.atoll_emu_launch(grid3.ctypes.data, block3.ctypes.data, int(shared_mem),
                                            addresses.ctypes.data, error, ERROR_BYTES)
        message = f"{self.name}: {error.value.decode(errors='replace')}"
        if status == _STATUS_BAD_LAUNCH:
            raise ValueError(message)
        if status == _STATUS_KERNEL_ERROR:
            raise EmulatorError(message)
