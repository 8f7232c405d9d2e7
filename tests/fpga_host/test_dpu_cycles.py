"""The image CU's cycle model (hls/image/dpu_cycles.json, fpga_host.dpu_cycles) and the emulated
XRT's per-run report of it, up to what `atoll bench preprocess` prints."""

from __future__ import annotations

import json

import pytest

from atoll.bench.corpus import jpeg_bytes
from atoll.bench.preprocess import modelled_card
from fpga_host import dpu_cycles, jpeg_header
from fpga_host.preprocessor import Preprocessor
from fpga_host.status import PreprocessError


def test_every_coefficient_says_where_it_comes_from():
    spec = json.loads(dpu_cycles.DEFAULT_MODEL.read_text())
    assert spec["kernel"] == "image_cu" and spec["clock_hz"] > 0
    for name, entry in spec["coefficients"].items():
        assert entry["source"].split(":")[0] in ("measured", "estimate"), name


def test_model_terms():
    model = dpu_cycles.load()
    c = model.coefficients
    data = jpeg_bytes(500, 375)
    frame = jpeg_header.frame(data)
    decode = max(c["symbol"] * c["symbols_per_scan_byte"] * len(data), c["block"] * frame.blocks())
    pixels = c["source_pixel"] * 500 * 375 + c["source_row"] * 375
    # one DATAFLOW region: the slower of decode and the pixel stages, whose pace the source
    # pixels set when downscaling to a crop and the output pixels when upscaling
    assert model.image_cycles(data, 224, 224) == round(c["image"] + c["tables"] + max(decode, pixels))
    assert model.image_cycles(data, 1000, 1000) == round(c["image"] + c["tables"] + max(decode, 1e6))
    assert model.image_cycles(b"not a jpeg", 224, 224) is None


@pytest.mark.parametrize("stage,shape", [("normalize", (224, 224)), ("decode", (375, 500))])
def test_emulated_runs_report_modelled_cycles(stage, shape):
    data = jpeg_bytes(500, 375, seed=3)
    with Preprocessor("emu", cpu_workers=0, image_cus=1, audio_mel_cus=0, audio_norm_cus=0) as pre:
        for _ in range(2):
            assert pre.submit_image(data, stage).result().backend == "emu"
        state = pre.describe()
    assert state["modelled_cycles"]["image_cu"] == {"runs": 2, "cycles": 2 * dpu_cycles.load().image_cycles(data, *shape)}
    card = modelled_card(state)
    assert card["cus"] == 1 and card["runs"] == 2
    assert card["images_per_s"] == pytest.approx(300e6 / card["cycles_per_image"], rel=1e-3)


def test_a_run_ending_in_an_error_status_costs_the_model_s_fixed_part():
    data = jpeg_bytes(64, 48)
    data = data[: len(data) // 2] + b"\xff\xd9"  # scan data that runs short: CORRUPT
    with Preprocessor("emu", cpu_workers=0, image_cus=1, audio_mel_cus=0, audio_norm_cus=0) as pre:
        with pytest.raises(PreprocessError, match="CORRUPT"):
            pre.submit_image(data, "normalize").result()
        modelled = pre.describe()["modelled_cycles"]["image_cu"]
    assert modelled == {"runs": 1, "cycles": round(dpu_cycles.load().coefficients["image"])}
