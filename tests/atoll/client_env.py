"""The separate environment holding the real `tritonclient` (a client this project did not write)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def client_python() -> str:
    path = os.environ.get("ATOLL_CLIENT_PYTHON") or str(ROOT / ".venv-client" / "bin" / "python")
    if not Path(path).exists():
        pytest.skip("no tritonclient environment: run `make test` (it creates .venv-client)")
    return path


def run_client(script: str, *args: str, timeout: float = 120.0) -> str:
    """Run a Python script in the tritonclient environment; returns its stdout."""
    proc = subprocess.run([client_python(), "-c", script, *args], capture_output=True, text=True,
                          timeout=timeout)  # fmt: skip
    if proc.returncode != 0:
        raise AssertionError(f"tritonclient script failed:\n{proc.stderr[-3000:]}")
    return proc.stdout
