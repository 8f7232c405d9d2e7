"""CUDA vGPU: CuPy streams over the cupy executor, the guard flag in host-mapped pinned memory.

Progress without synchronising: after every kernel on a BE stream the device enqueues a one-thread
marker kernel that, unless the flag is set, stores the entry's sequence number into a
host-mapped counter; the host reads the counter with a plain load. A marker that ran with the
flag clear proves its kernel ran to the end with the flag clear, and once a marker finds the flag
set every later kernel on that stream starts guarded and exits at once, so after a flush at most
one kernel per stream (the one that was running, possibly cut at a tile boundary) is re-run:
`exact_progress`. RT streams are unguarded and use an event per kernel instead.

Preemption latency on the GPU timeline: `on_arrival` records an event on an idle clock stream when
an RT request arrives and the RT stream records one after the task's first kernel; the first
kernel's start is the latter minus that kernel's solo duration (measured once per program).
"""

from __future__ import annotations

import threading
import time
from collections import deque
from typing import Any, Sequence

import numpy as np

from scheduler.device import Kernel
from scheduler.padded_kernel import Padder
from scheduler.padding import PaddingRules
from scheduler.profiler import SM90, DeviceLimits
from scheduler.task import RT, Task

MARKER_SOURCE = r"""
extern "C" __global__ void atoll_progress(const int* __restrict__ flag, int* counter, int value) {
  if (!*((volatile const int*)flag)) { *((volatile int*)counter) = value; __threadfence_system(); }
}
"""


class MappedCounter:
    """One int32 in host-mapped pinned memory: kernels store to it, the host reads it directly."""

    def __init__(self, cp):
        import ctypes

        rt = cp.cuda.runtime
        self._rt = rt
        self._ptr = rt.hostAlloc(4, rt.hostAllocMapped)
        self.host = np.ctypeslib.as_array(ctypes.cast(self._ptr, ctypes.POINTER(ctypes.c_int32)), shape=(1,))
        self.host[0] = 0
        # Unified addressing: the mapped allocation has the same address on the device.
        self.device = cp.ndarray((1,), cp.int32, cp.cuda.MemoryPointer(cp.cuda.UnownedMemory(self._ptr, 4, self), 0))

    def __del__(self):
        try:
            self._rt.freeHost(self._ptr)
        except Exception:  # interpreter shutdown: the driver may be gone already
            pass


# NVRTC takes a fraction of a second per dispatcher; bound the start-up cost of many model pairs.
MAX_PREPARED_VARIANTS = 48


def _spin_until(done) -> None:
    while not done():
        time.sleep(0)  # give the GIL away between queries


class CudaStream:
    def __init__(self, device: "CudaDevice", guarded: bool, priority: int):
        cp = device.cp
        self.guarded = guarded
        self._device = device
        # CUDA stream priorities: lower numbers are higher priority; -1 is the highest on H100.
        try:
            self.stream = cp.cuda.Stream(non_blocking=True, priority=priority)
        except TypeError:  # a CuPy without stream priorities: same semantics, no priority
            self.stream = cp.cuda.Stream(non_blocking=True)
        self._entries: deque = deque()  # (seq, task, index, pads, event|None)
        self._seq = 0
        self._exit_event = None  # recorded behind everything submitted so far, by `exited`
        if guarded:
            self._counter = MappedCounter(cp)

    def submit(self, task: Task, index: int, pads: Sequence[Kernel] = ()) -> None:
        dev = self._device
        if pads:
            # Planned pads passed `can_pad`, so their variant exists: dropping one silently would
            # leave its BE task waiting for a kernel that never runs.
            if not dev.padder.launch([(task.state, index)] + [(t.state, i) for t, i in pads], self.stream):
                raise RuntimeError("padded launch planned without a compiled variant")
        else:
            dev.executor.launch(task.state, index, self.stream)
        self._seq += 1
        event = None
        if self.guarded:
            with self.stream:
                dev.marker((1, 1, 1), (1, 1, 1), (dev.flag.device, self._counter.device, np.int32(self._seq)))
        else:
            event = dev.cp.cuda.Event()
            event.record(self.stream)
            if index == 0 and task.priority == RT:
                dev.first_kernel_events[task.id] = event
        if task.first_kernel_s is None:
            task.first_kernel_s = dev.clock()  # submit time; RT tasks get the GPU-side time at finish
        self._entries.append((self._seq, task, index, tuple(pads), event))
        self._exit_event = None

    def outstanding(self) -> int:
        return len(self._entries)

    def poll(self) -> None:
        entries = self._entries
        if self.guarded:
            seen = int(self._counter.host[0])
            while entries and entries[0][0] <= seen:
                self._credit(entries.popleft())
        else:
            while entries and entries[0][4].done:
                self._credit(entries.popleft())

    @staticmethod
    def _credit(entry) -> None:
        _, task, index, pads, _ = entry
        task.executed += 1
        task.completed = index + 1
        for t, i in pads:
            t.executed += 1
            t.completed = i + 1

    def exited(self) -> bool:
        # After a flush the markers stop counting, so only an event behind the last kernel says
        # that the guarded ones have all returned.
        if not self._entries:
            return True
        if self._exit_event is None:
            self._exit_event = self._device.cp.cuda.Event(disable_timing=True)
            self._exit_event.record(self.stream)
        return self._exit_event.done

    def drain(self) -> None:
        _spin_until(self.exited)
        self.poll()
        self._entries.clear()  # flushed by the guard: exited without running (or cut short)

    def close(self) -> None:
        self.stream.synchronize()


