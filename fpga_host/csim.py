"""The DPU's C-simulation library: the HLS kernel sources compiled for the host with g++.

`load_library()` returns the ctypes handle (building it first when needed), `library_path()` says
where the build for the current sources lives, and a failed compile raises `CsimBuildError` with
the compiler's stderr verbatim. Builds are cached under build/csim/<hash>/, the hash covering the
sources, the compiler and the flags, so an edited kernel is rebuilt on next load; concurrent builds
write to a private temporary name and rename it into place.

`run_image_cu(jpeg_bytes, ...)` calls `image_cu` once and returns (status dict, numpy array); the
kernel ABI is in hls/ABI_DPU.md.
"""

from __future__ import annotations

import ctypes
import functools
import hashlib
import os
import subprocess
import tempfile
from pathlib import Path

import numpy as np

REPO_ROOT = Path(__file__).resolve().parent.parent
HLS_DIR = REPO_ROOT / "hls"

# Kernel sources compiled into the library: directories (every .cpp in them is compiled, every
# .h hashed) or single files. Each CU's sources are one entry.
KERNEL_SOURCES: list[Path] = [HLS_DIR / "image", HLS_DIR / "audio"]
INCLUDE_DIRS: list[Path] = [HLS_DIR / "common"]
CXX = os.environ.get("CXX", "g++")
# -ffp-contract=off: no fused multiply-adds, so float32 results round where the reference rounds.
CXXFLAGS: tuple[str, ...] = ("-O2", "-ffp-contract=off", "-shared", "-fPIC", "-std=c++17", "-Wno-unknown-pragmas")
BUILD_ROOT = REPO_ROOT / "build" / "csim"
LIBRARY_NAME = "libatoll_dpu.so"

STATUS_NAMES = {0: "OK", 1: "UNSUPPORTED", 2: "CORRUPT", 3: "TOO_LARGE", 4: "BAD_ARGS",
                5: "EMPTY", 6: "TOO_LONG", 7: "NON_FINITE", 8: "BAD_RATE"}
IMAGE_MAX_DIM = 8192  # the CU's line-buffer width (kMaxDim in hls/image/image_types.h)
IMAGE_STATUS_FIELDS = ("code", "c", "h", "w", "src_h", "src_w", "n_components", "bytes_written")


class CsimBuildError(RuntimeError):
    """The kernel sources did not compile; `stderr` holds the compiler's output verbatim."""

    def __init__(self, command: list[str], stderr: str):
        super().__init__(f"C-simulation build failed: {' '.join(command)}\n{stderr}")
        self.command = command
        self.stderr = stderr


def _files(entries: list[Path], suffixes: tuple[str, ...]) -> list[Path]:
    found: list[Path] = []
    for entry in entries:
        if entry.is_dir():
            found += sorted(p for p in entry.rglob("*") if p.suffix in suffixes)
        elif entry.suffix in suffixes:
            found.append(entry)
    return found


def compile_units(entries: list[Path] | None = None) -> list[Path]:
    """The .cpp files compiled into the library."""
    return _files(KERNEL_SOURCES if entries is None else entries, (".cpp",))


def build_key(entries: list[Path], flags: tuple[str, ...], cxx: str = CXX) -> str:
    """Hash of every kernel source and header, the compiler and the flags."""
    digest = hashlib.sha256("\0".join((cxx, *flags)).encode())
    for path in _files([*entries, *INCLUDE_DIRS], (".cpp", ".h", ".hpp")):
        name = path.relative_to(REPO_ROOT) if path.is_relative_to(REPO_ROOT) else path
        digest.update(str(name).encode() + b"\0")
        digest.update(path.read_bytes())
    return digest.hexdigest()[:16]


