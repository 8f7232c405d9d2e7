"""`atoll profile`: measurement on a fake clock against the knee rule, and one real run through the
vGPU worker pool on a CPU vGPU with a tiny ONNX model executed by onnxruntime."""

from __future__ import annotations

import json

import onnx
import pytest
from batching.knee import knee
from batching.profile import load_profile
from onnx import TensorProto, helper

from atoll.bench.knee_profile import measure
from atoll.cli import main
from atoll.commands.profile import parse_batches, parse_lengths


class FakeClock:
    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now


def test_measure_records_tail_latency_and_knees_by_the_knee_rule():
    clock = FakeClock()
    calls = []

    def runner(batch, length):  # latency 10 ms + 0.5 ms per input-second, one slow outlier
        calls.append((batch, length))
        clock.now += (0.010 + 0.0005 * batch * length) * (3.0 if len(calls) % 7 == 0 else 1.0)

    sizes = [1, 2, 4, 8, 16, 32]
    m = measure(runner, "asr", "audio", [2.5, 10.0], sizes, repeats=5, warmup=1, percentile=50,
                clock=clock, progress=False)
    assert [b.length_s for b in m.buckets] == [2.5, 10.0]
    assert len(calls) == 2 * len(sizes) * 6
    for b in m.buckets:
        expected = {s: 10.0 + 0.5 * s * b.length_s for s in sizes}
        assert b.latency_ms == pytest.approx(expected)  # the median ignores the outlier
        assert (b.batch_knee, b.time_knee_ms) == pytest.approx(knee(expected))
    image = measure(runner, "cls", "image", [2.5, 10.0], sizes, 3, 1, 95, clock, False)
    assert [b.length_s for b in image.buckets] == [None]


def test_argument_parsing():
    assert parse_batches("4,1,2,2") == [1, 2, 4]
    assert parse_lengths("2.5:7.5:2.5") == [2.5, 5.0, 7.5]
    assert parse_lengths("5,2.5") == [2.5, 5.0]
    with pytest.raises(ValueError, match="comma list of integers"):
        parse_batches("1,x")


def _tiny_audio_repository(root):
    # y[n, c] = mean over time of x[n, c, t]: cost grows with batch and length
    graph = helper.make_graph(
        [helper.make_node("ReduceMean", ["x"], ["y"], axes=[2], keepdims=0)],
        "tiny",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 8, "t"])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 8])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    d = root / "tiny"
    (d / "1").mkdir(parents=True)
    onnx.save(model, str(d / "1" / "model.onnx"))
    (d / "config.pbtxt").write_text(
        'name: "tiny"\nplatform: "onnxruntime_onnx"\nmax_batch_size: 8\n'
        'input [ { name: "x" data_type: TYPE_FP32 dims: [ 8, -1 ] } ]\n'
        'output [ { name: "y" data_type: TYPE_FP32 dims: [ 8 ] } ]\n'
        'parameters { key: "atoll.preprocess" value { string_value: "audio" } }\n'
    )
    return root


@pytest.mark.timeout(120)
def test_profile_command_on_a_cpu_vgpu(tmp_path, capsys):
    repo = _tiny_audio_repository(tmp_path / "repo")
    out = tmp_path / "cpu.json"
    args = ["profile", "tiny", "--repository", str(repo), "--vgpu-mode", "cpu", "--vgpu", "cpu0",
            "--lengths", "2.5,5", "--batches", "1,2,4", "--repeats", "3", "--warmup", "1",
            "--out", str(out)]
    assert main(args) == 0
    profile = load_profile(out)
    assert profile.kind == "cpu" and "measured by `atoll profile`" in profile.source
    buckets = profile.models["tiny"].buckets
    assert [b.length_s for b in buckets] == [2.5, 5.0]
    assert all(sorted(b.latency_ms) == [1, 2, 4] for b in buckets)
    # a second model (here the same one, re-measured) merges into the existing file
    assert main(args) == 0
    assert list(json.loads(out.read_text())["models"]) == ["tiny"]


def test_profile_command_errors_are_one_line(tmp_path, capsys):
    repo = _tiny_audio_repository(tmp_path / "repo")
    assert main(["profile", "nope", "--repository", str(repo), "--out", str(tmp_path / "p.json")]) == 2
    assert "no model 'nope'" in capsys.readouterr().err
    assert main(["profile", "tiny", "--repository", str(repo), "--batches", "1,16",
                 "--vgpu-mode", "cpu", "--out", str(tmp_path / "p.json")]) == 2
    assert "accepts batches up to 8" in capsys.readouterr().err
