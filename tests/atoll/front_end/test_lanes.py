"""Preprocessing lanes: an RT job runs while every BE thread is busy, BE jobs run in order at a
lowered OS priority, each on its core where given cores, and a job given up before it starts is
skipped and reported abandoned."""

from __future__ import annotations

import asyncio
import os
import threading

import pytest
from gpu_runtime.priority import BE_NICE, Priority

from atoll.front_end.lanes import Batched, LaneLoad, Lanes, core_share


def test_rt_job_runs_while_the_be_lane_is_busy():
    async def main():
        lanes = Lanes(be_threads=1)
        gate = threading.Event()
        order = []
        try:
            held = lanes.run(Priority.BE, gate.wait)
            queued = lanes.run(Priority.BE, order.append, "be")
            assert await lanes.run(Priority.RT, lambda: order.append("rt") or 7) == 7
            gate.set()
            await asyncio.gather(held, queued)
            assert order == ["rt", "be"]
        finally:
            gate.set()
            lanes.close()

    asyncio.run(main())


def test_errors_reach_the_caller_and_be_threads_are_nicer():
    async def main():
        lanes = Lanes(be_threads=2)
        try:
            with pytest.raises(ZeroDivisionError):
                await lanes.run(Priority.BE, lambda: 1 / 0)
            nice = lambda: os.getpriority(os.PRIO_PROCESS, threading.get_native_id())  # noqa: E731
            rt, be = await lanes.run(Priority.RT, nice), await lanes.run(Priority.BE, nice)
            assert be == min(19, rt + BE_NICE)
        finally:
            lanes.close()

    asyncio.run(main())


def test_a_job_given_up_is_skipped_and_reported_abandoned():
    async def main():
        lanes = Lanes(be_threads=1)
        gate = threading.Event()
        ran, abandoned = [], asyncio.Event()
        try:
            held = lanes.run(Priority.BE, gate.wait)
            given_up = lanes.run(Priority.BE, ran.append, 1, abandoned=abandoned.set)
            given_up.cancel()
            gate.set()
            await held
            await asyncio.wait_for(abandoned.wait(), 10)
            assert ran == []
        finally:
            gate.set()
            lanes.close()

    asyncio.run(main())


def test_batched_jobs_waiting_together_run_in_one_call_within_their_share():
    calls = []

    def run(items):
        calls.append([item[0] for item in items])
        return [ValueError(f"bad {x}") if x == 3 else x * 10 for (x,) in items]

    async def main():
        lanes = Lanes(be_threads=1)
        gate = threading.Event()
        try:
            held = lanes.run(Priority.BE, gate.wait)
            job, other = Batched(run, "a", limit=8), Batched(run, "b", limit=8)
            waiting = [lanes.run(Priority.BE, job, x) for x in (1, 2)]
            passed_over = lanes.run(Priority.BE, other, 9)
            waiting += [lanes.run(Priority.BE, job, x) for x in (3, 4)]
            given_up = lanes.run(Priority.BE, job, 5)
            given_up.cancel()
            gate.set()
            await held
            results = await asyncio.gather(*waiting, passed_over, return_exceptions=True)
            assert results[:2] + results[3:] == [10, 20, 40, 90]
            assert isinstance(results[2], ValueError) and str(results[2]) == "bad 3"  # that job alone failed
            # one lane, so its share is all that waits: the jobs of "a" in one call (the one given
            # up left out), the job of "b" it passed over after them
            assert calls == [[1, 2, 3, 4], [9]]
        finally:
            gate.set()
            lanes.close()

    asyncio.run(main())


def test_a_lane_takes_no_more_than_its_share_of_what_waits():
    calls = []

    def run(items):
        calls.append(len(items))
        return [None] * len(items)

    async def main():
        lanes = Lanes(be_threads=2)
        gates = [threading.Event(), threading.Event()]
        try:
            held = [lanes.run(Priority.BE, gate.wait) for gate in gates]
            job = Batched(run, "a", limit=32)
            waiting = [lanes.run(Priority.BE, job, x) for x in range(8)]
            gates[0].set()  # one lane goes on while the other is busy: 8 wait, 2 lanes
            await held[0]
            await asyncio.sleep(0)
            gates[1].set()
            await asyncio.gather(*held, *waiting)
            assert calls[0] == 1 + 7 // 2  # itself and its share of those behind it
            assert sum(calls) == 8
        finally:
            for gate in gates:
                gate.set()
            lanes.close()

    asyncio.run(main())


class _Busy(LaneLoad):
    """Lanes that were kept busy: they wait for their batches."""

    def busy(self, lanes: int) -> float:
        return 1.0


class _Idle(LaneLoad):
    """Lanes busy half the time, that held 4 jobs at once not long ago: they do not wait."""

    def busy(self, lanes: int) -> float:
        return 0.5

    def peak(self) -> int:
        return 4


