"""The native real-time launch path (native/rt_launch.c), built with the system C compiler on first
use (`gpu_runtime.native`, cached by content under build/rt_launch/) and called through ctypes.

Why native: between an RT request's arrival and its graph's launch there must be no scheduler Python
and nothing waiting for the GIL. The C function makes the four driver calls (flag write, event,
graph, event) back to back with the GIL released, and can spin on the stamp word to report when the
first RT kernel got an SM. The arriving thread calls it itself, as a launch thread would add a
wake-up to every arrival. `RtLauncher.program` makes all a launch passes, so `fire` allocates no
ctypes object; it runs inside `quiet.RT_WINDOW`, where no garbage collection starts. Without a
compiler `NativeBuildError` is raised, and callers launch from Python. Figures: docs/gpu.md.
"""

from __future__ import annotations

import ctypes
import os
from pathlib import Path

from gpu_runtime.executors.quiet import RT_WINDOW
from gpu_runtime.native import NativeBuildError, build_library

SOURCE = Path(__file__).with_name("native") / "rt_launch.c"
CC = os.environ.get("CC", "cc")
CFLAGS = ("-O2", "-shared", "-fPIC", "-std=c11")
LIBCUDA = "libcuda.so.1"


class RtProgram(ctypes.Structure):
    """Mirrors `atoll_rt_program` in rt_launch.c; carries its launch's preallocated arguments."""

    _fields_ = [("context", ctypes.c_void_p), ("stream", ctypes.c_void_p), ("flag", ctypes.c_ulonglong),
                ("flag_event", ctypes.c_void_p), ("graph", ctypes.c_void_p),
                ("done_event", ctypes.c_void_p), ("started", ctypes.c_void_p)]

    def __init__(self, *fields):
        super().__init__(*fields)
        self.pointer = ctypes.pointer(self)
        self.entered_at, self.started_at = ctypes.c_double(), ctypes.c_double()
        self.entered_ref, self.started_ref = ctypes.byref(self.entered_at), ctypes.byref(self.started_at)


class RtLauncher:
    def __init__(self, libcuda: str = LIBCUDA):
        self._lib = ctypes.CDLL(str(build_library([SOURCE], CFLAGS, "librt_launch.so", "rt_launch",
                                                  CC, ("-ldl",))))
        self._lib.atoll_rt_open.argtypes = [ctypes.c_char_p]
        self._lib.atoll_rt_fire.argtypes = [ctypes.POINTER(RtProgram), ctypes.c_int, ctypes.c_double,
                                            ctypes.POINTER(ctypes.c_double), ctypes.POINTER(ctypes.c_double)]
        rc = self._lib.atoll_rt_open(libcuda.encode())
        if rc:
            raise NativeBuildError(f"the RT launcher could not open {libcuda} (code {rc})")
        self._driver = ctypes.CDLL(libcuda)
        self._fire = self._lib.atoll_rt_fire

    def current_context(self) -> int:
        """The calling thread's current CUcontext (after any CUDA use: CuPy's primary context)."""
        ctx = ctypes.c_void_p()
        rc = self._driver.cuCtxGetCurrent(ctypes.byref(ctx))
        if rc:
            raise RuntimeError(f"cuCtxGetCurrent failed: CUDA driver error {rc}")
        return ctx.value or 0

    @staticmethod
    def program(context: int, stream: int, flag: int, flag_event: int, graph: int, done_event: int,
                started: int = 0) -> RtProgram:
        """Driver handles as integers; `started` is the host address of the stamp word (0: none)."""
        return RtProgram(context, stream, flag, flag_event, graph, done_event, started)

    def fire(self, program: RtProgram, preempt: bool, wait_s: float = 0.0) -> tuple[float, float | None]:
        """Raise the flag (if `preempt`) and launch. Returns (when the native call began, when the
        stamp was seen) on time.perf_counter's clock; the latter only with `wait_s`, else None."""
        with RT_WINDOW:
            rc = self._fire(program.pointer, 1 if preempt else 0, wait_s, program.entered_ref,
                            program.started_ref)
        if rc:
            raise RuntimeError(f"RT launch failed: CUDA driver error {rc}")
        return program.entered_at.value, program.started_at.value or None
