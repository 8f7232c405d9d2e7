"""The garbage collector kept out of the real-time launch path: frozen after a load, off inside
the launch window (even with several threads inside at once), back as it was afterwards."""

from __future__ import annotations

import gc
import threading

import pytest

from gpu_runtime.executors.quiet import RT_WINDOW, RtWindow, freeze_after_load


@pytest.fixture
def collections():
    seen = []

    def record(phase, info):
        if phase == "start":
            seen.append(info["generation"])

    gc.callbacks.append(record)
    yield seen
    gc.callbacks.remove(record)


def _cycles(n: int) -> None:
    for _ in range(n):
        a = []
        a.append(a)


def test_no_collection_starts_inside_the_window(collections):
    assert gc.isenabled()
    with RT_WINDOW:
        _cycles(20 * gc.get_threshold()[0])  # would trigger many generation-0 collections
        inside = len(collections)  # allocates nothing the collector tracks
    assert inside == 0 and gc.isenabled()
    _cycles(2 * gc.get_threshold()[0])
    assert collections  # and outside it they run again


def test_the_window_holds_while_any_thread_is_inside():
    window = RtWindow()
    inside, leave = threading.Event(), threading.Event()

    def other():
        with window:
            inside.set()
            leave.wait()

    thread = threading.Thread(target=other)
    thread.start()
    inside.wait()
    with window:
        pass
    assert not gc.isenabled()  # the other thread is still inside
    leave.set()
    thread.join()
    assert gc.isenabled()


def test_a_disabled_collector_stays_disabled():
    gc.disable()
    try:
        with RtWindow():
            pass
        assert not gc.isenabled()
    finally:
        gc.enable()


def test_freeze_after_load_moves_the_heap_out_of_collections():
    try:
        freeze_after_load()
        assert gc.get_freeze_count() > 0 and gc.get_count()[2] == 0
    finally:
        gc.unfreeze()
