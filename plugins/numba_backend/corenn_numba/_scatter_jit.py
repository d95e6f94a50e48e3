"""The compiled loops behind corenn_numba.scatter (imported when a scatter path first runs, not at
``import corenn``). Serial on purpose: repeated indices would make a parallel loop race.

Each checks its arguments' shapes and dtypes first (``corenn_numba._checks.entry``), and every
index it reads against the axis it indexes, before the first write: an index out of range
comes back as its position, and the target is left untouched.
"""
from __future__ import annotations

import numba

from corenn_numba._checks import FLOATS, INT64, array, entry, fail

_jit = numba.njit(cache=True)


def _check_add_rows(out, index, src):
    dtype = array("add_rows", "out", out, FLOATS, ndim=3, writeable=True).dtype
    array("add_rows", "index", index, INT64, ndim=1)
    array("add_rows", "src", src, dtype, (out.shape[0], index.shape[0], out.shape[2]))


def _check_add_flat(out, positions, values):
    dtype = array("add_flat", "out", out, FLOATS, ndim=1, writeable=True).dtype
    array("add_flat", "positions", positions, INT64, ndim=1)
    array("add_flat", "values", values, dtype, positions.shape)


def _check_add_rows_at(out, coords, dims, src):
    dtype = array("add_rows_at", "out", out, FLOATS, ndim=2, writeable=True).dtype
    array("add_rows_at", "coords", coords, INT64, ndim=2)
    array("add_rows_at", "dims", dims, INT64, coords.shape[:1])
    array("add_rows_at", "src", src, dtype, (coords.shape[1], out.shape[1]))
    rows = 1
    for size in dims.tolist():  # k <= 32 leading axes: O(1)
        if size < 0:
            fail("add_rows_at", f"argument 'dims' must not be negative, got {dims.tolist()}")
        rows *= size
    if rows != out.shape[0]:
        fail("add_rows_at", f"argument 'dims' {dims.tolist()} must multiply to out's {out.shape[0]} rows")


@entry(_check_add_rows)
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


@entry(_check_add_flat)
@_jit
def add_flat(out, positions, values):
    """``out[positions[i]] += values[i]``; returns the position of a position out of range (nothing written), or -1."""
    size = out.shape[0]
    for i in range(positions.shape[0]):  # check first, so a bad position leaves ``out`` untouched
        if positions[i] < 0 or positions[i] >= size:
            return i
    for i in range(positions.shape[0]):
        out[positions[i]] += values[i]
    return -1


@entry(_check_add_rows_at)
@_jit
def add_rows_at(out, coords, dims, src):
    """``out[ravel(coords[:, i]), q] += src[i, q]`` with coordinates per leading axis (negative ones wrap).

    Returns ``i * k + axis`` for the first out-of-range coordinate (nothing written), or -1.
    """
    k, count = coords.shape
    cols = src.shape[1]
    for i in range(count):  # check first, so a bad coordinate leaves ``out`` untouched
        for axis in range(k):
            c = coords[axis, i]
            if c < -dims[axis] or c >= dims[axis]:
                return i * k + axis
    for i in range(count):
        r = 0
        for axis in range(k):
            c = coords[axis, i]
            size = dims[axis]
            if c < 0:
                c += size
            r = r * size + c
        for q in range(cols):
            out[r, q] += src[i, q]
    return -1
