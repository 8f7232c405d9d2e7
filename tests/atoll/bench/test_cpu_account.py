"""The bench's CPU account: thread names to stages, and a window's CPU-ms per request."""

from __future__ import annotations

import threading
import time

import pytest
from gpu_runtime.thread_names import name_this_thread, named_while, this_thread_name

from atoll.bench import cpu_account
from atoll.bench.cpu_account import ThreadMeter, stage_of

linux_only = pytest.mark.skipif(not cpu_account.PROC.joinpath("self", "task").is_dir(), reason="needs /proc")


def test_stage_of_names():
    assert stage_of("atoll-fe0", "atoll-fe0") == "front end: edge, admission, answers"
    assert stage_of("lane-be1", "atoll-fe0") == "lanes: preprocessing, colocated runs"
    assert stage_of("exec-pool", "atoll-w-cpu0") == "executor"
    assert stage_of("hop-reply", "atoll-w-cpu0") == "hop: vGPU worker back"
    assert stage_of("hop-monitor", "atoll-super") == "hop: vGPU worker back"
    assert stage_of("tritonserver", "tritonserver") == "other: tritonserver"


@linux_only
def test_named_while_names_threads_started_inside():
    seen = []
    before = this_thread_name()
    with named_while("exec-pool"):
        t = threading.Thread(target=lambda: seen.append(this_thread_name()))
        t.start()
        t.join()
    assert seen == ["exec-pool"]
    assert this_thread_name() == before


@linux_only
def test_a_busy_named_thread_is_its_stage():
    stop = threading.Event()

    def spin():
        name_this_thread("lane-be9")
        while not stop.is_set():
            sum(range(1000))

    lanes = stage_of("lane-be9", "python")
    meter = ThreadMeter(__import__("os").getpid())
    meter.start()
    t = threading.Thread(target=spin)
    t.start()
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:  # until the spinning thread has used some CPU
            meter.stop()
            if meter.account(1).stages[lanes] >= 50:
                break
            time.sleep(0.05)
    finally:  # a failure must not leave the thread spinning beside the other tests
        stop.set()
        t.join()
    account = meter.account(10)
    assert account.stages[lanes] >= 5.0  # 50+ CPU-ms over 10 requests
    assert account.total == pytest.approx(sum(account.stages.values()))
    assert account.to_json()["requests"] == 10
    assert lanes in account.table()
