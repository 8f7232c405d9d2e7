"""Triton's sequence batcher for stateful models, as pure decisions (no clock: callers pass the time).

What it follows (Triton's docs/user_guide/model_configuration.md, "Sequence Batcher", and
architecture.md, "Stateful Models"; the `ModelSequenceBatching` message of model_config.proto):
- Every request of a sequence model carries a correlation ID (non-zero integer or non-empty
  string); the first of a sequence carries START, the last END. A request of a sequence that was
  never started, or whose slot was released, is refused with Triton's words.
- A started sequence is given a slot, here on one vGPU (its implicit state lives in that vGPU's
  worker) until its END request has run, or it sat idle `max_sequence_idle_microseconds` (default
  1 s); then the slot is released and a sequence waiting in the backlog takes it. Requests of one
  sequence run one at a time, in order: at most one request of a sequence in a batch.
- `direct`: each sequence is pinned to a batch slot (one of max_batch_size per vGPU); a batch holds
  the next request of every slot that has one, in slot order; it forms at once, or waits up to
  `max_queue_delay_microseconds` for `minimum_slot_utilization` of the slots to hold one.
- `oldest`: up to `max_candidate_sequences` sequences per vGPU (0: max_batch_size) are candidates;
  a batch takes the oldest next requests among them, up to max_batch_size, as soon as the largest
  `preferred_batch_size` (else max_batch_size) are ready or the oldest has waited
  `max_queue_delay_microseconds`.
- One batch of a model runs on a vGPU at a time (Triton's one batch per model instance), so
  requests of busy sequences queue and the next batch is fuller.

Controls (`control_input`) and implicit state (`state`) are read here; the worker fills them in
(gpu_runtime.vgpu.sequence_state). Control inputs of kind START, END and READY take their
`int32_false_true`, `fp32_false_true` or `bool_false_true` values; CORRID takes the correlation ID
in its `data_type` (UINT64, INT64, UINT32, INT32 or STRING).
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Hashable, Mapping
from dataclasses import dataclass, field

KINDS = {"CONTROL_SEQUENCE_START": "start", "CONTROL_SEQUENCE_END": "end",
         "CONTROL_SEQUENCE_READY": "ready", "CONTROL_SEQUENCE_CORRID": "corrid"}  # fmt: skip
FLAG_VALUES = {"int32_false_true": "INT32", "fp32_false_true": "FP32", "bool_false_true": "BOOL"}
CORRID_TYPES = ("UINT64", "INT64", "UINT32", "INT32", "BYTES")
STRATEGIES = ("direct", "oldest")
DEFAULT_IDLE_US = 1_000_000  # Triton's default max_sequence_idle_microseconds


class SequenceError(ValueError):
    """A request the sequence batcher refuses (Triton's INVALID_ARG), or a config it cannot read."""


def no_correlation_id(model: str) -> str:
    return f"inference request to model '{model}' must specify a non-zero or non-empty correlation ID"


def not_one_row(model: str) -> str:
    return f"inference request to model '{model}' must specify batch-size 1 due to requirements of sequence batcher"


@dataclass(frozen=True)
class Control:
    kind: str  # start | end | ready | corrid
    input_name: str
    datatype: str  # protocol name (INT32, FP32, BOOL, UINT64, BYTES...)
    false_true: tuple = (0, 1)  # start/end/ready: the values for false and true


@dataclass(frozen=True)
class State:
    """An implicit state: the model's `input_name` gets what its `output_name` made for the same
    sequence last time, zeros at START (Triton's default initial state)."""

    input_name: str
    output_name: str
    datatype: str
    dims: tuple[int, ...]


@dataclass(frozen=True)
class SequenceSettings:
    strategy: str = "direct"
    max_sequence_idle_us: int = DEFAULT_IDLE_US
    controls: tuple[Control, ...] = ()
    states: tuple[State, ...] = ()
    max_candidate_sequences: int = 0  # oldest: per vGPU; 0: max_batch_size
    preferred_batch_sizes: tuple[int, ...] = ()  # oldest
    max_queue_delay_us: int = 0
    minimum_slot_utilization: float = 0.0  # direct

    @property
    def model_inputs(self) -> tuple[str, ...]:
        """The model's inputs that requests do not send: the controls and the states."""
        return tuple(c.input_name for c in self.controls) + tuple(s.input_name for s in self.states)

    @property
    def datatypes(self) -> tuple[str, ...]:
        """The datatypes of the tensors the server fills and keeps (the executor must compute them)."""
        return tuple(c.datatype for c in self.controls) + tuple(s.datatype for s in self.states)

    @property
    def state_outputs(self) -> tuple[str, ...]:
        return tuple(s.output_name for s in self.states)

    def config(self, type_name) -> dict:
        """As Triton's config endpoint writes `sequence_batching`; `type_name` maps a protocol
        datatype to its config name (TYPE_INT32)."""
        controls = []
        for c in self.controls:
            kind = next(k for k, v in KINDS.items() if v == c.kind)
            if c.kind == "corrid":
                entry = {"kind": kind, "data_type": type_name(c.datatype)}
            else:
                key = next(k for k, v in FLAG_VALUES.items() if v == c.datatype)
                entry = {"kind": kind, key: list(c.false_true)}
            controls.append({"name": c.input_name, "control": [entry]})
        strategy = {"max_queue_delay_microseconds": str(self.max_queue_delay_us)}
        if self.strategy == "oldest":
            strategy |= {"max_candidate_sequences": self.max_candidate_sequences,
                         "preferred_batch_size": list(self.preferred_batch_sizes)}  # fmt: skip
        else:
            strategy["minimum_slot_utilization"] = self.minimum_slot_utilization
        return {"max_sequence_idle_microseconds": str(self.max_sequence_idle_us), "control_input": controls,
                "state": [{"input_name": s.input_name, "output_name": s.output_name,
                           "data_type": type_name(s.datatype), "dims": [str(d) for d in s.dims]}
                          for s in self.states], self.strategy: strategy}  # fmt: skip


def read_sequence_batching(entry: Mapping, types: Mapping[str, str]) -> SequenceSettings:
    """A config's `sequence_batching` (pbtxt or JSON: numbers may be strings); `types` maps config
    type names (TYPE_INT32) to protocol names."""

    def as_list(value) -> list:
        return [] if value is None else value if isinstance(value, list) else [value]

    try:
        strategies = [s for s in STRATEGIES if s in entry]
        if len(strategies) > 1:
            raise SequenceError("sequence_batching takes one strategy, direct or oldest")
        strategy = strategies[0] if strategies else "direct"
        fields = entry.get(strategy) or {}
        controls = []
        for control_input in as_list(entry.get("control_input")):
            for c in as_list(control_input.get("control")):
                controls.append(_control(control_input["name"], c, types))
        kinds = [c.kind for c in controls]
        if len(set(kinds)) != len(kinds):
            raise SequenceError("sequence_batching names a control kind more than once")
        states = []
        for s in as_list(entry.get("state")):
            dims = tuple(int(d) for d in as_list(s.get("dims")))
            if any(d < 1 for d in dims):
                raise SequenceError(f"state {s.get('input_name')!r}: dims must be positive (variable-size "
                                    "states are not served)")  # fmt: skip
            for initial in as_list(s.get("initial_state")):
                if "data_file" in initial:
                    raise SequenceError(f"state {s.get('input_name')!r}: an initial_state from a data_file is not "
                                        "served (zero_data is)")  # fmt: skip
            states.append(State(s["input_name"], s["output_name"], types[s["data_type"]], dims))
        settings = SequenceSettings(
            strategy, int(entry.get("max_sequence_idle_microseconds", DEFAULT_IDLE_US)), tuple(controls),
            tuple(states), int(fields.get("max_candidate_sequences", 0)),
            tuple(int(p) for p in as_list(fields.get("preferred_batch_size"))),
            int(fields.get("max_queue_delay_microseconds", 0)), float(fields.get("minimum_slot_utilization", 0.0)))
    except SequenceError:
        raise
    except (TypeError, ValueError, KeyError, AttributeError) as exc:
        raise SequenceError(f"sequence_batching: cannot read {exc}") from None
    if settings.max_sequence_idle_us <= 0 or settings.max_queue_delay_us < 0 or settings.max_candidate_sequences < 0:
        raise SequenceError("sequence_batching: idle time must be positive, delays and counts non-negative")
    return settings


def _control(name: str, entry: Mapping, types: Mapping[str, str]) -> Control:
    kind = KINDS.get(entry.get("kind", "CONTROL_SEQUENCE_START"))  # protobuf's default enum value
    if kind is None:
        raise SequenceError(f"control input {name!r}: unknown kind {entry.get('kind')!r}")
    if kind == "corrid":
        datatype = types.get(entry.get("data_type", ""))
        if datatype not in CORRID_TYPES:
            raise SequenceError(f"control input {name!r}: CONTROL_SEQUENCE_CORRID takes data_type "
                                f"TYPE_UINT64, TYPE_INT64, TYPE_UINT32, TYPE_INT32 or TYPE_STRING")  # fmt: skip
        return Control(kind, name, datatype, ())
    given = [key for key in FLAG_VALUES if key in entry]
    if len(given) != 1:
        raise SequenceError(f"control input {name!r}: give one of {', '.join(FLAG_VALUES)}")
    values = tuple(entry[given[0]])
    if len(values) != 2:
        raise SequenceError(f"control input {name!r}: {given[0]} takes two values, false and true")
    return Control(kind, name, FLAG_VALUES[given[0]], values)


# -- the batcher ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class SequenceRequest:
    payload: object  # the caller's (the dispatcher's ticket)
    corrid: Hashable  # int or str
    start: bool
    end: bool
    arrival: float


@dataclass(frozen=True)
class SequenceDispatch:
    """A batch to run on `vgpu`: at most one request per sequence; `released` names sequences whose
    slots were released (idle) since the last dispatch there: their state can be dropped."""

    vgpu: str
    requests: tuple[SequenceRequest, ...]
    released: tuple[Hashable, ...] = ()


@dataclass
class _Sequence:
    corrid: Hashable
    pending: deque = field(default_factory=deque)
    vgpu: str | None = None  # None: in the backlog, waiting for a slot
    slot: int = -1
    running: bool = False
    last: float = 0.0  # when it last ran (or arrived): idle time counts from here


class SequenceBatcher:
    """One model's sequence batcher over `vgpus`, `max_batch` requests in a batch at most."""

    def __init__(self, model: str, settings: SequenceSettings, vgpus: tuple[str, ...], max_batch: int):
        if not vgpus:
            raise ValueError("a sequence batcher needs at least one vGPU")
        self.model = model
        self.settings = settings
        self.max_batch = max(1, max_batch)
        oldest = settings.strategy == "oldest"
        self.slots = (settings.max_candidate_sequences or self.max_batch) if oldest else self.max_batch
        preferred = max(settings.preferred_batch_sizes, default=self.max_batch)
        self.target = min(preferred, self.max_batch) if oldest else max(
            1, math.ceil(settings.minimum_slot_utilization * self.slots))
        self.delay = settings.max_queue_delay_us * 1e-6
        self.idle = settings.max_sequence_idle_us * 1e-6
        self.vgpus = tuple(vgpus)
        self._active: dict[Hashable, _Sequence] = {}  # sequences holding a slot, or in the backlog
        self._backlog: deque[_Sequence] = deque()
        self._taken: dict[str, dict[int, _Sequence]] = {v: {} for v in self.vgpus}  # vGPU -> slot -> sequence
        self._busy: set[str] = set()  # vGPUs running a batch of this model
        self._released: dict[str, list] = {v: [] for v in self.vgpus}

    def add(self, request: SequenceRequest) -> None:
        """Queue a request, or raise SequenceError with Triton's words."""
        if request.corrid in (0, "", None):
            raise SequenceError(no_correlation_id(self.model))
        seq = self._active.get(request.corrid)
        if seq is None:
            if not request.start:
                raise SequenceError(f"inference request for sequence {request.corrid} to model "
                                    f"'{self.model}' must specify the START flag on the first request of "
                                    "the sequence")  # fmt: skip
            seq = self._active[request.corrid] = _Sequence(request.corrid, last=request.arrival)
            self._backlog.append(seq)
        seq.pending.append(request)
        self._assign()

    def _assign(self) -> None:
        """Give free slots to the backlog's sequences, oldest first, on the vGPU holding fewest."""
        while self._backlog:
            vgpu = min(self.vgpus, key=lambda v: len(self._taken[v]))
            taken = self._taken[vgpu]
            if len(taken) >= self.slots:
                return
            seq = self._backlog.popleft()
            seq.vgpu, seq.slot = vgpu, next(s for s in range(self.slots) if s not in taken)
            taken[seq.slot] = seq

    def _ready(self, vgpu: str) -> list[_Sequence]:
        ready = [s for s in self._taken[vgpu].values() if s.pending and not s.running]
        if self.settings.strategy == "oldest":
            return sorted(ready, key=lambda s: s.pending[0].arrival)
        return sorted(ready, key=lambda s: s.slot)

    def poll(self, now: float) -> list[SequenceDispatch]:
        """Release idle sequences, then every batch due now."""
        self._reap(now)
        out = []
        for vgpu in self.vgpus:
            if vgpu in self._busy:
                continue
            ready = self._ready(vgpu)
            if not ready:
                continue
            oldest = min(s.pending[0].arrival for s in ready)
            if len(ready) < self.target and oldest + self.delay > now:
                continue
            requests = []
            for seq in ready[: self.max_batch]:
                seq.running = True
                requests.append(seq.pending.popleft())
            self._busy.add(vgpu)
            out.append(SequenceDispatch(vgpu, tuple(requests), tuple(self._released[vgpu])))
            self._released[vgpu].clear()
        return out

    def complete(self, dispatch: SequenceDispatch, now: float) -> None:
        """The batch has run (or was dropped): its sequences may run again; ended ones free their slots."""
        self._busy.discard(dispatch.vgpu)
        for request in dispatch.requests:
            seq = self._active.get(request.corrid)
            if seq is None:
                continue
            seq.running, seq.last = False, now
            if request.end and not seq.pending:
                self._release(seq)
        self._assign()

    def _release(self, seq: _Sequence) -> None:
        del self._active[seq.corrid]
        del self._taken[seq.vgpu][seq.slot]

    def _reap(self, now: float) -> None:
        """Release the slots of sequences idle for max_sequence_idle_microseconds."""
        for vgpu, taken in self._taken.items():
            for seq in [s for s in taken.values() if not s.pending and not s.running and s.last + self.idle <= now]:
                self._release(seq)
                self._released[vgpu].append(seq.corrid)
        self._assign()

    def next_deadline(self) -> float | None:
        """When `poll` has something to do next (None: only on an arrival or a completion)."""
        deadlines = []
        for vgpu, taken in self._taken.items():
            for seq in taken.values():
                if not seq.pending and not seq.running:
                    deadlines.append(seq.last + self.idle)
            if vgpu not in self._busy and (ready := self._ready(vgpu)):
                deadlines.append(min(s.pending[0].arrival for s in ready) + self.delay)
        return min(deadlines, default=None)

    @property
    def sequences(self) -> int:
        """Sequences started and not yet released (in slots or in the backlog)."""
        return len(self._active)
