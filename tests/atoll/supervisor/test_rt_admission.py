"""Real-time admission at load and enforcement in the dispatcher (atoll/supervisor/rt_admission.py),
with a WCET profile written here: bounds computed by hand."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from batching import make_batcher
from gpu_runtime.priority import Priority
from scheduler.rt_profile import ModelWcet, WcetProfile

from atoll.kserve.errors import ApiError
from atoll.observe.metrics import Metrics
from atoll.repository.specs import ModelSpec, TensorSpec
from atoll.supervisor.dispatcher import Dispatcher, FrontEndLink
from atoll.supervisor.latency_model import LatencyModel
from atoll.supervisor.model_control import ModelControl
from atoll.supervisor.rt_admission import PROFILES_ENV, RealTime, RtRefused, declaration
from atoll.wire.channel import Failure, Submit
from atoll.wire.model_control import IndexModels, LoadModel
from atoll.wire.rt_bounds import BOUND_PARAM, RtBounds
from tests.atoll.supervisor.test_dispatcher import PLANS, POLICY, StandInPool, Writer, row, settle
from tests.atoll.supervisor.test_model_control import Supervisor as StubSupervisor
from tests.atoll.supervisor.test_model_control import write


def spec(name: str, **params) -> ModelSpec:
    return ModelSpec(name, "1", Path("m.onnx"), "onnxruntime_onnx", 4, [TensorSpec("x", "FP32", (2,))],
                     [TensorSpec("y", "FP32", (10,))], "none", "none", parameters=params)  # fmt: skip


def rt(name: str, rate: float, deadline_ms: float, **more) -> ModelSpec:
    return spec(name, **{"atoll.rt.rate_per_s": str(rate), "atoll.rt.deadline_ms": str(deadline_ms), **more})


# per-row WCETs: a 2 ms, b 8 ms, asr 1 ms; blocking 1 ms on the cpu vGPUs
PROFILE = WcetProfile("cpu", 1.25, 1e-3, {
    "a": ModelWcet({1: 2e-3, 4: 6e-3}, {}, 1e-3), "b": ModelWcet({1: 8e-3}, {}, 1e-3),
    "asr": ModelWcet({1: 1e-3}, {}, 1e-3)})


def test_declaration_from_parameters():
    assert declaration(spec("plain")) is None
    d = declaration(rt("a", 100, 20, **{"atoll.rt.burst": "2", "atoll.rt.on_violation": "refuse"}))
    assert (d.envelope.rate_per_s, d.envelope.burst, d.deadline_s, d.on_violation) == (100.0, 2, 0.02, "refuse")
    with pytest.raises(RtRefused, match="needs atoll.rt.rate_per_s and atoll.rt.deadline_ms"):
        declaration(spec("x", **{"atoll.rt.deadline_ms": "5"}))
    with pytest.raises(RtRefused, match="on_violation"):
        declaration(rt("x", 10, 5, **{"atoll.rt.on_violation": "ignore"}))


def test_a_load_that_makes_an_admitted_model_miss_is_refused_naming_it():
    r = RealTime(["cpu"], profiles={"cpu": PROFILE})
    r.admit(spec("plain"))  # declares nothing: nothing to analyse
    r.admit(rt("a", 100, 5))  # 1 + 2 = 3 ms <= 5
    assert r.bounds["a"].total_s == pytest.approx(3e-3)
    # b at 10/s, 50 ms: 1 + 2 + 8 = 11 ms for both; a's 5 ms deadline breaks
    with pytest.raises(RtRefused) as refused:
        r.check(rt("b", 10, 50))
    assert str(refused.value) == ("real-time model 'a' would miss its deadline: bound 11.000 ms > deadline "
                                  "5.000 ms")  # fmt: skip
    assert set(r.declared) == {"a"}  # nothing changed
    r.admit(rt("a", 100, 15))  # a config change: a's new deadline lets b in
    r.admit(rt("b", 10, 50))
    assert {n: round(b.total_s * 1e3, 6) for n, b in r.bounds.items()} == {"a": 11.0, "b": 11.0}
    r.forget("b")
    assert r.bounds["a"].total_s == pytest.approx(3e-3)


def test_a_model_without_a_profiled_wcet_is_refused():
    r = RealTime(["cpu", "a100-1g.5gb"], profiles={"cpu": PROFILE, "a100-1g.5gb": None})
    with pytest.raises(RtRefused, match="no WCET of real-time model.*'a'.*atoll rt profile"):
        r.check(rt("a", 100, 5))


def test_dispatcher_demotes_rows_beyond_the_envelope_and_counts_them():
    async def main():
        pool = StandInPool()
        metrics = Metrics()
        batcher = make_batcher("preba", {"cpu0": "cpu"}, lambda *a: 0.01, policies=POLICY)
        dispatcher = Dispatcher(PLANS, pool, batcher, metrics, LatencyModel(), {"cpu0": "cpu"})
        dispatcher.rt = RealTime(["cpu"], metrics, profiles={"cpu": PROFILE})
        dispatcher.rt.admit(rt("asr", 1, 50, **{"atoll.rt.burst": "2"}))  # 2 rows at once, then 1 a second
        dispatcher.start()
        fe = Writer()
        far = dispatcher.now() + 60
        dispatcher.submit(FrontEndLink(fe), Submit("asr/1", Priority.RT, far, (row(0, 50), row(1, 50))))
        dispatcher.submit(FrontEndLink(fe), Submit("asr/1", Priority.RT, far, (row(2, 50),)))  # beyond: demoted
        await settle()
        priorities = [b[4] for b in pool.batches]
        assert priorities[0] == Priority.RT and len(pool.batches[0][2]) == 2
        assert Priority.RT not in priorities[1:]  # the demoted row waits in the batcher as BE work
        text = metrics.render()
        assert b'atoll_rt_demoted_total{model="asr",reason="envelope"} 1.0' in text
        assert b'atoll_rt_bound_seconds{model="asr"} 0.003' in text  # 1 ms blocking + a burst of 2 x 1 ms
        pool.batches[0][5].set_result(([], []))
        await settle()
        assert dispatcher.rt.guard.models["asr"].worst_s > 0  # its answer came
        dispatcher.rt.guard.models["asr"].on_violation = "refuse"
        dispatcher.submit(FrontEndLink(fe), Submit("asr/1", Priority.RT, far, (row(3, 50),)))
        await settle()
        assert fe.messages[-1].failure == Failure.REJECTED and "beyond its declared envelope" in fe.messages[-1].reason
        for batch in pool.batches:  # the demoted rows' batches end too, so the stop waits for none
            if not batch[5].done():
                batch[5].set_result(([], []))
        await dispatcher.stop()

    asyncio.run(main())


def test_a_refused_config_change_leaves_the_served_version_serving(tmp_path):
    write(tmp_path, "a")
    stub, refuse = StubSupervisor(), []

    def check(spec):
        if refuse:
            raise RtRefused("real-time model 'a' would miss its deadline: bound 11.000 ms > deadline 5.000 ms")

    async def go():
        mc = ModelControl(tmp_path, "explicit", 0.05, stub.add, stub.remove, check)
        await mc.start(["a"])
        write(tmp_path, "a", "2")
        refuse.append(True)
        with pytest.raises(ApiError, match="failed to load 'a': real-time model 'a' would miss"):
            await mc.handle(LoadModel("a"))
        assert stub.log == [("add", "a", "1")]
        # version 1 serves on; the refused version 2 is listed with its reason (each version has its entry)
        assert await mc.handle(IndexModels()) == [
            {"name": "a", "version": "1", "state": "READY"},
            {"name": "a", "version": "2", "state": "UNAVAILABLE",
             "reason": "real-time model 'a' would miss its deadline: bound 11.000 ms > deadline 5.000 ms"}]

    asyncio.run(go())


def test_the_shipped_cpu_profile_admits_the_zoos_image_models_declared_real_time(monkeypatch):
    """batching/profiles/rt_cpu.json: a declared zoo model loads without `atoll rt profile` first;
    its bound holds its preprocessing, the platform's stall and the front end's hops."""
    monkeypatch.delenv(PROFILES_ENV, raising=False)
    r = RealTime(["cpu"])
    for name in ("mobilenet_v3_small", "squeezenet1_1"):
        image = ModelSpec(name, "1", Path("m.onnx"), "onnxruntime_onnx", 32, [TensorSpec("input", "FP32", (3, 224, 224))],
                          [TensorSpec("logits", "FP32", (1000,))], "image", "image",
                          parameters={"atoll.rt.rate_per_s": "1", "atoll.rt.deadline_ms": "100000"})  # fmt: skip
        r.admit(image)
    profile = r.profiles["cpu"]
    assert set(r.bounds) == {"mobilenet_v3_small", "squeezenet1_1"}
    for bound in r.bounds.values():
        assert set(bound.stages_s) == {"preprocess", "cpu"} and bound.fixed_s == profile.front_end_s > 0
        assert bound.stall_s == pytest.approx(2 * profile.stall_s) and 0 < bound.total_s < 100


def test_bounds_reach_the_specs_parameters_and_leave_them_with_the_declaration():
    declared, plain = rt("a", 100, 5), spec("p", **{"atoll.max_dim": "8"})
    shown = RtBounds({"a": 3.0}).applied(declared)
    assert shown.parameters[BOUND_PARAM] == "3.000" and BOUND_PARAM not in declared.parameters
    assert RtBounds({"a": 3.0}).applied(plain) is plain  # nothing to show: the same spec
    moved = RtBounds({"a": 11.5}).applied(shown)
    assert moved.parameters[BOUND_PARAM] == "11.500" and RtBounds({}).applied(moved).parameters == declared.parameters
