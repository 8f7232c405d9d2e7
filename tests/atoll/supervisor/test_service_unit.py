"""deploy/: the systemd unit (systemd's own check where systemd-analyze exists, and its keys) and the
example settings it starts the server with."""

from __future__ import annotations

import configparser
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from atoll.config import ServerConfig, load_config
from atoll.supervisor.supervisor import FRONT_END_EXIT_S

DEPLOY = Path(__file__).resolve().parents[3] / "deploy"
UNIT = DEPLOY / "systemd" / "atoll.service"


def unit() -> configparser.ConfigParser:
    parser = configparser.ConfigParser(interpolation=None, strict=True)
    parser.optionxform = str  # keys are case-sensitive
    parser.read_string(UNIT.read_text())
    return parser


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="systemd-analyze is not installed here")
def test_systemd_analyze_verify_finds_nothing(tmp_path):
    """verify exits 0 even for keys it ignores, so its output must be empty; ExecStart must name a
    program that exists here, so this copy runs the test's Python instead."""
    text = UNIT.read_text().replace("/opt/atoll/.venv/bin/atoll", sys.executable)
    (tmp_path / "atoll.service").write_text(text)
    done = subprocess.run(["systemd-analyze", "verify", str(tmp_path / "atoll.service")], check=False,
                          capture_output=True, text=True, timeout=120)  # fmt: skip
    assert (done.returncode, done.stdout + done.stderr) == (0, "")


def test_the_unit_is_a_notify_service_stopped_in_order_with_the_capability_and_file_limit_it_needs():
    s = unit()["Service"]
    assert s["Type"] == "notify" and s["NotifyAccess"] == "main"
    assert s["ExecStart"].split()[1:] == ["serve", "--config", "/etc/atoll/atoll.toml"]
    assert s["KillMode"] == "mixed" and s["KillSignal"] == "SIGTERM"
    # the drain, the front ends' exit and the workers' stop fit before systemd's SIGKILL
    assert int(s["TimeoutStopSec"]) >= ServerConfig().drain_s + 2 * FRONT_END_EXIT_S
    assert s["Restart"] == "on-failure" and s["RestartPreventExitStatus"] == "2"  # a usage error stays down
    assert s["AmbientCapabilities"] == s["CapabilityBoundingSet"] == "CAP_SYS_NICE"
    assert int(s["LimitNOFILE"]) >= 65536
    assert int(s["WatchdogSec"]) > 0
    assert s["User"] == "atoll"
    assert unit()["Install"]["WantedBy"] == "multi-user.target"


def test_the_example_settings_are_valid_and_fit_the_unit():
    config = load_config(DEPLOY / "atoll.toml")
    assert config.server.repository == "/var/lib/atoll/models"  # under the unit's StateDirectory
    assert unit()["Service"]["StateDirectory"] == "atoll"
    assert int(unit()["Service"]["TimeoutStopSec"]) >= config.server.drain_s + 2 * FRONT_END_EXIT_S
