"""The Vitis build files: one HLS-component config per kernel, `make -n` prints `v++ -c --mode hls`
per kernel and one `v++ -l`, every key and option is one the guides document (vitis_docs.py), and
CU names agree with the manifest."""

from __future__ import annotations

import re
import shlex
import shutil
import subprocess
from pathlib import Path

import pytest

from fpga_host.manifest import DEFAULT_MANIFEST, load_manifest
from tests.fpga_host import vitis_docs as docs

REPO = Path(__file__).resolve().parents[2]
HLS = REPO / "hls"
KERNELS = tuple(load_manifest(DEFAULT_MANIFEST).kernels)
PLATFORM = "xilinx_u55c_gen3x16_xdma_3_202210_1"


def sections(path: Path) -> dict[str, list[tuple[str, str]]]:
    """`key=value` lines by section ("" before the first header), comments dropped."""
    found: dict[str, list[tuple[str, str]]] = {"": []}
    section = ""
    for line in path.read_text().splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        if m := re.fullmatch(r"\[(\w+)\]", line):
            section = m[1].lower()
            found.setdefault(section, [])
            continue
        key, sep, value = line.partition("=")
        assert sep, f"{path.name}: not key=value: {line!r}"
        found[section].append((key.strip(), value.strip()))
    return found


@pytest.mark.parametrize("kernel", KERNELS)
def test_each_kernel_is_an_hls_component_of_documented_keys(kernel):
    cfg = sections(HLS / f"{kernel}.cfg")
    assert set(cfg) == {"", "hls"} and not cfg[""], "an HLS component holds one [hls] section"
    keys = [k for k, _ in cfg["hls"]]
    assert set(keys) <= set(docs.HLS_KEYS), set(keys) - set(docs.HLS_KEYS)
    values = dict(cfg["hls"])
    for key, allowed in docs.HLS_VALUES.items():
        assert values.get(key) in allowed, key
    assert values["syn.top"] == kernel and keys.count("syn.top") == 1
    for key, value in cfg["hls"]:  # every path exists, relative to hls/
        if key in ("syn.file", "syn.blackbox.file"):
            assert (HLS / value).is_file(), value
    for flag in shlex.split(values["syn.cflags"]):
        assert flag.startswith("-I") and (HLS / flag[2:]).is_dir(), flag


def test_no_syn_key_outside_an_hls_component():
    tracked = subprocess.run(["git", "ls-files", "*.cfg"], cwd=REPO, capture_output=True, text=True).stdout.split()
    assert "hls/connectivity.cfg" in tracked
    for cfg in (REPO / name for name in tracked):
        parsed = sections(cfg)
        component = any(k == "syn.top" for k, _ in parsed.get("hls", []))
        for section, pairs in parsed.items():
            stray = [k for k, _ in pairs if k.startswith("syn.") and not (component and section == "hls")]
            assert not stray, f"{cfg}: {stray}"


def test_connectivity_matches_manifest_and_uses_documented_keys():
    cfg = sections(HLS / "connectivity.cfg")
    assert set(cfg) == {"", "connectivity"} and not cfg[""]
    assert {k for k, _ in cfg["connectivity"]} <= set(docs.CONNECTIVITY_KEYS)
    nk = {}
    for key, value in cfg["connectivity"]:
        if key == "nk":
            kernel, count, cus = value.split(":")
            nk[kernel] = (int(count), tuple(cus.split(",")))
    manifest = load_manifest(DEFAULT_MANIFEST)
    assert {k: (len(v.cus), v.cus) for k, v in manifest.kernels.items()} == nk
    ports = [re.fullmatch(r"(\w+)\.(\w+):HBM\[(\d+)\]", v).groups() for k, v in cfg["connectivity"] if k == "sp"]
    for kernel in manifest.kernels.values():  # every bo argument of every CU has a bank
        for cu in kernel.cus:
            bos = {a.name for a in kernel.args if a.kind == "bo"}
            assert {p for c, p, _ in ports if c == cu} == bos, cu
    mel_banks = {b for c, p, b in ports if p == "mel"}
    assert len(mel_banks) == 1  # the hand-off buffers are reachable from every audio CU


