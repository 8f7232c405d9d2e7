"""Tiny kernel programs and an instrumented arena executor for the scheduler tests.

Programs follow gpu_runtime.program exactly: buffers at byte offsets in one arena (temporaries
rotate through a few shared slots, as a planner would place them), launches naming numpy kernels.
"""

from __future__ import annotations

import threading
import time

import numpy as np
from gpu_runtime.program import BufferRef, BufferSpec, KernelDef, Launch, Program

from scheduler.cpu_device import CpuDevice


def _dense_tanh(x, w, out):
    np.matmul(x, w, out=out)
    np.tanh(out, out=out)


def _sleep_copy(x, out, seconds):
    time.sleep(seconds)
    out[...] = x


DENSE = KernelDef("dense_tanh", "", _dense_tanh)
SLEEP = KernelDef("sleep_copy", "", _sleep_copy)


def dense_chain(model: str, layers: int, width: int = 32, slots: int = 3, seed: int = 0) -> Program:
    """x -> tanh(x W1) -> ... -> y, temporaries rotating through `slots` shared arena slots."""
    rng = np.random.default_rng(seed)
    nbytes = width * 4
    buffers = [BufferSpec("x", (1, width), "float32", 0, "input")]
    weights = {}
    offset = nbytes
    slot_offsets = []
    for _ in range(slots):
        slot_offsets.append(offset)
        offset += nbytes
    launches = []
    prev = 0
    weight_offset = 0  # weights live in their own region (Program.weight_bytes)
    for k in range(layers):
        buffers.append(BufferSpec(f"w{k}", (width, width), "float32", weight_offset, "weight"))
        weights[len(buffers) - 1] = (rng.standard_normal((width, width)) / np.sqrt(width)).astype(np.float32)
        weight_offset += width * nbytes
        w = len(buffers) - 1
        last = k == layers - 1
        buffers.append(BufferSpec("y" if last else f"t{k}", (1, width), "float32",
                                  offset if last else slot_offsets[k % slots], "output" if last else "temp"))
        out = len(buffers) - 1
        launches.append(Launch(DENSE, (1, 1, 1), (width, 1, 1), (BufferRef(prev), BufferRef(w), BufferRef(out)), (out,)))
        prev = out
    offset += nbytes
    return Program(model, 1, buffers, launches, {"x": 0}, {"y": len(buffers) - 1}, weights, offset,
                   weight_offset)


def gated_chain(model: str, kernels: int, seconds: float, gate) -> Program:
    """Kernels that copy after sleeping `seconds` (declared durations, for profiles), the first one
    `gate(x, out, seconds)` instead (None: the same), for tests that need it to wait for a condition."""
    first = SLEEP if gate is None else KernelDef(f"gate_{model}", "", gate)
    buffers = [BufferSpec("x", (1, 4), "float32", 0, "input"),
               BufferSpec("a", (1, 4), "float32", 16, "temp"),
               BufferSpec("b", (1, 4), "float32", 32, "temp"),
               BufferSpec("y", (1, 4), "float32", 48, "output")]
    launches = []
    src = 0
    for k in range(kernels):
        dst = 3 if k == kernels - 1 else (1 if k % 2 == 0 else 2)
        launches.append(Launch(first if k == 0 else SLEEP, (1, 1, 1), (1, 1, 1),
                               (BufferRef(src), BufferRef(dst), seconds), (dst,)))
        src = dst
    return Program(model, 1, buffers, launches, {"x": 0}, {"y": 3}, {}, 64)


class ArenaState:
    def __init__(self, program: Program):
        self.program = program
        self.arena = np.zeros(program.arena_bytes, np.uint8)
        self.weights = np.zeros(program.weight_bytes, np.uint8)
        self.views = [(self.weights if b.role == "weight" else self.arena)[b.offset:b.offset + b.nbytes]
                      .view(b.dtype).reshape(b.shape) for b in program.buffers]
        for i, value in program.weights.items():
            self.views[i][...] = value


class ArenaExecutor:
    """Runs launches synchronously and logs (model, index, start, end) for every kernel it runs;
    `hook(model, index)`, when set, is called as each kernel starts (a test's gate)."""

    name = "arena-fake"
    preemptible = True

    def __init__(self):
        self.log: list[tuple[str, int, float, float]] = []
        self.hook = None
        self._lock = threading.Lock()

    def load(self, program: Program, flag=None) -> ArenaState:
        return ArenaState(program)

    def set_inputs(self, state: ArenaState, inputs) -> None:
        for name, value in inputs.items():
            state.views[state.program.inputs[name]][...] = value

    def launch(self, state: ArenaState, index: int, stream=None) -> None:
        launch = state.program.launches[index]
        args = [state.views[a.index] if isinstance(a, BufferRef) else a for a in launch.args]
        t0 = time.perf_counter()  # a kernel held by the hook started here
        if self.hook is not None:
            self.hook(state.program.model, index)
        launch.kernel.numpy_impl(*args)
        t1 = time.perf_counter()
        with self._lock:
            self.log.append((state.program.model, index, t0, t1))

    def synchronize(self, state, stream=None) -> None:
        pass

    def outputs(self, state: ArenaState):
        return {name: state.views[i] for name, i in state.program.outputs.items()}


def run_alone(program: Program, inputs) -> dict[str, np.ndarray]:
    """The unpreempted reference: every launch once, in order, on a fresh state."""
    ex = ArenaExecutor()
    state = ex.load(program)
    ex.set_inputs(state, inputs)
    for i in range(len(program.launches)):
        ex.launch(state, i)
    return {k: v.copy() for k, v in ex.outputs(state).items()}


class ObservedCpuDevice(CpuDevice):
    """A CPU vGPU a test can watch: each stream keeps `submitted`, (client, index, kernels
    outstanding just before) per submit, in `guarded` or `unguarded`; `wait_flag_raised(n)` waits
    until the flag has been raised n times (an arrival's launch, then the scheduler's flush)."""

    def __init__(self, executor, **kwargs):
        super().__init__(executor, **kwargs)
        self.guarded, self.unguarded = [], []
        self._raised = 0
        self._raised_cv = threading.Condition()

    def stream(self, guarded, priority=0):
        s = super().stream(guarded, priority)
        s.submitted = []
        submit = s.submit

        def recorded(task, index, pads=(), preempt=False):
            s.submitted.append((task.client, index, s.outstanding()))
            submit(task, index, pads, preempt)

        s.submit = recorded
        (self.guarded if guarded else self.unguarded).append(s)
        return s

    def set_flag(self):
        super().set_flag()
        with self._raised_cv:
            self._raised += 1
            self._raised_cv.notify_all()

    def wait_flag_raised(self, times, timeout=30):
        with self._raised_cv:
            return self._raised_cv.wait_for(lambda: self._raised >= times, timeout)

    def most_outstanding(self):
        """The most kernels any guarded stream held once a submit had landed."""
        return max(n + 1 for s in self.guarded for _, _, n in s.submitted)


class DeclaredTimeDevice(ObservedCpuDevice):
    """Profiles from the kernels' declared durations (a chain's `seconds` argument), not a clock."""

    def time_launch(self, state, index):
        return state.program.launches[index].args[2]
