"""Moving a model's weight image into the pool, group by group, on a copy stream of its own.

`Gate` is what launches wait on: how many groups have arrived. On CPU vGPUs the copy stream is a
thread (`HostCopier`): it copies each group's ranges (a real memcpy, into the emulated device's
memory on the CUDA emulator) and, given a `bandwidth`, holds each group back until the time a PCIe
link of that bandwidth would have taken (`overhead_s` per group plus bytes / bandwidth), so the
pipeline on a CPU vGPU has the shape it has on a GPU. On GPUs (`CupyCopier`) each group is
asynchronous copies from pinned host memory on a non-blocking stream, with an event behind it; a
launch stream waits on the event of the group it needs (`Switch.wait_on`), so nothing waits on the host.
"""

from __future__ import annotations

import queue
import statistics
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from gpu_runtime.thread_names import name_this_thread

ALL = 1 << 30  # a gate that has everything: the model is resident


class Gate:
    """Groups of one model that have arrived; `wait_for(n)` returns once n have."""

    def __init__(self):
        self.arrived = ALL
        self.watch: Switch | None = None  # the switch whose first launch is still to come
        self.switch: Switch | None = None  # GPU: the switch whose copies may still run (its events)
        self._cond = threading.Condition()

    def close(self) -> None:
        self.arrived = 0

    def started(self) -> None:
        """The first launch after a switch is starting: its start-up overhead ends here."""
        switch, self.watch = self.watch, None
        if switch is not None:
            switch.first_launch_s = time.perf_counter()
            switch.on_first_launch(switch)

    def arrive(self, groups: int) -> None:
        with self._cond:
            self.arrived = groups
            self._cond.notify_all()

    def wait_for(self, groups: int) -> None:
        with self._cond:
            self._cond.wait_for(lambda: self.arrived >= groups)


@dataclass
class Switch:
    """One transfer: the source image, its destination in the pool and the groups' byte ranges."""

    model: str
    source: Any
    destination: Any
    ranges: tuple
    gate: Gate
    done: Callable[["Switch"], None]  # called once the last group landed (before launches see it)
    on_first_launch: Callable[["Switch"], None]
    nbytes: int = 0
    requested_s: float = 0.0  # when the batch that needed it arrived
    first_launch_s: float = 0.0
    arrived_s: float = 0.0  # when the last group landed
    events: list = field(default_factory=list)  # GPU: one event per group

    def wait_on(self, stream: Any, groups: int) -> None:
        """GPU: make `stream` wait for the first `groups` groups (no host wait)."""
        stream.wait_event(self.events[groups - 1])


def handoff_s(copier, reps: int = 7) -> float:
    """Median time from handing `copier` a one-group 4 KB switch to a waiting thread seeing it
    arrive: what each group costs on this host beyond its bytes (thread wake-ups, on a CPU vGPU),
    which the grouping plans with."""
    source, destination = np.zeros(4096, np.uint8), np.zeros(4096, np.uint8)
    times = []
    for _ in range(reps):
        gate = Gate()
        switch = Switch("", source, destination, (((0, 4096),),), gate, _ignore, _ignore, 4096)
        start = time.perf_counter()
        copier.transmit(switch)
        gate.wait_for(1)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def _ignore(switch: Switch) -> None:
    """The callbacks of `handoff_s`'s switches."""


class HostCopier:
    """The copy stream of a CPU vGPU: one thread; `bandwidth` in bytes/s (None: the memcpy as is)."""

    def __init__(self, bandwidth: float | None, overhead_s: float):
        self.bandwidth, self.overhead_s = bandwidth, overhead_s
        self._jobs: queue.SimpleQueue = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._loop, name="vgpu-copy", daemon=True)
        self._thread.start()

    def transmit(self, switch: Switch) -> None:
        switch.gate.close()
        self._jobs.put(switch)

    def close(self) -> None:
        self._jobs.put(None)
        self._thread.join(10)

    def _loop(self) -> None:
        name_this_thread()
        while (switch := self._jobs.get()) is not None:
            start = time.perf_counter()
            moved = 0
            for g, ranges in enumerate(switch.ranges):
                for a, b in ranges:
                    switch.destination[a:b] = switch.source[a:b]
                    moved += b - a
                if self.bandwidth:
                    due = start + (g + 1) * self.overhead_s + moved / self.bandwidth
                    while (left := due - time.perf_counter()) > 0:
                        time.sleep(left)
                if g == len(switch.ranges) - 1:  # done before the last launches may run (and end)
                    switch.arrived_s = time.perf_counter()
                    switch.done(switch)
                switch.gate.arrive(g + 1)


class CupyCopier:
    """The copy stream of a GPU vGPU: pinned source images, a non-blocking stream, one event per
    group. `done` runs on a host thread once the last event completed."""

    def __init__(self):
        import cupy  # optional: CuPy, GPU only

        self._cp = cupy
        self.stream = cupy.cuda.Stream(non_blocking=True)
        self._jobs: queue.SimpleQueue = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._loop, name="vgpu-copy", daemon=True)
        self._thread.start()

    def pinned(self, nbytes: int):
        """Host memory the copy engine reads directly (what `layout.host_image` fills on GPUs)."""
        import cupyx  # optional: CuPy, GPU only

        return cupyx.empty_pinned((nbytes,), self._cp.uint8)

    def bandwidth(self, nbytes: int = 64 << 20) -> float:
        """Bytes/s of one pinned host-to-device copy on this stream (the grouping plans with it)."""
        cp = self._cp
        source, destination = self.pinned(nbytes), cp.empty(nbytes, cp.uint8)
        start, end = cp.cuda.Event(), cp.cuda.Event()
        destination.set(source, stream=self.stream)  # the first copy pays for setting up
        start.record(self.stream)
        destination.set(source, stream=self.stream)
        end.record(self.stream)
        end.synchronize()
        return nbytes / (cp.cuda.get_elapsed_time(start, end) * 1e-3)

    def transmit(self, switch: Switch) -> None:
        switch.events = []
        for ranges in switch.ranges:
            for a, b in ranges:
                switch.destination[a:b].set(switch.source[a:b], stream=self.stream)
            event = self._cp.cuda.Event(disable_timing=True)
            event.record(self.stream)
            switch.events.append(event)
        switch.gate.switch = switch  # graphs wait on the events, on their streams
        switch.gate.arrive(ALL)
        self._jobs.put(switch)

    def close(self) -> None:
        self._jobs.put(None)
        self._thread.join(10)

    def _loop(self) -> None:
        name_this_thread()
        while (switch := self._jobs.get()) is not None:
            switch.events[-1].synchronize()
            switch.arrived_s = time.perf_counter()
            if switch.gate.switch is switch:
                switch.gate.switch = None  # every event has completed: nothing left to wait on
            switch.done(switch)
