"""Every ``xp.add.at`` path of the core, as compiled loops: repeated indices accumulate.

``numpy.add.at`` is unbuffered and slow for anything but 1-D targets: scattering 4096
rows of 128 floats into a (10000, 128) embedding gradient took 3.8 ms with ``add.at``
and 0.13 ms as a plain loop. Three loops serve every path:

- ``_add_rows``: ``out[p, index[i], q] += src[p, i, q]`` on (P, R, Q) views -- an index
  along one axis (embedding backward, index_select backward, index_add, pad backward);
  ``_add_rows_at`` is its multi-axis form for ``x[idx]`` / ``x[i, j]`` / ``x[mask]``
  backward and ``index_put(accumulate=True)`` when the integer indices lead;
- ``_add_flat``: ``out.flat[positions[i]] += values[i]`` for the rest (gather backward,
  ``scatter(reduce="add")``, indices mixed with slices).

They are serial on purpose: repeated indices make a parallel loop race. Float32/float64
targets only; other dtypes run the core kernel.

Example (nothing changes for the user)::

    >>> import corenn
    >>> x = corenn.zeros(3, requires_grad=True)
    >>> x[corenn.tensor([0, 0, 2])].sum().backward()
    >>> x.grad.tolist()
    [2.0, 0.0, 1.0]
"""
from __future__ import annotations

import numbers

import numpy as np

from corenn.kernels import PAD_MODES, KernelOverride
from corenn.ops import embedding as core_embedding
from corenn.ops import movement as core_movement

from corenn_numba._base import LazyModule, handles

jit = LazyModule("corenn_numba._scatter_jit")  # the compiled loops; numba is imported when one first runs


def _scatter_rows(out3, index, src3, axis_size, axis):
    """Run ``_add_rows``; an out-of-range index raises numpy's IndexError (what ``add.at`` raises)."""
    bad = jit.add_rows(out3, index, src3)
    if bad >= 0:
        raise IndexError(f"index {int(index[bad])} is out of bounds for axis {axis} with size {axis_size}")


def _add_flat(out, positions, values):
    """Run ``add_flat``; a position out of range (which the callers never make) raises IndexError."""
    bad = jit.add_flat(out, positions, values)
    if bad >= 0:
        raise IndexError(f"position {int(positions[bad])} is out of bounds for {out.shape[0]} elements")


def _planes(shape, axis):
    """(P, R, Q): the sizes before, at and after ``axis``."""
    return int(np.prod(shape[:axis], dtype=np.int64)), shape[axis], int(np.prod(shape[axis + 1:], dtype=np.int64))


def _int64(index):
    return np.ascontiguousarray(index, dtype=np.int64).reshape(-1)


def _is_int_item(item):
    if isinstance(item, np.ndarray):
        return item.dtype.kind in "iu"
    return isinstance(item, numbers.Integral) and not isinstance(item, (bool, np.bool_))


def _leading_index(index, shape):
    """(coords (k, n), result shape) for an index of integer arrays/ints on the k leading axes, else None.

    ``x[idx]``, ``x[i, j]`` and ``x[mask]`` (a mask arrives as its nonzero coordinates) pick whole
    trailing rows of the flattened leading axes.
    """
    if not isinstance(index, tuple) or not index or len(index) > len(shape):
        return None
    if not all(_is_int_item(item) for item in index):
        return None
    if not any(isinstance(item, np.ndarray) for item in index):
        return None  # all plain ints is basic indexing
    arrays = np.broadcast_arrays(*[np.asarray(item) for item in index])
    coords = np.empty((len(arrays), arrays[0].size), dtype=np.int64)
    for axis, array in enumerate(arrays):
        coords[axis] = array.reshape(-1)
    return coords, arrays[0].shape + tuple(shape[len(index):])


