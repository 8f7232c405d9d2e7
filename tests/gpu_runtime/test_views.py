"""The view algebra (compiler.view) against NumPy: a view must address exactly the elements the
same ops on an array of element indices select, whether it stays affine or needs a row table;
invert() must put each base element where the view shows it; the kernels' fast division must be
exact for every 31-bit dividend."""

from __future__ import annotations

import numpy as np
import pytest

from gpu_runtime.compiler import view as V
from gpu_runtime.compiler.graph import Tensor
from gpu_runtime.kernels.source import addresses, fastdiv

RNG = np.random.default_rng(5)


def _addresses(v) -> np.ndarray:
    """Every element's address, from the view's table and strides."""
    k = v.k
    idx = np.broadcast_to(v.table.reshape(v.table.shape + (1,) * (len(v.shape) - k)), v.shape)
    trailing = addresses(0, v.shape[k:], v.strides) if k < len(v.shape) else np.zeros(())
    return idx + trailing.reshape((1,) * k + trailing.shape)


def _base(shape):
    return V.of(Tensor(0, tuple(shape))), np.arange(int(np.prod(shape))).reshape(shape)


def test_transpose_reshape_narrow_follow_numpy():
    v, a = _base((4, 6, 5))
    v, a = V.transpose(v, (2, 0, 1)), a.transpose(2, 0, 1)
    assert v.affine
    v, a = V.narrow(v, 2, 5, 1, -2), a[:, :, 5:0:-2][:, :, :1]
    v, a = V.reshape(v, (5, 4)), a.reshape(5, 4)
    np.testing.assert_array_equal(_addresses(v), a)


def test_swin_roll_and_window_partition_is_one_row_table():
    """Slice + Concat on two axes (a cyclic shift), then the 7x7 window partition, of an NHWC
    tensor: one table over (window, token) rows, channels stay a stride."""
    B, S, C, W, k = 2, 14, 8, 7, 3
    v, a = _base((B, S, S, C))
    for axis in (1, 2):
        head, tail = V.narrow(v, axis, S - k, k), V.narrow(v, axis, 0, S - k)
        v = V.concat([head, tail], axis)
        a = np.roll(a, k, axis=axis)
    n = S // W
    v = V.reshape(V.transpose(V.reshape(v, (B, n, W, n, W, C)), (0, 1, 3, 2, 4, 5)), (B * n * n, W * W, C))
    a = a.reshape(B, n, W, n, W, C).transpose(0, 1, 3, 2, 4, 5).reshape(B * n * n, W * W, C)
    assert v.strides == (1,) and v.table.shape == (B * n * n, W * W)
    np.testing.assert_array_equal(_addresses(v), a)


def test_patch_merge_concat_is_affine():
    """Swin's 2x2 neighbour concat (offsets 0, W, 1, W + 1 rows apart) needs no table."""
    v, a = _base((2, 8, 8, 4))
    parts = [V.narrow(V.narrow(v, 1, r, 4, 2), 2, s, 4, 2) for r, s in ((0, 0), (1, 0), (0, 1), (1, 1))]
    joined = V.concat(parts, 3)
    want = np.concatenate([a[:, r::2, s::2, :] for r, s in ((0, 0), (1, 0), (0, 1), (1, 1))], 3)
    np.testing.assert_array_equal(_addresses(joined), want)


@pytest.mark.parametrize("seed", range(6))
def test_random_chains_and_their_inverse(seed):
    rng = np.random.default_rng(seed)
    shape = tuple(int(d) for d in rng.integers(2, 5, 4))
    v, a = _base(shape)
    perm = rng.permutation(4)
    v, a = V.transpose(v, perm), a.transpose(perm)
    rows, cols = a.shape[0] * a.shape[1], a.shape[2] * a.shape[3]
    v, a = V.reshape(v, (rows, cols)), a.reshape(rows, cols)
    idx = rng.permutation(a.shape[0])
    v, a = V.take(v, 0, idx), a[idx]
    np.testing.assert_array_equal(_addresses(v), a)
    inv = V.invert(v, V.of(Tensor(1, a.shape)))  # base element c goes where the view shows it
    np.testing.assert_array_equal(_addresses(inv).reshape(-1)[a.reshape(-1)], np.arange(a.size))


def test_broadcast_and_gather_rows():
    v, a = _base((3, 1, 5))
    b = V.broadcast_to(v, (2, 3, 4, 5))
    np.testing.assert_array_equal(_addresses(b), np.broadcast_to(a, (2, 3, 4, 5)))
    g = V.take(b, 2, np.array([[3, 0], [1, 1]]))
    np.testing.assert_array_equal(_addresses(g), np.broadcast_to(a, (2, 3, 4, 5))[:, :, [[3, 0], [1, 1]]])


def test_fast_division_is_exact():
    for d in [1, 2, 3, 7, 49, 3136, 12544, 65535, 2 ** 31 - 1] + list(RNG.integers(1, 1 << 20, 50)):
        magic, shift = fastdiv(int(d))
        n = np.concatenate([RNG.integers(0, 1 << 31, 2000), [0, d - 1, d, 2 ** 31 - 1]]).astype(np.uint64)
        hi = (n * np.uint64(magic & 0xFFFFFFFF)) >> np.uint64(32)
        np.testing.assert_array_equal((hi + n) >> np.uint64(shift), n // np.uint64(d))
