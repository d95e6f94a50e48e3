"""max_pool (with and without indices), avg_pool and adaptive_avg_pool, compiled with numba.

The core pools with one whole-array numpy pass per kernel offset (max/where for max
pooling, a strided-window sum for average pooling) and backward adds one strided
array per offset; adaptive pooling is two tensordots with averaging matrices. Here
max pooling is one loop over the output that reads its window in place, finding the
maximum and its position in the same pass; it saves the flat positions (PyTorch's
indices) for backward, which is then one scatter-add per output element. Average
pooling, fixed and adaptive, is separable: each output row's input rows are added up,
then the windows along that row; backward spreads each output's share along its row
and writes each input row once, as the sum of the spread rows whose windows hold it.

Handled: float32/float64 inputs with 1 or 2 spatial dims (1-d arrives as a height of 1),
any kernel size, stride, padding, dilation and ceil_mode. 3-d pooling, integer
dtypes and empty tensors run the core kernel.

Example (nothing changes for the user; the dispatcher picks these kernels)::

    >>> import corenn, corenn.nn.functional as F
    >>> out, indices = F.max_pool2d(corenn.randn(2, 3, 8, 8), 2, return_indices=True)
    >>> out.shape, indices.dtype
    (corenn.Size([2, 3, 4, 4]), corenn.int64)
"""
from __future__ import annotations

import numpy as np

from corenn.kernels import KernelOverride, pool_output_size
from corenn.ops import pooling as core_pool

from corenn_numba._base import LazyModule, handles

jit = LazyModule("corenn_numba._pooling_jit")


def _handled(x, *params):
    """float32/float64 with 1 or 2 spatial dims, not empty (any pooling parameters)."""
    return x.ndim in (3, 4) and x.size > 0 and handles(x)


def _planes(x):
    """(N, C, H, W) contiguous, with 1-d input (N, C, L) seen as a height of 1."""
    return np.ascontiguousarray(x if x.ndim == 4 else x[:, :, None, :])


def _pairs(values, one_d, fill):
    """A 1-d op's parameters as 2-d ones: ``fill`` for the height."""
    return ((fill,) if one_d else ()) + tuple(values)


def _shape_back(array, one_d):
    return array[:, :, 0, :] if one_d else array


class MaxPool(KernelOverride, core_pool.MaxPool):
    """``max_pool``: maximum and argmax in one pass; backward scatters through the saved indices."""

    handles = staticmethod(_handled)

    @staticmethod
    def forward(ctx, x, kernel_size, stride, padding, dilation, ceil_mode):
        out, indices = _max_pool(ctx, x, kernel_size, stride, padding, dilation, ceil_mode)
        return out

    @staticmethod
    def backward(ctx, grad):
        return _max_pool_backward(ctx, grad)


class MaxPoolWithIndices(KernelOverride, core_pool.MaxPoolWithIndices):
    """``max_pool_with_indices``: the same pass; the indices it saves are the ones it returns."""

    handles = staticmethod(_handled)

    @staticmethod
    def forward(ctx, x, kernel_size, stride, padding, dilation, ceil_mode):
        out, indices = _max_pool(ctx, x, kernel_size, stride, padding, dilation, ceil_mode)
        # The returned indices are a copy: a caller writing into them must not change the gradient.
        returned = indices.copy()
        _index_empty_windows(returned, x.shape[2:], kernel_size, stride, padding, dilation)
        return out, returned

    @staticmethod
    def backward(ctx, grad):
        return _max_pool_backward(ctx, grad[0])


def _max_pool(ctx, x, kernel_size, stride, padding, dilation, ceil_mode):
    one_d = x.ndim == 3
    planes = _planes(x)
    kernel_size, stride = _pairs(kernel_size, one_d, 1), _pairs(stride, one_d, 1)
    padding, dilation = _pairs(padding, one_d, 0), _pairs(dilation, one_d, 1)
    out_size = tuple(pool_output_size(s, k, st, p, d, ceil_mode)
                     for s, k, st, p, d in zip(planes.shape[2:], kernel_size, stride, padding, dilation))
    out = np.empty(planes.shape[:2] + out_size, dtype=planes.dtype)
    indices = np.empty(out.shape, dtype=np.int64)
    jit.max_pool(planes, out, indices, *kernel_size, *stride, *padding, *dilation)
    ctx.save_for_backward(indices)
    ctx.params = (planes.shape, one_d)
    return _shape_back(out, one_d), _shape_back(indices, one_d)


