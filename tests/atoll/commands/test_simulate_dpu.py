"""`atoll simulate` for image models: how many DPU image CUs each offered rate needs."""

from __future__ import annotations

import json
import math
from pathlib import Path

from atoll.bench.corpus import jpeg_bytes
from atoll.cli import main
from fpga_host import dpu_cycles

PROFILE = str(Path(__file__).resolve().parents[3] / "batching" / "profiles" / "a100-1g.5gb.json")


def _report(capsys, model: str, *extra) -> dict:
    code = main(["simulate", "--profile", PROFILE, "--model", model, "--duration", "1", "--json", *extra])
    assert code == 0
    return json.loads(capsys.readouterr().out)


def test_image_model_plan_counts_cus_from_the_cycle_model(capsys):
    report = _report(capsys, "mobilenet_v3_small", "--rate", "1500")
    model = dpu_cycles.load()
    image_ms = model.seconds(model.image_cycles(jpeg_bytes(500, 375), 224, 224)) * 1e3
    assert report["dpu"]["image_ms"] == round(image_ms, 4)
    assert report["dpu"]["cus_needed"] == [{"rate_rps": 1500.0, "cus": math.ceil(1.5 * image_ms)}]


def test_given_image_time_and_audio_models(capsys):
    report = _report(capsys, "mobilenet_v3_small", "--rate", "1000", "--dpu-image-ms", "4.5")
    assert report["dpu"]["cus_needed"] == [{"rate_rps": 1000.0, "cus": 5}]
    assert "dpu" not in _report(capsys, "conformer", "--rate", "100")
