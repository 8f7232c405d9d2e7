"""`atoll demo --repository examples/...` (issue 43): the Python pipeline's ensemble is driven with
JPEGs in place of its MobileNet step, and the stateful repository is refused with what to run instead."""

from __future__ import annotations

import json
import runpy
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from gpu_runtime.zoo import build
from gpu_runtime.zoo.repository import write_model

from atoll.cli import build_parser
from atoll.commands.demo import media_inputs
from atoll.repository.specs import load_repository

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


@pytest.fixture(scope="module")
def pipeline(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("pipeline") / "repo"
    shutil.copytree(EXAMPLES / "python_pipeline", root)
    write_model(root, "mobilenet_v3_small", build("mobilenet_v3_small"))
    return root


@pytest.fixture
def sequences(tmp_path) -> Path:
    root = tmp_path / "repo"
    shutil.copytree(EXAMPLES / "sequence_accumulator", root, ignore=shutil.ignore_patterns("*.onnx", "*.py", "*.md"))
    runpy.run_path(str(EXAMPLES / "sequence_accumulator" / "build.py"))["build"](root)
    return root


def test_the_ensemble_is_driven_in_place_of_its_media_step(pipeline):
    assert media_inputs(load_repository(pipeline)) == {"classify": ("IMAGE", "image")}


def test_the_demo_serves_the_pipeline(pipeline):
    done = subprocess.run([sys.executable, "-m", "atoll.cli", "demo", "--repository", str(pipeline), "--requests", "16",
                           "--rate", "20", "--json"], capture_output=True, text=True, timeout=600)  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["errors"] == 0 and result["requests"] == 16
    assert set(result["per_model"]) <= {"classify", "classify (rt)"}
    assert set(result["mean_batch_size"]) >= {"mobilenet_v3_small", "topk"}  # the steps ran, batched


def test_a_stateful_repository_is_refused_with_what_to_run(sequences, capsys):
    assert media_inputs(load_repository(sequences)) == {}
    args = build_parser().parse_args(["demo", "--repository", str(sequences)])
    assert args.func(args) == 2
    said = capsys.readouterr().err
    assert "accumulator" in said and "simple_sequence" in said
    assert f"atoll serve --repository {sequences}" in said and "sequence_accumulator/README.md" in said
