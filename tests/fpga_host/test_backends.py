"""The backend registry: one table that the facade, the probe and the CLI choices read."""

from __future__ import annotations

import pytest

import fpga_host
from fpga_host.backends import UnknownBackend, backend
from fpga_host.preprocessor import Preprocessor
from fpga_host.probe import probe_backends


def test_choices_are_auto_then_the_registry():
    assert fpga_host.BACKEND_CHOICES == ("auto", *fpga_host.BACKENDS)
    assert {"xrt", "emu", "cpu"} <= set(fpga_host.BACKENDS)
    assert all(callable(spec.probe) for spec in fpga_host.BACKENDS.values())


def test_an_unknown_name_lists_the_choices():
    with pytest.raises(UnknownBackend, match="expected one of auto, xrt"):
        backend("gpu")
    with pytest.raises(ValueError, match="unknown backend 'gpu'"):
        Preprocessor("gpu")


def test_probe_reports_every_registered_backend_and_auto_never_picks_emu():
    report = probe_backends()
    assert set(report["backends"]) == set(fpga_host.BACKENDS)
    assert fpga_host.BACKENDS[report["backend"]].auto or fpga_host.BACKENDS[report["backend"]].open is None
