"""The float32 operator units (hls/rtl: fp32_add, fp32_mul, mel_mac, fft_butterfly, fp32_log)
against NumPy and their C models, on Icarus Verilog through cocotb (tests/sim_tb/testbenches.py)."""

from __future__ import annotations

from tests.sim_tb.testbenches import load_testbench, needs_simulators

pytestmark = needs_simulators

test_fp32_add = load_testbench("fp32_add").test_fp32_add
test_fp32_mul = load_testbench("fp32_mul").test_fp32_mul
test_mel_mac = load_testbench("mel_mac").test_mel_mac
test_fft_butterfly = load_testbench("fft_butterfly").test_fft_butterfly
test_fp32_log = load_testbench("fp32_log").test_fp32_log
