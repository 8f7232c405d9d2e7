"""examples/python_pipeline served as its README says (MobileNetV3-small built from the zoo into a
copy of it): a JPEG to the ensemble `classify` answers, over HTTP and gRPC, the top 5 classes of the
softmax of the logits MobileNet itself answers for that JPEG, and their labels by class_count."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import cv2
import numpy as np
import pytest
from gpu_runtime.zoo import build
from gpu_runtime.zoo.repository import write_model
from tests.atoll.client_env import client_python
from tests.atoll.probes import PATIENCE_S

from atoll.supervisor.server_process import ServerProcess

HERE = os.path.dirname(__file__)
EXAMPLE = Path(HERE).parents[2] / "examples" / "python_pipeline"


@pytest.fixture(scope="module")
def answers(tmp_path_factory):
    python = client_python()
    tmp = tmp_path_factory.mktemp("example")
    root = tmp / "repo"
    shutil.copytree(EXAMPLE, root)
    write_model(root, "mobilenet_v3_small", build("mobilenet_v3_small"))
    image = np.random.default_rng(43).integers(0, 256, (300, 400, 3), dtype=np.uint8)
    ok, jpeg = cv2.imencode(".jpg", cv2.GaussianBlur(image, (9, 9), 3))
    assert ok
    (tmp / "in.jpg").write_bytes(jpeg.tobytes())
    args = ["--repository", str(root), "--backend", "cpu", "--set", "vgpus.cpu_vgpus=1", "--front-ends", "1"]
    with ServerProcess(args) as server:
        subprocess.run([python, os.path.join(HERE, "example_calls.py"), server.url.removeprefix("http://"),
                        server.grpc_address, str(tmp / "in.jpg"), str(tmp / "out.npz")],
                       check=True, timeout=PATIENCE_S)  # fmt: skip
    return dict(np.load(tmp / "out.npz", allow_pickle=True))


def test_the_ensemble_answers_the_top_classes_of_mobilenets_logits(answers):
    logits = answers["logits"].astype(np.float64)
    probabilities = np.exp(logits - logits.max()) / np.exp(logits - logits.max()).sum()
    best = np.argsort(-probabilities, axis=-1, kind="stable")[:, :5]
    for path in ("http", "grpc"):
        assert answers[f"{path}/TOPK_INDICES"].tolist() == best.tolist(), path
        np.testing.assert_allclose(answers[f"{path}/TOPK_SCORES"], np.take_along_axis(probabilities, best, -1),
                                   rtol=1e-5)  # fmt: skip
        labels = [entry.decode().split(":") for entry in answers[f"{path}/PROBABILITIES"].reshape(-1)]
        assert [int(index) for _, index, _ in labels] == best[0].tolist()
        assert [label for *_, label in labels] == [f"class_{i:03d}" for i in best[0]]
