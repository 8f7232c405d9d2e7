"""Knee and cost-floor rules on synthetic curves, profile files (validation, interpolation, the
per-input CPU field), shipped profiles.

References: the knee rule's closed form for a linear latency curve (derived in the test), PREBA's
published Batch_knee values (MobileNet 16/128, SqueezeNet 4/32, Swin 2/16 on A100 1g.5gb/7g.40gb),
the cost floor's closed form for a fixed cost per batch shared by its inputs (derived in the test).
"""

from __future__ import annotations

import copy
import json
import math
from pathlib import Path

import pytest

from batching.knee import COST_FLOOR, KNEE, batch_max, cost_floor, knee
from batching.paper_profiles import KINDS, paper_profile
from batching.profile import (ProfileError, load_profile, parse_profile, save_profile, service_time_from,
                              shipped_profile)

PROFILES = Path(__file__).resolve().parents[2] / "batching" / "profiles"
DOUBLING = [2**i for i in range(10)]


@pytest.mark.parametrize("a,c", [(10.0, 0.1), (2.0, 0.5), (17.0, 3.3), (1.0, 1e-4)])
def test_knee_of_linear_latency_matches_closed_form(a, c):
    # latency a + c b doubles-step test: (a + 2cb) / (a + cb) <= sqrt(2)  <=>  c b <= a / sqrt(2),
    # so the knee is the largest power of two b with c b / 2 <= a / sqrt(2) (capped by the grid)
    latency = {b: a + c * b for b in DOUBLING}
    expected = max(b for b in DOUBLING if c * b / 2 <= a / math.sqrt(2))
    assert knee(latency) == (expected, latency[expected])


def test_knee_is_first_step_where_latency_outgrows_throughput():
    # throughput grows until 8, then latency doubles per doubling (throughput flat): knee 8
    latency = {1: 10.0, 2: 10.5, 4: 11.0, 8: 12.0, 16: 24.0, 32: 48.0}
    assert knee(latency) == (8, 12.0)
    # the exact boundary: latency growth equal to throughput gain is still acceptable
    assert knee({1: 1.0, 2: math.sqrt(2), 4: 10.0})[0] == 2


def test_knee_handles_uneven_sizes_and_flat_curves():
    assert knee({1: 5.0, 3: 5.1, 7: 5.2}) == (7, 5.2)
    # 3 -> 12 is 4x the batch; latency 3x < sqrt(4)=2? no: 3 > 2 so the knee stays at 3
    assert knee({1: 1.0, 3: 1.2, 12: 3.6})[0] == 3
    assert knee({4: 9.0}) == (4, 9.0)
    with pytest.raises(ValueError):
        knee({})


def test_shipped_profiles_reproduce_prebas_published_knees():
    published = {"a100-1g.5gb": {"mobilenet_v3_small": 16, "squeezenet1_1": 4, "swin_t": 2},
                 "a100-7g.40gb": {"mobilenet_v3_small": 128, "squeezenet1_1": 32, "swin_t": 16}}
    for kind, knees in published.items():
        profile = load_profile(PROFILES / f"{kind}.json")
        assert profile.kind == kind and "PREBA" in profile.source and "not measured" in profile.source
        for model, expected in knees.items():
            assert profile.models[model].buckets[0].batch_knee == expected
        for model in ("conformer", "citrinet"):
            times = [b.time_knee_ms for b in profile.models[model].buckets]
            assert 20.0 <= min(times) and max(times) <= 45.0  # PREBA: audio Time_knee ~35 ms


@pytest.mark.parametrize("kind", list(KINDS))
def test_shipped_profiles_are_the_generator_output_and_obey_the_knee_rule(kind):
    shipped = json.loads((PROFILES / f"{kind}.json").read_text())
    assert shipped == paper_profile(kind).to_json()
    for model in load_profile(PROFILES / f"{kind}.json").models.values():
        for b in model.buckets:
            assert (b.batch_knee, b.time_knee_ms) == pytest.approx(knee(b.latency_ms), rel=1e-6)


def test_service_time_interpolates_over_batch_and_length():
    profile = load_profile(PROFILES / "a100-1g.5gb.json")
    conformer = profile.models["conformer"]
    grid = {(b.length_s, s): v for b in conformer.buckets for s, v in b.latency_ms.items()}
    assert profile.service_time("conformer", 8, 5.0) == pytest.approx(grid[(5.0, 8)] / 1e3)
    mid_batch = (grid[(5.0, 8)] + grid[(5.0, 16)]) / 2
    assert profile.service_time("conformer", 12, 5.0) == pytest.approx(mid_batch / 1e3)
    mid_len = (grid[(5.0, 8)] + grid[(7.5, 8)]) / 2
    assert profile.service_time("conformer", 8, 6.25) == pytest.approx(mid_len / 1e3)
    # shorter than the first bucket: clamped to it; past the largest batch: linear extrapolation
    assert profile.service_time("conformer", 8, 0.3) == pytest.approx(grid[(2.5, 8)] / 1e3)
    slope = grid[(2.5, 256)] - grid[(2.5, 128)]
    assert profile.service_time("conformer", 384, 2.5) == pytest.approx(
        (grid[(2.5, 256)] + slope) / 1e3)
    # images ignore length
    assert profile.service_time("swin_t", 2, 99.0) == profile.service_time("swin_t", 2, 1.0)
    fn = service_time_from({profile.kind: profile})
    assert fn("conformer", 8, 5.0, "a100-1g.5gb") == profile.service_time("conformer", 8, 5.0)
    with pytest.raises(ProfileError, match="no profile for vGPU kind"):
        fn("conformer", 8, 5.0, "h100")


