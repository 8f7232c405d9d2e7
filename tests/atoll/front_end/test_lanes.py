"""Preprocessing lanes: an RT job runs while every BE thread is busy, BE jobs run in order at a
lowered OS priority, and a job given up before it starts is skipped and reported abandoned."""

from __future__ import annotations

import asyncio
import os
import threading

import pytest
from gpu_runtime.priority import BE_NICE, Priority

from atoll.front_end.lanes import Lanes


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
