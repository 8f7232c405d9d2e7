"""`tools/gpu_acceptance.sh` runs where a GPU is lent, often once, on a machine whose image has a
fixed package list: its step budgets add up to 8 minutes, its dry run goes through every step on
the CPU and leaves at most 8 files, every command in it parses with today's options, and every
Python entry point imports only what the image has (`serve` also the wheels the script carries)."""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from atoll.cli import COMMANDS, build_parser
from tools import gpu_bench, image_imports

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "tools" / "gpu_acceptance.sh"
IMAGE = image_imports.package_list(ROOT / "tools" / "gpu_image_packages.txt")
WHEELS = image_imports.package_list(ROOT / "tools" / "gpu_wheels.txt")
VARIABLES = {"$OUT": "/tmp/out", "$w": "A", "$arch": "90"}
# What `bench serve` starts besides its own modules: `atoll serve`'s supervisor, front ends and
# vGPU workers (processes of their own).
SERVER_MODULES = ["atoll.supervisor.supervisor", "atoll.front_end.process", "gpu_runtime.vgpu.worker"]


def _text() -> str:
    return SCRIPT.read_text().replace("\\\n", " ")


def steps() -> list[str]:
    return re.search(r'^STEPS="([^"]+)"', _text(), re.MULTILINE).group(1).split()


def budgets() -> dict[str, int]:
    return {k: int(v) for k, v in re.findall(r"\[(\w+)\]=(\d+)", re.search(r"declare -A BUDGET=\((.*)\)",
                                                                          _text()).group(1))}


def commands() -> list[list[str]]:
    """The arguments of every `py ...` line of the script, shell variables stood in for."""
    out = []
    for line in _text().splitlines():
        if not re.match(r"\s*(OUT=\$OUT )?py ", line):
            continue
        words = shlex.split(line, comments=True)
        args = words[words.index("py") + 1:]
        args = args[:next((i for i, a in enumerate(args) if a in ("||", "&&", ";", "|")), len(args))]
        for name, value in VARIABLES.items():
            args = [a.replace(name, value) for a in args]
        out.append(args)
    return out


def gpu_tests() -> list[str]:
    return re.search(r'^GPU_TESTS="([^"]+)"', SCRIPT.read_text(), re.MULTILINE).group(1).split()


def test_the_budgets_cover_every_step_and_add_up_to_eight_minutes():
    assert set(budgets()) == set(steps())
    assert sum(budgets().values()) <= 8 * 60
    listed = subprocess.run(["bash", str(SCRIPT), "--list"], capture_output=True, text=True, check=True).stdout
    assert [line.split()[0] for line in listed.splitlines()] == steps()
    assert [int(line.split()[1]) for line in listed.splitlines()] == [budgets()[s] for s in steps()]
    wrong = subprocess.run(["bash", str(SCRIPT), "--all"], capture_output=True, text=True, check=False)
    assert wrong.returncode == 2 and "usage" in wrong.stderr


def test_every_bench_command_in_the_script_parses():
    atoll = [c[2:] for c in commands() if c[:2] == ["-m", "atoll"]]
    benches = [c[1:] for c in commands() if c[0] == "tools/gpu_bench.py"]
    assert {tuple(c[:2]) for c in atoll} == {("bench", "serve")}
    assert {c[0] for c in benches} == {"preempt", "disb"}
    for args in atoll:
        assert callable(build_parser().parse_args(args).func)
    for args in benches:
        parsed = gpu_bench.build_parser().parse_args(args)
        assert callable(parsed.func) and "$" not in " ".join(args)
    saturated = [c for c in benches if c[0] == "preempt" and "--device" in c]
    assert saturated and "idle,saturate" in saturated[0]


def _entries(args: list[str]) -> list[str]:
    """The modules a `py` command runs at start: its module, script or test files."""
    if args[0] == "-m":
        if args[1] == "pytest":
            return gpu_tests()
        if args[1] == "atoll":
            return [module.__name__ for module in COMMANDS.values()] + SERVER_MODULES
        return [args[1]]
    return [args[0]] if args[0].endswith(".py") else []


@pytest.mark.slow
def test_every_step_imports_only_what_the_gpu_image_has():
    needs = {}
    for args in commands():
        if args[:2] == ["-m", "pip"] or args[0] == "-c":
            continue
        entries = _entries(args)
        needs[" ".join(entries)] = image_imports.distributions(entries)
    serve = " ".join(_entries(["-m", "atoll"]))
    for entry, dists in needs.items():
        if entry != serve:
            assert dists <= IMAGE, (entry, dists - IMAGE)
    assert needs[serve] - IMAGE == WHEELS  # the wheels carried are exactly what serve lacks


@pytest.mark.slow
def test_the_dry_run_goes_through_every_step_on_the_cpu(tmp_path):
    run = subprocess.run(["bash", str(SCRIPT), "--dry-run"], capture_output=True, text=True,
                         env={"PATH": "/usr/local/bin:/usr/bin:/bin", "OUT": str(tmp_path),
                              "PYTHON": sys.executable, "HOME": str(Path.home())}, check=False)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    files = sorted(p.name for p in tmp_path.iterdir())
    assert len(files) <= 8 and "acceptance.json" in files
    doc = json.loads((tmp_path / "acceptance.json").read_text())
    assert doc["mode"] == "cpu"
    assert {k: v["status"] for k, v in doc["steps"].items()} == {s: "ok" for s in steps() if s != "summary"}
    assert doc["tests"]["tests"] > 0 and doc["tests"]["failures"] == doc["tests"]["errors"] == 0
    assert set(doc["preempt"]) == {"rt-only/none", "reset/idle", "reset/saturate"}
    assert all(doc["disb"][w]["reset"]["rt_p50_ms"] > 0 for w in ("A", "C"))
    assert doc["models"]["squeezenet1_1/b1/fp32"]["ok"]
    assert 0 < doc["serve"]["ideal_ratio"][0]
    if doc["cubins"] and "not_run" not in doc["cubins"]:
        assert doc["cubins"]["variants"] > 0 and not doc["cubins"]["spilled"]