def _index_empty_windows(indices, size, kernel_size, stride, padding, dilation):
    """The index PyTorch (and the core) return for a window that holds no input element (dilation steps over
    the input), in place of the -1 the compiled loop saves for backward: the position of its first row and
    column at or past 0, as if they were inside (they are not; backward gives them no gradient).

    Which windows are empty is decided per axis, from the geometry (a few values per output row and
    column): the indices are only touched where there are some.
    """
    starts, empty = [], []
    for n, out, k, s, p, d in zip(size, indices.shape[2:], kernel_size, stride, padding, dilation):
        start = np.arange(out) * s - p
        taps = start[:, None] + np.arange(k) * d
        empty.append(~((taps >= 0) & (taps < n)).any(axis=1))
        starts.append(np.where(start < 0, start + (-start + d - 1) // d * d, start))  # first tap at or past 0
    if not any(e.any() for e in empty):
        return
    missing = False
    for axis_empty in np.meshgrid(*empty, indexing="ij", sparse=True):
        missing = missing | axis_empty  # a window is empty when it is along either axis
    flat = 0
    for n, first in zip(size, np.meshgrid(*starts, indexing="ij", sparse=True)):
        flat = flat * n + first
    indices[...] = np.where(missing, flat, indices)


def _max_pool_backward(ctx, grad):
    (indices,) = ctx.saved
    planes_shape, one_d = ctx.params
    grad_x = np.empty(planes_shape, dtype=grad.dtype)  # the kernel writes every element
    grad_planes = np.ascontiguousarray(grad if not one_d else grad[:, :, None, :])
    where = np.ascontiguousarray(indices.reshape(grad_planes.shape))
    bad = jit.max_pool_backward(grad_planes, where, grad_x)
    if bad >= 0:  # only indices that max_pool did not make can be out of their plane
        raise IndexError(f"max_pool backward: index {int(where.reshape(-1)[bad])} is out of bounds for planes of "
                         f"{planes_shape[2] * planes_shape[3]} elements")
    return _shape_back(grad_x, one_d)


class AvgPool(KernelOverride, core_pool.AvgPool):
    """``avg_pool``: row sums, then window sums, with PyTorch's per-window divisors; backward spreads the
    same shares along the rows, then gathers each input row."""

    handles = staticmethod(_handled)

    @staticmethod
    def forward(ctx, x, kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override=None):
        one_d = x.ndim == 3
        planes = _planes(x)
        kernel_size, stride, padding = (_pairs(kernel_size, one_d, 1), _pairs(stride, one_d, 1),
                                        _pairs(padding, one_d, 0))
        out_size = tuple(pool_output_size(s, k, st, p, 1, ceil_mode)
                         for s, k, st, p in zip(planes.shape[2:], kernel_size, stride, padding))
        out = np.empty(planes.shape[:2] + out_size, dtype=planes.dtype)
        # 0 stands for "no override": the front end rejects a zero divisor.
        divisor = 0.0 if divisor_override is None else float(divisor_override)
        geometry = (*kernel_size, *stride, *padding, bool(count_include_pad), divisor)
        jit.avg_pool(planes, out, *geometry)
        ctx.params = (planes.shape, one_d, geometry)
        return _shape_back(out, one_d)

    @staticmethod
    def backward(ctx, grad):
        planes_shape, one_d, geometry = ctx.params
        grad_x = np.empty(planes_shape, dtype=grad.dtype)  # the kernel writes every element
        jit.avg_pool_backward(np.ascontiguousarray(grad if not one_d else grad[:, :, None, :]), grad_x, *geometry)
        return _shape_back(grad_x, one_d)


class AdaptiveAvgPool(KernelOverride, core_pool.AdaptiveAvgPool):
    """``adaptive_avg_pool``: avg_pool's separable passes over the adaptive windows, instead of two
    averaging-matrix tensordots."""

    @staticmethod
    def handles(x, output_size):
        return _handled(x) and 0 not in tuple(output_size)

    @staticmethod
    def forward(ctx, x, output_size):
        one_d = x.ndim == 3
        planes = _planes(x)
        out = np.empty(planes.shape[:2] + _pairs(output_size, one_d, 1), dtype=planes.dtype)
        jit.adaptive_avg_pool(planes, out)
        ctx.params = (planes.shape, one_d)
        return _shape_back(out, one_d)

    @staticmethod
    def backward(ctx, grad):
        planes_shape, one_d = ctx.params
        grad_x = np.empty(planes_shape, dtype=grad.dtype)  # the kernel writes every element
        jit.adaptive_avg_pool_backward(np.ascontiguousarray(grad if not one_d else grad[:, :, None, :]), grad_x)
        return _shape_back(grad_x, one_d)


OVERRIDES = [("max_pool", MaxPool), ("max_pool_with_indices", MaxPoolWithIndices), ("avg_pool", AvgPool),
             ("adaptive_avg_pool", AdaptiveAvgPool)]
