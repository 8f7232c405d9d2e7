"""Which preprocessing backends this machine can run, and which one `auto` picks."""

from __future__ import annotations

import os
from pathlib import Path

from fpga_host.backends import BACKENDS, CPU_PATH
from fpga_host.manifest import DEFAULT_MANIFEST
from fpga_host.status import reason_of


def probe_backends(manifest: str | os.PathLike | None = None) -> dict:
    """Every backend's probe, and the one `auto` picks: the first available one that `auto` may
    pick, else the CPU path. Never raises."""
    manifest = Path(manifest) if manifest else DEFAULT_MANIFEST
    found = {}
    for name, spec in BACKENDS.items():
        try:
            found[name] = spec.probe(manifest)
        except Exception as exc:  # probes do not raise; if one does, `atoll info` still prints
            found[name] = {"available": False, "reason": reason_of(exc)}
    usable = [name for name, spec in BACKENDS.items() if spec.auto and found[name]["available"]]
    return {"backend": usable[0] if usable else CPU_PATH, "backends": found}