def test_model_batching_from_profile():
    profile = load_profile(PROFILES / "a100-1g.5gb.json")
    policy = profile.model_batching("conformer")
    assert policy.modality == "audio" and len(policy.buckets) == 14
    assert policy.buckets[0].max_length == 2.5 and policy.buckets[-1].max_length == 35.0
    assert policy.buckets[0].batch_max == profile.models["conformer"].buckets[0].batch_knee
    assert policy.buckets[0].time_knee == pytest.approx(
        profile.models["conformer"].buckets[0].time_knee_ms / 1e3)
    assert math.isinf(profile.model_batching("swin_t").buckets[0].max_length)
    with pytest.raises(ProfileError, match="has no model 'bert'"):
        profile.model_batching("bert")


def _valid():
    return paper_profile("a100-1g.5gb").to_json()


@pytest.mark.parametrize("mutate,message", [
    (lambda d: d.pop("kind"), r"kind: missing or not a string"),
    (lambda d: d.update(models={}), r"models: is empty"),
    (lambda d: d["models"]["swin_t"].update(modality="video"),
     r"models.swin_t.modality: must be one of"),
    (lambda d: d["models"]["swin_t"]["buckets"][0].update(length_s=2.5),
     r"models.swin_t.buckets\[0\].length_s: must be null"),
    (lambda d: d["models"]["conformer"]["buckets"][3].update(length_s=1.0),
     r"models.conformer.buckets: length_s must increase"),
    (lambda d: d["models"]["conformer"]["buckets"][1].update(batch_knee=48),
     r"models.conformer.buckets\[1\].batch_knee: 48 is not one of the profiled batch sizes"),
    (lambda d: d["models"]["conformer"]["buckets"][1]["latency_ms"].update({"x": 1.0}),
     r"batch size 'x' is not a positive integer"),
    (lambda d: d["models"]["conformer"]["buckets"][2]["latency_ms"].update({"4": -1.0}),
     r"latency_ms\[4\]: must be a positive number"),
    (lambda d: d["models"]["conformer"]["buckets"][2]["latency_ms"].pop("4"),
     r"must profile the same batch sizes as bucket 0"),
    (lambda d: d["models"]["conformer"]["buckets"][0].pop("time_knee_ms"),
     r"time_knee_ms: must be a positive number"),
])
def test_profile_validation_names_the_field(mutate, message):
    data = copy.deepcopy(_valid())
    mutate(data)
    with pytest.raises(ProfileError, match=message):
        parse_profile(data, "p.json")


def test_load_profile_errors_are_one_line(tmp_path):
    with pytest.raises(ProfileError, match="cannot read profile"):
        load_profile(tmp_path / "missing.json")
    bad = tmp_path / "bad.json"
    bad.write_text("{nope")
    with pytest.raises(ProfileError, match="not valid JSON"):
        load_profile(bad)


def test_shipped_profiles_are_found_by_vgpu_kind():
    assert shipped_profile(["h100"]) is None
    path = shipped_profile(["h100", "a100-1g.5gb"])
    assert path is not None and load_profile(path).kind == "a100-1g.5gb"
    assert load_profile(shipped_profile(["cpu"])).kind == "cpu"


@pytest.mark.parametrize("fixed,per_input", [(1.0, 1.0), (4.0, 1.0), (10.0, 0.5), (0.1, 2.0)])
def test_cost_floor_of_a_fixed_cost_per_batch_matches_closed_form(fixed, per_input):
    # cost per input = fixed / b + per_input falls towards per_input; the least over the grid is at
    # its largest size B, and the rule takes the smallest b with fixed / b + p <= 1.05 (fixed / B + p)
    cost = {b: fixed / b + per_input for b in DOUBLING}
    latency = {b: fixed + per_input * b for b in DOUBLING}
    bound = 1.05 * (fixed / DOUBLING[-1] + per_input)
    expected = min(b for b in DOUBLING if fixed / b + per_input <= bound)
    assert cost_floor(latency, cost) == (expected, latency[expected])


