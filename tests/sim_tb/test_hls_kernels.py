"""The kernel-level testbench (sim_tb/hls_kernel: AxiRam behind every m_axi bundle, AxiLiteMaster on
s_axi_control writing arguments, ap_start, polling ap_done) on kernel RTL with the Vitis HLS
interface.

Here the testbench runs on the RTL kernel image_post_cu (hls/rtl; its runner,
sim_tb/image_post_cu, is collected with the unit testbenches in test_rtl_units.py). Where Vitis
HLS is installed, `make -C hls rtl` exports the RTL of the DPU's three HLS kernels to build/rtl/,
and the same testbench runs on image_cu, audio_mel_cu and audio_norm_cu against the C-simulation
library's outputs for the same inputs (fpga_host.csim, the golden vectors), with the argument
lists of bitstreams/atoll_dpu.json and the m_axi bundles of the kernels' INTERFACE pragmas. Those
three skip, with the reason, when their RTL is absent, or when it instantiates modules that are
not in it (the Vivado floating-point IP of the audio kernels has no model for Icarus or Verilator:
ATOLL_RTL_SIM selects a simulator that has Vivado's compiled simulation libraries).
"""

from __future__ import annotations

import os
import re
import shutil
import sys
from pathlib import Path

import cv2
import numpy as np
import pytest

from fpga_host import csim
from fpga_host.manifest import DEFAULT_MANIFEST, load_manifest
from tests.fpga_host import audio_csim

REPO = Path(__file__).resolve().parents[2]
SIM_TB = REPO / "sim_tb"
RTL_EXPORT = REPO / "build" / "rtl"
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from sim_tb.hls_kernel.hls_kernel import Arg, Run, m_axi_bundles, run_kernel  # noqa: E402

pytestmark = pytest.mark.skipif(shutil.which("iverilog") is None or shutil.which("g++") is None,
                                reason="needs Icarus Verilog (make sysdeps) and g++")

KEYWORDS = {"module", "input", "output", "inout", "wire", "reg", "assign", "always", "initial", "begin", "end",
            "if", "else", "case", "endcase", "for", "function", "endfunction", "localparam", "parameter",
            "integer", "genvar", "generate", "endgenerate", "default", "return", "endmodule", "task", "endtask"}


def kernel_args(kernel: str) -> list[Arg]:
    source = next((REPO / "hls").glob(f"*/{kernel}.cpp")).read_text()
    bundles = m_axi_bundles(source)
    return [Arg(a.name, bundles[a.name] if a.kind == "bo" else None)
            for a in load_manifest(DEFAULT_MANIFEST).kernel(kernel).args]


def words(values) -> bytes:
    return np.asarray(values, dtype=np.uint32).tobytes()


def beats(data: bytes) -> bytes:
    """The bytes in whole 64-byte beats: the kernels' 512-bit ports read and write whole beats."""
    return data + bytes(csim.whole_beats(len(data)) - len(data))


def image_cu_runs() -> list[Run]:
    """A small JPEG through stage 3 (float32 and float16) and stage 1, as fpga_host.csim runs it."""
    rgb = np.clip(np.random.default_rng(5).normal(128, 60, (40, 56, 3)), 0, 255).astype(np.uint8)
    jpeg = cv2.imencode(".jpg", cv2.cvtColor(rgb, cv2.COLOR_RGB2BGR), [cv2.IMWRITE_JPEG_QUALITY, 90])[1].tobytes()
    max_dim = 64
    scratch = int(csim.load_library().image_cu_scratch_bytes(max_dim))
    runs = []
    for stage, resize_short, crop, fp16 in ((3, 32, 28, 0), (3, 32, 28, 1), (1, 24, 24, 0)):
        status, out = csim.run_image_cu(jpeg, stage=stage, resize_short=resize_short, crop=crop, out_fp16=bool(fp16),
                                        max_dim=max_dim)
        expected_out = out.tobytes()
        out_bytes = csim.whole_beats(len(expected_out))
        scalars = {"jpeg_len": len(jpeg), "scratch_bytes": scratch, "out_bytes": out_bytes, "stage": stage,
                   "resize_short": resize_short, "crop": crop, "out_fp16": fp16, "max_dim": max_dim}
        runs.append(Run(scalars, {"jpeg": beats(jpeg), "scratch": bytes(scratch), "out": bytes(out_bytes),
                                  "status": bytes(32)},
                        {"out": expected_out, "status": words([status[f] for f in csim.IMAGE_STATUS_FIELDS])}))
    return runs