class CudaDevice:
    name = "cuda"
    exact_progress = True
    limits: DeviceLimits = SM90
    # Each pad gets its own blocks beside the RT blocks; one BE kernel per padded launch keeps the
    # number of compiled dispatcher variants small.
    padding_rules = PaddingRules(max_pads=1, serial=False, same_block=True)
    poll_s = 0.0  # busy polling: kernel completions do not raise `wake`

    def __init__(self, executor: Any, clock=time.perf_counter):
        import cupy

        self.cp = cupy
        self.executor = executor
        self.clock = clock
        self.wake = threading.Event()
        self.flag = executor.new_flag()  # shared by every BE state
        self._zero = executor.new_flag()  # never set: RT states and padded bodies
        self.marker = cupy.RawKernel(MARKER_SOURCE, "atoll_progress")
        self._clock_stream = cupy.cuda.Stream(non_blocking=True)
        self.arrival_events: dict[int, Any] = {}
        self.first_kernel_events: dict[int, Any] = {}
        self._k0_solo_s: dict[int, float] = {}
        self._resources: dict[str, tuple[int, int]] = {}
        self.padder = Padder(cupy, self._zero, self.limits, self.resources)
        props = cupy.cuda.runtime.getDeviceProperties(cupy.cuda.Device().id)
        name = props["name"].decode() if isinstance(props["name"], bytes) else props["name"]
        self.description = f"{name} (cupy executor)"

    def stream(self, guarded: bool, priority: int = 0) -> CudaStream:
        return CudaStream(self, guarded, priority)

    def load(self, program, guarded: bool) -> Any:
        state = self.executor.load(program, flag=self.flag if guarded else self._zero)
        if not guarded:
            self._k0_solo_s[id(state)] = float(np.median([self.time_launch(state, 0) for _ in range(5)]))
        return state

    def set_inputs(self, state, inputs) -> None:
        self.executor.set_inputs(state, inputs)
        state.stream.synchronize()  # the copy ran on the state's own stream; ours must see it

    def set_flag(self) -> None:
        self.flag.set()

    def clear_flag(self) -> None:
        self.flag.clear()

    def on_arrival(self, task: Task) -> None:
        if task.priority == RT:
            event = self.cp.cuda.Event()
            event.record(self._clock_stream)
            self.arrival_events[task.id] = event

    def started_at(self, task: Task) -> float | None:
        """RT tasks: arrival + (GPU time from arrival to the end of kernel 0 - kernel 0 alone)."""
        arrival = self.arrival_events.pop(task.id, None)
        first = self.first_kernel_events.pop(task.id, None)
        if arrival is None or first is None:
            return task.first_kernel_s
        arrival.synchronize()
        first.synchronize()
        gap = self.cp.cuda.get_elapsed_time(arrival, first) * 1e-3 - self._k0_solo_s[id(task.state)]
        return task.arrival_s + max(0.0, gap)

    def time_launch(self, state, index: int) -> float:
        cp = self.cp
        start, end = cp.cuda.Event(), cp.cuda.Event()
        start.record(state.stream)
        self.executor.launch(state, index, state.stream)
        end.record(state.stream)
        end.synchronize()
        return cp.cuda.get_elapsed_time(start, end) * 1e-3

    def can_pad(self, rt_state, rt_index: int, be_state, be_index: int) -> bool:
        return self.padder.ready([rt_state.program.launches[rt_index], be_state.program.launches[be_index]])

    def prepare_pads(self, pairs, limit: int = MAX_PREPARED_VARIANTS) -> int:
        """Compile the `limit` dispatcher variants that the most (RT kernel, BE kernel) pairs
        need; pairs whose variant is not built are simply not padded (`can_pad` only looks)."""
        from collections import Counter
        from concurrent.futures import ThreadPoolExecutor

        launches, counts = {}, Counter()
        for rs, r, bs, i, n in pairs:
            pair = [rs.program.launches[r], bs.program.launches[i]]
            key = self.padder.key(pair)
            launches.setdefault(key, pair)
            counts[key] += n
        chosen = [launches[k] for k, _ in counts.most_common(limit)]
        with ThreadPoolExecutor(8) as pool:
            list(pool.map(self.padder.variant, chosen))
        return len(chosen)

    def resources(self, kernel) -> tuple[int, int]:
        """(registers per thread, static shared bytes) of the compiled kernel."""
        found = self._resources.get(kernel.name)
        if found is None:
            attrs = self.executor.compile(kernel).attributes
            found = self._resources[kernel.name] = (attrs["num_regs"], attrs["shared_size_bytes"])
        return found

    def close(self) -> None:
        self.cp.cuda.Device().synchronize()
