"""RTL blackbox units (hls/rtl) against their C models, on Icarus Verilog through cocotb: the IDCT
and the pixel units here (the float operators in test_rtl_operators.py, the JPEG decode units in
test_rtl_jpeg.py), and every unit's blackbox descriptor and generated ROMs.

Each unit's testbench lives in sim_tb/<unit>/test_<unit>.py with its own pytest runner function;
these files only collect those functions (tests/sim_tb/testbenches.py). The references are the
HLS kernels' own C++ (compiled with g++, called through ctypes), named in each testbench.
"""

from __future__ import annotations

import importlib.util
import json
import re
from pathlib import Path

import pytest

from tests.sim_tb.testbenches import SIM_TB, load_testbench, needs_simulators

pytestmark = needs_simulators

test_idct8x8_islow = load_testbench("idct8x8_islow").test_idct8x8_islow
test_resize_tap_gen = load_testbench("resize_tap_gen").test_resize_tap_gen
test_image_postdecode = load_testbench("image_postdecode").test_image_postdecode
test_image_postdecode_full_rate = load_testbench("image_postdecode").test_full_rate_two_pixels_a_cycle
test_image_post_cu = load_testbench("image_post_cu").test_image_post_cu
test_upsample_color = load_testbench("upsample_color").test_upsample_color
test_upsample_color_full_rate = load_testbench("upsample_color").test_full_rate_two_pixels_a_cycle
test_jpeg_mcu_strip = load_testbench("jpeg_mcu_strip").test_jpeg_mcu_strip


@pytest.mark.parametrize("descriptor", sorted((SIM_TB.parent / "hls" / "rtl").glob("*.json")), ids=lambda p: p.stem)
def test_blackbox_descriptor_names_real_ports(descriptor: Path):
    """Every file, function and port a Vitis HLS blackbox descriptor names exists in hls/rtl."""
    rtl = descriptor.parent
    desc = json.loads(descriptor.read_text())
    assert desc["c_function_name"] == desc["rtl_top_module_name"] == descriptor.stem
    for c_file in desc["c_files"]:
        source = (rtl / c_file["c_file"]).read_text()
        assert re.search(rf"\bvoid {desc['c_function_name']}\(", source)
    top = (rtl / f"{desc['rtl_top_module_name']}.v").read_text()
    ports = set(re.findall(r"^\s*(?:input|output)\s+wire\s+(?:\[[^\]]*\]\s*)?(\w+)", top, re.MULTILINE))
    for rtl_file in desc["rtl_files"]:
        assert (rtl / rtl_file).is_file()
    named = [n for p in desc["c_parameters"] for n in p["rtl_ports"].values()]
    named += [n for n in desc["rtl_common_signal"].values() if n]
    assert named and set(named) <= ports, set(named) - ports
    assert int(desc["rtl_performance"]["latency"]) > 0 and int(desc["rtl_performance"]["II"]) > 0


def test_generated_roms_are_the_generator_output():
    """hls/rtl/gen_roms.py wrote the committed ROMs and hls/audio/log_tables.h from this code."""
    spec = importlib.util.spec_from_file_location("gen_roms", SIM_TB.parent / "hls" / "rtl" / "gen_roms.py")
    gen_roms = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gen_roms)
    for path, text in gen_roms.outputs().items():
        assert path.read_text() == text, f"{path.name} differs from gen_roms.py's output: run it again"
