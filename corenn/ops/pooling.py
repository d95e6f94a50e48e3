"""Pooling: N-d max and average pooling over sliding windows, and adaptive average pooling.

Windows are strided views of the (padded) input; nothing is copied until the
reduction. Backward adds each kernel offset's share back with one strided add per
offset; non-overlapping max pooling (stride == kernel, the usual 2x2/2) instead
rebuilds the input gradient with a reshape of the one-hot window gradient.
"""
from __future__ import annotations

import math
import itertools
import numbers

from corenn.kernels import pool_output_size
from corenn.ops._kernel import Op, check_tensor, kernel, run


def _windows(xp, x, kernel_size, stride, dilation, out_size):
    """(N, C, *S) -> strided view (N, C, *out, *k)."""
    sN, sC, *s_spatial = x.strides
    shape = x.shape[:2] + tuple(out_size) + tuple(kernel_size)
    strides = (sN, sC, *(s * st for s, st in zip(s_spatial, stride)), *(s * d for s, d in zip(s_spatial, dilation)))
    return xp.lib.stride_tricks.as_strided(x, shape=shape, strides=strides, writeable=False)


def _window(offset, stride, dilation, out_size):
    return (slice(None), slice(None)) + tuple(
        slice(o * d, o * d + s * (n - 1) + 1, s) for o, s, d, n in zip(offset, stride, dilation, out_size))


def _padded(xp, x, padding, out_size, kernel_size, stride, dilation, fill):
    """Pad ``x`` so every window of ``out_size`` fits (ceil mode may need extra on the right)."""
    widths = [(0, 0), (0, 0)]
    for size, p, o, k, s, d in zip(x.shape[2:], padding, out_size, kernel_size, stride, dilation):
        needed = (o - 1) * s + d * (k - 1) + 1
        widths.append((p, max(needed - size - p, 0)))
    if not any(before or after for before, after in widths):
        return x
    return xp.pad(x, widths, constant_values=fill)


def _crop(padded, padding, shape):
    return padded[(slice(None), slice(None)) + tuple(slice(p, p + s) for p, s in zip(padding, shape[2:]))]


def _lowest(xp, dtype):
    return -xp.inf if dtype.kind == "f" else xp.iinfo(dtype).min


# ---------------------------------------------------------------------------------------------------------
# max pooling
# ---------------------------------------------------------------------------------------------------------

@kernel("max_pool", "MaxPool2DWithIndicesBackward0")
class MaxPool(Op):
    """Running max over the kernel offsets: one strided view of the input per offset.

    For the usual small kernels (2x2, 3x3) this is kh*kw whole-array ufunc passes,
    with no window copy and no argmax over a tiny trailing axis. ``argmax`` records
    which offset won; a later offset wins only when strictly greater, so the first
    maximum wins ties, as in PyTorch.
    """

    @staticmethod
    def forward(ctx, x, kernel_size, stride, padding, dilation, ceil_mode):
        xp = ctx.xp
        out_size = tuple(pool_output_size(s, k, st, p, d, ceil_mode)
                         for s, k, st, p, d in zip(x.shape[2:], kernel_size, stride, padding, dilation))
        padded = _padded(xp, x, padding, out_size, kernel_size, stride, dilation, _lowest(xp, x.dtype))
        offsets = itertools.product(*(range(k) for k in kernel_size))
        out = padded[_window(next(offsets), stride, dilation, out_size)]
        argmax = xp.zeros(out.shape, dtype=xp.int8 if math.prod(kernel_size) < 128 else xp.int64)
        for index, offset in enumerate(offsets, start=1):
            candidate = padded[_window(offset, stride, dilation, out_size)]
            better = candidate > out
            # maximum/where make new arrays, yet beat masked in-place writes (copyto where=) by ~6x.
            out = xp.maximum(out, candidate)
            argmax = xp.where(better, index, argmax).astype(argmax.dtype, copy=False)
        if math.prod(kernel_size) == 1:
            out = out.copy()  # a 1x1 window leaves a view of the input: outputs own their memory
        ctx.save_for_backward(argmax)
        ctx.params = (x.shape, padded.shape, kernel_size, stride, padding, dilation, out_size)
        return out

    @staticmethod
    def backward(ctx, grad):
        xp = ctx.xp
        (argmax,) = ctx.saved
        x_shape, padded_shape, kernel_size, stride, padding, dilation, out_size = ctx.params
        grad_padded = xp.zeros(padded_shape, dtype=grad.dtype)
        for index, offset in enumerate(itertools.product(*(range(k) for k in kernel_size))):
            # Windows may overlap (stride < kernel): accumulate rather than assign.
            grad_padded[_window(offset, stride, dilation, out_size)] += grad * (argmax == index)
        return _crop(grad_padded, padding, x_shape)