def _four_held(lanes: Lanes, job: Batched, gate: threading.Event) -> list[asyncio.Future]:
    """A job held by `gate` and three of `job` queued behind it: the lanes hold 4 at once."""
    held = lanes.run(Priority.BE, Batched(lambda items: [gate.wait() for _ in items], "gate", limit=8))
    return [held, *(lanes.run(Priority.BE, job, x) for x in (1, 2, 3))]


def _batches_after_four_held(lanes: Lanes, then) -> list[list[int]]:
    """The batches of "a" the lanes ran: three behind a held job, then `then(lanes, job, first)`
    (`first`: the futures of those four, the gate opened)."""
    calls = []

    def run(items):
        calls.append([x for (x,) in items])
        return [x for (x,) in items]

    async def main():
        gate, job = threading.Event(), Batched(run, "a", limit=8)
        try:
            first = _four_held(lanes, job, gate)
            gate.set()
            await then(lanes, job, first)
        finally:
            gate.set()
            lanes.close()

    asyncio.run(main())
    return calls


def test_a_free_lane_waits_for_its_share_of_what_the_lanes_recently_held():
    async def then(lanes, job, first):
        await asyncio.sleep(0.05)  # the lane waits for a fourth of "a": its share of the 4 held
        last = lanes.run(Priority.BE, job, 4)
        assert await asyncio.gather(*first, last) == [True, 1, 2, 3, 4]

    lanes = Lanes(be_threads=1, batch_wait_s=1000, load=_Busy())  # (no test waits that long: the job comes first)
    assert _batches_after_four_held(lanes, then) == [[1, 2, 3, 4]]  # (without the wait: [1, 2, 3], then [4])


def test_a_lane_waits_no_longer_than_batch_wait_and_not_for_the_real_time_lane():
    async def then(lanes, job, first):
        await asyncio.gather(*first)  # after 50 ms, the three alone
        await lanes.run(Priority.BE, job, 5)  # its share is 4: it waits, then runs alone
        await lanes.run(Priority.RT, job, 6)

    assert _batches_after_four_held(Lanes(be_threads=1, batch_wait_s=0.05, load=_Busy()), then) == [[1, 2, 3], [5], [6]]


def test_lanes_not_kept_busy_run_what_waits():
    async def then(lanes, job, first):
        await asyncio.gather(*first)
        await lanes.run(Priority.BE, job, 5)

    lanes = Lanes(be_threads=1, batch_wait_s=1000, load=_Idle())  # (had it waited, pytest's timeout would end it)
    assert _batches_after_four_held(lanes, then) == [[1, 2, 3], [5]]


def test_lane_load_keeps_the_most_held_and_the_busy_share_over_the_last_one_to_two_windows():
    now = [0.0]
    load = LaneLoad(window_s=0.5, clock=lambda: now[0])
    for _ in range(6):
        load.added()
    now[0] = 0.4
    load.ran(6, 0.4)  # one of two lanes ran for the whole 0.4 s
    assert load.peak() == 6 and load.busy(2) == pytest.approx(0.4 / (0.9 * 2))
    now[0] = 0.6  # a new window: the last one's 6 still counts
    load.added()
    assert load.peak() == 6
    now[0] = 1.2  # two windows on: only the last one's (1) and this one's
    load.added()
    assert load.peak() == 2
    load.ran(2, 0.0)
    now[0] = 5.0  # after an idle spell both windows are stale
    load.added()
    assert load.peak() == 1 and load.busy(2) == 0.0


def test_core_share_splits_the_cores_among_front_ends():
    assert [core_share([3, 0, 2, 1], i, 2) for i in range(2)] == [[0, 1], [2, 3]]
    assert [core_share(range(5), i, 2) for i in range(2)] == [[0, 1], [2, 3, 4]]
    assert [core_share([4, 6], i, 3) for i in range(3)] == [[4], [4], [6]]  # fewer cores than front ends
    assert core_share([7], 0, 1) == [7]


@pytest.mark.skipif(not hasattr(os, "sched_setaffinity"), reason="thread affinity is Linux's")
def test_best_effort_lanes_stay_on_the_cores_given_in_turn_else_where_the_os_places_them():
    allowed = sorted(os.sched_getaffinity(0))
    cores = allowed[:2] if len(allowed) > 1 else allowed * 2

    async def main():
        pinned, free = Lanes(be_threads=2, cores=cores), Lanes(be_threads=1)
        both = threading.Barrier(2, timeout=30)  # one job on each lane at once
        placed = lambda: (both.wait(), os.sched_getaffinity(0))[1]  # noqa: E731
        try:
            on_lanes = await asyncio.gather(pinned.run(Priority.BE, placed), pinned.run(Priority.BE, placed))
            assert sorted(map(sorted, on_lanes)) == sorted([[cores[0]], [cores[1]]])
            assert await pinned.run(Priority.RT, os.sched_getaffinity, 0) == set(allowed)  # RT goes anywhere
            assert await free.run(Priority.BE, os.sched_getaffinity, 0) == set(allowed)
        finally:
            pinned.close()
            free.close()

    asyncio.run(main())