def _index_add_into(out, index, value):
    """``add.at(out, index, value)`` for any getitem-style index, in place."""
    leading = _leading_index(index, out.shape)
    if leading is not None:
        coords, result_shape = leading
        k = coords.shape[0]
        cols = int(np.prod(out.shape[k:], dtype=np.int64))
        values = np.ascontiguousarray(np.broadcast_to(value, result_shape), dtype=out.dtype)
        bad = jit.add_rows_at(out.reshape(-1, cols), coords, np.array(out.shape[:k], dtype=np.int64),
                           values.reshape(-1, cols))
        if bad >= 0:
            i, axis = divmod(bad, k)
            raise IndexError(f"index {int(coords[axis, i])} is out of bounds for axis {axis} with size "
                             f"{out.shape[axis]}")
        return
    # Anything else (slices, None, Ellipsis mixed in): the flat position of every indexed element is
    # what the same index picks out of an arange -- numpy does the index arithmetic and bounds checks.
    positions = np.arange(out.size, dtype=np.int64).reshape(out.shape)[index]
    values = np.ascontiguousarray(np.broadcast_to(value, positions.shape), dtype=out.dtype)
    _add_flat(out.reshape(-1), _int64(positions), values.reshape(-1))


# ---------------------------------------------------------------------------------------------------------
# embedding
# ---------------------------------------------------------------------------------------------------------

class Embedding(KernelOverride, core_embedding.Embedding):
    """Embedding backward as a row loop (forward is numpy's take: already at memory speed)."""

    @staticmethod
    def backward(ctx, grad):
        if not handles(grad):
            return core_embedding.Embedding.backward(ctx, grad)
        (indices,) = ctx.saved
        rows, cols = ctx.weight_shape
        grad_weight = np.zeros(ctx.weight_shape, dtype=grad.dtype)
        _scatter_rows(grad_weight.reshape(1, rows, cols), _int64(indices),
                      np.ascontiguousarray(grad).reshape(1, -1, cols), rows, 0)
        if ctx.padding_idx is not None:
            grad_weight[ctx.padding_idx] = 0
        return grad_weight, None


# ---------------------------------------------------------------------------------------------------------
# indexing: getitem backward, index_put(accumulate=True)
# ---------------------------------------------------------------------------------------------------------

class GetItem(KernelOverride, core_movement.GetItem):
    """Advanced-index backward without ``add.at`` (basic indexing already writes a view: the core's)."""

    @staticmethod
    def backward(ctx, grad):
        if not ctx.advanced or not handles(grad):
            return core_movement.GetItem.backward(ctx, grad)
        grad_input = np.zeros(ctx.shape, dtype=grad.dtype)
        _index_add_into(grad_input, ctx.saved, grad)  # an advanced index: saved by the core's forward
        return grad_input


def _same_float_or_number(value, a):
    """``value`` is an array of ``a``'s dtype or a real number (not a bool)."""
    return (isinstance(value, np.ndarray) and value.dtype == a.dtype) or (
        isinstance(value, numbers.Real) and not isinstance(value, (bool, np.bool_)))


class IndexPut(KernelOverride, core_movement.IndexPut):
    """``index_put(..., accumulate=True)`` without ``add.at``; backward is the core's (a gather)."""

    @staticmethod
    def handles(a, value, index, accumulate=False):
        return accumulate and handles(a) and _same_float_or_number(value, a)

    @staticmethod
    def forward(ctx, a, value, index, accumulate=False):
        out = a.copy()
        _index_add_into(out, index, value)
        ctx.save_for_backward(*index)  # what the core's backward reads
        ctx.accumulate, ctx.value_shape = accumulate, getattr(value, "shape", None)
        return out


# ---------------------------------------------------------------------------------------------------------
# gather backward, scatter(reduce="add")
# ---------------------------------------------------------------------------------------------------------

def _gather_positions(index, axis, shape):
    """Flat positions in an array of ``shape`` of ``index`` along ``axis`` (other axes: their own coordinate)."""
    index = np.asarray(index, dtype=np.int64)
    size = shape[axis]
    bad = (index < -size) | (index >= size)
    if bad.any():
        raise IndexError(f"index {int(index[bad].reshape(-1)[0])} is out of bounds for axis {axis} with size {size}")
    coords = list(np.indices(index.shape, sparse=True))
    coords[axis] = np.where(index < 0, index + size, index)
    return _int64(np.ravel_multi_index(coords, shape))


class Gather(KernelOverride, core_movement.Gather):
    """Gather backward without ``add.at``: one flat scatter of the gradient (forward is the core's)."""

    @staticmethod
    def backward(ctx, grad):
        if not handles(grad):
            return core_movement.Gather.backward(ctx, grad)
        grad_input = np.zeros(ctx.shape, dtype=grad.dtype)
        (index,) = ctx.saved
        _add_flat(grad_input.reshape(-1), _gather_positions(index, ctx.axis, ctx.shape),
                  np.ascontiguousarray(grad).reshape(-1))
        return grad_input, None


