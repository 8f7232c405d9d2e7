"""The scheduler on a CPU vGPU with instrumented fake executors (tests/scheduler/scheduler_fakes.py).

References: outputs are compared with the same program run once, straight through, with no
scheduler (`run_alone`); orders of events are read from the executor's kernel log, and RT arrivals are
placed by holding chosen kernels (`_pause_at`), never by sleeps."""

import gc
import queue
import threading

import numpy as np
import pytest
from scheduler_fakes import (ArenaExecutor, DeclaredTimeDevice, ObservedCpuDevice, dense_chain, gated_chain,
                             run_alone)

from scheduler.cpu_device import CpuDevice
from scheduler.policies import POLICIES
from scheduler.reef import Reef
from scheduler.task import BE, RT, Task

WIDTH = 48


def _inputs(n, seed=0):
    rng = np.random.default_rng(seed)
    return [{"x": rng.standard_normal((1, WIDTH)).astype(np.float32)} for _ in range(n)]


def _scheduler(policy, capacity=4, be_streams=2):
    ex = ArenaExecutor()
    return Reef(ex, CpuDevice(ex), policy, capacity=capacity, be_streams=be_streams, poll_s=5e-5,
                profile_reps=1)


def _close(reef):
    reef.stop()
    reef.device.close()


@pytest.mark.parametrize("policy", ["reset", "reef"])
def test_preempted_be_tasks_are_bit_identical(policy):
    """RT tasks arrive while chosen BE kernels are held (be0's at 100 and 300, be1's at 100; not
    while the flag is up, when a BE kernel is a pad), each alone and launched at once, so its flag
    is up before the held kernel lets go and every such BE task is preempted mid-task."""
    be = [dense_chain("be0", 400, WIDTH, slots=6, seed=1), dense_chain("be1", 300, WIDTH, slots=2, seed=2)]
    rt = dense_chain("rt", 8, WIDTH, slots=3, seed=3)
    reef = _scheduler(policy)
    reef.add_client("b0", be[0], BE)
    reef.add_client("b1", be[1], BE)
    reef.add_client("r", rt, RT)
    reef.prepare_padding()
    xs = _inputs(8)
    held = _pause_at(reef.executor, {"be0": {100, 300}, "be1": {100}}, unless=reef.device.flag_is_set)
    with reef:
        be_futures = [(i % 2, x, reef.submit(f"b{i % 2}", x)) for i, x in enumerate(xs)]
        _end_when_done(held, [f for _, _, f in be_futures])
        rt_results = []
        while (pause := held.get(timeout=30)) is not None:
            x = xs[len(rt_results) % 8]
            rt_future = reef.submit("r", x)
            pause[2].set()
            rt_results.append((x, rt_future.result(timeout=30)))
        results = [(k, x, f.result(timeout=30)) for k, x, f in be_futures]
    _close(reef)
    assert len(rt_results) >= 6
    assert sum(r.preemptions for _, _, r in results) >= 8  # every task at least once
    assert max(r.preemptions for _, _, r in results) >= 2  # be0's tasks twice
    for k, x, r in results:
        np.testing.assert_array_equal(r.outputs["y"], run_alone(be[k], x)["y"])
    for x, r in rt_results:
        np.testing.assert_array_equal(r.outputs["y"], run_alone(rt, x)["y"])


def test_reef_pads_queued_rt_tasks_with_the_preempted_be_task():
    """Deterministic by construction. The BE task's first kernel returns only once two RT tasks
    are in the system and the scheduler has flushed (the flag raised a second time), so it is
    preempted mid-task; the first RT task's first kernel waits until the flushed BE stream has
    drained, so the second RT task is planned against the settled BE task. Profiles come from the
    declared durations: 3 ms RT kernels, 0 s BE ones, so REEF's rules pick pads."""
    rt_submitted = threading.Event()

    def rt_gate(x, out, _):
        for stream in device.guarded:
            stream.drain()
        out[...] = x

    def be_gate(x, out, _):
        be_running.set()
        assert rt_submitted.wait(30) and device.wait_flag_raised(2)
        out[...] = x

    be_running = threading.Event()
    ex = ArenaExecutor()
    device = DeclaredTimeDevice(ex)
    reef = Reef(ex, device, "reef", be_streams=1, poll_s=5e-5)
    reef.add_client("b", gated_chain("be", 200, 0.0, be_gate), BE)
    reef.add_client("r", gated_chain("rt", 6, 0.003, rt_gate), RT)
    reef.prepare_padding()
    x = {"x": np.arange(4, dtype=np.float32).reshape(1, 4)}
    with reef:
        be_future = reef.submit("b", x)
        assert be_running.wait(30)
        rt_futures = [reef.submit("r", x), reef.submit("r", x)]
        rt_submitted.set()
        for f in rt_futures:
            np.testing.assert_array_equal(f.result(timeout=30).outputs["y"], x["x"])
        result = be_future.result(timeout=30)
    _close(reef)
    np.testing.assert_array_equal(result.outputs["y"], x["x"])
    assert result.preemptions >= 1 and reef.stats.padded_kernels >= 1


