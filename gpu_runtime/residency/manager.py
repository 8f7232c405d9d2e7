"""Residency of one vGPU: which models hold the pool, switching a model in when a batch needs it,
and the launch gate (`GatedExecutor`) that makes each launch wait only for its own layer group.

A batch is admitted (`admit(model, start)`): a resident model starts at once; a host-resident one
has idle least-recently-used models evicted for it (`holdings`: the policy and the pool), takes its
place, its groups go to the copy stream (`transfer`) and the batch starts at once, its launches
waiting at the gate. When nothing can be evicted (the others are running or have work waiting), the
batch waits here until a batch ends (`release`). Evicted models stay READY.

The pool is one of two kinds. A byte array (CPU vGPUs, numpy executor): a model's weight views are
rebound to its place in it (`layout.rebind`) and, when evicted, to its host image; arenas stay per
model. A `vmm.VirtualPool` (GPUs, and the CUDA emulator): every model keeps the addresses it was
loaded at (its weights' and its arenas' reserved ranges, which captured CUDA graphs bake in), and
taking a place maps the pool's chunks there under them, evicting unmaps them: weights and arenas
both live in the pool and count against it, and nothing is rebound.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from gpu_runtime.executors.device_memory import Region
from gpu_runtime.residency import metrics
from gpu_runtime.residency.holdings import Holdings
from gpu_runtime.residency.layout import Groups, host_image, make_groups, rebind
from gpu_runtime.residency.transfer import Gate, Switch
from gpu_runtime.residency.vmm import VirtualPool

OPEN = Gate()  # the gate of states outside residency: everything has arrived


@dataclass
class _Model:
    name: str
    image: Any  # the host image (pinned on GPUs)
    groups: Groups
    states: list
    gate: Gate
    nbytes: int  # weight bytes
    footprint: int  # bytes of pool it takes (its weights; and its arenas in a virtual pool)
    weights: Any = None  # virtual pool: the byte array over its weights' range
    place: int | None = None  # its place in the pool (None: host-resident)


@dataclass
class _Loading:
    """A model's ranges in a virtual pool while it loads (`Residency.place`)."""

    weights: Region | None = None
    arenas: dict = field(default_factory=dict)  # arena group -> Region
    ranges: list = field(default_factory=list)  # (Region, its range's address), every one reserved


@dataclass
class SwitchStats:
    """Every switch done (`transfer.Switch`, with its times) and evictions, for benches and tests."""

    switches: list[Switch] = field(default_factory=list)
    evictions: int = 0