def options(argv: list[str], table: dict) -> dict[str, str | None]:
    """argv's options checked against a documented table; returns option -> value."""
    found, i = {}, 0
    while i < len(argv):
        word = argv[i]
        name, eq, value = word.partition("=")
        assert name in table, f"undocumented v++ option {name!r}"
        takes_value = table[name][0]
        if takes_value and not eq:
            i += 1
            value = argv[i]
        assert takes_value or not eq, word
        found[name] = value if takes_value else None
        i += 1
    return found


def vpp_lines(target: str = "hw") -> tuple[list[list[str]], str]:
    out = subprocess.run(["make", "-C", str(HLS), "-n", f"TARGET={target}"], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    return [shlex.split(line)[1:] for line in out.stdout.splitlines() if line.startswith("v++ ")], out.stdout


@pytest.mark.skipif(shutil.which("make") is None, reason="no make")
@pytest.mark.parametrize("target", sorted(docs.TARGETS))
def test_make_dry_run_prints_the_flow_of_todays_vitis(target):
    lines, text = vpp_lines(target)
    compiles = [argv for argv in lines if argv[0] == "-c"]
    links = [argv for argv in lines if argv[0] == "-l"]
    assert len(compiles) == len(KERNELS) and len(links) == 1 and len(lines) == len(KERNELS) + 1
    build = f"build/{target}.{PLATFORM}"
    for kernel, argv in zip(KERNELS, compiles):
        opts = options(argv, docs.COMPILE_HLS_OPTIONS)
        assert opts["--mode"] == "hls" and opts["--platform"] == PLATFORM
        assert opts["--config"].endswith(f"{build}/cfg/{kernel}.cfg"), opts
        # the build copy of the config: absolute paths and the .xo it writes (documented keys only)
        assert f"package.output.file={REPO}/{build}/{kernel}.xo" in text
    link = links[0]
    xos = [a for a in link if a.endswith(".xo")]
    opts = options([a for a in link if a not in xos], docs.LINK_OPTIONS)
    assert opts["-t"] == target and opts["--platform"] == PLATFORM
    assert opts["--config"] == str(HLS / "connectivity.cfg") and opts["-o"].endswith(f"{build}/atoll_dpu.xclbin")
    assert xos == [f"{REPO}/{build}/{k}.xo" for k in KERNELS]
    # hw builds are installed next to the manifest; hw_emu ones stay in the build folder
    assert ("bitstreams/atoll_dpu.xclbin" in text) == (target == "hw")


@pytest.mark.skipif(shutil.which("make") is None, reason="no make")
def test_sw_emu_is_refused():
    refused = subprocess.run(["make", "-C", str(HLS), "-n", "TARGET=sw_emu"], capture_output=True, text=True)
    assert refused.returncode != 0 and "deprecated since Vitis 2024.2" in refused.stderr


@pytest.mark.skipif(shutil.which("make") is None, reason="no make")
def test_rtl_export_is_the_hls_components_own_verilog():
    """`make -C hls rtl` compiles each HLS component and copies what v++ -c --mode hls leaves in
    <work_dir>/hls/syn/verilog (UG1702 2025.2 'Output Directories of v++ -c --mode hls')."""
    out = subprocess.run(["make", "-C", str(HLS), "-n", "rtl"], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    build = f"{REPO}/build/hw.{PLATFORM}"
    for kernel in KERNELS:
        assert f"--work_dir {build}/hls/{kernel}" in out.stdout
        assert f"cp {build}/hls/{kernel}/hls/syn/verilog/*.v {HLS}/rtl/*.v {REPO}/build/rtl/{kernel}/" in out.stdout
