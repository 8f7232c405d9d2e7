"""Lazy layout: a View is a window on a buffer that no kernel has copied yet.

A view of rank r addresses its element (i_0, ..., i_{r-1}) in its base buffer at

    table[i_0, ..., i_{k-1}] + i_k * strides[0] + ... + i_{r-1} * strides[r-k-1]

(k = 0: affine, the table a 0-d offset). So Transpose, Slice, Split, Reshape, Squeeze, Expand,
Gather with constant indices (a row table, e.g. Swin's rolled window partition) and Concat of views
of one buffer launch nothing: a consumer reads through the view or copies it once. Tables are built
with NumPy at model import, at most MAX_TABLE entries; past that an operation returns None (copy).
"""

from __future__ import annotations

import numpy as np

from gpu_runtime.compiler.graph import Tensor, View
from gpu_runtime.kernels.source import contiguous_strides

MAX_TABLE = 1 << 20


def _prod(shape) -> int:
    return int(np.prod(shape, dtype=np.int64))


def of(t: Tensor) -> View:
    return View(t, tuple(t.shape), tuple(contiguous_strides(t.shape)), np.array(0, np.int64))


def expand(v: View, k: int) -> View | None:
    """The same view with its table covering the first k dims (None past MAX_TABLE)."""
    if k <= v.k:
        return v
    if _prod(v.shape[:k]) > MAX_TABLE:
        return None
    table, strides = v.table, list(v.strides)
    for d in range(v.k, k):
        table = table[..., None] + np.arange(v.shape[d], dtype=np.int64) * strides.pop(0)
    return View(v.base, v.shape, tuple(strides), table)


def compress(v: View) -> View:
    """Moves trailing table dims that are arithmetic progressions back into strides."""
    table, strides = v.table, list(v.strides)
    while table.ndim:
        n = table.shape[-1]
        if n == 1:
            table, step = table[..., 0], 0
        else:
            steps = np.diff(table, axis=-1)
            step = int(steps.flat[0])
            if not np.all(steps == step):
                break
            table = table[..., 0]
        strides.insert(0, step)
    return View(v.base, v.shape, tuple(strides), table.copy())


def transpose(v: View, perm) -> View | None:
    perm = list(perm)
    k = v.k
    # the table must cover a prefix of the old dims that the permutation maps onto a prefix
    while k and set(perm[:k]) != set(range(k)):
        k += 1
    v = expand(v, k)
    if v is None:
        return None
    table = np.transpose(v.table, perm[:k]) if k else v.table
    strides = tuple(v.strides[p - k] for p in perm[k:])
    return compress(View(v.base, tuple(v.shape[p] for p in perm), strides, table))


def _affine_reshape(shape, strides, new_shape) -> tuple[int, ...] | None:
    """Strides that give `new_shape` the same addresses as (shape, strides), or None."""
    old = [(d, s) for d, s in zip(shape, strides) if d != 1]
    new = [d for d in new_shape if d != 1]
    out, oi, ni = [], 0, 0
    while oi < len(old) or ni < len(new):
        if oi == len(old) or ni == len(new):
            return None
        nprod, oprod, nj, oj = new[ni], old[oi][0], ni + 1, oi + 1
        while nprod != oprod:
            if nprod < oprod:
                nprod *= new[nj]
                nj += 1
            else:
                oprod *= old[oj][0]
                oj += 1
        if any(old[t][1] != old[t + 1][1] * old[t + 1][0] for t in range(oi, oj - 1)):
            return None
        group, s = [], old[oj - 1][1]
        for d in reversed(new[ni:nj]):
            group.insert(0, s)
            s *= d
        out += group
        oi, ni = oj, nj
    it = iter(out)
    return tuple(0 if d == 1 else next(it) for d in new_shape)


def reshape(v: View, shape) -> View | None:
    shape = tuple(int(d) for d in shape)
    for k in range(v.k, len(v.shape) + 1):
        w = expand(v, k)
        if w is None:
            return None
        lead = _prod(v.shape[:k])
        for j in range(len(shape) + 1):
            if _prod(shape[:j]) != lead or (k and not j):
                continue
            strides = _affine_reshape(v.shape[k:], w.strides, shape[j:])
            if strides is not None:
                table = w.table.reshape(shape[:j]) if j else w.table
                return compress(View(v.base, shape, strides, table))
    return None


def narrow(v: View, axis: int, start: int, size: int, step: int = 1) -> View:
    """Elements start, start + step, ... (size of them) along `axis`."""
    shape = list(v.shape)
    shape[axis] = size
    if axis < v.k:
        index = [slice(None)] * v.k
        index[axis] = slice(start, start + step * size if step > 0 or start + step * size >= 0
                            else None, step)
        return compress(View(v.base, tuple(shape), v.strides, v.table[tuple(index)]))
    strides = list(v.strides)
    s = strides[axis - v.k]
    strides[axis - v.k] = s * step
    return View(v.base, tuple(shape), tuple(strides), v.table + start * s)