class LaggingCpuDevice(ObservedCpuDevice):
    """Progress seen late, as with CUDA events: a BE kernel's completion is credited only at a poll
    that finds no kernel of its task running, and completions not yet credited when the flag is
    set are lost, so a flush re-runs up to the rerun window of kernels that had in fact finished."""

    exact_progress = False

    def __init__(self, executor):
        super().__init__(executor)
        self._pending = []
        self._running = {}
        self._unguarded = set()
        self._lock = threading.Lock()

    def load(self, program, guarded):
        state = super().load(program, guarded)
        if not guarded:
            self._unguarded.add(id(state))
        return state

    def run_kernel(self, task, index):
        if id(task.state) in self._unguarded:
            return super().run_kernel(task, index)
        task.mark_started(self.clock())
        with self._lock:
            self._running[task] = self._running.get(task, 0) + 1
        self.executor.launch(task.state, index)
        task.executed += 1
        with self._lock:
            self._running[task] -= 1
            if not self.flag_is_set():
                self._pending.append((task, index))

    def poll(self):
        with self._lock:
            keep = []
            for task, index in self._pending:
                if self._running.get(task):
                    keep.append((task, index))
                else:
                    task.completed = max(task.completed, index + 1)
            self._pending = keep

    def set_flag(self):
        with self._lock:
            self._pending.clear()
        super().set_flag()


def _pause_at(executor, points, unless=lambda: False):
    """Hold each kernel of `points` ({model: indices}) until the test lets it go (once per task:
    not when the kernel held last is re-run after its preemption; nor while `unless()`): the queue
    yields (model, index, go) per held kernel, in the order they were reached."""
    held, last = queue.SimpleQueue(), {}

    def hook(model, index):
        if index == 0:  # a task of `model` starts
            last.pop(model, None)
        if index in points.get(model, ()) and index != last.get(model) and not unless():
            last[model] = index
            go = threading.Event()
            held.put((model, index, go))
            assert go.wait(30)

    executor.hook = hook
    return held


def _end_when_done(held, futures):
    """Put None on `held` once every future is done: the end of a test's loop over held kernels."""
    left = [len(futures)]
    lock = threading.Lock()

    def done(_):
        with lock:
            left[0] -= 1
            if left[0] == 0:
                held.put(None)

    for f in futures:
        f.add_done_callback(done)


@pytest.mark.parametrize("slots", [2, 4])
def test_reruns_after_late_progress_are_bit_identical(slots):
    """An RT task arrives while BE kernel k runs and finishes before k lets go: k's completion
    lands under the flag and is lost, with whatever of the window was not yet credited, so every
    such arrival re-runs at least one kernel."""
    be = dense_chain("be", 300, WIDTH, slots=slots, seed=4)
    rt = dense_chain("rt", 6, WIDTH, slots=3, seed=5)
    ex = ArenaExecutor()
    device = LaggingCpuDevice(ex)
    reef = Reef(ex, device, "reset", capacity=4, be_streams=1, poll_s=5e-5)
    reef.add_client("b", be, BE)
    reef.add_client("r", rt, RT)
    xs = _inputs(3)
    held = _pause_at(ex, {"be": {40, 150, 260}})
    with reef:
        futures = [reef.submit("b", x) for x in xs]
        for _ in range(3 * len(xs)):
            _, _, go = held.get(timeout=30)
            reef.submit("r", xs[0]).result(timeout=30)
            go.set()
        results = [f.result(timeout=30) for f in futures]
    _close(reef)
    assert sum(r.reruns for r in results) >= 3 * len(xs)  # kernels really were executed twice
    assert device.most_outstanding() <= slots - 1  # capped by the rerun window
    for x, r in zip(xs, results):
        np.testing.assert_array_equal(r.outputs["y"], run_alone(be, x)["y"])