def audio_runs(kernel: str) -> list[Run]:
    """0.3 s of noise at 22.05 kHz (resampled) and 16 kHz through audio_mel_cu, then its log-mel
    through audio_norm_cu, as the C-simulation library computes them."""
    runs = []
    for rate in (22050, 16000):
        pcm = (np.random.default_rng(rate).normal(0, 3000, int(0.3 * rate))).astype(np.int16)
        mel_words, mel = audio_csim.mel_cu(pcm, rate)
        if kernel == "audio_mel_cu":
            capacity = csim.whole_beats(4 * mel.size)
            scalars = {"n_samples": pcm.size, "sample_format": 0, "sample_rate": rate, "max_samples": 0,
                       "mel_capacity": capacity // 4}
            runs.append(Run(scalars, {"pcm": beats(pcm.tobytes()), "mel": bytes(capacity), "status": bytes(32)},
                            {"mel": mel.tobytes(), "status": words(mel_words)}))
        else:
            norm_words, out = audio_csim.norm_cu(mel)
            runs.append(Run({"n_frames": mel.shape[1]}, {"mel": beats(mel.tobytes()),
                                                          "out": bytes(csim.whole_beats(4 * out.size)),
                                                          "status": bytes(32)},
                            {"out": out.tobytes(), "status": words(norm_words)}))
    return runs


def undefined_modules(sources: list[Path]) -> set[str]:
    """Modules the sources instantiate but do not define (IP cores they expect from Vivado)."""
    text = "\n".join(re.sub(r"//[^\n]*", "", p.read_text()) for p in sources)
    defined = set(re.findall(r"^\s*module\s+(\w+)", text, re.M))
    used = set(re.findall(r"^\s*(\w+)\s+(?:#\s*\(|\w+\s*\()", text, re.M)) - KEYWORDS
    return used - defined


@pytest.mark.parametrize("kernel", ["image_cu", "audio_mel_cu", "audio_norm_cu"])
def test_vitis_kernel_rtl_at_its_axi_boundary(kernel, tmp_path):
    rtl = RTL_EXPORT / kernel
    if not (rtl / f"{kernel}.v").is_file():
        pytest.skip(f"no Vitis HLS RTL of {kernel} in build/rtl/ (`make -C hls rtl` exports it; needs Vitis HLS)")
    sources = sorted(rtl.glob("*.v"))
    missing = undefined_modules(sources)
    if missing and os.environ.get("ATOLL_RTL_SIM", "icarus") in ("icarus", "verilator"):
        pytest.skip(f"{kernel}'s RTL instantiates {sorted(missing)}, Vivado IP with no model for this simulator")
    runs = image_cu_runs() if kernel == "image_cu" else audio_runs(kernel)
    run_kernel(kernel, sources, kernel_args(kernel), runs, tmp_path, (rtl / f"{kernel}_control_s_axi.v").read_text())


@pytest.mark.parametrize("kernel", ["image_cu", "audio_mel_cu", "audio_norm_cu"])
def test_vitis_kernel_cases_fit_the_kernel(kernel):
    """What the Vitis path replays (runs here without Vitis): the manifest's arguments are the C
    signature's, in order, every pointer on an m_axi bundle; each run sets every scalar and fills
    every buffer, and expects the status words the C-simulation library wrote."""
    source = next((REPO / "hls").glob(f"*/{kernel}.cpp")).read_text()
    signature = re.search(rf'(?:extern "C"\s+)?void {kernel}\(([^)]*)\)', source)[1]
    params = [p.split()[-1].lstrip("*") for p in signature.split(",")]
    args = kernel_args(kernel)
    assert [a.name for a in args] == params
    runs = image_cu_runs() if kernel == "image_cu" else audio_runs(kernel)
    for run in runs:
        assert set(run.scalars) == {a.name for a in args if not a.is_pointer}
        assert set(run.buffers) == {a.name for a in args if a.is_pointer}
        assert np.frombuffer(run.expected["status"], np.uint32)[0] == 0  # OK