def broadcast_to(v: View, shape) -> View:
    """NumPy broadcasting of `v` to `shape` (new leading dims and size-1 dims get stride 0)."""
    shape = tuple(int(d) for d in shape)
    extra = len(shape) - len(v.shape)
    table = np.broadcast_to(v.table.reshape((1,) * extra + v.table.shape), shape[:extra + v.k])
    strides = tuple(0 if d == 1 and n != 1 else s
                    for d, n, s in zip(v.shape[v.k:], shape[extra + v.k:], v.strides))
    return compress(View(v.base, shape, strides, table))


def take(v: View, axis: int, indices: np.ndarray) -> View | None:
    """Gather along `axis` with constant indices (their shape replaces that axis)."""
    w = expand(v, axis + 1)
    if w is None:
        return None
    table = np.take(w.table, indices.astype(np.int64), axis=axis)
    shape = v.shape[:axis] + tuple(indices.shape) + v.shape[axis + 1:]
    if _prod(table.shape) > MAX_TABLE:
        return None
    return compress(View(v.base, shape, w.strides, table))


def concat(views: list[View], axis: int) -> View | None:
    """Views of one buffer joined along `axis` as one view, if they can be."""
    base = views[0].base
    if any(p.base.buf != base.buf for p in views):
        return None
    stacked = _stacked(views, axis)
    if stacked is not None:
        return stacked
    k = max(max(p.k for p in views), axis + 1)
    parts = [expand(p, k) for p in views]
    if any(p is None for p in parts) or len({p.strides for p in parts}) != 1:
        return None
    table = np.concatenate([p.table for p in parts], axis=axis)
    if _prod(table.shape) > MAX_TABLE:
        return None
    shape = list(views[0].shape)
    shape[axis] = sum(p.shape[axis] for p in views)
    return compress(View(base, tuple(shape), parts[0].strides, table))


def _stacked(views: list[View], axis: int) -> View | None:
    """Equal affine parts whose offsets follow a mixed-radix pattern (Swin's 2x2 patch merge:
    offsets 0, W*C, C, W*C + C) are one affine view with the concatenated axis split in two."""
    first = views[0]
    if any(not p.affine or p.shape != first.shape or p.strides != first.strides for p in views):
        return None
    n, offs = len(views), [p.offset - first.offset for p in views]
    for outer in [d for d in range(1, n + 1) if n % d == 0]:
        inner = n // outer
        s_in = offs[1] if inner > 1 else 0
        s_out = offs[inner] if outer > 1 else 0
        if all(offs[i] == (i // inner) * s_out + (i % inner) * s_in for i in range(n)):
            shape = list(first.shape)
            split = shape[:axis] + [outer, inner] + shape[axis:]
            strides = list(first.strides)
            strides = strides[:axis] + [s_out, s_in] + strides[axis:]
            joined = shape[:axis] + [n * shape[axis]] + shape[axis + 1:]
            return reshape(View(first.base, tuple(split), tuple(strides), first.table), joined)
    return None


def invert(v: View, target: View) -> View | None:
    """`target` seen in the coordinates of v's base: element c of the base maps to target[u] for
    the u where v shows c. Defined when v shows every element of its base once; a producer then
    writes through it straight into the layout its consumer reads (no copy)."""
    shape = tuple(v.base.shape)
    n = _prod(shape)
    if _prod(v.shape) != n or target.shape != v.shape:
        return None
    if v.affine and v.offset == 0:
        dims = [d for d in range(len(v.shape)) if v.shape[d] != 1]
        order = sorted(dims, key=lambda d: -v.strides[d])
        if order and v.strides[order[-1]] == 1 and all(
                v.strides[a] == v.strides[b] * v.shape[b] for a, b in zip(order, order[1:])):
            rest = [d for d in range(len(v.shape)) if v.shape[d] == 1]
            return reshape(transpose(target, order + rest), shape)
    for k in range(v.k, len(v.shape) + 1):
        if v.strides[k - v.k:] == tuple(contiguous_strides(v.shape[k:])):
            break
    w = expand(v, k)
    if w is None:
        return None
    rows, block = _prod(v.shape[:k]), _prod(v.shape[k:])
    addr = w.table.reshape(-1)
    if np.any(addr % block) or not np.array_equal(np.sort(addr // block), np.arange(rows)):
        return None
    inverse = np.empty(rows, np.int64)
    inverse[addr // block] = np.arange(rows)
    t = reshape(target, (rows, block))
    t = expand(t, 1) if t is not None else None
    if t is None:
        return None
    return reshape(compress(View(target.base, (rows, block), t.strides, t.table[inverse])), shape)