class Residency:
    """`pool` is the pre-allocated byte array (NumPy) of the budget's size or a `vmm.VirtualPool`;
    `copier` a `transfer` copier; `bandwidth` and `overhead_s` what the grouping plans with. With a
    virtual pool, the executor's `memory.placer` must be `place`, and loads made inside
    `loading(model)`."""

    def __init__(self, pool: Any, copier: Any, bandwidth: float, overhead_s: float, vgpu: str = "",
                 pinned=(), evict_real_time: bool = False, image_allocate: Callable | None = None):
        self.pool, self.copier, self.vgpu = pool, copier, vgpu
        self.space = pool if isinstance(pool, VirtualPool) else None
        self.bandwidth, self.overhead_s = bandwidth, overhead_s
        self.holdings = Holdings(pool.nbytes if self.space else len(pool), pinned, evict_real_time)
        self._loading: dict[str, _Loading] = {}
        self.stats = SwitchStats()
        self._image_allocate = image_allocate
        self._models: dict[str, _Model] = {}
        self._waiting: list[tuple[str, bool, Callable[[], None]]] = []
        self._lock = threading.Lock()
        metrics.RESIDENT_BYTES.labels(vgpu).set(0)

    def __contains__(self, model: str) -> bool:
        return model in self._models

    @contextlib.contextmanager
    def loading(self, model: str):
        """Loads of `model`'s programs inside take their weights and arenas from the virtual pool's
        ranges of `model` (`place`); a reload first drops the model's earlier states and ranges,
        a failed load its new ranges."""
        self.remove(model)
        if self.space is None:
            yield
            return
        with self._lock:
            self._loading[model] = _Loading()
        try:
            yield
        except BaseException:
            with self._lock:
                self._loading.pop(model, None)
                self.space.forget(model)
            raise
        with self._lock:
            self._loading.pop(model, None)

    def place(self, model: str, group: Any, program: Any, arena_bytes: int,
              weights: Region | None) -> tuple[Region, Region, bool] | None:
        """`DeviceMemory.placer`: (weights, arena, whether the weights are new) of a program of a
        model inside `loading`, as ranges reserved in the virtual pool (one weights range per
        model, one arena per group, as `DeviceMemory` shares them), else None."""
        with self._lock:
            loading = self._loading.get(model)
            if loading is None:
                return None
            fresh = False
            if weights is None:
                if loading.weights is None:
                    loading.weights = self._reserve(loading, model, max(program.weight_bytes, 1), "weights")
                    fresh = True
                weights = loading.weights
            arena = loading.arenas.get(group)
            if arena is None or arena.nbytes < arena_bytes:
                arena = self._reserve(loading, model, max(arena_bytes, 1), "arena")
                if group is not None:
                    loading.arenas[group] = arena
            return weights, arena, fresh

    def _reserve(self, loading: _Loading, model: str, nbytes: int, kind: str) -> Region:
        address, array = self.space.reserve(model, nbytes)
        region = Region(array, nbytes, model, kind)
        loading.ranges.append((region, address))
        return region

    def _drop_unused(self, model: str, states: list) -> None:
        """Ranges of the load that no state kept (a probe's arena a larger one superseded) go."""
        used = {id(r) for state in states for r in (state.weights, state.arena)}
        for region, address in self._loading[model].ranges:
            if id(region) not in used:
                self.space.drop(model, address)
        self._loading[model].ranges = []

    def add(self, model: str, states: list, exec_s: list[float]) -> dict:
        """Take `model`'s loaded program states under residency (`exec_s`: per launch of the first
        state's program, measured). Resident at once if the pool has room without evicting;
        ValueError naming the sizes if it could never fit."""
        program = states[0].program
        if self.space is not None:
            with self._lock:
                self._drop_unused(model, states)
        footprint = self.space.footprint(model) if self.space else program.weight_bytes
        if footprint > self.holdings.places.nbytes:
            what = "weights and arenas" if self.space else "weights"
            raise ValueError(f"{model}: {what} of {footprint} bytes exceed the vGPU's residency "
                             f"budget of {self.holdings.places.nbytes} bytes")
        groups = make_groups(program, exec_s, self.bandwidth, self.overhead_s)
        entry = _Model(model, host_image(program, self._image_allocate), groups, states, Gate(),
                       program.weight_bytes, footprint)
        for state in states:
            state.residency_gate = entry.gate
            state.residency_need = need = groups.need(state.program)
            state.residency_chunk_need = [max(need[a:b], default=1) for a, b in getattr(state, "chunks", None) or ()]
            if self.space is None:
                rebind(state, entry.image)
        with self._lock:
            if self.space is not None:
                entry.weights = states[0].weights.array
                self.space.unback(model)  # the load's own chunks go: READY until it takes a place
            self._models[model] = entry
            at = self.holdings.load(model, entry.footprint)
            if at is not None:  # room without evicting anyone: resident from the start
                self._bind(entry, at)
                _copy(self._destination(entry), entry.image[:entry.nbytes])
                self._count_resident()
        return {"weight_bytes": entry.nbytes, "footprint": footprint, "groups": len(groups),
                "resident": at is not None}

    def remove(self, model: str) -> None:
        with self._lock:
            self._models.pop(model, None)
            self.holdings.forget(model)
            if self.space is not None:
                self.space.forget(model)
            self._waiting = [w for w in self._waiting if w[0] != model]
            self._count_resident()

    def close(self) -> None:
        """The vGPU stops: the copy stream ends, the pool's memory goes back."""
        self.copier.close()
        if self.space is not None:
            with self._lock:
                self.space.close()

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
        taken = self.holdings.take(model, entry.footprint, real_time, {w[0] for w in self._waiting}.__contains__)
        if taken is None:
            return False
        victims, at = taken
        if at is None:  # resident
            return True
        for victim in victims:  # unmapped before the incoming model maps their chunks
            self._bind(self._models[victim], None)
            self.stats.evictions += 1
            metrics.EVICTIONS.labels(*metrics.labels(victim, self.vgpu)).inc()
        self._bind(entry, at)
        self.holdings.policy.begin(model)  # the copy keeps the model busy too: nobody evicts it mid-flight
        switch = Switch(model, entry.image, self._destination(entry), entry.groups.ranges, entry.gate,
                        self._arrived, self._first_launch, entry.nbytes, time.perf_counter())
        entry.gate.watch = switch
        self.copier.transmit(switch)
        self._count_resident()
        return True

    def _bind(self, entry: _Model, at: int | None) -> None:
        """Give the model pool place `at` (None: host-resident). Virtual pool: map the place's
        chunks under its ranges (or unmap them). Else point its states' weight views there (or at
        its host image) unless they do."""
        if self.space is not None:
            if at is None:
                self.space.unmap(entry.name)
            else:
                self.space.map(entry.name, at)
            entry.place = at
            return
        if at == entry.place and at is not None:
            return
        region = entry.image if at is None else self.pool[at:at + entry.nbytes]
        for state in entry.states:
            rebind(state, region)
        entry.place = at

    def _destination(self, entry: _Model) -> Any:
        """Where the model's weight image goes: its own range (virtual pool) or its place."""
        if self.space is not None:
            return entry.weights[:entry.nbytes]
        return self.pool[entry.place:entry.place + entry.nbytes]

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
    they need; everything else is the executor's own. States it loads start with the open gate.
    On GPUs nothing waits on the host: before a graph (a chunk of launches, or the whole program)
    goes to a stream, the stream waits for the copy stream's event of the last group the graph
    reads (`await_weights`), so each chunk waits only for its own groups."""

    def __init__(self, inner: Any):
        self._inner = inner
        self._graphs = hasattr(inner, "launch_chunk")  # the cupy executor's graphs (GPU)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    def load(self, program, *args, **kwargs):
        state = self._inner.load(program, *args, **kwargs)
        state.residency_gate = OPEN
        state.residency_need = [0] * len(program.launches)
        state.residency_chunk_need = [0] * len(getattr(state, "chunks", None) or ())
        return state

    def launch(self, state, index: int, stream=None) -> None:
        gate, need = state.residency_gate, state.residency_need[index]
        if gate.arrived < need:
            gate.wait_for(need)
        if index == 0 and gate.watch is not None:
            gate.started()
        self._inner.launch(state, index, stream)

    def await_weights(self, state, stream, chunk: int | None = None) -> None:
        """GPU: `stream` waits, on the device, for the groups chunk `chunk` (None: the whole
        program) reads, if its model is switching in."""
        gate = state.residency_gate
        switch = gate.switch
        if switch is not None:
            switch.wait_on(stream, state.residency_need[-1] if chunk is None else state.residency_chunk_need[chunk])
        if gate.watch is not None and not chunk:
            gate.started()

    def execute(self, state, stream=None) -> None:
        if not self._graphs:  # launch by launch, each at the gate
            for index in range(len(state.program.launches)):
                self.launch(state, index, stream)
            return
        self.await_weights(state, stream or state.stream)
        self._inner.execute(state, stream)

    def launch_chunk(self, state, index: int, stream=None) -> None:
        self.await_weights(state, stream or state.stream, index)
        self._inner.launch_chunk(state, index, stream)


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
