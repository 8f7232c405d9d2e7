"""The RTL units' testbenches (sim_tb/<unit>/test_<unit>.py, each with its own pytest runner
function), loaded for the test_rtl_*.py files that collect them so `make test` (testpaths = tests)
runs them. They are spread over several files because pytest-xdist's loadfile runs one file on one
worker: in one file they ran one after another, the longest stretch of the suite."""

from __future__ import annotations

import importlib.util
import shutil
from pathlib import Path

import pytest

SIM_TB = Path(__file__).resolve().parents[2] / "sim_tb"

needs_simulators = pytest.mark.skipif(
    shutil.which("iverilog") is None or shutil.which("g++") is None,
    reason="needs Icarus Verilog (make sysdeps) and g++",
)


def load_testbench(unit: str):
    path = SIM_TB / unit / f"test_{unit}.py"
    spec = importlib.util.spec_from_file_location(f"sim_tb_{unit}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