def test_an_rt_task_arriving_as_the_last_one_ends_finds_be_work_still_flushed():
    """B is submitted from A's done-callback, which runs on the scheduler thread after A is counted
    out and before RT mode ends: the window of the flag race (issue #32). B launches itself with
    the flag; the restore that follows must keep RT mode, so the BE task is preempted once (not
    restored and flushed again, as before the fix) and none of its kernels starts until B is done."""
    ex = ArenaExecutor()
    reef = Reef(ex, ObservedCpuDevice(ex), "reset", be_streams=1, poll_s=5e-5)
    be = dense_chain("be", 400, WIDTH, slots=6, seed=1)
    reef.add_client("b", be, BE)
    reef.add_client("r", dense_chain("rt", 8, WIDTH, seed=3), RT)
    x = _inputs(1)[0]
    held = _pause_at(ex, {"be": {100}})
    second = []
    with reef:
        be_future = reef.submit("b", x)
        _, _, go = held.get(timeout=30)
        first = reef.submit("r", x)
        first.add_done_callback(lambda _: second.append(reef.submit("r", x)))
        go.set()
        first.result(timeout=30)
        b = second[0].result(timeout=30)
        result = be_future.result(timeout=30)
    _close(reef)
    be_starts = [t0 for m, _, t0, _ in ex.log if m == "be"]
    assert not [t for t in be_starts if b.arrival_s <= t <= b.end_s]
    assert result.preemptions == 1
    np.testing.assert_array_equal(result.outputs["y"], run_alone(be, x)["y"])


@pytest.mark.parametrize("policy", sorted(POLICIES))
def test_every_task_completes_exactly_once(policy):
    reef = _scheduler(policy, be_streams=3)
    programs = {f"b{k}": dense_chain(f"be{k}", 30, WIDTH, seed=k) for k in range(3)}
    programs |= {"r0": dense_chain("rt0", 5, WIDTH, seed=7), "r1": dense_chain("rt1", 6, WIDTH, seed=8)}
    for name, program in programs.items():
        reef.add_client(name, program, RT if name.startswith("r") else BE)
    clients = ["b0", "b1", "b2", "r0", "r1"]
    futures = []
    with reef:
        for i, x in enumerate(_inputs(60)):
            futures.append(reef.submit(clients[i % 5], x))
            if i % 7 == 0:  # now and then the system runs down to this request before more come
                futures[-1].result(timeout=30)
        results = [f.result(timeout=30) for f in futures]
    _close(reef)
    assert len(results) == 60 and all(f.done() for f in futures)
    for i, r in enumerate(results):  # each future got its own request's answer
        k = clients[i % 5]
        ref = run_alone(programs[k], _inputs(60)[i])
        np.testing.assert_array_equal(r.outputs["y"], ref["y"])


def test_a_task_resolves_once():
    t = Task(0, BE, "c", {}, 1, 1, 0.0)
    assert t.finish({}, 1.0)
    assert not t.finish({}, 2.0) and not t.fail(RuntimeError())
    assert t.future.result().end_s == 1.0


def test_tasks_left_at_stop_fail_once():
    """The first task's first kernel is running when the scheduler stops (it returns once stop
    raises the flag), the others are queued: all three fail, once, and so does a late submit."""
    running = threading.Event()

    def first_kernel(x, out, _):
        running.set()
        assert device.wait_flag_raised(1)
        out[...] = x

    ex = ArenaExecutor()
    device = ObservedCpuDevice(ex)
    reef = Reef(ex, device, "reset", poll_s=5e-5)
    reef.add_client("b", gated_chain("slow", 50, 0.0, first_kernel), BE)
    with reef:
        futures = [reef.submit("b", {"x": np.zeros((1, 4), np.float32)}) for _ in range(3)]
        assert running.wait(30)
    _close(reef)
    for f in futures:
        with pytest.raises(RuntimeError, match="stopped"):
            f.result(timeout=1)
    late = reef.submit("b", {"x": np.zeros((1, 4), np.float32)})
    with pytest.raises(RuntimeError):
        late.result(timeout=1)


