"""Triton's restricted APIs as `kserve.restricted` parses and applies them: the flags' rules, each
endpoint's category, and Triton's refusals (HTTP 403, gRPC UNAVAILABLE, their messages)."""

from __future__ import annotations

import grpc
import pytest

from atoll.kserve.restricted import CATEGORIES, GRPC_CATEGORIES, Restrictions, Rule, http_category

ADMIN = "model-repository,shared-memory:Admin-Key=s3cret"


def test_nothing_restricted_is_falsy_and_allows_everything():
    for none in (Restrictions.none(), Restrictions.parse([], [])):
        assert not none
        assert none.http_refusal("POST", "/v2/repository/models/m/load", {}) is None
        assert none.grpc_refusal("RepositoryModelLoad", {}) is None
    assert Restrictions.parse([ADMIN], [])
    assert Restrictions.parse([], [ADMIN])


def test_parse_groups_and_headers():
    r = Restrictions.parse([ADMIN, "statistics:stats=x=y:z"], ["inference:k=v"])
    assert r.http == {"model-repository": Rule("Admin-Key", "s3cret"), "shared-memory": Rule("Admin-Key", "s3cret"),
                      "statistics": Rule("stats", "x=y:z")}  # split at the first ':', then the first '='
    assert r.grpc == {"inference": Rule("triton-grpc-protocol-k", "v")}


@pytest.mark.parametrize("spec, words", [
    ("model-repository", "option format is '<apis>:<key>=<value>'"),
    ("model-repository:key", "option format"),
    (":key=value", "option format"),
    ("model-repository:=value", "option format"),
    ("model-repository:key=", "option format"),
    ("model-control:key=value", ("unknown restricted api 'model-control' (known: health, metadata, inference, "
                                 "shared-memory, model-config, model-repository, statistics, trace, logging)")),
    ("health,,metadata:key=value", "unknown restricted api ''"),
])  # fmt: skip
def test_malformed_specs_are_refused(spec, words):
    with pytest.raises(ValueError, match="^--http-restricted-api") as raised:
        Restrictions.parse([spec], [])
    assert words in str(raised.value)
    with pytest.raises(ValueError, match="^--grpc-restricted-protocol"):
        Restrictions.parse([], [spec])


def test_a_category_in_one_group_only():
    with pytest.raises(ValueError) as raised:
        Restrictions.parse(["health:a=1", "metadata,health:b=2"], [])
    assert str(raised.value) == ("--http-restricted-api: restricted api 'health' can not be specified in "
                                 "multiple groups")  # fmt: skip
    with pytest.raises(ValueError, match="restricted protocol 'trace'"):
        Restrictions.parse([], ["trace,trace:a=1"])
    assert Restrictions.parse(["health:a=1"], ["health:b=2"])  # each transport has its own groups


@pytest.mark.parametrize("path, category", [
    ("/v2", "metadata"), ("/v2/health/live", "health"), ("/v2/health/ready", "health"),
    ("/v2/models/m", "metadata"), ("/v2/models/m/versions/1", "metadata"), ("/v2/models/{model}", "metadata"),
    ("/v2/models/m/ready", "health"), ("/v2/models/m/versions/2/ready", "health"),
    ("/v2/models/m/infer", "inference"), ("/v2/models/{model}/versions/{version}/infer", "inference"),
    ("/v2/models/m/generate", "inference"), ("/v2/models/m/config", "model-config"),
    ("/v2/models/stats", "statistics"), ("/v2/models/m/stats", "statistics"),
    ("/v2/models/m/versions/1/stats", "statistics"),
    ("/v2/repository/index", "model-repository"), ("/v2/repository/models/m/load", "model-repository"),
    ("/v2/repository/models/m/unload", "model-repository"),
    ("/v2/systemsharedmemory/status", "shared-memory"),
    ("/v2/systemsharedmemory/region/r/register", "shared-memory"),
    ("/v2/cudasharedmemory/region/r/unregister", "shared-memory"),
    ("/v2/trace/setting", "trace"), ("/v2/models/m/trace/setting", "trace"), ("/v2/logging", "logging"),
    ("/metrics", None), ("/v2/models", None), ("/v2/models/m/versions", None), ("/v2/nothing", None),
    ("/v1/models/m", None), ("/", None),
])  # fmt: skip
def test_http_categories(path, category):
    assert http_category(path) == category


def test_every_grpc_method_has_its_category():
    from tritonclient.grpc import service_pb2  # the protos Atoll serves (tritonclient's, generated from Triton's)

    methods = service_pb2.DESCRIPTOR.services_by_name["GRPCInferenceService"].methods_by_name
    assert set(methods) == set(GRPC_CATEGORIES)
    assert set(GRPC_CATEGORIES.values()) == set(CATEGORIES)


def test_http_refusal_is_triton_s():
    r = Restrictions.parse([ADMIN], [])
    load = "/v2/repository/models/m/load"
    refused = (403, "This API is restricted, expecting header 'Admin-Key'")
    assert r.http_refusal("POST", load, {}) == refused
    assert r.http_refusal("POST", load, {"admin-key": "wrong"}) == refused
    assert r.http_refusal("POST", load, {"admin-key": "S3CRET"}) is not None  # values match exactly
    for headers in ({"admin-key": "s3cret"}, {"Admin-Key": "s3cret"}, {"ADMIN-KEY": "s3cret", "x": "y"}):
        assert r.http_refusal("POST", load, headers) is None  # names in any case
    assert r.http_refusal("GET", "/v2/systemsharedmemory/status", {}) is not None
    assert r.http_refusal("DELETE", load, {}) is not None  # by path, before the method (a 405 later)
    for free in ("/v2/models/m/infer", "/v2/health/live", "/v2/models/stats", "/metrics", "/v2/nothing"):
        assert r.http_refusal("POST", free, {}) is None


def test_grpc_refusal_is_triton_s():
    r = Restrictions.parse([], ["model-repository,shared-memory:Admin-Key=s3cret"])
    message = "This protocol is restricted, expecting header 'triton-grpc-protocol-admin-key'"
    refused = (grpc.StatusCode.UNAVAILABLE, message)
    assert r.grpc_refusal("RepositoryModelLoad", {}) == refused
    assert r.grpc_refusal("SystemSharedMemoryRegister", {"triton-grpc-protocol-admin-key": "nope"}) == refused
    assert r.grpc_refusal("Admin-Key", {"admin-key": "s3cret"}) is None  # not a method: nothing to restrict
    assert r.grpc_refusal("RepositoryModelUnload", {"admin-key": "s3cret"}) == refused  # the prefix is needed
    for method in ("RepositoryIndex", "RepositoryModelLoad", "CudaSharedMemoryStatus"):
        assert r.grpc_refusal(method, {"triton-grpc-protocol-admin-key": "s3cret"}) is None
    for free in ("ModelInfer", "ModelStreamInfer", "ServerLive", "ModelStatistics"):
        assert r.grpc_refusal(free, {}) is None
    assert r.grpc_rule("ModelInfer") is None and r.grpc_rule("RepositoryModelLoad") == r.grpc["model-repository"]
