"""Triton's restricted APIs on a real `atoll serve` (issue #33): with model control, shared memory and
inference restricted, `tritonclient` calls over HTTP and gRPC without the header are refused with
Triton's status and message (403; UNAVAILABLE) and change nothing; with it they work; what is not
restricted (health, metadata) needs no header, and its routes are the handlers themselves. The flags
reach the config; a malformed one stops the start with its reason."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from tests.atoll.client_env import run_client
from tests.atoll.probes import PATIENCE_S
from tests.atoll.supervisor.test_failing_models import SERVER
from tests.atoll.user_models import FP32_PAIR_CONFIG, fp32_pair, write

from atoll.cli import build_parser
from atoll.config import SERVE_FLAGS, ConfigError, config_from_args, load_config
from atoll.front_end.http_routes import InferenceServer
from atoll.http.messages import HttpRequest
from atoll.kserve.restricted import Restrictions
from atoll.supervisor.server_process import ServerProcess

GROUP = "model-repository,shared-memory,inference:Atoll-Admin=open sesame"

# Run in the tritonclient environment: argv = HTTP address, gRPC address; prints {call: "OK" | [status, message]}.
CLIENT = r"""
import json, os, sys
import numpy as np
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
import tritonclient.utils.shared_memory as shm
from tritonclient.utils import InferenceServerException

http = httpclient.InferenceServerClient(sys.argv[1])
grpc = grpcclient.InferenceServerClient(sys.argv[2])
H = {"ATOLL-ADMIN": "open sesame"}  # HTTP header names match in any case
G = {"triton-grpc-protocol-atoll-admin": "open sesame"}
out = {}


def call(name, fn):
    try:
        result = fn()
        out[name] = "OK" if result is None else result
    except InferenceServerException as e:
        out[name] = [e.status(), e.message()]


def http_infer(headers=None):
    x = httpclient.InferInput("x", [1, 16], "FP32")
    x.set_data_from_numpy(np.arange(16, dtype=np.float32)[None])
    return float(http.infer("good", [x], headers=headers).as_numpy("z")[0, 15])


def grpc_stream(headers=None):
    answers = []
    x = grpcclient.InferInput("x", [1, 16], "FP32")
    x.set_data_from_numpy(np.arange(16, dtype=np.float32)[None])
    grpc.start_stream(lambda result, error: answers.append(error or result), headers=headers)
    try:
        grpc.async_stream_infer("good", [x])
    except InferenceServerException:
        pass  # the stream has ended already (refused): its error comes through the callback
    finally:
        grpc.stop_stream()  # waits for the stream's end and its callbacks
    if isinstance(answers[0], InferenceServerException):
        raise answers[0]
    return float(answers[0].as_numpy("z")[0, 15])


KEY = f"/atoll_restricted_{os.getpid()}"
region = shm.create_shared_memory_region("r", KEY, 64)
try:
    for proto, client, headers in (("http", http, H), ("grpc", grpc, G)):
        call(f"{proto} unload refused", lambda: client.unload_model("good"))
        call(f"{proto} ready after refused unload", lambda: client.is_model_ready("good"))
        call(f"{proto} unload", lambda: client.unload_model("good", headers=headers))
        call(f"{proto} ready after unload", lambda: client.is_model_ready("good"))
        call(f"{proto} load refused", lambda: client.load_model("good"))
        call(f"{proto} load", lambda: client.load_model("good", headers=headers))
        call(f"{proto} ready after load", lambda: client.is_model_ready("good"))
        call(f"{proto} register refused", lambda: client.register_system_shared_memory("r", KEY, 64))
        call(f"{proto} status refused", lambda: client.get_system_shared_memory_status())
        call(f"{proto} register", lambda: client.register_system_shared_memory("r", KEY, 64, headers=headers))
        if proto == "http":
            names = [r["name"] for r in client.get_system_shared_memory_status(headers=headers)]
        else:
            names = list(client.get_system_shared_memory_status(headers=headers, as_json=True)["regions"])
        out[f"{proto} regions"] = names
        call(f"{proto} unregister", lambda: client.unregister_system_shared_memory("r", headers=headers))
        call(f"{proto} live", lambda: client.is_server_live())
        call(f"{proto} metadata", lambda: client.get_model_metadata("good") and None)
    call("http infer refused", http_infer)
    out["http infer"] = http_infer(H)
    call("grpc stream refused", grpc_stream)
    out["grpc stream"] = grpc_stream(G)
