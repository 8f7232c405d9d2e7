"""The GPU step of residency (`tools/gpu_switch.py`) runs its whole path on the CPU with --dry-run:
models switched into a pool half their size, each launch waiting for its layer group, the figures
written; then the serving path (REEF's engine, the virtual pool) on the CUDA emulator. Figures are
not checked (timing); that each model switched and was answered right is."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.timeout(600)
def test_gpu_switch_dry_run(tmp_path):
    subprocess.run([sys.executable, str(ROOT / "tools" / "gpu_switch.py"), "--dry-run", "--out", str(tmp_path)],
                   check=True, env={**os.environ, "PYTHONPATH": str(ROOT)}, capture_output=True, timeout=540)
    doc = json.loads((tmp_path / "switch.json").read_text())
    assert doc["dry_run"] and set(doc["models"]) == {"mobilenet_v3_small", "chain_small"}
    for figures in doc["models"].values():
        assert figures["switches"] == 1 and figures["groups"] >= 1
        assert {"startup_ms", "total_overhead_ms", "transfer_ms", "total_over_transfer"} <= figures.keys()
    serve = doc["serve"]
    assert serve["executor"] == "cuda-emu" and serve["wrong_answers"] == 0 and serve["evictions"] >= 2
    for figures in serve["models"].values():
        assert figures["switches"] == 1 and figures["footprint_mb"] > figures["weights_mb"]
        assert {"startup_ms", "duration_ms", "total_overhead_ms"} <= figures.keys()
