"""Every RTL unit in hls/rtl synthesizes with Yosys for UltraScale+ (synth_xilinx -family xcup, out of
context), and the resources committed for it, in its blackbox descriptor and in the table of
hls/rtl/README.md, are what that synthesis gives (sim_tb/yosys_synth.py counts them and writes
both). The units synthesize two at a time, one per core.

The SLOW units (minutes each) are not synthesized here: their counts must come from the sources as
they are now, which the source hash `--write` recorded for them says (`python -m sim_tb.yosys_synth`
and `atoll bench dpu` synthesize them).
"""

from __future__ import annotations

import json
import shutil
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from sim_tb import yosys_synth  # noqa: E402

UNITS = list(yosys_synth.units())
SYNTHESIZED = [unit for unit in UNITS if unit not in yosys_synth.SLOW]
needs_yosys = pytest.mark.skipif(shutil.which("yosys") is None, reason="needs Yosys (make sysdeps)")


@pytest.fixture(scope="module")
def synthesized():
    with ThreadPoolExecutor(2) as pool:
        yield {unit: pool.submit(yosys_synth.synthesize, unit) for unit in SYNTHESIZED}


@needs_yosys
@pytest.mark.parametrize("unit", SYNTHESIZED)
def test_unit_synthesizes_to_its_recorded_resources(unit, synthesized):
    counts = synthesized[unit].result()
    assert counts["LUT"] > 0 and counts["FF"] > 0
    recorded = yosys_synth.recorded()[unit]
    assert yosys_synth.agrees(counts, recorded), (counts, recorded)


@pytest.mark.parametrize("unit", sorted(yosys_synth.SLOW))
def test_slow_unit_counts_come_from_its_current_sources(unit):
    assert yosys_synth.recorded_sources().get(unit) == yosys_synth.sources_hash(unit), (
        f"{unit}'s Verilog or script changed since its counts were recorded: "
        "run python -m sim_tb.yosys_synth --write")


def test_source_hashes_are_recorded_for_the_slow_units_only():
    assert set(yosys_synth.recorded_sources()) == yosys_synth.SLOW


def test_descriptors_carry_the_readme_counts():
    table = yosys_synth.recorded()
    assert set(table) == set(UNITS)
    for unit, path in yosys_synth.descriptors().items():
        usage = json.loads(path.read_text())["rtl_resource_usage"]
        assert {f: int(usage[f]) for f in yosys_synth.FIELDS} == table[unit], unit
