"""`atoll model check`: our executor vs onnxruntime on a seeded input, exit codes, errors."""

from __future__ import annotations

import argparse
import json

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from atoll.commands import model as model_cmd
from gpu_runtime.compiler.importer import missing_operators
from gpu_runtime.zoo import build
from gpu_runtime.zoo.repository import write_model
from tests.gpu_runtime.zoo_cases import zoo_model


def _run(argv):
    parser = argparse.ArgumentParser()
    model_cmd.register(parser.add_subparsers())
    args = parser.parse_args(["model", "check", *argv])
    return args.func(args)


@pytest.fixture(scope="module")
def repo(tmp_path_factory):
    root = tmp_path_factory.mktemp("repo")
    write_model(root, "squeezenet1_1", build("squeezenet1_1"))
    return root


def test_check_passes_and_reports_json(repo, capsys):
    assert _run([str(repo / "squeezenet1_1"), "--batch", "2", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    out = report["outputs"]["logits"]
    assert report["ok"] and out["shape"] == [2, 1000] and report["rtol"] == 1e-3
    assert 0 < out["max_rel"] < 1e-4 and out["max_abs"] > 0


def test_check_fails_above_tolerance(repo, capsys):
    assert _run([str(repo / "squeezenet1_1" / "1" / "model.onnx"), "--rtol", "0"]) == 1
    assert "FAILED" in capsys.readouterr().out


def test_check_relative_difference_is_robust():
    got = {"y": np.array([1.0, 0.0, 2.001], np.float32)}
    want = {"y": np.array([1.0, 1e-9, 2.0], np.float32)}
    r = model_cmd.compare(got, want)["y"]
    assert r["max_rel"] == pytest.approx(0.001 / 2.0, rel=1e-2)  # tiny reference values do not explode it


def test_unsupported_model_is_a_one_line_error_naming_every_missing_operator(tmp_path, capsys):
    graph = helper.make_graph([helper.make_node("Hardmax", ["x"], ["h"], name="hm"),
                               helper.make_node("Einsum", ["h"], ["y"], name="e", equation="ij->ij")], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])])
    path = tmp_path / "m.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    assert _run([str(path)]) == 2
    err = capsys.readouterr().err
    assert "lacks operator(s) Einsum, Hardmax" in err and "onnxruntime" in err and err.count("\n") == 1


def test_missing_file(tmp_path, capsys):
    assert _run([str(tmp_path / "nope.onnx")]) == 2
    assert "no ONNX file" in capsys.readouterr().err


def test_fp16_check_states_its_own_tolerance(repo, capsys):
    assert _run([str(repo / "squeezenet1_1"), "--precision", "fp16", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["precision"] == "fp16" and report["rtol"] == model_cmd.TOLERANCES["fp16"]
    assert 1e-5 < report["outputs"]["logits"]["max_rel"] < report["rtol"]  # fp16, not fp32, error


@pytest.mark.parametrize("name", ["mobilenet_v3_small", "squeezenet1_1", "swin_t", "conformer", "citrinet"])
def test_every_zoo_model_is_on_the_kernel_runtime(name):
    """Operators the importer folds (Swin-T's shifted-window mask: Equal, Where on constants) keep no
    model off it: `atoll model check` and the server's executor choice count what is lowered."""
    assert missing_operators(zoo_model(name)) == ()
