"""`atoll rt status` from a server's metrics and from a repository's declarations."""

from __future__ import annotations

import json

from scheduler.rt_profile import ModelWcet, WcetProfile

from atoll.commands import rt as rt_cli
from atoll.observe.metrics import Metrics
from atoll.supervisor.rt_admission import RealTime
from tests.atoll.supervisor.test_model_control import GRAPH
from tests.atoll.supervisor.test_rt_admission import rt


def test_status_reads_a_servers_rt_metrics(tmp_path):
    metrics = Metrics()
    r = RealTime(["cpu"], metrics, profiles={"cpu": WcetProfile("cpu", 1.0, 1e-3, {"a": ModelWcet({1: 2e-3}, {}, 0.0)})})
    r.admit(rt("a", 100, 5))
    r.ran("a", 1, 1e-3, 2.5e-3)
    r.route("a", 1, 0.0), r.route("a", 1, 0.0)  # the second is beyond the envelope
    page = tmp_path / "metrics"
    page.write_bytes(metrics.render())
    assert rt_cli.server_status(page.as_uri()) == [{"model": "a", "bound_ms": 3.0, "deadline_ms": 5.0,
                                                    "observed_worst_ms": 2.5, "demoted_envelope": 1,
                                                    "demoted_overrun": 0}]  # fmt: skip


def test_status_of_a_repository_uses_the_kinds_wcet_profile(tmp_path, monkeypatch):
    root = tmp_path / "repo"
    for name, params in (("fast", 'parameters [ { key: "atoll.rt.rate_per_s" value: { string_value: "100" } },'
                                  ' { key: "atoll.rt.deadline_ms" value: { string_value: "5" } } ]'),
                         ("plain", "")):
        (root / name / "1").mkdir(parents=True)
        (root / name / "config.pbtxt").write_text(
            f'name: "{name}"\nplatform: "onnxruntime_onnx"\nmax_batch_size: 4\n'
            'input [ { name: "x" data_type: TYPE_FP32 dims: [ 2 ] } ]\n'
            f'output [ {{ name: "y" data_type: TYPE_FP32 dims: [ 2 ] }} ]\n{params}\n')
        (root / name / "1" / "model.onnx").write_bytes(GRAPH)
    profile = tmp_path / "rt_cpu.json"
    profile.write_text(json.dumps(WcetProfile("cpu", 1.0, 1e-3, {"fast": ModelWcet({1: 2e-3}, {}, 0.0)}).to_json()))
    monkeypatch.setattr(rt_cli, "profile_path", lambda kind: profile)
    rows = rt_cli.repository_bounds(str(root), "cpu")
    assert rows == [{"model": "fast", "deadline_ms": 5.0, "bound_ms": 3.0, "meets": True}]
