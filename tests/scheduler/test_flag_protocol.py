"""No flag race (issue #32): every interleaving of a new RT task's arrival with the restore that ends
the previous RT task's RT mode, and none leaves BE work unflagged while the new RT task runs.

The ordering code is the real one (`Preemption.rt_arrives`, `settle`, `restore`); around it are
models of the device's flag protocol (CUDA's stream-ordered writes and event-waiting clears, as in
`scheduler.cuda_device`; the CPU's immediate ones), of the BE streams and of the lock. Each actor runs
on its own thread, but one moves at a time, and only where it touches shared state; `explore`
enumerates every schedule of those steps depth-first. The order before the fix (kept below as
`restore_before_the_fix`) races.
"""

from __future__ import annotations

import threading
from collections import deque
from typing import Callable

import pytest

from scheduler.preemption import Mode, Preemption
from scheduler.reef import SchedulerStats


class Deadlock(AssertionError):
    pass


class Explorer:
    """Runs actors on threads one step at a time along `schedule` (indices into the moves enabled at
    each decision; 0 past its end), records the decisions it made, and checks `invariant` in
    every state reached."""

    def __init__(self, schedule: list[int]):
        self.schedule = schedule
        self.made: list[tuple[int, int]] = []  # (choice, moves enabled) per decision
        self._cv = threading.Condition()
        self._turn: str | None = None
        self._parked: dict[str, Callable[[], bool]] = {}
        self._done: set[str] = set()
        self._errors: list[BaseException] = []

    def step(self, enabled: Callable[[], bool] = lambda: True) -> None:
        """Called by an actor before it touches shared state: wait for its turn (and `enabled`)."""
        me = threading.current_thread().name
        with self._cv:
            self._parked[me] = enabled
            self._turn = None
            self._cv.notify_all()
            self._cv.wait_for(lambda: self._turn == me)
            del self._parked[me]

    def run(self, actors: dict[str, Callable[[], None]], device_moves: Callable[[], list],
            invariant: Callable[[], str | None]) -> str | None:
        """Returns the first violation found on this schedule, or None."""
        threads = [threading.Thread(target=self._actor, args=(fn,), name=name, daemon=True)
                   for name, fn in actors.items()]
        with self._cv:
            for t in threads:
                t.start()
            self._cv.wait_for(lambda: len(self._parked) + len(self._done) == len(actors))
        violation = None
        while violation is None:
            violation = invariant()
            with self._cv:
                ready = sorted(name for name, enabled in self._parked.items() if enabled())
            moves = [(False, name) for name in ready] + [(True, move) for move in device_moves()]
            if not moves:
                if len(self._done) < len(actors):
                    raise Deadlock(f"actors stuck: {sorted(self._parked)}")
                break
            k = len(self.made)
            choice = self.schedule[k] if k < len(self.schedule) else 0
            self.made.append((choice, len(moves)))
            on_device, what = moves[choice]
            if on_device:
                what()
                continue
            with self._cv:
                self._turn = what
                self._cv.notify_all()
                self._cv.wait_for(lambda: self._turn is None)
        if violation is not None:  # let the actors run out, unchecked, so their threads end
            self.schedule = []
            self.run_out(device_moves)
        for t in threads:
            t.join(10)
        if self._errors:
            raise self._errors[0]
        return violation

    def run_out(self, device_moves) -> None:
        while True:
            with self._cv:
                ready = sorted(name for name, enabled in self._parked.items() if enabled())
            moves = device_moves()
            if ready:
                with self._cv:
                    self._turn = ready[0]
                    self._cv.notify_all()
                    self._cv.wait_for(lambda: self._turn is None)
            elif moves:
                moves[0]()
            else:
                return

    def _actor(self, fn: Callable[[], None]) -> None:
        self.step()
        try:
            fn()
        except BaseException as e:  # reported by run()
            self._errors.append(e)
        finally:
            with self._cv:
                self._done.add(threading.current_thread().name)
                self._turn = None
                self._cv.notify_all()


