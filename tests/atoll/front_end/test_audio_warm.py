"""A front end builds librosa's caches (~4 s of imports) only where audio is served: at its start
if an audio model is, else once, when the first one is added."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

from fpga_host import cpu_backend

from atoll.front_end.rows import FrontEnd


def test_the_first_audio_model_added_warms_librosa_once(monkeypatch):
    warmed = []
    monkeypatch.setattr(cpu_backend, "warm_audio", lambda: warmed.append(True))
    front_end = SimpleNamespace(audio_warm=False)  # what FrontEnd.__init__ sets with no audio model served
    for preprocess in ("image", "none", "audio", "audio"):
        asyncio.run(FrontEnd.warm_for(front_end, SimpleNamespace(preprocess=preprocess)))
    assert warmed == [True] and front_end.audio_warm


def test_a_worker_without_audio_still_caps_its_native_threads(monkeypatch):
    calls = []
    monkeypatch.setattr(cpu_backend, "warm_audio", lambda: calls.append("warm"))
    monkeypatch.setattr(cpu_backend, "threadpool_limits", lambda limits: calls.append(("limits", limits)))
    cpu_backend.init_worker(audio_too=False)
    cpu_backend.init_worker()
    assert calls == [("limits", 1), "warm"]