def _rt_arrivals_during_held_be_kernels(policy, wait_for_rt_start):
    """One BE stream running tasks of be0 and be1 in turn; an RT task is submitted whenever a BE
    kernel is held (be0's 20th, be1's 30th; not while the flag is up, when it is a pad), and the
    held kernel lets go at once or, with `wait_for_rt_start`, once the RT task's first kernel has
    started. Returns the scheduler, the executor's log and [(held model, index, RT result)]."""
    ex = ArenaExecutor()
    device = ObservedCpuDevice(ex)
    reef = Reef(ex, device, policy, be_streams=1, poll_s=5e-5, profile_reps=1)
    reef.add_client("b0", dense_chain("be0", 60, WIDTH, seed=1), BE)
    reef.add_client("b1", dense_chain("be1", 60, WIDTH, seed=2), BE)
    reef.add_client("r", dense_chain("rt", 3, WIDTH, seed=3), RT)
    reef.prepare_padding()
    held = _pause_at(ex, {"be0": {20}, "be1": {30}}, unless=device.flag_is_set)
    pause, rt_started = ex.hook, threading.Event()

    def hook(model, index):
        if model == "rt" and index == 0:
            rt_started.set()
        pause(model, index)

    ex.hook = hook
    x = _inputs(1)[0]
    arrivals = []
    with reef:
        be = [reef.submit(c, x) for c in ("b0", "b1", "b0", "b1")]
        _end_when_done(held, be)
        while (paused := held.get(timeout=30)) is not None:
            model, index, go = paused
            rt_started.clear()
            rt = reef.submit("r", x)
            if wait_for_rt_start:
                assert rt_started.wait(30), "the RT task waited for the BE kernel"
            go.set()
            arrivals.append((model, index, rt.result(timeout=30)))
        for f in be:
            f.result(timeout=30)
    _close(reef)
    assert len(arrivals) == 4  # one per BE task: each reaches its held kernel with the flag down
    return reef, ex.log, arrivals


@pytest.mark.parametrize("policy", ["reset", "reef"])
def test_rt_starts_beside_the_be_kernel_it_found_and_no_other_starts(policy):
    """The RT task's first kernel starts while the BE kernel it found is still running (that one
    cannot be stopped), and until the RT task ends no BE kernel starts but REEF's pads."""
    reef, log, arrivals = _rt_arrivals_during_held_be_kernels(policy, wait_for_rt_start=True)
    for model, index, r in arrivals:
        found = [t1 for m, i, t0, t1 in log if (m, i) == (model, index) and t0 < r.arrival_s < t1]
        assert len(found) == 1 and r.first_kernel_s < found[0]
    started_beside = [t0 for m, _, t0, _ in log if m.startswith("be")
                      for _, _, r in arrivals if r.first_kernel_s < t0 < r.end_s]
    assert len(started_beside) <= reef.stats.padded_kernels  # 0 under reset


@pytest.mark.parametrize("policy", sorted(POLICIES))
def test_a_lone_rt_task_starts_in_the_submitting_thread(policy):
    """Under streams/reset/reef an RT task that finds no other RT task in the system has its first
    kernel launched by submit() itself: it runs even before the scheduler thread exists. A second
    RT task submitted meanwhile goes through the scheduler; seq and wait never start at once."""
    ex = ArenaExecutor()
    device = ObservedCpuDevice(ex)
    reef = Reef(ex, device, policy, poll_s=5e-5, profile_reps=1)
    rt = dense_chain("rt", 4, WIDTH, seed=3)
    reef.add_client("r0", rt, RT)
    reef.add_client("r1", rt, RT)
    ex.log.clear()  # `reef` profiled the kernels at add_client
    x0, x1 = _inputs(2)
    first = reef.submit("r0", x0)
    second = reef.submit("r1", x1)
    rt_stream = device.unguarded[0]
    rt_stream.drain()  # the RT stream thread runs whatever was launched
    ran_before_start = [(m, i) for m, i, _, _ in ex.log]
    submitted_before_start = list(rt_stream.submitted)
    with reef:
        results = [first.result(timeout=30), second.result(timeout=30)]
    _close(reef)
    at_once = POLICIES[policy].rt_starts_at_once
    assert submitted_before_start == ([("r0", 0, 0)] if at_once else [])
    assert ran_before_start == ([("rt", 0)] if at_once else [])
    assert reef.stats.rt_started_on_arrival == int(at_once)
    for x, r in zip((x0, x1), results):
        np.testing.assert_array_equal(r.outputs["y"], run_alone(rt, x)["y"])


