"""RTL blackbox units (hls/rtl) against their C models, on Icarus Verilog through cocotb.

Each unit's testbench lives in sim_tb/<unit>/test_<unit>.py with its own pytest runner function;
this file only collects those functions so `make test` (testpaths = tests) runs them. The
references are the HLS kernels' own C++ (compiled with g++, called through ctypes), named in
each testbench.
"""

from __future__ import annotations

import importlib.util
import json
import re
import shutil
from pathlib import Path

import pytest

SIM_TB = Path(__file__).resolve().parents[2] / "sim_tb"

pytestmark = pytest.mark.skipif(
    shutil.which("iverilog") is None or shutil.which("g++") is None,
    reason="needs Icarus Verilog (make sysdeps) and g++",
)


def _testbench(unit: str):
    path = SIM_TB / unit / f"test_{unit}.py"
    spec = importlib.util.spec_from_file_location(f"sim_tb_{unit}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


test_idct8x8_islow = _testbench("idct8x8_islow").test_idct8x8_islow
test_fp32_add = _testbench("fp32_add").test_fp32_add
test_fp32_mul = _testbench("fp32_mul").test_fp32_mul
test_mel_mac = _testbench("mel_mac").test_mel_mac
test_fft_butterfly = _testbench("fft_butterfly").test_fft_butterfly
test_fp32_log = _testbench("fp32_log").test_fp32_log
test_resize_tap_gen = _testbench("resize_tap_gen").test_resize_tap_gen
test_image_postdecode = _testbench("image_postdecode").test_image_postdecode
test_image_postdecode_full_rate = _testbench("image_postdecode").test_full_rate_two_pixels_a_cycle
test_image_post_cu = _testbench("image_post_cu").test_image_post_cu
test_upsample_color = _testbench("upsample_color").test_upsample_color
test_upsample_color_full_rate = _testbench("upsample_color").test_full_rate_two_pixels_a_cycle
test_jpeg_bit_reader = _testbench("jpeg_bit_reader").test_jpeg_bit_reader
test_jpeg_entropy_decode = _testbench("jpeg_entropy_decode").test_jpeg_entropy_decode
test_jpeg_decode_core = _testbench("jpeg_decode_core").test_jpeg_decode_core
test_jpeg_mcu_strip = _testbench("jpeg_mcu_strip").test_jpeg_mcu_strip
test_image_cu_datapath = _testbench("image_cu_datapath").test_image_cu_datapath


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
