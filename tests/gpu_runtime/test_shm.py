"""Shared-memory tensor transport: bytes, dtypes and shapes survive exactly (numpy is the reference)."""

from __future__ import annotations

import os
import secrets

import numpy as np
import pytest

from gpu_runtime import shm


@pytest.fixture
def segment():
    name = f"atoll-test-{secrets.token_hex(4)}"
    yield name
    shm.unlink(name)


def test_round_trip_many_dtypes_and_shapes(segment):
    rng = np.random.default_rng(0)
    arrays = {
        "image": rng.standard_normal((2, 3, 5, 7)).astype(np.float32),
        "mel": rng.standard_normal((1, 80, 13)).astype(np.float16),
        "ids": rng.integers(-(2**40), 2**40, size=9, dtype=np.int64),
        "mask": rng.random(5) > 0.5,
        "scalar": np.float64(3.25),
        "empty": np.zeros((0, 4), np.float32),
        "strided": rng.standard_normal((6, 6)).astype(np.float32)[::2, 1::2],  # non-contiguous
    }
    layout = shm.write(segment, arrays)
    assert all(offset % shm.ALIGN == 0 for *_, offset in layout)
    back = shm.read(segment, layout)
    assert list(back) == list(arrays)
    for name, array in arrays.items():
        assert back[name].dtype == np.asarray(array).dtype
        np.testing.assert_array_equal(back[name], array)


def test_mapped_views_are_zero_copy(segment):
    layout = shm.write(segment, {"x": np.arange(10, dtype=np.int32)})
    with shm.Mapped(segment, layout) as views:
        views["x"][3] = 99
        del views
    np.testing.assert_array_equal(shm.read(segment, layout)["x"], [0, 1, 2, 99, 4, 5, 6, 7, 8, 9])


def test_unlink(segment):
    shm.write(segment, {"x": np.ones(3)})
    assert os.path.exists(f"/dev/shm/{segment}")
    assert shm.unlink(segment) is True
    assert shm.unlink(segment) is False
    assert not os.path.exists(f"/dev/shm/{segment}")


def test_existing_name_is_refused(segment):
    shm.write(segment, {"x": np.ones(3)})
    with pytest.raises(FileExistsError):
        shm.write(segment, {"x": np.ones(3)})