@pytest.mark.parametrize("policy", ["reset", "reef"])
def test_rt_task_does_not_wait_for_the_running_be_kernel(policy):
    """A BE kernel that is already running when the RT task arrives cannot be stopped. The RT
    task must neither wait for it before its other kernels are submitted (`reef` leaves them
    unpadded until it exits) nor before its result is delivered: the BE kernel here ends only
    once the RT task's result is out."""
    started, rt_done = threading.Event(), threading.Event()

    def first_be_kernel(x, out, _):
        started.set()
        assert rt_done.wait(30)
        out[...] = x

    rt_done.set()  # while `reef` profiles the kernels at add_client
    reef = _scheduler(policy, be_streams=1)
    reef.add_client("b", gated_chain("be", 4, 0.0, first_be_kernel), BE)
    reef.add_client("r", dense_chain("rt", 4, WIDTH, seed=3), RT)
    reef.executor.log.clear()
    started.clear()
    rt_done.clear()
    x = {"x": np.ones((1, 4), np.float32)}
    with reef:
        be = reef.submit("b", x)
        assert started.wait(30)  # BE kernel 0 is running until the RT result is out
        rt_future = reef.submit("r", _inputs(1)[0])
        rt_future.add_done_callback(lambda _: rt_done.set())
        rt = rt_future.result(timeout=30)
        be_result = be.result(timeout=30)
    _close(reef)
    be_kernel_0_end = min(t1 for m, i, _, t1 in reef.executor.log if m == "be" and i == 0)
    assert rt.end_s < be_kernel_0_end
    np.testing.assert_array_equal(be_result.outputs["y"], x["x"])


def test_seq_makes_rt_wait_for_a_whole_be_task():
    """Under seq the RT task found a BE task running and starts only after that task's last kernel."""
    _, log, arrivals = _rt_arrivals_during_held_be_kernels("seq", wait_for_rt_start=False)
    for model, index, r in arrivals:
        held_start = [t0 for m, i, t0, t1 in log if (m, i) == (model, index) and t0 < r.arrival_s < t1]
        assert len(held_start) == 1
        last = [t1 for m, i, t0, t1 in log if m == model and i == 59 and t0 > held_start[0]]
        assert last and last[0] < r.first_kernel_s


@pytest.mark.parametrize("capacity", [1, 3])
def test_vhq_never_exceeds_capacity(capacity):
    ex = ArenaExecutor()
    device = ObservedCpuDevice(ex)
    reef = Reef(ex, device, "reset", capacity=capacity, be_streams=1, poll_s=5e-5)
    reef.add_client("b", dense_chain("be", 60, WIDTH, slots=8), BE)  # rerun window 7 > capacity
    reef.add_client("r", dense_chain("rt", 4, WIDTH), RT)
    with reef:
        futures = [reef.submit("b", x) for x in _inputs(4)]
        futures += [reef.submit("r", x) for x in _inputs(3)]
        for f in futures:
            f.result(timeout=30)
    _close(reef)
    assert len(device.guarded[0].submitted) >= 4 * 60  # every BE kernel went through the vHQ
    assert device.most_outstanding() <= capacity  # room for one more at every submit


def test_an_executor_error_fails_only_its_task():
    reef = _scheduler("reset")
    reef.add_client("b", dense_chain("be", 20, WIDTH), BE)
    calls = {"n": 0}
    launch = reef.executor.launch

    def flaky(state, index, stream=None):
        calls["n"] += 1
        if calls["n"] == 5:
            raise FloatingPointError("injected")
        launch(state, index, stream)

    reef.executor.launch = flaky
    with reef:
        futures = [reef.submit("b", x) for x in _inputs(3)]
        with pytest.raises(FloatingPointError):
            futures[0].result(timeout=30)
        assert all(f.result(timeout=30) for f in futures[1:])
    _close(reef)



def test_no_garbage_collection_starts_between_an_rt_arrival_and_its_launch():
    """An RT task's upload, arrival and first launch run with the collector off; a BE submit's do not."""
    reef = _scheduler("reset")
    reef.add_client("b", dense_chain("be", 4, WIDTH, seed=1), BE)
    reef.add_client("r", dense_chain("rt", 4, WIDTH, seed=2), RT)
    collector = []
    set_inputs = reef.device.set_inputs

    def recording(state, inputs):
        collector.append(gc.isenabled())
        set_inputs(state, inputs)

    reef.device.set_inputs = recording
    x = _inputs(1)[0]
    with reef:
        reef.submit("b", x).result(timeout=30)
        reef.submit("r", x).result(timeout=30)
    _close(reef)
    assert collector[-1] is False  # the RT upload, inside the window
    assert gc.isenabled()
