"""The kernel-level testbench's host side: a kernel's arguments in Vitis HLS's control-register map,
and the runs (argument values, input buffers, expected outputs) it replays at the AXI boundary.

A kernel's pointers are m_axi ports (one AxiRam per bundle, as XRT gives each argument its own
buffer object) and every argument is an s_axilite register. Vitis HLS (flow target vitis, a
`return` on s_axilite) lays the registers out from 0x10 in argument order: a 64-bit pointer as
data low, data high and a reserved word (12 bytes), a 32-bit scalar as data and a reserved word
(8 bytes), after 0x00 control, 0x04 global interrupt enable, 0x08 interrupt enable and 0x0c
interrupt status. The map of an RTL kernel's control module (`// 0x10 : Data signal of <arg>`,
as Vitis HLS comments its generated <kernel>_control_s_axi.v) is checked against that layout.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from sim_tb.cocotb_run import run_cocotb

HERE = Path(__file__).resolve().parent
FIRST_ARGUMENT = 0x10


@dataclass(frozen=True)
class Arg:
    """One kernel argument: a pointer on an m_axi bundle, or a 32-bit scalar."""

    name: str
    bundle: str | None = None  # m_axi bundle of a pointer; None for a scalar

    @property
    def is_pointer(self) -> bool:
        return self.bundle is not None


@dataclass
class Run:
    """One kernel invocation: scalar values, input buffer contents and sizes, expected outputs.

    buffers[name] is the initial content of a pointer's buffer (its size at least max(len,
    the expected output's end)); expected[name] the bytes the kernel must leave at its start."""

    scalars: dict[str, int]
    buffers: dict[str, bytes]
    expected: dict[str, bytes] = field(default_factory=dict)


def control_offsets(args: list[Arg]) -> dict[str, int]:
    """Register offset of each argument (a pointer's low word) in Vitis HLS's layout."""
    offsets, offset = {}, FIRST_ARGUMENT
    for arg in args:
        offsets[arg.name] = offset
        offset += 12 if arg.is_pointer else 8
    return offsets


def documented_offsets(control_verilog: str) -> dict[str, int]:
    """The register map in a control module's header comment: name -> offset of [31:0]."""
    return {m[2]: int(m[1], 16) for m in re.finditer(r"//\s*0x([0-9a-fA-F]+)\s*:\s*Data signal of (\w+) \[31:0\]",
                                                     control_verilog)}


def m_axi_bundles(kernel_source: str) -> dict[str, str]:
    """port -> bundle of every `#pragma HLS INTERFACE m_axi` in a kernel's C++."""
    bundles = {}
    for pragma in re.findall(r"#pragma HLS INTERFACE m_axi ([^\n]*)", kernel_source):
        fields = dict(re.findall(r"(\w+)\s*=\s*(\w+)", pragma))
        bundles[fields["port"]] = fields["bundle"]
    return bundles


def write_case(case_dir: Path, args: list[Arg], runs: list[Run]) -> None:
    """The argument list and runs as files the cocotb test (test_hls_kernel.py) reads."""
    case_dir.mkdir(parents=True, exist_ok=True)
    described = []
    for k, run in enumerate(runs):
        for kind, blobs in (("in", run.buffers), ("expected", run.expected)):
            for name, data in blobs.items():
                (case_dir / f"run{k}_{kind}_{name}.bin").write_bytes(data)
        described.append({"scalars": run.scalars,
                          "buffers": {n: len(d) for n, d in run.buffers.items()},
                          "expected": sorted(run.expected)})
    meta = {"args": [{"name": a.name, "bundle": a.bundle} for a in args], "runs": described,
            "offsets": control_offsets(args)}
    (case_dir / "case.json").write_text(json.dumps(meta, indent=1))


def run_kernel(toplevel: str, sources: list[Path], args: list[Arg], runs: list[Run], work_dir: Path,
               control_verilog: str | None = None) -> None:
    """Replays the runs on the kernel RTL through cocotb (toplevel named as the kernel)."""
    offsets = control_offsets(args)
    if control_verilog is not None:
        documented = documented_offsets(control_verilog)
        assert documented == offsets, f"control map {documented} is not Vitis HLS's layout {offsets}"
    write_case(work_dir / "case", args, runs)
    run_cocotb(toplevel, sources, HERE / "test_hls_kernel.py", {}, work_dir / "sim",
               {"TB_CASE": str(work_dir / "case")})


def as_bytes(array: np.ndarray) -> bytes:
    return np.ascontiguousarray(array).tobytes()
