"""Shared pytest setup: GPU tests skip (never fail) where no CUDA device answers."""

from __future__ import annotations

import functools

import pytest


@functools.cache
def cuda_available() -> bool:
    try:
        import cupy  # optional: CuPy, GPU only

        return cupy.cuda.runtime.getDeviceCount() > 0
    except Exception:  # no cupy, no driver, or no device: all mean "no GPU here"
        return False


def pytest_collection_modifyitems(config, items):
    if cuda_available():
        return
    skip = pytest.mark.skip(reason="no CUDA device (cupy absent or no driver)")
    for item in items:
        if item.get_closest_marker("gpu") is not None:
            item.add_marker(skip)
