"""The endpoint's pure parts: the routing choice, placement, the cluster's index, statistics and
metrics made from its nodes' answers, and what routing reads of a gRPC infer message."""

from __future__ import annotations

import pytest
from google.protobuf.message import DecodeError
from prometheus_client.parser import text_string_to_metric_families

from atoll.bench.bodies import grpc_request
from atoll.cluster import placement
from atoll.cluster.aggregate import merged_metrics, summed_statistics, union_index
from atoll.cluster.grpc_proxy import _head, _real_time
from atoll.cluster.routing import Counts, Router, real_time


def test_the_least_loaded_node_is_chosen_and_ties_take_turns():
    router = Router()
    assert router.choose([], False) is None
    assert {router.choose(["a", "b"], False) for _ in range(4)} == {"a", "b"}  # idle: in turn
    router.sent("a", False)
    assert [router.choose(["a", "b"], False) for _ in range(3)] == ["b", "b", "b"]
    router.sent("b", False)
    router.sent("b", False)
    assert router.choose(["a", "b"], False) == "a"
    router.answered("a", False)
    assert router.outstanding()["a"].total == 0


def test_the_router_takes_other_counts_only_while_none_are_out():
    router = Router()
    router.sent("a", False)
    with pytest.raises(RuntimeError, match="while requests are out"):
        router.count_with(Counts())
    router.answered("a", False)
    shared = Counts()  # (the native relay's `_relay.Routing` in the endpoint)
    router.count_with(shared)
    router.sent("b", True)
    assert shared.of("b") == (1, 1) and router.outstanding()["b"].real_time == 1 and "a" not in router.outstanding()


def test_a_real_time_request_goes_to_the_shortest_real_time_queue():
    router = Router()
    for _ in range(5):
        router.sent("a", False)  # a: much best-effort work, no real-time
    router.sent("b", True)  # b: one real-time request
    assert router.choose(["a", "b"], True) == "a"
    assert router.choose(["a", "b"], False) == "b"
    router.answered("b", True)
    assert (router.outstanding()["b"].total, router.outstanding()["b"].real_time) == (0, 0)


@pytest.mark.parametrize("parameters, rt", [({"priority": 1}, True), ({"priority": 2}, False), ({}, False),
                                            ({"priority": True}, False), ({"priority": "1"}, False)])
def test_priority_one_is_real_time(parameters, rt):
    assert real_time(parameters) is rt


def test_placement_keeps_holders_then_takes_the_least_loaded():
    live = ["a", "b", "c"]
    assert placement.targets(live, set(), None, {}) == live
    assert placement.targets(live, set(), 5, {}) == live
    assert placement.targets(live, {"c"}, 1, {}) == ["c"]
    assert placement.targets(live, set(), 2, {"a": 3, "b": 0, "c": 1}) == ["b", "c"]
    assert placement.targets(live, {"a"}, 2, {"a": 3, "b": 2, "c": 2}) == ["a", "b"]


def test_the_replicas_parameter_is_taken_out_of_the_load():
    parameters = {"replicas": 2, "config": "{}"}
    assert placement.replicas_of(parameters, None) == 2
    assert parameters == {"config": "{}"}
    assert placement.replicas_of({}, 3) == 3
    assert placement.replicas_of({"replicas": "1"}, None) == 1
    for bad in (0, -1, "x", 1.5, True):
        with pytest.raises(ValueError, match="replicas"):
            placement.replicas_of({"replicas": bad}, None)


def test_a_model_is_ready_where_some_node_has_it_ready():
    index = union_index({
        "a": [{"name": "m", "version": "1", "state": "READY"}, {"name": "n", "version": "1", "state": "UNAVAILABLE",
                                                                "reason": "unloaded"}, {"name": "never"}],
        "b": [{"name": "m", "version": "1", "state": "LOADING"}, {"name": "n", "version": "1", "state": "UNAVAILABLE",
                                                                  "reason": "bad file"}, {"name": "never"}],
    })  # fmt: skip
    assert index == [{"name": "m", "version": "1", "state": "READY"},
                     {"name": "n", "version": "1", "state": "UNAVAILABLE",
                      "reason": "a: UNAVAILABLE (unloaded); b: UNAVAILABLE (bad file)"},
                     {"name": "never"}]  # fmt: skip


def _stats(name: str, success: int, last: int, batches: dict[int, int]) -> dict:
    return {"name": name, "version": "1", "last_inference": last, "inference_count": success,
            "execution_count": sum(batches.values()),
            "inference_stats": {"success": {"count": success, "ns": success * 1000}},
            "batch_stats": [{"batch_size": size, "compute_infer": {"count": n, "ns": n * 10}}
                            for size, n in batches.items()]}  # fmt: skip


def test_statistics_sum_per_model_and_batch_size():
    a = {"model_stats": [_stats("m", 3, 100, {1: 3}), _stats("x", 1, 5, {1: 1})]}
    b = {"model_stats": [_stats("m", 4, 200, {1: 2, 2: 1})]}
    m, x = summed_statistics([a, b])["model_stats"]
    assert x == _stats("x", 1, 5, {1: 1})
    assert (m["name"], m["version"], m["last_inference"], m["inference_count"]) == ("m", "1", 200, 7)
    assert m["inference_stats"]["success"] == {"count": 7, "ns": 7000}
    assert m["batch_stats"] == [{"batch_size": 1, "compute_infer": {"count": 5, "ns": 50}},
                                {"batch_size": 2, "compute_infer": {"count": 1, "ns": 10}}]  # fmt: skip


NODE_METRICS = """# HELP nv_inference_request_success Number of successful inference requests
# TYPE nv_inference_request_success counter
nv_inference_request_success_total{model="m",version="1"} 3.0
# HELP atoll_up Whether up
# TYPE atoll_up gauge
atoll_up 1.0
"""


def test_every_node_sample_gets_its_node_label_and_each_family_appears_once():
    text = merged_metrics([("a", NODE_METRICS), ('b"1', NODE_METRICS.replace(" 3.0", " 4.0"))],
                          "# HELP atoll_cluster_retries_total retries\n# TYPE atoll_cluster_retries_total counter\n"
                          "atoll_cluster_retries_total 2.0\n")  # fmt: skip
    samples = [s for f in text_string_to_metric_families(text) for s in f.samples]  # the parser takes it whole
    assert {(s.labels.get("node"), s.name, s.labels.get("model"), s.value) for s in samples} == {
        ("a", "nv_inference_request_success_total", "m", 3.0), ('b"1', "nv_inference_request_success_total", "m", 4.0),
        ("a", "atoll_up", None, 1.0), ('b"1', "atoll_up", None, 1.0), (None, "atoll_cluster_retries_total", None, 2.0)}
    assert text.count("# TYPE nv_inference_request_success counter") == 1


def test_an_infer_message_is_read_for_routing_without_its_tensors():
    raw = grpc_request("m", "input", "FP32", [1, 3], bytes(12), priority=1)
    head = _head(raw)
    assert (head.model_name, len(head.inputs), len(head.raw_input_contents)) == ("m", 0, 0)
    assert _real_time(head) and not _real_time(_head(grpc_request("m", "input", "FP32", [1, 3], bytes(12))))
    with pytest.raises(DecodeError, match="ends inside a field"):
        _head(raw[:-3])
