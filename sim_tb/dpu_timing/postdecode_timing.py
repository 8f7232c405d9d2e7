"""Cycles image_postdecode (the RTL unit its descriptor names) takes for one frame, at full rate.

Builds sim_tb/dpu_timing/postdecode_timing_tb.v around the unit on Verilator (or Icarus) once per
source set and runs it per frame; the unit's timing depends on the frame's arguments only. The
unit keeps its module interface when it is replaced, so this times whichever version hls/rtl holds.
"""

from __future__ import annotations

import hashlib
import re
import subprocess
from pathlib import Path

from sim_tb.cocotb_run import descriptor_sources
from sim_tb.jpeg_entropy_decode.entropy_sim import BUILD, verilator_executable

HERE = Path(__file__).resolve().parent
FORMATS = {"u8": 0, "f32": 1, "f16": 2}


def _command(simulator: str) -> list[str]:
    sources = [*descriptor_sources("image_postdecode"), HERE / "postdecode_timing_tb.v"]
    key = hashlib.sha256(simulator.encode())
    for path in sources:
        key.update(path.read_bytes())
    out = BUILD.parent / "dpu_timing" / f"{simulator}-{key.hexdigest()[:16]}"
    if simulator == "icarus":
        vvp = out / "tb.vvp"
        if not vvp.exists():
            out.mkdir(parents=True, exist_ok=True)
            subprocess.run(["iverilog", "-g2012", "-s", "postdecode_timing_tb", "-o", str(vvp), *map(str, sources)],
                           check=True, capture_output=True, text=True)
        return ["vvp", "-n", str(vvp)]
    binary = out / "Vpostdecode_timing_tb"
    if not binary.exists():
        out.mkdir(parents=True, exist_ok=True)
        subprocess.run([verilator_executable(), "--binary", "-O3", "-j", "2", "--top-module", "postdecode_timing_tb",
                        "-CFLAGS", "-fcoroutines -O2", "-Wno-fatal", "-Wno-WIDTH", "--Mdir", str(out),
                        *map(str, sources)], check=True, capture_output=True, text=True)
    return [str(binary)]


def postdecode_cycles(src_h: int, src_w: int, dst_h: int, dst_w: int, crop_h: int, crop_w: int,
                      fmt: str = "f32", simulator: str = "verilator") -> int:
    """ap_start to ap_done for one frame: pixels offered and beats taken every cycle."""
    args = {"src_h": src_h, "src_w": src_w, "dst_h": dst_h, "dst_w": dst_w, "crop_h": crop_h, "crop_w": crop_w,
            "format": FORMATS[fmt]}
    out = subprocess.run([*_command(simulator), *(f"+{k}={v}" for k, v in args.items())], check=True,
                         capture_output=True, text=True).stdout
    found = re.search(r"postdecode cycles (\d+) pixels (\d+) beats (\d+) done (\d)", out)
    if not found or found[4] != "1" or int(found[2]) != src_h * src_w:
        raise RuntimeError(f"image_postdecode did not finish the frame: {out[-500:]}")
    return int(found[1])