def explore(scenario: Callable[[Explorer], str | None]) -> tuple[int, str | None]:
    """Every schedule of `scenario`, depth-first: (schedules run, the first violation or None)."""
    schedule: list[int] = []
    runs = 0
    while True:
        explorer = Explorer(schedule)
        violation = scenario(explorer)
        runs += 1
        if violation is not None:
            return runs, violation
        made = explorer.made
        while made and made[-1][0] + 1 >= made[-1][1]:
            made.pop()
        if not made:
            return runs, None
        schedule = [choice for choice, _ in made[:-1]] + [made[-1][0] + 1]


class Sequential:
    """An explorer for code run straight through on one thread: every step is taken at once."""

    def step(self, enabled=None) -> None:
        pass


class ModelLock:
    def __init__(self, explorer):
        self.explorer = explorer  # Sequential while a scenario is set up
        self.owner: str | None = None

    def __enter__(self):
        self.explorer.step(lambda: self.owner is None)
        self.owner = threading.current_thread().name

    def __exit__(self, *exc):
        self.owner = None


class ModelGpu:
    """CudaDevice's flag: one word on the device and the host's view of it (DeviceFlag._value). A
    preempting RT launch queues the flag write and then the RT program on the RT stream, where they
    land in order as device moves; the launching thread then records the event behind the write
    and sets the host view. `set_flag` writes at once unless the host view says it is set;
    `clear_flag` takes the recorded events, waits until they have landed, then writes 0."""

    def __init__(self, explorer):
        self.explorer = explorer  # Sequential while a scenario is set up
        self.word = self.host_view = 0
        self.rt_stream: deque = deque()
        self.flag_events: list[dict] = []
        self.running: set[str] = set()

    @staticmethod
    def clock() -> float:
        return 0.0

    def launch_rt(self, task: str, preempt: bool) -> None:
        self.explorer.step()
        event = {"landed": False}
        if preempt:
            self.rt_stream.append(("flag", event))
        self.rt_stream.append(("start", task))
        if preempt:
            self.explorer.step()
            self.host_view = 1
            self.flag_events.append(event)

    def set_flag(self) -> None:
        self.explorer.step()
        if not self.host_view:
            self.word = self.host_view = 1

    def clear_flag(self) -> None:
        self.explorer.step()
        events, self.flag_events = self.flag_events, []
        self.explorer.step(lambda: all(e["landed"] for e in events))
        self.word = self.host_view = 0

    def moves(self) -> list:
        return [self._land] if self.rt_stream else []

    def _land(self) -> None:
        op, what = self.rt_stream.popleft()
        if op == "flag":
            self.word = 1
            what["landed"] = True
        else:
            self.running.add(what)


class ModelCpu(ModelGpu):
    """CpuDevice's flag: a preempting launch raises it at once, before queuing the kernel."""

    def launch_rt(self, task: str, preempt: bool) -> None:
        self.explorer.step()
        if preempt:
            self.word = self.host_view = 1
        self.rt_stream.append(("start", task))

    def set_flag(self) -> None:
        self.explorer.step()
        self.word = self.host_view = 1

    def clear_flag(self) -> None:
        self.explorer.step()
        self.word = self.host_view = 0


class ModelBe:
    """The BE streams: `issued` while BE kernels are on them (they run wherever the flag is 0)."""

    def __init__(self, explorer, issued: bool):
        self.explorer = explorer  # Sequential while a scenario is set up
        self.issued = issued

    def poll(self) -> None:
        pass

    def drain(self) -> None:  # under the flag: the flushed kernels exit
        self.explorer.step()
        self.issued = False

    def rewind(self) -> None:
        pass

    def pump_all(self) -> None:
        self.explorer.step()
        self.issued = True


