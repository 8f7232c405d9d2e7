"""The cluster endpoint with no node that answers (one listed, nothing listening there): live but not
ready, every request answered 503 / UNAVAILABLE saying why, and Triton's restricted APIs enforced at
the endpoint over HTTP (403) and gRPC (UNAVAILABLE) before anything reaches a node."""

from __future__ import annotations

import json
import socket
import urllib.request

import grpc
import numpy as np
import pytest
from tritonclient.grpc import service_pb2 as pb
from tritonclient.grpc import service_pb2_grpc

from atoll.bench.bodies import tensor_body
from atoll.cluster.directory import NodeAddress, StaticDirectory
from tests.atoll.cluster.test_endpoint import Running

KEY = "admin-key"


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]  # closed on return: nothing listens there


@pytest.fixture(scope="module")
def endpoint():
    port = _closed_port()
    directory = StaticDirectory([NodeAddress("gone", f"127.0.0.1:{port}", f"127.0.0.1:{port}", "")])
    group = [f"model-repository:{KEY}=secret"]
    running = Running(directory, **{"server.http_restricted_api": group, "server.grpc_restricted_protocol": group})
    yield running.endpoint
    running.stop()


def _call(url: str, body: bytes | None = None, headers: dict | None = None) -> tuple[int, dict | None]:
    method = "POST" if body is not None else "GET"
    request = urllib.request.Request(url, data=body, headers=headers or {}, method=method)
    try:
        with urllib.request.urlopen(request, timeout=30) as r:
            raw = r.read()
            status = r.status
    except urllib.error.HTTPError as e:
        raw, status = e.read(), e.code
    return status, json.loads(raw) if raw.startswith(b"{") else None


def test_live_but_not_ready_and_inference_is_refused_saying_why(endpoint):
    url = endpoint.http_url
    assert _call(f"{url}/v2/health/live")[0] == 200
    assert _call(f"{url}/v2/health/ready")[0] == 503
    body, headers = tensor_body("input", np.zeros((1, 3), np.float32))
    status, answer = _call(f"{url}/v2/models/m/infer", body, headers)
    assert status == 503 and "not ready on any node of the cluster (0 of 1 nodes reachable)" in answer["error"]
    with grpc.insecure_channel(endpoint.grpc_address) as channel:
        stub = service_pb2_grpc.GRPCInferenceServiceStub(channel)
        assert stub.ServerReady(pb.ServerReadyRequest(), timeout=30).ready is False
        with pytest.raises(grpc.RpcError) as refused:
            stub.ModelInfer(pb.ModelInferRequest(model_name="m"), timeout=30)
    assert refused.value.code() == grpc.StatusCode.UNAVAILABLE and "not ready on any node" in refused.value.details()


def test_restricted_model_control_needs_its_header_over_http_and_grpc(endpoint):
    load = f"{endpoint.http_url}/v2/repository/models/m/load"
    assert _call(load, b"") == (403, {"error": f"This API is restricted, expecting header '{KEY}'"})
    status, answer = _call(load, b"", {KEY: "secret"})  # let through: no node to load it on
    assert status == 503 and "no node of the cluster is reachable" in answer["error"]
    assert _call(f"{endpoint.http_url}/v2/health/ready")[0] == 503  # other categories stay free
    with grpc.insecure_channel(endpoint.grpc_address) as channel:
        stub = service_pb2_grpc.GRPCInferenceServiceStub(channel)
        request = pb.RepositoryModelLoadRequest(model_name="m")
        with pytest.raises(grpc.RpcError) as refused:
            stub.RepositoryModelLoad(request, timeout=30)
        assert refused.value.details() == f"This protocol is restricted, expecting header 'triton-grpc-protocol-{KEY}'"
        with pytest.raises(grpc.RpcError) as passed:
            stub.RepositoryModelLoad(request, timeout=30, metadata=((f"triton-grpc-protocol-{KEY}", "secret"),))
        assert "no node of the cluster is reachable" in passed.value.details()
