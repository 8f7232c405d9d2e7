"""Residency of one vGPU: which models hold the pool, switching a model in when a batch needs it,
and the launch gate (`GatedExecutor`) that makes each launch wait only for its own layer group.

A batch is admitted (`admit(model, start)`): a resident model starts at once; a host-resident one
has idle least-recently-used models evicted for it (`holdings`: the policy and the pool), takes its place (its
programs' weight views follow it there when its place changed, `layout.rebind`), its groups go to
the copy stream (`transfer`) and the batch starts at once, its launches waiting at the gate. When
nothing can be evicted (the others are running or have work waiting), the batch waits here until a
batch ends (`release`). Evicted models are rebound to their host image; they stay READY.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from gpu_runtime.residency import metrics
from gpu_runtime.residency.holdings import Holdings
from gpu_runtime.residency.layout import Groups, host_image, make_groups, rebind
from gpu_runtime.residency.transfer import Gate, Switch

OPEN = Gate()  # the gate of states outside residency: everything has arrived


@dataclass
class _Model:
    image: Any  # the host image (pinned on GPUs)
    groups: Groups
    states: list
    gate: Gate
    nbytes: int
    place: int | None = None  # where its states' weight views point in the pool (None: the image)


@dataclass
class SwitchStats:
    """Every switch done (`transfer.Switch`, with its times) and evictions, for benches and tests."""

    switches: list[Switch] = field(default_factory=list)
    evictions: int = 0


class Residency:
    """`pool` is the pre-allocated byte array (NumPy, or CuPy on GPUs) of the budget's size;
    `copier` a `transfer` copier; `bandwidth` and `overhead_s` what the grouping plans with."""

    def __init__(self, pool: Any, copier: Any, bandwidth: float, overhead_s: float, vgpu: str = "",
                 pinned=(), evict_real_time: bool = False, image_allocate: Callable | None = None):
        self.pool, self.copier, self.vgpu = pool, copier, vgpu
        self.bandwidth, self.overhead_s = bandwidth, overhead_s
        self.holdings = Holdings(len(pool), pinned, evict_real_time)
        self.stats = SwitchStats()
        self._image_allocate = image_allocate
        self._models: dict[str, _Model] = {}
        self._waiting: list[tuple[str, bool, Callable[[], None]]] = []
        self._lock = threading.Lock()
        metrics.RESIDENT_BYTES.labels(vgpu).set(0)

    def __contains__(self, model: str) -> bool:
        return model in self._models

    def add(self, model: str, states: list, exec_s: list[float]) -> dict:
        """Take `model`'s loaded program states under residency (`exec_s`: per launch of the first
        state's program, measured). Resident at once if the pool has room without evicting;
        ValueError naming the sizes if it could never fit."""
        program = states[0].program
        if program.weight_bytes > len(self.pool):
            raise ValueError(f"{model}: weights of {program.weight_bytes} bytes exceed the vGPU's residency "
                             f"budget of {len(self.pool)} bytes")
        groups = make_groups(program, exec_s, self.bandwidth, self.overhead_s)
        entry = _Model(host_image(program, self._image_allocate), groups, states, Gate(), program.weight_bytes)
        for state in states:
            state.residency_gate = entry.gate
            state.residency_need = groups.need(state.program)
            rebind(state, entry.image)
        with self._lock:
            self._models[model] = entry
            at = self.holdings.load(model, entry.nbytes)
            if at is not None:  # room without evicting anyone: resident from the start
                self._bind(entry, at)
                _copy(self.pool[at:at + entry.nbytes], entry.image[:entry.nbytes])
                self._count_resident()
        return {"weight_bytes": entry.nbytes, "groups": len(groups), "resident": at is not None}

    def remove(self, model: str) -> None:
        with self._lock:
            self._models.pop(model, None)
            self.holdings.forget(model)
            self._waiting = [w for w in self._waiting if w[0] != model]
            self._count_resident()

    def resident(self) -> list[str]:
        with self._lock:
            return self.holdings.resident()

    def admit(self, model: str, real_time: bool, start: Callable[[], None]) -> None:
        """Run `start()` (which submits the batch) once `model` holds its place: at once when it is
        resident or a switch can begin, else when enough work has ended."""
        with self._lock:
            ready = self._try(model, real_time)
            if not ready:
                self._waiting.append((model, real_time, start))
        if ready:
            start()

    def release(self, model: str) -> None:
        """A batch of `model` ended; batches waiting for room are retried in arrival order."""
        starts = []
        with self._lock:
            self.holdings.end(model)
            still = []
            for waiting in self._waiting:
                if self._try(waiting[0], waiting[1]):
                    starts.append(waiting[2])
                else:
                    still.append(waiting)
            self._waiting = still
        for start in starts:
            start()

    # ---- under the lock ---------------------------------------------------------------------------
    def _try(self, model: str, real_time: bool) -> bool:
        entry = self._models[model]
        taken = self.holdings.take(model, entry.nbytes, real_time, {w[0] for w in self._waiting}.__contains__)
        if taken is None:
            return False
        victims, at = taken
        if at is None:  # resident
            return True
        for victim in victims:
            self._bind(self._models[victim], None)
            self.stats.evictions += 1
            metrics.EVICTIONS.labels(*metrics.labels(victim, self.vgpu)).inc()
        self._bind(entry, at)
        self.holdings.policy.begin(model)  # the copy keeps the model busy too: nobody evicts it mid-flight
        switch = Switch(model, entry.image, self.pool[at:at + entry.nbytes], entry.groups.ranges, entry.gate,
                        self._arrived, self._first_launch, entry.nbytes, time.perf_counter())
        entry.gate.watch = switch
        self.copier.transmit(switch)
        self._count_resident()
        return True

    def _bind(self, entry: _Model, at: int | None) -> None:
        """Point the model's states at pool offset `at` (None: its host image) unless they do."""
        if at == entry.place and at is not None:
            return
        region = entry.image if at is None else self.pool[at:at + entry.nbytes]
        for state in entry.states:
            rebind(state, region)
        entry.place = at

    def _count_resident(self) -> None:
        metrics.RESIDENT_BYTES.labels(self.vgpu).set(
            sum(self._models[m].nbytes for m in self.holdings.resident() if m in self._models))

    def _first_launch(self, switch: Switch) -> None:
        metrics.SWITCH_STARTUP_US.labels(*metrics.labels(switch.model, self.vgpu)).inc(
            (switch.first_launch_s - switch.requested_s) * 1e6)

    def _arrived(self, switch: Switch) -> None:
        """The copy stream's callback once a switch's last group landed: the copy's hold ends."""
        self.stats.switches.append(switch)
        labels = metrics.labels(switch.model, self.vgpu)
        metrics.SWITCHES.labels(*labels).inc()
        metrics.SWITCH_BYTES.labels(*labels).inc(switch.nbytes)
        metrics.SWITCH_DURATION_US.labels(*labels).inc((switch.arrived_s - switch.requested_s) * 1e6)
        self.release(switch.model)