def restore_before_the_fix(p: Preemption, device: ModelGpu, be: ModelBe) -> None:
    """`Preemption.restore` as of 3a5aa2c (`Reef.restore_be` before it): settle, then lower the flag
    whatever has arrived meanwhile, and resubmit BE work."""
    if p.mode is Mode.FLUSHING:
        be.drain()
        be.rewind()
    device.clear_flag()
    be.pump_all()


# How the previous RT task A left things, reached through the real transitions: under `reset` a
# settled flush (RT); a flush whose kernels have not yet exited (FLUSHING; under `reef` on CUDA,
# hardware padding); padding under `reef` on CUDA, its chunks out beside A (PADDING).
STARTS = {"rt": (False, Mode.RT), "flushing": (True, Mode.FLUSHING), "padding": (True, Mode.PADDING)}
DEVICES = {"cuda": ModelGpu, "cpu": ModelCpu}
CASES = [(d, s) for d in DEVICES for s in STARTS if not (d == "cpu" and s == "padding")]


def scenario(device_kind: str, start: str, restore=None, settle_first=False):
    """RT task A is finishing: the scheduler (after settling its flush, with `settle_first`) counts
    it out and restores, while RT task B arrives and, alone once A is out, launches itself with the
    flag."""
    pads_in_hardware, mode = STARTS[start]
    pads_in_hardware &= device_kind == "cuda"

    def run(x: Explorer) -> str | None:
        setup = Sequential()
        device, be, lock = DEVICES[device_kind](setup), ModelBe(setup, True), ModelLock(setup)
        p = Preemption(device, be, SchedulerStats(), pads_in_hardware=pads_in_hardware, lock=lock)
        p.rt_arrives(None)  # A arrived, was admitted, preempted the BE work
        p.enter_rt()
        p.flush()
        if mode is not Mode.FLUSHING:
            p.settle()
            be.issued = mode is Mode.PADDING  # the padding chunks go out beside A
        assert p.mode is mode
        device.explorer = be.explorer = lock.explorer = x

        def scheduler():
            if settle_first:
                p.settle()  # with hardware padding: the flag down on purpose, A known
            p.rt_departs()
            if restore is None:
                p.restore()
            else:
                restore(p, device, be)

        def arrival():
            p.rt_arrives(lambda: device.launch_rt("B", preempt=True))

        def invariant():
            if "B" in device.running and be.issued and device.word == 0:
                return f"BE work unflagged beside RT task B (mode {p.mode.name})"
            return None

        return x.run({"scheduler": scheduler, "arrival": arrival}, device.moves, invariant)

    return run


@pytest.mark.parametrize("settle_first", [False, True])
@pytest.mark.parametrize("device_kind,start", CASES)
def test_no_interleaving_leaves_be_work_unflagged_beside_rt(device_kind, start, settle_first):
    runs, violation = explore(scenario(device_kind, start, settle_first=settle_first))
    assert violation is None
    assert runs >= 30  # every schedule: dozens to hundreds of them


@pytest.mark.parametrize("device_kind,start", CASES)
def test_the_order_before_the_fix_races(device_kind, start):
    runs, violation = explore(scenario(device_kind, start, restore_before_the_fix))
    assert violation is not None and "unflagged" in violation


def test_a_refused_restore_keeps_rt_mode_and_cuts_padding_short():
    """One schedule spelled out: B is counted in before the restore looks, so RT mode stays; from
    padding, the flag is raised again and the padding chunks count as flushed (settled later)."""
    x = Sequential()
    device, be = ModelGpu(x), ModelBe(x, True)
    p = Preemption(device, be, SchedulerStats(), pads_in_hardware=True, lock=ModelLock(x))
    p.rt_arrives(None)
    p.enter_rt()
    p.flush()
    p.settle()
    assert p.mode is Mode.PADDING and device.word == 0
    p.rt_departs()
    assert p.rt_arrives(lambda: device.launch_rt("B", preempt=True))
    assert not p.restore()
    assert p.mode is Mode.FLUSHING and p.rt_mode
    while device.moves():
        device.moves()[0]()
    assert device.running == {"B"} and device.word == 1
