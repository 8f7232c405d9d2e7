"""Synthesis of the RTL units with Yosys for UltraScale+ (synth_xilinx -family xcup), and their resources.

Each unit is synthesized out of context (flattened, no I/O buffers) with its parameters' defaults,
the configuration its blackbox descriptor describes. Counts come from the mapped cells (`resources`):
FF, LUT (with the LUTs of distributed RAM and shift registers), BRAM in 18 Kb units as Vitis HLS
reports it, URAM, DSP. `python -m sim_tb.yosys_synth` prints the table; `--write` also writes the
counts into the units' JSON and the README, which tests/sim_tb/test_rtl_synthesis.py checks. Counts
are cached (`$ATOLL_HOME` or `~/.cache/atoll`, under yosys/) by a hash of the unit's Verilog, the
script and the Yosys version, so a unit is synthesized again only when one of those changes.

The SLOW units take minutes each on a clean machine, so the test suite does not synthesize them:
`--write` records the hash of their sources (Verilog + script) in SOURCES, and the suite checks
that hash against the current files, so their counts cannot silently outlive an RTL change. This
module's main and `atoll bench dpu` synthesize them.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import re
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

RTL = Path(__file__).resolve().parent.parent / "hls" / "rtl"
README = RTL / "README.md"
SOURCES = Path(__file__).resolve().with_name("yosys_sources.json")
# The Yosys whose counts are committed; another version maps differently (the test then allows drift).
RECORDED_YOSYS = "0.23"
# Units without a blackbox descriptor: the RTL kernel's plumbing (image_post_cu is these plus the
# post-decode unit).
PLUMBING = {
    "image_post_cu_control_s_axi": ["image_post_cu_control_s_axi.v"],
    "axi_pixel_reader": ["axi_pixel_reader.v"],
    "axi_element_writer": ["axi_element_writer.v"],
}
# Stages of a unit, each with a row of its own (the decode core's, inside jpeg_decode_core's row).
PARTS = {
    "jpeg_bit_reader": ["jpeg_bit_reader.v"],
    "jpeg_huff_decoder": ["jpeg_huff_decoder.v"],
    "jpeg_coef_block": ["jpeg_coef_block.v"],
}
# Units the test suite does not synthesize (minutes each, uncached): it checks their recorded
# source hash instead. A unit joins by its name here, then `--write` records its hash.
SLOW = {"jpeg_decode_core", "image_postdecode", "jpeg_mcu_strip"}
LUTS_PER_CELL = {"RAM32M16": 8, "RAM32M": 4, "RAM64M": 4, "RAM32X1D": 2, "RAM64X1D": 2, "RAM128X1D": 4,
                 "SRL16E": 1, "SRLC32E": 1, "RAM32X1S": 1, "RAM64X1S": 1}
BRAM18_PER_CELL = {"RAMB36E2": 2, "RAMB18E2": 1}
FIELDS = ("LUT", "FF", "DSP", "BRAM", "URAM")


def descriptors() -> dict[str, Path]:
    return {p.stem: p for p in sorted(RTL.glob("*.json"))}


def units() -> dict[str, list[str]]:
    """unit -> its Verilog files (a descriptor's rtl_files, the plumbing's, or a stage's)."""
    found = {name: json.loads(path.read_text())["rtl_files"] for name, path in descriptors().items()}
    return found | PLUMBING | PARTS


@functools.cache
def yosys_version() -> str:
    out = subprocess.run(["yosys", "-V"], capture_output=True, text=True, check=True).stdout
    return re.search(r"Yosys (\S+)", out)[1]


def resources(cells: dict[str, int]) -> dict[str, int]:
    lut = sum(n for c, n in cells.items() if re.fullmatch(r"LUT[1-6]|INV", c))
    lut += sum(n * LUTS_PER_CELL.get(c, 0) for c, n in cells.items())
    return {
        "LUT": lut,
        "FF": sum(n for c, n in cells.items() if c.startswith("FD")),
        "DSP": cells.get("DSP48E2", 0),
        "BRAM": sum(n * BRAM18_PER_CELL.get(c, 0) for c, n in cells.items()),
        "URAM": cells.get("URAM288", 0),
    }


def _script(unit: str, files: str, stat: Path) -> str:
    return (f"read_verilog {files}; synth_xilinx -family xcup -top {unit} -flatten -noiopad; "
            f"tee -q -o {stat} stat -json")


def _digest(unit: str, salt: str) -> str:
    key = hashlib.sha256(f"{salt}{_script(unit, '', Path())}".encode())
    for name in units()[unit]:
        key.update((RTL / name).read_bytes())
    return key.hexdigest()[:20]


def sources_hash(unit: str) -> str:
    """A hash of what a unit's counts come from: its synthesis script and its Verilog files."""
    return _digest(unit, "")


def _cache_file(unit: str) -> Path:
    key = _digest(unit, f"{yosys_version()}\n")
    root = Path(os.environ.get("ATOLL_HOME") or Path.home() / ".cache" / "atoll")
    return root / "yosys" / f"{unit}-{key}.json"


def synthesize(unit: str) -> dict[str, int]:
    """Resource counts of one unit (Yosys runs in a subprocess unless these sources were done)."""
    cached = _cache_file(unit)
    if cached.is_file():
        return json.loads(cached.read_text())
    files = " ".join(str(RTL / f) for f in units()[unit])
    with tempfile.TemporaryDirectory() as tmp:
        stat = Path(tmp) / "stat.json"
        subprocess.run(["yosys", "-q", "-p", _script(unit, files, stat)], check=True, capture_output=True, text=True)
        module = json.loads(stat.read_text())["modules"]
    (cells,) = (m["num_cells_by_type"] for m in module.values())
    counts = resources(cells)
    cached.parent.mkdir(parents=True, exist_ok=True)
    temporary = cached.with_suffix(f".{os.getpid()}.tmp")
    temporary.write_text(json.dumps(counts))
    temporary.replace(cached)  # whole or absent, whichever process writes it
    return counts


def agrees(counts: dict[str, int], recorded: dict[str, int]) -> bool:
    """Whether a synthesis gives the recorded counts: equal with the Yosys that recorded them;
    another version maps differently, so there each count may drift by a quarter (and a few cells)."""
    if yosys_version() == RECORDED_YOSYS:
        return counts == recorded
    return all(abs(counts[f] - recorded[f]) <= 0.25 * recorded[f] + 4 for f in recorded)


def checked(names: list[str]) -> dict[str, dict[str, int]]:
    """The recorded counts of these units, each synthesized (cached) and found to agree."""
    recorded_counts = recorded()
    with ThreadPoolExecutor(2) as pool:
        counts = dict(zip(names, pool.map(synthesize, names)))
    stale = [unit for unit in names if not agrees(counts[unit], recorded_counts[unit])]
    if stale:
        raise RuntimeError(f"{stale}: recorded Yosys counts are stale; run python -m sim_tb.yosys_synth --write")
    return {unit: recorded_counts[unit] for unit in names}


def recorded_sources() -> dict[str, str]:
    """The SLOW units' source hashes as `--write` last recorded them."""
    return json.loads(SOURCES.read_text())


def table(counts: dict[str, dict[str, int]]) -> str:
    rows = ["| unit | " + " | ".join(FIELDS) + " | latency | II |", "|" + " --- |" * (len(FIELDS) + 3)]
    for unit, c in counts.items():
        path = descriptors().get(unit)
        performance = json.loads(path.read_text())["rtl_performance"] if path else {"latency": "-", "II": "-"}
        rows.append(f"| `{unit}` | " + " | ".join(str(c[f]) for f in FIELDS)
                    + f" | {performance['latency']} | {performance['II']} |")
    return "\n".join(rows) + "\n"


def recorded() -> dict[str, dict[str, int]]:
    """The counts the README's table records, per unit (what `--write` last wrote)."""
    rows = re.findall(r"^\| `(\w+)` \| ([\d |]+?) \| [\d-]+ \| [\d-]+ \|$", README.read_text(), re.M)
    return {unit: dict(zip(FIELDS, map(int, cells.split(" | ")))) for unit, cells in rows}


def write(counts: dict[str, dict[str, int]]) -> None:
    for unit, path in descriptors().items():
        desc = json.loads(path.read_text())
        desc["rtl_resource_usage"] = {k: str(counts[unit][k]) for k in ("FF", "LUT", "BRAM", "URAM", "DSP")}
        path.write_text(json.dumps(desc, indent=2) + "\n")
    text = README.read_text()
    start, end = "<!-- resources: begin -->\n", "<!-- resources: end -->"
    head, rest = text.split(start)
    README.write_text(head + start + table(counts) + end + rest.split(end, 1)[1])
    SOURCES.write_text(json.dumps({unit: sources_hash(unit) for unit in sorted(SLOW)}, indent=2) + "\n")


def main(argv: list[str]) -> None:
    with ThreadPoolExecutor(2) as pool:
        counts = dict(zip(units(), pool.map(synthesize, units())))
    print(f"Yosys {yosys_version()}\n" + table(counts))
    if "--write" in argv:
        write(counts)


if __name__ == "__main__":
    main(sys.argv[1:])