def _copy(destination: Any, source: Any) -> None:
    """A whole image at once (a load, not a switch): CuPy arrays take host data through `set`."""
    if hasattr(destination, "set"):
        destination.set(source)
    else:
        destination[...] = source


class GatedExecutor:
    """A kernel-program executor whose launches wait at their model's gate for the layer group
    they need; everything else is the executor's own. States it loads start with the open gate."""

    def __init__(self, inner: Any):
        self._inner = inner

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    def load(self, program, *args, **kwargs):
        state = self._inner.load(program, *args, **kwargs)
        state.residency_gate = OPEN
        state.residency_need = [0] * len(program.launches)
        return state

    def launch(self, state, index: int, stream=None) -> None:
        gate, need = state.residency_gate, state.residency_need[index]
        if gate.arrived < need:
            gate.wait_for(need)
        if index == 0 and gate.watch is not None:
            gate.started()
        self._inner.launch(state, index, stream)


def measure_launches(executor: Any, state: Any) -> list[float]:
    """Seconds each launch of `state`'s program takes (once, in order, synchronised)."""
    out = []
    for i in range(len(state.program.launches)):
        t0 = time.perf_counter()
        executor.launch(state, i)
        executor.synchronize(state)
        out.append(time.perf_counter() - t0)
    return out


def cpu_pool(nbytes: int) -> np.ndarray:
    return np.zeros(nbytes, np.uint8)
