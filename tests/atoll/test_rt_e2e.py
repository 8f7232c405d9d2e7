"""Issue #44 end to end: `atoll serve` with a declared real-time model beside best-effort load,
driven by tritonclient (`rt_calls.py`): the model is admitted and its bound shows in its config
answer (HTTP and gRPC); a client beyond its envelope is demoted, not failed, and counted; a load
that would make it miss its deadline is refused, naming the model, its bound and its deadline.
The WCET profile is written here (`$ATOLL_RT_PROFILES`), so the bounds are known exactly."""

from __future__ import annotations

import json
import os
import re
import subprocess

import pytest
from scheduler.rt_profile import ModelWcet, WcetProfile
from tests.atoll.client_env import client_python
from tests.atoll.probes import PATIENCE_S
from tests.atoll.test_model_config import TENSORS, plus
from tests.atoll.user_models import write

from atoll.commands.rt import server_status
from atoll.repository.specs import load_repository
from atoll.supervisor.rt_admission import PROFILES_ENV, RealTime, RtRefused
from atoll.supervisor.server_process import ServerProcess

HERE = os.path.dirname(__file__)
# rt-fast alone: 2 ms blocking + 1 ms stall + a burst of 2 x 2 ms + 3 ms of front-end hops = 10 ms
# (deadline 30 ms); with rt-greedy's 40 ms rows beside it, far more.
PROFILE = WcetProfile("cpu", 1.0, 2e-3, {"rt-fast": ModelWcet({1: 2e-3}, {}, 0.0),
                                         "rt-greedy": ModelWcet({1: 40e-3}, {}, 0.0)},
                      stall_s=1e-3, front_end_s=3e-3)  # fmt: skip


def declared(rate: float, deadline_ms: float, burst: int = 1) -> str:
    values = {"atoll.rt.rate_per_s": rate, "atoll.rt.deadline_ms": deadline_ms, "atoll.rt.burst": burst}
    return "parameters [ " + ", ".join(f'{{ key: "{k}" value: {{ string_value: "{v}" }} }}'
                                       for k, v in values.items()) + " ]\n"  # fmt: skip


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    python = client_python()
    tmp = tmp_path_factory.mktemp("rt_e2e")
    root, profiles = tmp / "repo", tmp / "profiles"
    write(root, "rt-fast", plus(1), TENSORS + declared(0.1, 30, burst=2))
    write(root, "rt-greedy", plus(2), TENSORS + declared(10, 1000))
    write(root, "be-load", plus(0), TENSORS)
    profiles.mkdir()
    (profiles / "rt_cpu.json").write_text(json.dumps(PROFILE.to_json()))
    args = ["--repository", str(root), "--backend", "cpu", "--set", "vgpus.cpu_vgpus=1", "--set", "vgpus.mode=cpu",
            "--front-ends", "1", "--model-control-mode", "explicit", "--load-model", "rt-fast",
            "--load-model", "be-load", "--metrics-port", "0"]  # fmt: skip
    with ServerProcess(args, env={PROFILES_ENV: str(profiles)}) as server:
        subprocess.run([python, os.path.join(HERE, "rt_calls.py"), server.url.removeprefix("http://"),
                        server.grpc_address, str(tmp / "out.json")], check=True, timeout=PATIENCE_S)  # fmt: skip
        metrics = next(m.group(1) for line in server.log if (m := re.search(r"metrics (\S+/metrics)", line)))
        status = server_status(metrics)
    specs = load_repository(str(root))
    return json.loads((tmp / "out.json").read_text()), status, specs


def test_the_declared_model_is_admitted_and_its_bound_is_in_its_config(served):
    answers, status, _ = served
    assert answers["bound"] == {"http": "10.000", "grpc": "10.000"}
    assert answers["rt_answers"] == [[[1.0, 2.0, 3.0, 4.0]]] * 8
    assert answers["be_answers"] == [[[0.0, 1.0, 2.0, 3.0]]] * 20
    row = next(r for r in status if r["model"] == "rt-fast")
    assert (row["bound_ms"], row["deadline_ms"]) == (10.0, 30.0) and row["observed_worst_ms"] > 0


def test_an_over_rate_client_is_demoted_and_counted(served):
    _, status, _ = served
    row = next(r for r in status if r["model"] == "rt-fast")
    # 8 requests back to back against a burst of 2 and one each 10 s: 6 beyond the envelope, unless
    # the 8 took over 10 s
    assert row["demoted_envelope"] >= 5 and row["demoted_overrun"] == 0


def test_a_load_that_would_break_the_guarantee_is_refused_naming_model_bound_and_deadline(served):
    answers, _, specs = served
    rt = RealTime(["cpu"], profiles={"cpu": PROFILE})
    rt.admit(specs["rt-fast"])
    with pytest.raises(RtRefused) as refused:
        rt.check(specs["rt-greedy"])
    line = str(refused.value)
    assert line.startswith("real-time model 'rt-fast' would miss its deadline: bound ") and "> deadline 30.000 ms" in line
    assert line in answers["refused"] and not answers["greedy_ready"]
    assert answers["bound_after"] == "10.000"  # the refused load changed nothing