@kernel("max_pool_with_indices", "MaxPool2DWithIndicesBackward0")
class MaxPoolWithIndices(MaxPool):
    """``max_pool`` that also returns PyTorch's indices: flat positions in each input plane."""

    num_outputs = 2
    differentiable_outputs = (True, False)

    @staticmethod
    def forward(ctx, x, kernel_size, stride, padding, dilation, ceil_mode):
        xp = ctx.xp
        out = MaxPool.forward(ctx, x, kernel_size, stride, padding, dilation, ceil_mode)
        (argmax,) = ctx.saved
        out_size = out.shape[2:]
        offsets = xp.unravel_index(argmax, kernel_size)
        flat_index = xp.zeros(argmax.shape, dtype=xp.int64)
        for dim, (size, k_offset, s, p, d) in enumerate(zip(x.shape[2:], offsets, stride, padding, dilation)):
            shape = [1] * argmax.ndim
            shape[2 + dim] = out_size[dim]
            position = (xp.arange(out_size[dim]) * s - p).reshape(shape) + k_offset * d
            flat_index = flat_index * size + position
        return out, flat_index

    @staticmethod
    def backward(ctx, grad):
        return MaxPool.backward(ctx, grad[0])


# ---------------------------------------------------------------------------------------------------------
# average pooling
# ---------------------------------------------------------------------------------------------------------

def _avg_divisor(xp, x_shape, out_size, kernel_size, stride, padding, count_include_pad, dtype):
    """Per-output divisor, the outer product of per-dim window sizes (PyTorch's rule at the borders)."""
    divisor = xp.ones((1, 1) + (1,) * len(out_size), dtype=dtype)
    for dim, (size, o, k, s, p) in enumerate(zip(x_shape[2:], out_size, kernel_size, stride, padding)):
        start = xp.arange(o) * s - p
        end = xp.minimum(start + k, size + p)
        if count_include_pad:
            counts = end - start
        else:
            counts = xp.minimum(end, size) - xp.maximum(start, 0)
        shape = [1] * divisor.ndim
        shape[2 + dim] = o
        divisor = divisor * counts.reshape(shape).astype(dtype)
    return divisor


@kernel("avg_pool", "AvgPool2DBackward0")
class AvgPool(Op):
    @staticmethod
    def forward(ctx, x, kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override=None):
        xp = ctx.xp
        ones = (1,) * len(kernel_size)
        out_size = tuple(pool_output_size(s, k, st, p, 1, ceil_mode)
                         for s, k, st, p in zip(x.shape[2:], kernel_size, stride, padding))
        padded = _padded(xp, x, padding, out_size, kernel_size, stride, ones, 0)
        windows = _windows(xp, padded, kernel_size, stride, ones, out_size)
        total = windows.sum(axis=tuple(range(-len(kernel_size), 0)))
        if divisor_override is not None:
            divisor = divisor_override
        else:
            divisor = _avg_divisor(xp, x.shape, out_size, kernel_size, stride, padding, count_include_pad, x.dtype)
        ctx.save_for_backward(divisor if divisor_override is None else None)
        ctx.params = (x.shape, padded.shape, kernel_size, stride, padding, out_size, divisor_override)
        return (total / divisor).astype(x.dtype, copy=False)

    @staticmethod
    def backward(ctx, grad):
        xp = ctx.xp
        (divisor,) = ctx.saved
        x_shape, padded_shape, kernel_size, stride, padding, out_size, divisor_override = ctx.params
        share = grad / (divisor_override if divisor is None else divisor)
        share = share.astype(grad.dtype, copy=False)
        grad_padded = xp.zeros(padded_shape, dtype=grad.dtype)
        ones = (1,) * len(kernel_size)
        for offset in itertools.product(*(range(k) for k in kernel_size)):
            grad_padded[_window(offset, stride, ones, out_size)] += share
        return _crop(grad_padded, padding, x_shape)


# ---------------------------------------------------------------------------------------------------------
# adaptive average pooling: one averaging matrix per spatial dim
# ---------------------------------------------------------------------------------------------------------