class Scatter(KernelOverride, core_movement.Scatter):
    """``scatter(..., reduce="add")`` (``scatter_add``) without ``add.at``; other reductions: the core's."""

    @staticmethod
    def handles(a, index, src, axis, reduce=None):
        return reduce == "add" and handles(a) and _same_float_or_number(src, a)

    @staticmethod
    def forward(ctx, a, index, src, axis, reduce=None):
        values = src[tuple(slice(0, s) for s in index.shape)] if isinstance(src, np.ndarray) and src.ndim else src
        out = a.copy()
        _add_flat(out.reshape(-1), _gather_positions(index, axis, a.shape),
                  np.ascontiguousarray(np.broadcast_to(values, index.shape), dtype=a.dtype).reshape(-1))
        ctx.save_for_backward(index)  # what the core's backward reads
        ctx.axis, ctx.reduce, ctx.src_shape = axis, reduce, getattr(src, "shape", None)
        return out


# ---------------------------------------------------------------------------------------------------------
# index_select backward, index_add
# ---------------------------------------------------------------------------------------------------------

class IndexSelect(KernelOverride, core_movement.IndexSelect):
    """index_select backward as a row loop over (before, axis, after) views."""

    @staticmethod
    def backward(ctx, grad):
        if not handles(grad):
            return core_movement.IndexSelect.backward(ctx, grad)
        (index,) = ctx.saved
        planes, rows, cols = _planes(ctx.shape, ctx.axis)
        grad_input = np.zeros(ctx.shape, dtype=grad.dtype)
        _scatter_rows(grad_input.reshape(planes, rows, cols), _int64(index),
                      np.ascontiguousarray(grad).reshape(planes, -1, cols), rows, ctx.axis)
        return grad_input, None


class IndexAdd(KernelOverride, core_movement.IndexAdd):
    """``index_add`` as a row loop (backward is the core's: a take)."""

    @staticmethod
    def handles(a, index, source, axis, alpha=1):
        index = np.asarray(index)
        return (handles(a, source) and index.ndim <= 1
                and tuple(source.shape) == a.shape[:axis] + (index.size,) + a.shape[axis + 1:])

    @staticmethod
    def forward(ctx, a, index, source, axis, alpha=1):
        index = np.asarray(index)
        planes, rows, cols = _planes(a.shape, axis)
        out = a.copy()
        scaled = source * alpha if alpha != 1 else source
        _scatter_rows(out.reshape(planes, rows, cols), _int64(index),
                      np.ascontiguousarray(scaled, dtype=a.dtype).reshape(planes, -1, cols), rows, axis)
        ctx.save_for_backward(index)
        ctx.axis, ctx.alpha = axis, alpha
        return out


# ---------------------------------------------------------------------------------------------------------
# pad (reflect / replicate / circular) backward
# ---------------------------------------------------------------------------------------------------------

class PadAxis(KernelOverride, core_movement.PadAxis):
    """Reflect/replicate/circular padding backward: the padded gradient folds back through the index map."""

    @staticmethod
    def backward(ctx, grad):
        if ctx.mode == "constant" or not handles(grad):
            return core_movement.PadAxis.backward(ctx, grad)
        after = grad.shape[ctx.axis] - ctx.size - ctx.before
        source = np.pad(np.arange(ctx.size), (ctx.before, after), mode=PAD_MODES[ctx.mode])
        shape = list(grad.shape)
        shape[ctx.axis] = ctx.size
        grad_input = np.zeros(shape, dtype=grad.dtype)
        planes, rows, cols = _planes(tuple(shape), ctx.axis)
        _scatter_rows(grad_input.reshape(planes, rows, cols), _int64(source),
                      np.ascontiguousarray(grad).reshape(planes, -1, cols), rows, ctx.axis)
        return grad_input


OVERRIDES = [("embedding", Embedding), ("getitem", GetItem), ("index_put", IndexPut), ("gather", Gather),
             ("scatter", Scatter), ("index_select", IndexSelect), ("index_add", IndexAdd), ("pad_axis", PadAxis)]