def compile_cached(entries: list[Path], flags: tuple[str, ...], out_dir: Path, name: str) -> Path:
    """Compiles entries into out_dir/name unless that build exists; returns its path.

    flags decide what is built (a shared library, or an executable such as the fuzz driver)."""
    target = out_dir / build_key(entries, flags) / name
    if target.exists():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(prefix=f".{name}.", dir=target.parent)
    os.close(fd)
    includes = [f"-I{d}" for d in [*INCLUDE_DIRS, *(e if e.is_dir() else e.parent for e in entries)]]
    command = [CXX, *flags, *includes, *map(str, compile_units(entries)), "-o", tmp_name]
    result = subprocess.run(command, capture_output=True, text=True)
    if result.returncode != 0:
        os.unlink(tmp_name)
        raise CsimBuildError(command, result.stderr)
    os.replace(tmp_name, target)
    return target


def library_path() -> Path:
    """Where the library for the current sources is (or will be) built."""
    return BUILD_ROOT / build_key(KERNEL_SOURCES, CXXFLAGS) / LIBRARY_NAME


def _declare(lib: ctypes.CDLL) -> None:
    u32, ptr = ctypes.c_uint32, ctypes.c_void_p
    lib.image_cu.argtypes = [ptr, u32, ptr, u32, ptr, u32, ptr, u32, u32, u32, u32, u32]
    lib.image_cu.restype = None
    lib.image_cu_scratch_bytes.argtypes = [u32]
    lib.image_cu_scratch_bytes.restype = ctypes.c_uint64


@functools.cache
def load_library() -> ctypes.CDLL:
    """Builds (if needed) and loads the C-simulation library; raises CsimBuildError."""
    lib = ctypes.CDLL(str(compile_cached(KERNEL_SOURCES, CXXFLAGS, BUILD_ROOT, LIBRARY_NAME)))
    _declare(lib)
    return lib


BEAT_BYTES = 64  # the DPU's m_axi ports move 512-bit beats; their buffers hold whole beats


def whole_beats(nbytes: int) -> int:
    return max(1, -(-nbytes // BEAT_BYTES)) * BEAT_BYTES


def _address(array: np.ndarray) -> int:
    return array.ctypes.data


def run_image_cu(jpeg: bytes, stage: int = 3, resize_short: int = 256, crop: int = 224,
                 out_fp16: bool = False, max_dim: int = 8192) -> tuple[dict, np.ndarray | None]:
    """Runs image_cu on one JPEG. Returns the status words as a dict (plus "status", the code's
    name) and the output: uint8 HWC for stages 0-2, float32/float16 CHW for stage 3, or None when
    the code is not OK."""
    lib = load_library()
    data = np.zeros(whole_beats(len(jpeg)), np.uint8)  # the 512-bit port reads whole beats
    data[: len(jpeg)] = np.frombuffer(jpeg, dtype=np.uint8)
    dim = min(max_dim, IMAGE_MAX_DIM)
    scratch = np.empty(lib.image_cu_scratch_bytes(dim), dtype=np.uint8)
    # Worst-case output per stage (large buffers are mapped lazily: untouched pages cost nothing).
    capacity = {0: 3 * dim * dim, 1: 3 * IMAGE_MAX_DIM * IMAGE_MAX_DIM, 2: 3 * crop * crop,
                3: 3 * crop * crop * (2 if out_fp16 else 4)}.get(stage, 0)
    out = np.empty(whole_beats(capacity), dtype=np.uint8)
    words = np.zeros(8, dtype=np.uint32)
    lib.image_cu(_address(data), len(jpeg), _address(scratch), scratch.nbytes, _address(out),
                 out.nbytes, _address(words), stage, resize_short, crop, int(out_fp16), max_dim)
    status = dict(zip(IMAGE_STATUS_FIELDS, map(int, words)))
    status["status"] = STATUS_NAMES.get(status["code"], "UNKNOWN")
    if status["code"] != 0:
        return status, None
    c, h, w = status["c"], status["h"], status["w"]
    if stage == 3:
        dtype = np.float16 if out_fp16 else np.float32
        return status, out[: status["bytes_written"]].view(dtype).reshape(c, h, w).copy()
    return status, out[: status["bytes_written"]].reshape(h, w, c).copy()