def _adaptive_matrix(xp, size, out, dtype):
    """(out, size) matrix whose row i averages input [floor(i*size/out), ceil((i+1)*size/out))."""
    i = xp.arange(out)
    start = (i * size) // out
    end = -((-(i + 1) * size) // out)
    j = xp.arange(size)
    inside = (j[None, :] >= start[:, None]) & (j[None, :] < end[:, None])
    return (inside / (end - start)[:, None]).astype(dtype)


@kernel("adaptive_avg_pool", "AdaptiveAvgPool2DBackward0")
class AdaptiveAvgPool(Op):
    @staticmethod
    def forward(ctx, x, output_size):
        xp = ctx.xp
        matrices = [_adaptive_matrix(xp, s, o, x.dtype) for s, o in zip(x.shape[2:], output_size)]
        out = x
        for dim, matrix in enumerate(matrices):
            out = xp.moveaxis(xp.tensordot(matrix, out, axes=([1], [2 + dim])), 0, 2 + dim)
        ctx.save_for_backward(*matrices)
        return out

    @staticmethod
    def backward(ctx, grad):
        xp = ctx.xp
        for dim, matrix in enumerate(ctx.saved):
            grad = xp.moveaxis(xp.tensordot(matrix.T, grad, axes=([1], [2 + dim])), 0, 2 + dim)
        return grad


# ---------------------------------------------------------------------------------------------------------
# Front ends (``torch.nn.functional.max_pool2d`` ...)
# ---------------------------------------------------------------------------------------------------------

def _tuple(value, n, name, op):
    if isinstance(value, numbers.Integral):
        return (int(value),) * n
    value = tuple(int(v) for v in value)
    if len(value) == 1:
        return value * n
    if len(value) != n:
        raise RuntimeError(f"{op}: {name} must either be a single int, or a tuple of {n} ints, got {list(value)}")
    return value


def _check_pool_input(input, n, op):
    check_tensor(input, "input", op)
    if input.ndim not in (n + 1, n + 2):
        raise RuntimeError(f"{op}: Expected {n + 1}D or {n + 2}D (batch mode) tensor for input, but got input of "
                           f"size {list(input.shape)}")
    if any(s == 0 for s in input.shape[1:]):
        raise RuntimeError(f"{op}: Expected input's non-batch dimensions to have positive length, but input has a "
                           f"shape of {list(input.shape)}")
    unbatched = input.ndim == n + 1
    return (input.unsqueeze(0) if unbatched else input), unbatched


def _pool_args(input, kernel_size, stride, padding, dilation, ceil_mode, n, op):
    kernel_size = _tuple(kernel_size, n, "kernel_size", op)
    stride = kernel_size if stride is None or (not isinstance(stride, numbers.Integral) and len(stride) == 0) \
        else _tuple(stride, n, "stride", op)
    padding = _tuple(padding, n, "padding", op)
    dilation = _tuple(dilation, n, "dilation", op)
    if any(k <= 0 for k in kernel_size):
        raise RuntimeError(f"{op}: kernel_size must be greater than zero, but got {list(kernel_size)}")
    if any(s <= 0 for s in stride):
        raise RuntimeError(f"{op}: stride must be greater than zero, but got {list(stride)}")
    if any(d <= 0 for d in dilation):
        raise RuntimeError(f"{op}: dilation must be greater than zero, but got {list(dilation)}")
    for k, p, d in zip(kernel_size, padding, dilation):
        if p < 0 or p > (d * (k - 1) + 1) // 2:
            raise RuntimeError(f"{op}: pad should be at most half of effective kernel size, but got pad={p}, "
                               f"kernel_size={k} and dilation={d}")
    for size, k, s, p, d in zip(input.shape[2:], kernel_size, stride, padding, dilation):
        if pool_output_size(size, k, s, p, d, ceil_mode) < 1:
            raise RuntimeError(f"{op}: Given input size {list(input.shape[1:])}, calculated output size is too "
                               f"small (kernel_size={list(kernel_size)}, padding={list(padding)})")
    return kernel_size, stride, padding, dilation


def _max_poolnd(input, kernel_size, stride, padding, dilation, ceil_mode, return_indices, n):
    op = f"max_pool{n}d"
    input, unbatched = _check_pool_input(input, n, op)
    args = _pool_args(input, kernel_size, stride, padding, dilation, ceil_mode, n, op)
    params = dict(zip(("kernel_size", "stride", "padding", "dilation"), args), ceil_mode=bool(ceil_mode))
    if return_indices:
        out, indices = run("max_pool_with_indices", input, **params)
        return (out.squeeze(0), indices.squeeze(0)) if unbatched else (out, indices)
    out = run("max_pool", input, **params)
    return out.squeeze(0) if unbatched else out


def max_pool1d(input, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False, return_indices=False):
    """1-d max pooling over (N, C, L); ``stride`` defaults to ``kernel_size``.

        >>> corenn.max_pool1d(corenn.tensor([[[1., 3., 2., 4.]]]), 2).tolist()
        [[[3.0, 4.0]]]
    """
    return _max_poolnd(input, kernel_size, stride, padding, dilation, ceil_mode, return_indices, 1)


def max_pool2d(input, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False, return_indices=False):
    """2-d max pooling over (N, C, H, W); ``return_indices=True`` also gives flat argmax positions.

        >>> corenn.max_pool2d(corenn.arange(16.).reshape(1, 1, 4, 4), 2).tolist()
        [[[[5.0, 7.0], [13.0, 15.0]]]]
    """
    return _max_poolnd(input, kernel_size, stride, padding, dilation, ceil_mode, return_indices, 2)


def _avg_poolnd(input, kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override, n):
    op = f"avg_pool{n}d"
    input, unbatched = _check_pool_input(input, n, op)
    args = _pool_args(input, kernel_size, stride, padding, 1, ceil_mode, n, op)
    if divisor_override is not None and divisor_override == 0:
        raise RuntimeError("divisor must be not zero")
    if not input.dtype.is_floating_point:
        raise RuntimeError(f"\"{op}\" not implemented for '{input.dtype}'")
    out = run("avg_pool", input, kernel_size=args[0], stride=args[1], padding=args[2], ceil_mode=bool(ceil_mode),
              count_include_pad=bool(count_include_pad), divisor_override=divisor_override)
    return out.squeeze(0) if unbatched else out


def avg_pool1d(input, kernel_size, stride=None, padding=0, ceil_mode=False, count_include_pad=True):
    """1-d average pooling over (N, C, L).

        >>> corenn.avg_pool1d(corenn.tensor([[[1., 3., 2., 4.]]]), 2).tolist()
        [[[2.0, 3.0]]]
    """
    return _avg_poolnd(input, kernel_size, stride, padding, ceil_mode, count_include_pad, None, 1)


def avg_pool2d(input, kernel_size, stride=None, padding=0, ceil_mode=False, count_include_pad=True,
               divisor_override=None):
    """2-d average pooling over (N, C, H, W); ``count_include_pad=False`` averages only real elements.

        >>> corenn.avg_pool2d(corenn.ones(1, 1, 4, 4), 2).shape
        corenn.Size([1, 1, 2, 2])
    """
    return _avg_poolnd(input, kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override, 2)


def _adaptive_avg_poolnd(input, output_size, n):
    op = f"adaptive_avg_pool{n}d"
    input, unbatched = _check_pool_input(input, n, op)
    if isinstance(output_size, numbers.Integral) or output_size is None:
        output_size = (output_size,) * n
    output_size = tuple(s if o is None else int(o) for o, s in zip(output_size, input.shape[2:]))
    if len(output_size) != n or any(o < 0 for o in output_size):
        raise RuntimeError(f"{op}: output_size must be {n} non-negative ints, got {list(output_size)}")
    if not input.dtype.is_floating_point:
        raise RuntimeError(f"\"{op}\" not implemented for '{input.dtype}'")
    out = run("adaptive_avg_pool", input, output_size=output_size)
    return out.squeeze(0) if unbatched else out


def adaptive_avg_pool1d(input, output_size):
    """Average pooling to a fixed output length, windows ``[floor(i*L/o), ceil((i+1)*L/o))``.

        >>> corenn.adaptive_avg_pool1d(corenn.tensor([[[1., 2., 3., 4.]]]), 2).tolist()
        [[[1.5, 3.5]]]
    """
    return _adaptive_avg_poolnd(input, output_size, 1)


def adaptive_avg_pool2d(input, output_size):
    """Average pooling to a fixed (H, W); ``None`` in ``output_size`` keeps that size.

        >>> corenn.adaptive_avg_pool2d(corenn.ones(1, 3, 7, 5), 1).shape
        corenn.Size([1, 3, 1, 1])
    """
    return _adaptive_avg_poolnd(input, output_size, 2)


# The public op functions of this file (what ``from corenn.ops import *`` re-exports as ``corenn.X``).
__all__ = [name for name, value in list(globals().items())
           if not name.startswith("_") and callable(value) and not isinstance(value, type)
           and getattr(value, "__module__", None) == __name__]