finally:
    shm.destroy_shared_memory_region(region)
print(json.dumps(out))
"""

HTTP_REFUSED = ["403", "This API is restricted, expecting header 'Atoll-Admin'"]
GRPC_REFUSED = ["StatusCode.UNAVAILABLE",
                "This protocol is restricted, expecting header 'triton-grpc-protocol-atoll-admin'"]


def test_restricted_calls_need_the_header(tmp_path):
    write(tmp_path, "good", fp32_pair(), FP32_PAIR_CONFIG)
    args = ["--repository", str(tmp_path), *SERVER, "--model-control-mode", "explicit", "--load-model", "good",
            "--http-restricted-api", GROUP, "--grpc-restricted-protocol", GROUP]  # fmt: skip
    with ServerProcess(args) as server:
        out = json.loads(run_client(CLIENT, server.url.removeprefix("http://"), server.grpc_address,
                                    timeout=PATIENCE_S * 4))  # fmt: skip
    assert server.proc.returncode == 0, "\n".join(server.log[-20:])
    for proto, refused in (("http", HTTP_REFUSED), ("grpc", GRPC_REFUSED)):
        assert out[f"{proto} unload refused"] == refused
        assert out[f"{proto} ready after refused unload"] is True  # the refused call changed nothing
        assert out[f"{proto} unload"] == "OK" and out[f"{proto} ready after unload"] is False
        assert out[f"{proto} load refused"] == refused
        assert out[f"{proto} load"] == "OK" and out[f"{proto} ready after load"] is True
        assert out[f"{proto} register refused"] == refused and out[f"{proto} status refused"] == refused
        assert out[f"{proto} register"] == "OK" and out[f"{proto} regions"] == ["r"]
        assert out[f"{proto} unregister"] == "OK"
        assert out[f"{proto} live"] is True and out[f"{proto} metadata"] == "OK"  # not restricted
    assert out["http infer refused"] == HTTP_REFUSED and out["http infer"] == 30.0
    assert out["grpc stream refused"] == GRPC_REFUSED and out["grpc stream"] == 30.0


def test_unrestricted_routes_are_the_handlers_themselves():
    """What is not restricted is served as before: no wrapper on the infer path (nor a gRPC interceptor,
    `grpc_service.start`, when no protocol is restricted)."""
    for restrictions in (None, Restrictions.parse(["model-repository:k=v"], [])):
        server = InferenceServer(None, None, restrictions=restrictions)
        routes = server.routes()
        assert routes.resolve(HttpRequest("POST", "/v2/models/m/infer", "", {})) == server.infer
        assert routes.resolve(HttpRequest("GET", "/v2/health/live", "", {})) == server.live
        load = routes.resolve(HttpRequest("POST", "/v2/repository/models/m/load", "", {}))
        assert (load == server.load) is (restrictions is None)
        server.parsing.shutdown()


def test_the_flags_reach_the_config(tmp_path):
    args = build_parser().parse_args(["serve", "--http-restricted-api", "health:a=1", "--http-restricted-api",
                                      "trace,logging:b=2,3", "--load-model", "m", "--load-model", "n"])  # fmt: skip
    server = config_from_args(args, SERVE_FLAGS).server
    assert server.http_restricted_api == ["health:a=1", "trace,logging:b=2,3"] and server.grpc_restricted_protocol == []
    assert server.load_model == "m,n"  # a repeated flag of a string key: comma-separated, as before
    toml = tmp_path / "atoll.toml"
    toml.write_text('[server]\ngrpc_restricted_protocol = ["statistics:k=v"]\n')
    assert load_config(toml).server.grpc_restricted_protocol == ["statistics:k=v"]
    assert load_config(overrides={"server.http_restricted_api": "health:k=v"}).server.http_restricted_api == [
        "health:k=v"]  # one group from --set
    with pytest.raises(ConfigError, match="server.http_restricted_api: expected a list of strings"):
        load_config(overrides={"server.http_restricted_api": 3})


def test_a_malformed_group_stops_the_start():
    proc = subprocess.run([sys.executable, "-m", "atoll", "serve", "--http-restricted-api", "model-control:k=v"],
                          capture_output=True, text=True, timeout=PATIENCE_S, check=False)  # fmt: skip
    assert proc.returncode == 2
    assert "--http-restricted-api: unknown restricted api 'model-control'" in proc.stderr
