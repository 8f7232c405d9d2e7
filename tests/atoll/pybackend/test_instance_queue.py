"""A Python model's request queue (atoll/pybackend/instances.py), without processes: an instance
takes the oldest request and those that fit behind it, and a request whose deadline passed is
answered unexecuted."""

from __future__ import annotations

import time
from concurrent.futures import Future

import pytest
from gpu_runtime.vgpu.messages import Row

from atoll.pybackend.instances import InstanceError, _Job, _Queue


def job(rows: int, deadline: float = float("inf")) -> _Job:
    return _Job(tuple(Row("arena", i, (4,)) for i in range(rows)), Future(), None, deadline)


def test_an_instance_takes_what_fits_its_largest_batch_in_order():
    queue = _Queue()
    jobs = [job(3), job(4), job(2), job(1)]
    for j in jobs:
        queue.put(j)
    assert queue.take(8) == jobs[:2]  # 3 + 4; the next (2) would pass 8
    assert queue.take(8) == jobs[2:]
    queue.put(big := job(5))
    assert queue.take(1) == [big]  # a request larger than the batch still runs, alone


def test_a_request_past_its_deadline_is_answered_unexecuted():
    queue = _Queue()
    late, live = job(1, deadline=time.monotonic() - 1), job(1)
    queue.put(late)
    queue.put(live)
    assert queue.take(8) == [live]
    with pytest.raises(InstanceError, match="deadline passed"):
        late.future.result(0)


def test_closing_answers_nothing_and_returns_what_waited():
    queue = _Queue()
    waiting = job(1)
    queue.put(waiting)
    assert queue.close() == [waiting]
    assert queue.take(8) is None
    with pytest.raises(InstanceError, match="unloaded"):
        queue.put(job(1))
