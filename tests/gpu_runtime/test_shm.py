"""Shared-memory tensor transport: bytes, dtypes and shapes survive exactly (numpy is the reference)."""

from __future__ import annotations

import os
import secrets
from multiprocessing import shared_memory

import ml_dtypes
import numpy as np
import pytest

from gpu_runtime.vgpu import shm


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


def test_views_are_zero_copy(segment):
    layout = shm.write(segment, {"x": np.arange(10, dtype=np.int32)})
    mapped = shared_memory.SharedMemory(name=segment)  # what another process maps
    view = shm.views(mapped.buf, layout)["x"]
    view[3] = 99
    del view
    mapped.close()
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


def test_strings_and_bfloat16_round_trip(segment):
    """BYTES outputs (onnxruntime's str, the protocol's bytes) are packed length-prefixed and read
    back as bytes; BF16 keeps its dtype (its NumPy code, '<V2', would read back as raw bytes)."""
    arrays = {"text": np.array([["cat", "\u00e9t\u00e9"], ["", "x"]], object), "raw": np.array([b"\x00\xff"], object),
              "half": np.arange(6, dtype=np.float32).reshape(2, 3).astype(ml_dtypes.bfloat16)}  # fmt: skip
    layout, size = shm.plan(arrays)
    assert size == 3 * shm.ALIGN  # 4 prefixes and 9 bytes of text, 6 bytes, 12 bytes: each aligned
    back = shm.read(segment, shm.write(segment, arrays))
    assert back["text"].tolist() == [[b"cat", "\u00e9t\u00e9".encode()], [b"", b"x"]] and back["text"].shape == (2, 2)
    assert back["raw"].tolist() == [b"\x00\xff"]
    assert back["half"].dtype == ml_dtypes.bfloat16 and back["half"].tolist() == arrays["half"].tolist()
    with pytest.raises(ValueError, match="holds bytes or str"):
        shm.plan({"odd": np.array([object()])})
