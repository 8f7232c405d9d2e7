"""CUDA vGPU: CUDA-graph units on prioritised CuPy streams over the cupy executor.

An RT task is one unit: its program as one CUDA graph on the highest-priority stream, opened by a
stamp kernel (when it first got an SM). A BE task's units are chunk graphs of about `chunk_s` GPU
time, each ending in a progress marker the host reads without synchronising, so progress is exact
per chunk. A lone RT task is launched by the arriving thread through the native launcher: flag
write and graph launch stream-ordered on the RT stream. Under `reef` the GPU's block scheduler pads:
flushed BE chunks resume beside the RT graph at the lowest stream priority. Why, and the figures:
docs/scheduling.md.
"""

from __future__ import annotations

import statistics
import threading
import time
from collections import deque
from typing import Any, Sequence

from gpu_runtime.executors.quiet import RT_WINDOW
from gpu_runtime.executors.rt_launcher import NativeBuildError, RtLauncher
from scheduler.device import Kernel
from scheduler.profiler import DeviceLimits
from scheduler.task import Task
from scheduler.vhq import chunk_bounds

CHUNK_S = 100e-6  # REEF's vHQ entries: tens to a few hundred us of GPU work
# Priorities outside the device's range are clamped to it by CUDA: ask for the extremes.
HIGHEST_PRIORITY, LOWEST_PRIORITY = -100, 0
START_WAIT_S = 0.05  # give up spinning for the stamp after this (the task still runs)


def _spin_until(done) -> None:
    while not done():
        time.sleep(0)  # give the GIL away between queries


def device_limits(cp) -> DeviceLimits:
    """Occupancy limits of the current device, read from the driver (an A100 differs from an
    H100: fewer shared bytes and registers per SM are not the same everywhere)."""
    props = cp.cuda.runtime.getDeviceProperties(cp.cuda.Device().id)
    return DeviceLimits(f"sm_{props['major']}{props['minor']}",
                        max_threads_per_sm=props["maxThreadsPerMultiProcessor"],
                        max_blocks_per_sm=props["maxBlocksPerMultiProcessor"],
                        registers_per_sm=props["regsPerMultiprocessor"],
                        shared_bytes_per_sm=props["sharedMemPerMultiprocessor"],
                        reserved_shared_per_block=props.get("reservedSharedMemPerBlock", 1024),
                        warp_size=props["warpSize"])


