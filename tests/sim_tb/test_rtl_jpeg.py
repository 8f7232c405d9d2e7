"""The JPEG decode units (hls/rtl: the bit reader, the entropy decoder, the decode core) against
their C models, and the whole CU datapath (decode core, MCU strip, colour, post-decode) against
the four C models chained, on Icarus Verilog through cocotb (tests/sim_tb/testbenches.py)."""

from __future__ import annotations

from tests.sim_tb.testbenches import load_testbench, needs_simulators

pytestmark = needs_simulators

test_jpeg_bit_reader = load_testbench("jpeg_bit_reader").test_jpeg_bit_reader
test_jpeg_entropy_decode = load_testbench("jpeg_entropy_decode").test_jpeg_entropy_decode
test_jpeg_decode_core = load_testbench("jpeg_decode_core").test_jpeg_decode_core
test_image_cu_datapath = load_testbench("image_cu_datapath").test_image_cu_datapath
