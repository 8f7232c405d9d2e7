"""Modelled hardware cycles of an image CU run: what a card would take, from the coefficients in
hls/image/dpu_cycles.json (each with where it comes from: an RTL-simulation measurement or the
code's cycle budget). The emulated XRT reports them per run (`emu_xrt.cycles`)."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

from fpga_host import jpeg_header
from fpga_host.csim import HLS_DIR

DEFAULT_MODEL = HLS_DIR / "image" / "dpu_cycles.json"


@dataclass(frozen=True)
class CycleModel:
    kernel: str
    clock_hz: float
    coefficients: dict[str, float]

    def image_cycles(self, jpeg: bytes, out_h: int, out_w: int) -> int | None:
        """Cycles of one run on `jpeg` writing out_h x out_w pixels; None when the file has no
        frame header (the CU stops at its headers)."""
        frame = jpeg_header.frame(jpeg)
        if frame is None:
            return None
        c = self.coefficients
        # Decode core, MCU strip and pixel stages are one DATAFLOW region: the slowest sets the pace.
        decode = max(c["symbol"] * c["symbols_per_scan_byte"] * len(jpeg), c["block"] * frame.blocks())
        pixels = max(c["source_pixel"] * frame.width * frame.height + c["source_row"] * frame.height,
                     c["output_pixel"] * out_h * out_w)
        return round(c["image"] + c["tables"] + max(decode, pixels))

    def seconds(self, cycles: int) -> float:
        return cycles / self.clock_hz


def load(path: str | os.PathLike | None = None) -> CycleModel:
    spec = json.loads(Path(path or DEFAULT_MODEL).read_text())
    values = {name: entry.get("cycles", entry.get("value")) for name, entry in spec["coefficients"].items()}
    return CycleModel(spec["kernel"], float(spec["clock_hz"]), values)
