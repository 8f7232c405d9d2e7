"""Atoll against the real Triton server: the same `tritonclient` calls (`triton_calls.py`), compared
call by call by status and by the structure of the answer.

Triton is nvidia-pytriton's `tritonserver` (see atoll/bench/triton_baseline.py for its environment),
serving Python-backend twins of the same models under the same names and tensor names, both servers
in explicit model-control mode. Not part of the test suite, which has no Triton environment:

    python -m tests.atoll.triton_conformance [--out bench/results/triton_conformance.json]

It prints every call whose status or answer structure differs (docs/serving.md, "Triton conformance", says
why each does). `test_triton_protocol.py` runs the same calls against Atoll alone and checks values.
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

import numpy as np
from gpu_runtime.zoo import build
from gpu_runtime.zoo.repository import write_model
from tests.atoll.client_env import run_client

from atoll.bench import triton_baseline
from atoll.bench.corpus import jpeg_bytes, synthetic_wav
from atoll.supervisor.server_process import ServerProcess

CALLS = Path(__file__).with_name("triton_calls.py")
MODELS = ("mobilenet_v3_small", "citrinet")
ATOLL_ARGS = ["--backend", "cpu", "--model-control-mode", "explicit", "--load-model", MODELS[0]]
TRITON_ARGS = ("--model-control-mode=explicit", f"--load-model={MODELS[0]}")


def calls_repository(root: Path) -> Path:
    """The models the calls expect: MobileNetV3's logits labelled (class0..class999), CitriNet."""

    for name in MODELS:
        write_model(root, name, build(name))
    config = root / MODELS[0] / "config.pbtxt"
    config.write_text(config.read_text().replace("dims: [ 1000 ] }", 'dims: [ 1000 ] label_filename: "labels.txt" }'))
    (root / MODELS[0] / "labels.txt").write_text("".join(f"class{i}\n" for i in range(1000)))
    return root


def write_media(directory: Path) -> Path:
    (directory / "image.jpg").write_bytes(jpeg_bytes(640, 480, seed=3))
    (directory / "audio.wav").write_bytes(synthetic_wav(np.random.default_rng(7), 3.2, rate=22050))
    return directory


def run_calls(http_url: str, grpc_address: str, media: Path) -> dict:
    out = run_client(CALLS.read_text(), http_url.removeprefix("http://"), grpc_address, str(media), timeout=600)
    return json.loads(out)


def differences(atoll: dict, triton: dict) -> dict:
    """Calls whose status or answer structure differs: {call: {"atoll": ..., "triton": ...}}."""
    out = {}
    for name in atoll.keys() | triton.keys():
        a, t = atoll.get(name, {}), triton.get(name, {})
        if (a.get("status"), a.get("structure")) != (t.get("status"), t.get("structure")):
            out[name] = {"atoll": {k: a.get(k) for k in ("status", "error", "structure")},
                         "triton": {k: t.get(k) for k in ("status", "error", "structure")}}  # fmt: skip
    return dict(sorted(out.items()))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, help="write the differences here as JSON")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="atoll-conformance-") as tmp:
        root = calls_repository(Path(tmp) / "repo")
        media = write_media(Path(tmp))
        with ServerProcess(["--repository", str(root), *ATOLL_ARGS]) as atoll:
            ours = run_calls(atoll.url, atoll.grpc_address, media)
        with triton_baseline.server(str(root), (), TRITON_ARGS) as triton:
            theirs = run_calls(triton.url, triton.grpc, media)
    found = differences(ours, theirs)
    for name, diff in found.items():
        print(f"{name}: atoll {diff['atoll']['status']} / triton {diff['triton']['status']}")
        if diff["atoll"]["status"] == diff["triton"]["status"]:
            print(f"    atoll:  {json.dumps(diff['atoll']['structure'])}\n    triton: {json.dumps(diff['triton']['structure'])}")
    print(f"{len(found)} of {len(ours)} calls differ")
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps({"calls": len(ours), "differences": found}, indent=2) + "\n")


if __name__ == "__main__":
    main()
