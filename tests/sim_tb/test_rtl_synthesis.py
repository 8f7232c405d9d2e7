"""Every RTL unit in hls/rtl synthesizes with Yosys for UltraScale+ (synth_xilinx -family xcup, out of
context), and the resources committed for it, in its blackbox descriptor and in the table of
hls/rtl/README.md, are what that synthesis gives (sim_tb/yosys_synth.py counts them and writes
both). The units synthesize two at a time, one per core.

With the Yosys that wrote the counts (RECORDED_YOSYS) they must be equal; another version maps
differently, so there each count may drift by a quarter (and a few cells).
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

pytestmark = pytest.mark.skipif(shutil.which("yosys") is None, reason="needs Yosys (make sysdeps)")
UNITS = list(yosys_synth.units())


@pytest.fixture(scope="module")
def synthesized():
    with ThreadPoolExecutor(2) as pool:
        yield {unit: pool.submit(yosys_synth.synthesize, unit) for unit in UNITS}


@pytest.mark.parametrize("unit", UNITS)
def test_unit_synthesizes_to_its_recorded_resources(unit, synthesized):
    counts = synthesized[unit].result()
    assert counts["LUT"] > 0 and counts["FF"] > 0
    recorded = yosys_synth.recorded()[unit]
    if yosys_synth.yosys_version() == yosys_synth.RECORDED_YOSYS:
        assert counts == recorded
    else:
        assert all(abs(counts[f] - recorded[f]) <= 0.25 * recorded[f] + 4 for f in recorded), (counts, recorded)


def test_descriptors_carry_the_readme_counts():
    table = yosys_synth.recorded()
    assert set(table) == set(UNITS)
    for unit, path in yosys_synth.descriptors().items():
        usage = json.loads(path.read_text())["rtl_resource_usage"]
        assert {f: int(usage[f]) for f in yosys_synth.FIELDS} == table[unit], unit