def test_cost_floor_where_cost_rises_again_and_where_it_is_flat():
    latency = {1: 3.0, 2: 4.0, 4: 6.0, 8: 11.6, 16: 25.6, 32: 57.6}
    # least 1.45 at 8; 4 costs 1.5, within 5 % of it: the rule stops at 4
    cost = {1: 3.0, 2: 2.0, 4: 1.5, 8: 1.45, 16: 1.6, 32: 1.8}
    assert cost_floor(latency, cost) == (4, 6.0)
    assert cost_floor(latency, cost, tolerance=0.01) == (8, 11.6)
    # no gain from batching at all (within 5 %): one input at a time
    assert cost_floor(latency, {1: 1.0, 2: 1.04, 4: 0.98, 8: 1.2, 16: 1.3, 32: 1.4}) == (1, 3.0)


def test_batch_max_names_its_rule():
    latency = {1: 10.0, 2: 10.5, 4: 11.0, 8: 12.0, 16: 24.0, 32: 48.0}
    cost = {1: 10.0, 2: 5.3, 4: 2.8, 8: 1.5, 16: 1.5, 32: 1.5}
    assert batch_max(KNEE, latency) == knee(latency) == (8, 12.0)
    assert batch_max(COST_FLOOR, latency, cost) == (8, 12.0)
    with pytest.raises(ValueError, match="needs per-input costs"):
        batch_max(COST_FLOOR, latency)
    with pytest.raises(ValueError, match="unknown Batch_max rule 'best'"):
        batch_max("best", latency)
    with pytest.raises(ValueError, match="same batch sizes"):
        cost_floor(latency, {1: 1.0, 2: 0.5})


def _cost_floor_profile():
    data = paper_profile("a100-1g.5gb").to_json()
    swin = data["models"]["swin_t"]
    swin["rule"], swin["source"] = COST_FLOOR, "measured on a test bench"
    latency = swin["buckets"][0]["latency_ms"]
    swin["buckets"][0]["cpu_ms_per_input"] = {s: round(9.0 / int(s) + 1.0, 4) for s in latency}
    return data


def test_profile_round_trip_keeps_the_rule_source_and_per_input_cost(tmp_path):
    data = _cost_floor_profile()
    profile = parse_profile(copy.deepcopy(data))
    swin = profile.models["swin_t"]
    assert swin.rule == COST_FLOOR and swin.source == "measured on a test bench"
    assert swin.buckets[0].cpu_ms_per_input[1] == 10.0 and swin.buckets[0].cpu_ms_per_input[256] == 1.0352
    assert profile.to_json() == data
    save_profile(profile, tmp_path / "p.json")
    assert load_profile(tmp_path / "p.json") == profile


@pytest.mark.parametrize("kind", list(KINDS))
def test_profiles_without_rule_or_per_input_cost_still_load(kind):
    # the shipped A100 profiles predate both fields: no rule recorded (the knee), no CPU cost
    profile = load_profile(PROFILES / f"{kind}.json")
    assert {m.rule for m in profile.models.values()} == {None}
    assert {b.cpu_ms_per_input is None for m in profile.models.values() for b in m.buckets} == {True}
    assert "rule" not in json.dumps(profile.to_json()) and "cpu_ms_per_input" not in json.dumps(profile.to_json())


@pytest.mark.parametrize("mutate,message", [
    (lambda m: m.update(rule="best"), r"models.swin_t.rule: must be one of"),
    (lambda m: m["buckets"][0].pop("cpu_ms_per_input"), r"the cost-floor rule needs cpu_ms_per_input"),
    (lambda m: m["buckets"][0]["cpu_ms_per_input"].pop("4"), r"cpu_ms_per_input: must cover the batch sizes"),
    (lambda m: m["buckets"][0]["cpu_ms_per_input"].update({"4": 0}), r"cpu_ms_per_input\[4\]: must be a positive"),
    (lambda m: m.update(source=3), r"models.swin_t.source: must be a string"),
])
def test_per_input_cost_validation_names_the_field(mutate, message):
    data = _cost_floor_profile()
    mutate(data["models"]["swin_t"])
    with pytest.raises(ProfileError, match=message):
        parse_profile(data, "p.json")


def test_shipped_cpu_profile_is_measured_at_load_and_obeys_the_cost_floor():
    profile = load_profile(PROFILES / "cpu.json")
    assert profile.kind == "cpu" and set(profile.models) >= {"mobilenet_v3_small", "citrinet"}
    for model in profile.models.values():
        assert model.rule == COST_FLOOR
        assert "measured by `atoll profile`" in model.source and "at load" in model.source
        for b in model.buckets:
            assert (b.batch_knee, b.time_knee_ms) == cost_floor(b.latency_ms, b.cpu_ms_per_input)
    # every clip the server accepts by default (up to 30 s) falls in a profiled bucket
    assert profile.models["citrinet"].buckets[-1].length_s == 30.0
