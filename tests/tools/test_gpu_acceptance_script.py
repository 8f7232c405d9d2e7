"""`tools/gpu_acceptance.sh` runs only where a GPU is lent, often once: every `atoll` command in it
must still parse with today's options, or a renamed flag is found on the GPU box, not here."""

from __future__ import annotations

import re
import shlex
import subprocess
from pathlib import Path

import pytest

from atoll.cli import build_parser

SCRIPT = Path(__file__).resolve().parents[2] / "tools" / "gpu_acceptance.sh"
# the script's shell variables, as the loop and its first argument set them
VARIABLES = {"${DEV}": "h100", "$DEV": "h100", "$R": "bench/results", "$m": "mobilenet_v3_small", "${w}": "A", "$w": "A"}


def atoll_commands() -> list[list[str]]:
    """The arguments after `python3 -m atoll` of every such command in the script."""
    text = SCRIPT.read_text().replace("\\\n", " ")
    commands = []
    for line in text.splitlines():
        words = shlex.split(line, comments=True)
        if "atoll" in words and words[words.index("atoll") - 1] == "-m":
            args = words[words.index("atoll") + 1:]
            for name, value in VARIABLES.items():
                args = [a.replace(name, value) for a in args]
            commands.append(args)
    return commands


def test_the_script_runs_every_benchmark_it_promises():
    subcommands = {tuple(c[:2]) for c in atoll_commands()}
    assert {("bench", "models"), ("bench", "preempt"), ("bench", "disb"), ("bench", "worker"), ("bench", "serve"),
            ("bench", "preprocess"), ("bench", "robust"), ("zoo", "build")} <= subcommands  # fmt: skip
    assert any(c[0] == "profile" for c in atoll_commands())


@pytest.mark.parametrize("args", atoll_commands(), ids=lambda a: " ".join(a[:2]))
def test_every_atoll_command_in_the_script_parses(args):
    parsed = build_parser().parse_args(args)
    assert callable(parsed.func)
    assert "$" not in " ".join(args)  # every shell variable stood in for


def test_the_steps_listed_are_the_steps_run_and_an_unknown_one_runs_nothing():

    steps = re.search(r'^STEPS="([^"]+)"', SCRIPT.read_text(), re.M).group(1).split()
    listed = subprocess.run(["bash", str(SCRIPT), "--list"], capture_output=True, text=True, check=True).stdout
    assert [line.split(":")[0] for line in listed.splitlines()] == steps  # each with what it is for
    wrong = subprocess.run(["bash", str(SCRIPT), "h100", "serve", "nosuch"], capture_output=True, text=True)
    assert wrong.returncode == 2 and "unknown step 'nosuch'" in wrong.stderr and "== " not in wrong.stdout
