"""The compiled loops behind corenn_numba.scatter (imported when a scatter path first runs, not at
``import corenn``). Serial on purpose: repeated indices would make a parallel loop race."""
from __future__ import annotations

import numba
import numpy as np

_jit = numba.njit(cache=True)


@_jit
def add_rows(out, index, src):
    """``out[p, index[i], q] += src[p, i, q]``; returns the position of an out-of-range index, or -1."""
    planes, rows, cols = out.shape
    count = index.shape[0]
    for i in range(count):  # check first, so a bad index leaves ``out`` untouched
        if index[i] < -rows or index[i] >= rows:
            return i
    for p in range(planes):
        for i in range(count):
            r = index[i]
            if r < 0:
                r += rows
            for q in range(cols):
                out[p, r, q] += src[p, i, q]
    return -1


@_jit
def add_flat(out, positions, values):
    """``out[positions[i]] += values[i]`` (positions already in range)."""
    for i in range(positions.shape[0]):
        out[positions[i]] += values[i]


@_jit
def add_rows_at(out, coords, dims, src):
    """``out[ravel(coords[:, i]), q] += src[i, q]`` with coordinates per leading axis (negative ones wrap).

    Returns ``i * k + axis`` for the first out-of-range coordinate, or -1 (``out`` is scratch then).
    """
    k, count = coords.shape
    cols = src.shape[1]
    for i in range(count):
        r = 0
        for axis in range(k):
            c = coords[axis, i]
            size = dims[axis]
            if c < -size or c >= size:
                return i * k + axis
            if c < 0:
                c += size
            r = r * size + c
        for q in range(cols):
            out[r, q] += src[i, q]
    return -1
