import json
import subprocess
import sys

from fpga_host import BACKENDS
from gpu_runtime.executors import EXECUTORS


def test_info_json_reports_this_machine():
    out = subprocess.run([sys.executable, "-m", "atoll", "info", "--json"], capture_output=True,
                         text=True, timeout=120, check=True).stdout  # fmt: skip
    info = json.loads(out)
    assert info["fpga"]["backend"] in BACKENDS
    assert set(info["fpga"]["backends"]) == set(BACKENDS)
    assert info["fpga"]["backends"]["cpu"]["available"] is True
    xrt = info["fpga"]["backends"]["xrt"]
    assert xrt["available"] or xrt["reason"]  # absent hardware is explained, not hidden
    assert info["vgpus"] and all({"id", "kind", "name"} <= set(v) for v in info["vgpus"])
    assert set(info["executors"]) == set(EXECUTORS)
    assert info["executors"]["numpy"]["available"] and info["executors"]["onnxruntime"]["available"]
    if not info["executors"]["cupy"]["available"]:
        assert info["executors"]["cupy"]["reason"]
    assert set(info["cupy"]) == {"package", "why"} and info["cupy"]["why"]  # which CuPy, and why


def test_info_table_and_bad_config(tmp_path):
    table = subprocess.run([sys.executable, "-m", "atoll", "info"], capture_output=True, text=True,
                           timeout=120, check=True).stdout  # fmt: skip
    assert "preprocessing backend:" in table and "vGPUs:" in table and "executors:" in table
    bad = tmp_path / "atoll.toml"
    bad.write_text("[vgpus]\nmode = 'tpu'\n")
    proc = subprocess.run([sys.executable, "-m", "atoll", "info", "--config", str(bad)],
                          capture_output=True, text=True, timeout=120)  # fmt: skip
    assert proc.returncode == 2 and "vgpus.mode" in proc.stderr
