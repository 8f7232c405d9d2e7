"""How `atoll serve` configures its batcher from model configs and a knee profile."""

from pathlib import Path

import pytest
from batching import Item, PrebaBatcher, TritonBatcher
from batching.profile import load_profile

from atoll.config import load_config
from atoll.repository.specs import ModelSpec, TensorSpec
from atoll.supervisor.model_batching import batcher_for, preba_policies

PROFILE = Path(__file__).resolve().parents[3] / "batching" / "profiles" / "a100-1g.5gb.json"


def _spec(name, preprocess, max_batch=32, delay_us=None):
    dims = (3, 224, 224) if preprocess == "image" else (80, -1)
    return ModelSpec(name, "1", Path("m.onnx"), "onnxruntime_onnx", max_batch,
                     [TensorSpec("x", "FP32", dims)], [TensorSpec("y", "FP32", (10,))],
                     preprocess, preprocess, max_queue_delay_microseconds=delay_us)  # fmt: skip


def test_defaults_without_profile():
    config = load_config(overrides={"batching.max_batch_size": 8, "preprocessing.max_audio_seconds": 12})
    policies = preba_policies(config, {"img": _spec("img", "image", delay_us=3000),
                                       "asr": _spec("asr", "audio", max_batch=4)})  # fmt: skip
    img, asr = policies["img"], policies["asr"]
    assert [(b.batch_max, b.time_knee) for b in img.buckets] == [(8, 0.003)]
    assert [b.max_length for b in asr.buckets] == [2.5, 5.0, 7.5, 10.0, 12.5]  # 2.5 s buckets to 12 s
    assert {b.batch_max for b in asr.buckets} == {4}  # capped by the model's max_batch_size


def test_profile_knees_become_batch_max_and_time_knee():
    profile = load_profile(PROFILE)
    config = load_config(overrides={"batching.profile": str(PROFILE)})
    models = {"mobilenet_v3_small": _spec("mobilenet_v3_small", "image"),
              "conformer": _spec("conformer", "audio", max_batch=32)}  # fmt: skip
    policies = preba_policies(config, models, profile)
    mobilenet = policies["mobilenet_v3_small"].buckets[0]
    assert mobilenet.batch_max == 16 and mobilenet.time_knee == pytest.approx(0.004)  # PREBA's knee
    conformer = policies["conformer"].buckets
    assert conformer[0].batch_max == 32  # knee 64, capped by max_batch_size 32
    assert conformer[0].time_knee == pytest.approx(profile.models["conformer"].buckets[0].time_knee_ms / 1e3)


def test_batcher_kinds_and_service_times():
    config = load_config(overrides={"batching.profile": str(PROFILE)})
    models = {"mobilenet_v3_small": _spec("mobilenet_v3_small", "image")}
    vgpus = {f"mig{i}": "a100-1g.5gb" for i in range(7)}
    batcher, _, largest = batcher_for(config, models, vgpus, latency=lambda *a: 1.0)
    assert isinstance(batcher, PrebaBatcher) and largest == {"mobilenet_v3_small": 16}
    # Time_queue = Time_knee / 7 vGPUs: one item dispatches alone after 4 ms / 7
    batcher.add(Item(1, "mobilenet_v3_small", 1.0, arrival=0.0), 0.0)
    assert batcher.next_deadline() == pytest.approx(0.004 / 7)
    assert [len(d.items) for d in batcher.poll(0.004 / 7)] == [1]
    triton, _, largest = batcher_for(load_config(overrides={"batching.batcher": "triton"}), models, vgpus,
                                     latency=lambda *a: 1.0)  # fmt: skip
    assert isinstance(triton, TritonBatcher) and largest == {"mobilenet_v3_small": 8}


def test_cpu_vgpus_take_batch_max_and_time_knee_from_the_shipped_cpu_profile():
    # no [batching] profile: `atoll serve` on CPU vGPUs finds batching/profiles/cpu.json
    cpu = load_profile(PROFILE.with_name("cpu.json"))
    models = {"mobilenet_v3_small": _spec("mobilenet_v3_small", "image"),
              "citrinet": _spec("citrinet", "audio", max_batch=32), "other": _spec("other", "image")}
    config = load_config()
    cap = config.batching.max_queue_delay_microseconds / 1e6  # a CPU profile's Time_knee is capped by it
    batcher, policies, largest = batcher_for(config, models, {"cpu0": "cpu"}, latency=lambda *a: 1.0)
    for name in ("mobilenet_v3_small", "citrinet"):
        profiled = cpu.models[name].buckets
        assert [(b.batch_max, b.time_knee) for b in policies[name].buckets] == [
            (p.batch_knee, pytest.approx(min(p.time_knee_ms / 1e3, cap))) for p in profiled]
        assert largest[name] == max(p.batch_knee for p in profiled)
    assert cpu.models["citrinet"].buckets[0].time_knee_ms / 1e3 > cap  # (the cap is not idle)
    assert [b.batch_max for b in policies["other"].buckets] == [4]  # unprofiled: the CPU default
    # one vGPU: Time_queue = Time_knee; a lone image goes when it has waited that long
    knee = min(cpu.models["mobilenet_v3_small"].buckets[0].time_knee_ms / 1e3, cap)
    batcher.add(Item(1, "mobilenet_v3_small", 1.0, arrival=0.0), 0.0)
    assert batcher.next_deadline() == pytest.approx(knee)
