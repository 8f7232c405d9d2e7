"""The Vitis build files: `make -n` prints the v++ flow, CU names agree with the manifest."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from fpga_host.manifest import DEFAULT_MANIFEST, load_manifest

HLS = Path(__file__).resolve().parents[2] / "hls"


def test_connectivity_matches_manifest():
    text = (HLS / "connectivity.cfg").read_text()
    nk = {m[1]: (int(m[2]), tuple(m[3].split("."))) for m in re.finditer(r"^nk=(\w+):(\d+):(\S+)$", text, re.M)}
    manifest = load_manifest(DEFAULT_MANIFEST)
    assert {k: (len(v.cus), v.cus) for k, v in manifest.kernels.items()} == nk
    ports = re.findall(r"^sp=(\w+)\.(\w+):HBM\[(\d+)\]$", text, re.M)
    for kernel in manifest.kernels.values():  # every bo argument of every CU has a bank
        for cu in kernel.cus:
            bos = {a.name for a in kernel.args if a.kind == "bo"}
            assert {p for c, p, _ in ports if c == cu} == bos, cu
    mel_banks = {b for c, p, b in ports if p == "mel"}
    assert len(mel_banks) == 1  # the hand-off buffers are reachable from every audio CU


@pytest.mark.skipif(shutil.which("make") is None, reason="no make")
def test_make_dry_run_prints_the_vitis_flow():
    missing = [k for k in ("image_cu", "audio_mel_cu", "audio_norm_cu") if not list(HLS.glob(f"*/{k}.cpp"))]
    if missing:
        pytest.skip(f"kernel sources not in this tree yet: {missing}")
    out = subprocess.run(["make", "-C", str(HLS), "-n"], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    build = "build/hw.xilinx_u55c_gen3x16_xdma_3_202210_1"
    for kernel in ("image_cu", "audio_mel_cu", "audio_norm_cu"):
        assert re.search(rf"v\+\+ -c -t hw --platform xilinx_u55c_gen3x16_xdma_3_202210_1 .* -k {kernel} "
                         rf".*-o \S*{build}/{kernel}\.xo \S*/{kernel}\.cpp", out.stdout), kernel
    assert re.search(r"v\+\+ -l .*--config \S*hls/connectivity\.cfg -o \S*atoll_dpu\.xclbin", out.stdout)
    assert "bitstreams/atoll_dpu.xclbin" in out.stdout
    emu = subprocess.run(["make", "-C", str(HLS), "-n", "TARGET=hw_emu"], capture_output=True, text=True)
    assert emu.returncode == 0 and "-t hw_emu" in emu.stdout
    assert "bitstreams/atoll_dpu.xclbin" not in emu.stdout  # hw_emu builds are not installed
    refused = subprocess.run(["make", "-C", str(HLS), "-n", "TARGET=sw_emu"], capture_output=True, text=True)
    assert refused.returncode != 0 and "deprecated since Vitis 2024.2" in refused.stderr