class CudaStream:
    def __init__(self, device: "CudaDevice", guarded: bool, priority: int):
        cp = device.cp
        self.guarded = guarded
        self._device = device
        try:
            self.stream = cp.cuda.Stream(non_blocking=True, priority=priority)
        except TypeError:  # a CuPy without stream priorities: same semantics, no priority
            self.stream = cp.cuda.Stream(non_blocking=True)
        self._entries: deque = deque()  # (task, unit)
        self._exit_event = None  # recorded behind everything submitted so far, by `exited`

    def submit(self, task: Task, index: int, pads: Sequence[Kernel] = (), preempt: bool = False) -> None:
        dev = self._device
        if self.guarded:
            dev.executor.launch_chunk(task.state, index, self.stream)
            if task.first_kernel_s is None:
                task.first_kernel_s = dev.clock()
        else:
            dev.launch_rt(task, self.stream, preempt)
        self._entries.append((task, index))
        self._exit_event = None

    def outstanding(self) -> int:
        return len(self._entries)

    def poll(self) -> None:
        entries = self._entries
        while entries:
            task, index = entries[0]
            state = task.state
            if self.guarded:
                if index >= state.progress.value:
                    return
            else:
                if task.first_kernel_s is None and state.started.value:
                    task.first_kernel_s = self._device.clock()
                if not self._device.rt_done(state):
                    return
            entries.popleft()
            task.executed += 1
            task.completed = index + 1

    def exited(self) -> bool:
        # After a flush the markers stop counting, so only an event behind the last unit says
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
    padding_rules = None  # no source-level padding: `reef` pads in hardware (module docstring)
    pads_in_hardware = True
    poll_s = 0.0  # busy polling: unit completions do not raise `wake`

    def __init__(self, executor: Any, clock=time.perf_counter, chunk_s: float = CHUNK_S,
                 measure_start: bool = False, native: bool = True):
        import cupy  # optional: CuPy, GPU only

        self.cp = cupy
        self.executor = executor
        self.clock = clock
        self.chunk_s = chunk_s
        self.measure_start = measure_start
        self.wake = threading.Event()
        self.flag = executor.new_flag()  # shared by every BE state
        self._zero = executor.new_flag()  # never set: RT states
        self.limits = device_limits(cupy)
        self._rt: dict[int, tuple] = {}  # id(RT state) -> (native program, flag event, done event)
        self._flag_events: list = []  # events behind stream-ordered flag writes not yet waited for
        # residency's gate (gpu_runtime/residency/manager.py): the native RT launch bypasses `execute`
        self._await_weights = getattr(executor, "await_weights", None)
        self.launcher = None
        if native:
            try:
                self.launcher = RtLauncher()
            except (NativeBuildError, OSError):
                self.launcher = None  # no C compiler here: the same launch, from Python
        props = cupy.cuda.runtime.getDeviceProperties(cupy.cuda.Device().id)
        name = props["name"].decode() if isinstance(props["name"], bytes) else props["name"]
        self.description = f"{name} (cupy executor, CUDA graphs" + (
            ", native RT launcher)" if self.launcher else ", RT launched from Python)")

    def stream(self, guarded: bool, priority: int = 0) -> CudaStream:
        return CudaStream(self, guarded, HIGHEST_PRIORITY if priority < 0 else LOWEST_PRIORITY)

    # ---- loading ---------------------------------------------------------------------------------
    def load(self, program, guarded: bool) -> Any:
        ex = self.executor
        if not guarded:
            state = ex.load(program, flag=self._zero, stamp=True)
            self._arm_rt(state)
            return state
        probe = ex.load(program, flag=self.flag)
        durations = [statistics.median(self.time_launch(probe, i) for _ in range(3))
                     for i in range(len(program.launches))]
        return ex.load(program, flag=self.flag, chunks=chunk_bounds(durations, self.chunk_s),
                       weights=probe.weights)

    def _arm_rt(self, state) -> None:
        cp = self.cp
        flag_event, done = cp.cuda.Event(disable_timing=True), cp.cuda.Event(disable_timing=True)
        program = None
        if self.launcher is not None:
            program = self.launcher.program(self.launcher.current_context(), 0, self.flag.address,
                                            flag_event.ptr,
                                            state.graph.graphExec, done.ptr,
                                            state.started._ptr if self.measure_start else 0)
        self._rt[id(state)] = (program, flag_event, done)

    def units(self, state) -> int:
        return len(state.chunks) if state.chunks else 1

    def set_inputs(self, state, inputs) -> None:
        self.executor.set_inputs(state, inputs)
        if state.progress is not None:
            state.progress.reset()  # no chunk of this state is in flight: a new task starts
        state.stream.synchronize()  # the copy ran on the state's own stream; ours must see it

    # ---- the RT path -----------------------------------------------------------------------------
    def launch_rt(self, task: Task, stream, preempt: bool) -> None:
        state = task.state
        program, flag_event, done = self._rt[id(state)]
        state.started.reset()
        if program is not None:
            if self._await_weights is not None:
                self._await_weights(state, stream)  # a model switching in: the graph waits on the device
            program.stream = stream.ptr
            task.launched_s, started = self.launcher.fire(
                program, preempt, START_WAIT_S if self.measure_start else 0.0)
            if started is not None:
                task.first_kernel_s = started
        else:
            task.launched_s = self.clock()
            with RT_WINDOW, stream:  # no garbage collection inside the launch (the native path's too)
                if preempt:
                    self.flag.device.fill(1)  # on the RT stream: stream-ordered like the C path
                flag_event.record(stream)
                self.executor.execute(state, stream)
                done.record(stream)
        if preempt:
            self.flag.assume_set()
            self._flag_events.append(flag_event)

    def rt_done(self, state) -> bool:
        return self._rt[id(state)][2].done

    def started_at(self, task: Task) -> float | None:
        return task.first_kernel_s

    # ---- the flag --------------------------------------------------------------------------------
    def set_flag(self) -> None:
        if not self.flag.is_set():
            self.flag.set()

    def clear_flag(self) -> None:
        # A stream-ordered write still queued behind the RT stream's work would land after this
        # clear and stop every BE kernel for good: wait until those writes are done.
        while self._flag_events:
            self._flag_events.pop().synchronize()
        self.flag.clear()

    # ---- profiling -------------------------------------------------------------------------------
    def time_launch(self, state, index: int) -> float:
        cp = self.cp
        start, end = cp.cuda.Event(), cp.cuda.Event()
        start.record(state.stream)
        self.executor.launch(state, index, state.stream)
        end.record(state.stream)
        end.synchronize()
        return cp.cuda.get_elapsed_time(start, end) * 1e-3

    def resources(self, kernel) -> tuple[int, int]:
        """(registers per thread, static shared bytes) of the compiled kernel."""
        attrs = self.executor.compile(kernel).attributes
        return attrs["num_regs"], attrs["shared_size_bytes"]

    def close(self) -> None:
        self.cp.cuda.Device().synchronize()
