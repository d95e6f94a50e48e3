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
from corenn._argcheck import check_int, check_ints, check_number, named, type_name
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
        if x.dtype.kind == "f" and xp.isnan(out).any().item():
            # NaN wins its window, at the position of its last NaN (PyTorch: ``val > max || isnan(val)``);
            # the pass above kept the NaN values but not their positions. Rare: only then a second pass.
            for index, offset in enumerate(itertools.product(*(range(k) for k in kernel_size))):
                candidate = padded[_window(offset, stride, dilation, out_size)]
                argmax = xp.where(xp.isnan(candidate), index, argmax).astype(argmax.dtype, copy=False)
        if padded is not x:
            # A window whose elements all hold the dtype's lowest value ties with its padding, which came
            # first: PyTorch picks the window's first element inside the input instead.
            stuck = out == _lowest(xp, x.dtype)
            if stuck.any().item():
                first = _first_inside(xp, kernel_size, stride, padding, dilation, out_size)
                argmax = xp.where(stuck, first, argmax).astype(argmax.dtype, copy=False)
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
        # A product with the mask is the fast way to route the gradient, but 0 * inf and 0 * nan are nan:
        # a non-finite gradient must reach its own window's maximum only, so then ``where`` (slower).
        finite = grad.dtype.kind != "f" or xp.isfinite(grad).all().item()
        for index, offset in enumerate(itertools.product(*(range(k) for k in kernel_size))):
            # Windows may overlap (stride < kernel): accumulate rather than assign.
            hit = argmax == index
            grad_padded[_window(offset, stride, dilation, out_size)] += grad * hit if finite else xp.where(hit, grad, 0)
        return _crop(grad_padded, padding, x_shape)


def _first_inside(xp, kernel_size, stride, padding, dilation, out_size):
    """Per output position, the kernel offset (flat, as ``argmax`` counts) of its window's first input element."""
    first = 0
    for dim, (k, s, p, d, o) in enumerate(zip(kernel_size, stride, padding, dilation, out_size)):
        start = xp.arange(o) * s - p
        skipped = xp.where(start < 0, (-start + d - 1) // d, 0)  # offsets that fall in the left padding
        shape = [1] * (2 + len(out_size))
        shape[2 + dim] = o
        first = first * k + skipped.reshape(shape)
    return first


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
# adaptive average pooling: one gather of window sums per spatial dim
# ---------------------------------------------------------------------------------------------------------

def _adaptive_bounds(xp, n, out):
    """Start and length of the ``out`` windows ``[floor(i*n/out), ceil((i+1)*n/out))`` over ``n`` elements."""
    i = xp.arange(out)
    start = (i * n) // out
    return start, -((-(i + 1) * n) // out) - start


def _adaptive_matrix(xp, n, out, dtype):
    """(out, n) matrix whose row i averages window i (a BLAS product: fast, but 0 * nan is nan)."""
    start, length = _adaptive_bounds(xp, n, out)
    j = xp.arange(n)
    inside = (j[None, :] >= start[:, None]) & (j[None, :] < (start + length)[:, None])
    return (inside / length[:, None]).astype(dtype)


def _adaptive_sum(xp, x, axis, out):
    """Sums of ``x`` along ``axis`` over its ``out`` adaptive windows, each read on its own (a gather).

    Unlike the averaging matrix, a NaN or an infinity stays in the windows that hold it. The
    windows are padded to the longest with a masked-out repeat of their first element.
    """
    start, length = _adaptive_bounds(xp, x.shape[axis], out)
    width = int(length.max().item()) if out else 0
    j = xp.arange(width)
    inside = j[None, :] < length[:, None]
    columns = xp.where(inside, start[:, None] + j[None, :], start[:, None])
    picked = xp.take(x, columns.reshape(-1), axis=axis).reshape(x.shape[:axis] + (out, width) + x.shape[axis + 1:])
    inside = inside.reshape((1,) * axis + (out, width) + (1,) * (x.ndim - axis - 1))
    return xp.where(inside, picked, 0).sum(axis=axis + 1)  # where, not a product: 0 * nan is nan


def _along(xp, vector, axis, ndim):
    return vector.reshape((1,) * axis + (-1,) + (1,) * (ndim - axis - 1))


@kernel("adaptive_avg_pool", "AdaptiveAvgPool2DBackward0")
class AdaptiveAvgPool(Op):
    """Windows ``[floor(i*n/out), ceil((i+1)*n/out))`` per spatial dim, averaged separably.

    Finite values go through one averaging matrix per dim (a tensordot). A NaN or an infinity
    would spread through the matrix's zeros into windows that don't hold it, so when the result
    (or, in backward, the gradient) is not finite, the windows are summed one by one instead (a
    gather), as PyTorch does. Checking the result costs a pass over the output only.
    """

    @staticmethod
    def forward(ctx, x, output_size):
        xp = ctx.xp
        ctx.input_size = sizes = x.shape[2:]
        out = x
        with xp.errstate(invalid="ignore"):  # 0 * inf, when x holds one: that result is discarded below
            for axis, (n, o) in enumerate(zip(sizes, output_size), start=2):
                out = xp.moveaxis(xp.tensordot(_adaptive_matrix(xp, n, o, x.dtype), out, axes=([1], [axis])), 0, axis)
        if not xp.isfinite(out).all().item():  # then x holds a NaN or an infinity
            out = x
            for axis, (n, o) in enumerate(zip(sizes, output_size), start=2):
                out = _adaptive_sum(xp, out, axis, o) / _along(xp, _adaptive_bounds(xp, n, o)[1], axis, out.ndim)
        return out.astype(x.dtype, copy=False)

    @staticmethod
    def backward(ctx, grad):
        xp = ctx.xp
        finite = xp.isfinite(grad).all().item()
        for axis, n in enumerate(ctx.input_size, start=2):
            o = grad.shape[axis]
            if finite:
                grad = xp.moveaxis(xp.tensordot(_adaptive_matrix(xp, n, o, grad.dtype).T, grad, axes=([1], [axis])),
                                   0, axis)
            else:
                # The adjoint of window sums is window sums with the sizes swapped: input j lies in the
                # output windows [floor(j*o/n), ceil((j+1)*o/n)).
                share = grad / _along(xp, _adaptive_bounds(xp, n, o)[1], axis, grad.ndim).astype(grad.dtype)
                grad = _adaptive_sum(xp, share, axis, n)
        return grad


# ---------------------------------------------------------------------------------------------------------
# adaptive max pooling: windows gathered per spatial dim, one argmax over each window
# ---------------------------------------------------------------------------------------------------------

@kernel("adaptive_max_pool", "AdaptiveMaxPool2DBackward0")
class AdaptiveMaxPool(Op):
    """Max over the windows ``[floor(i*n/out), ceil((i+1)*n/out))`` of each spatial dim, with PyTorch's indices
    (flat positions in each input plane).

    Each dim's windows are gathered (padded to the longest with the dtype's lowest value, which never beats
    the window's own first element), then one argmax runs over every window: the first maximum wins ties,
    and a NaN wins its window at its last position, as in PyTorch's loop (``val > max || isnan(val)``).
    """

    num_outputs = 2
    differentiable_outputs = (True, False)

    @staticmethod
    def forward(ctx, x, output_size):
        xp = ctx.xp
        sizes = x.shape[2:]
        n = len(sizes)
        ctx.grad_fn_name = f"AdaptiveMaxPool{n}DBackward0"
        windows, positions = x, None
        flat_position = xp.zeros((1,) * (2 * n), dtype=xp.int64)
        for dim, (size, out) in enumerate(zip(sizes, output_size)):
            start, length = _adaptive_bounds(xp, size, out)
            width = int(length.max().item()) if out else 0
            offset = xp.arange(width)
            inside = offset[None, :] < length[:, None]
            columns = xp.where(inside, start[:, None] + offset[None, :], start[:, None])  # (out, width)
            axis = 2 + 2 * dim  # (N, C, o0, w0, ..., o_dim-1, w_dim-1, S_dim, ...)
            shape = windows.shape
            windows = xp.take(windows, columns.reshape(-1), axis=axis).reshape(shape[:axis] + (out, width)
                                                                                + shape[axis + 1:])
            mask_shape = (1, 1) + (1,) * (2 * dim) + (out, width) + (1,) * (n - dim - 1)
            windows = xp.where(inside.reshape(mask_shape), windows, _lowest(xp, x.dtype))
            place = [1] * (2 * n)
            place[2 * dim], place[2 * dim + 1] = out, width
            flat_position = flat_position * size + columns.reshape(place)
        # (N, C, o0, w0, o1, w1, ...) -> (N, C, o0, o1, ..., w0 * w1 * ...)
        order = (0, 1) + tuple(2 + 2 * d for d in range(n)) + tuple(3 + 2 * d for d in range(n))
        windows = windows.transpose(order).reshape(x.shape[:2] + tuple(output_size) + (-1,))
        flat_position = flat_position.transpose(tuple(range(0, 2 * n, 2)) + tuple(range(1, 2 * n, 2)))
        flat_position = flat_position.reshape(tuple(output_size) + (-1,))
        best = windows.argmax(axis=-1)
        if x.dtype.kind == "f":
            nan = xp.isnan(windows)
            if nan.any().item():
                last_nan = windows.shape[-1] - 1 - nan[..., ::-1].argmax(axis=-1)
                best = xp.where(nan.any(axis=-1), last_nan, best)
        out = xp.take_along_axis(windows, best[..., None], axis=-1)[..., 0]
        indices = xp.take_along_axis(xp.broadcast_to(flat_position, windows.shape), best[..., None], axis=-1)[..., 0]
        ctx.save_for_backward(indices)
        ctx.input_shape = x.shape
        return out, indices

    @staticmethod
    def backward(ctx, grad):
        xp = ctx.xp
        grad = grad[0]
        (indices,) = ctx.saved
        shape = ctx.input_shape
        plane = math.prod(shape[2:])
        planes = math.prod(shape[:2])
        grad_input = xp.zeros(planes * plane, dtype=grad.dtype)
        # adaptive windows overlap when the size does not divide evenly: add.at accumulates
        base = (xp.arange(planes) * plane).reshape((planes,) + (1,) * (indices.ndim - 2))
        xp.add.at(grad_input, (indices.reshape((planes,) + indices.shape[2:]) + base).reshape(-1), grad.reshape(-1))
        return grad_input.reshape(shape)


# ---------------------------------------------------------------------------------------------------------
# max unpooling: the max pool's values scattered back to their indices (a partial inverse of max pooling)
# ---------------------------------------------------------------------------------------------------------

@kernel("max_unpool", "MaxUnpool2DBackward0")
class MaxUnpool(Op):
    """Each value goes to its flat index in its (N, C) output plane, zeros elsewhere; backward gathers."""

    @staticmethod
    def forward(ctx, x, indices, output_size):
        xp = ctx.xp
        planes, plane = math.prod(x.shape[:2]), math.prod(output_size)
        flat = indices.reshape(planes, -1)
        bad = (flat < 0) | (flat >= plane)
        if bad.any().item():
            index = int(flat[bad][0].item())
            sizes = "x".join(map(str, output_size))
            raise RuntimeError(f"Found an invalid max index: {index} (output volumes are of size {sizes})")
        out = xp.zeros((planes, plane), dtype=x.dtype)
        xp.put_along_axis(out, flat, x.reshape(planes, -1), axis=1)
        ctx.save_for_backward(flat)
        ctx.input_shape = x.shape
        ctx.grad_fn_name = f"MaxUnpool{len(output_size)}DBackward0"
        return out.reshape(x.shape[:2] + tuple(output_size))

    @staticmethod
    def backward(ctx, grad):
        (flat,) = ctx.saved
        planes = flat.shape[0]
        return ctx.xp.take_along_axis(grad.reshape(planes, -1), flat, axis=1).reshape(ctx.input_shape), None


# ---------------------------------------------------------------------------------------------------------
# fractional max pooling: pseudo-random window starts per (sample, channel) plane (Graham 2014)
# ---------------------------------------------------------------------------------------------------------

def _fractional_starts(xp, samples, size, out, k):
    """PyTorch's ``generate_intervals`` for each plane's sample u (arithmetic in the input's dtype):
    start i = int((i + u) * alpha) - int(u * alpha), alpha = (size - k) / (out - 1); the last is size - k."""
    starts = xp.full(samples.shape + (out,), size - k, dtype=xp.int64)
    if out > 1:
        alpha = samples.dtype.type(size - k) / samples.dtype.type(out - 1)
        i = xp.arange(out - 1, dtype=samples.dtype)
        first = xp.trunc((i + samples[..., None]) * alpha).astype(xp.int64)
        starts[..., :-1] = first - xp.trunc(samples * alpha).astype(xp.int64)[..., None]
    return starts


@kernel("fractional_max_pool", "FractionalMaxPool2DBackward0")
class FractionalMaxPool(Op):
    """Max over windows of ``kernel_size`` at starts drawn from ``samples`` (N, C, dims), one per plane and dim
    (for 2-d the samples list width first, as PyTorch's); returns the maxima and PyTorch's flat indices."""

    num_outputs = 2
    differentiable_outputs = (True, False)

    @staticmethod
    def forward(ctx, x, samples, kernel_size, output_size):
        xp = ctx.xp
        n = len(kernel_size)
        sizes = x.shape[2:]
        order = (1, 0) if n == 2 else (0, 1, 2)  # which sample drives which spatial dim
        flat = xp.zeros((1, 1) + (1,) * (2 * n), dtype=xp.int64)
        for dim, (size, k, out) in enumerate(zip(sizes, kernel_size, output_size)):
            starts = _fractional_starts(xp, samples[..., order[dim]], size, out, k)  # (N, C, out)
            positions = starts[..., None] + xp.arange(k)  # (N, C, out, k), placed at dims (2 + dim, 2 + n + dim)
            flat = flat * size + positions.reshape(x.shape[:2] + tuple(
                out if d == dim else 1 for d in range(n)) + tuple(k if d == dim else 1 for d in range(n)))
        window = math.prod(kernel_size)
        flat = xp.broadcast_to(flat, x.shape[:2] + tuple(output_size) + tuple(kernel_size))
        flat = flat.reshape(x.shape[:2] + tuple(output_size) + (window,))
        planes = x.reshape(x.shape[:2] + (-1,))
        values = xp.take_along_axis(planes, flat.reshape(x.shape[:2] + (-1,)), axis=2).reshape(flat.shape)
        best = values.argmax(axis=-1)  # the first maximum wins ties (PyTorch: ``val > maxVal``)
        if x.dtype.kind == "f":
            nan = xp.isnan(values)
            if nan.any().item():  # a NaN wins its window, at its last position
                last_nan = window - 1 - nan[..., ::-1].argmax(axis=-1)
                best = xp.where(nan.any(axis=-1), last_nan, best)
        out = xp.take_along_axis(values, best[..., None], axis=-1)[..., 0]
        indices = xp.take_along_axis(flat, best[..., None], axis=-1)[..., 0]
        ctx.save_for_backward(indices)
        ctx.input_shape = x.shape
        ctx.grad_fn_name = f"FractionalMaxPool{n}DBackward0"
        return out, indices

    @staticmethod
    def backward(ctx, grad):
        xp = ctx.xp
        (indices,) = ctx.saved
        shape = ctx.input_shape
        planes, plane = math.prod(shape[:2]), math.prod(shape[2:])
        grad_input = xp.zeros(planes * plane, dtype=grad[0].dtype)
        base = (xp.arange(planes) * plane).reshape((planes,) + (1,) * (indices.ndim - 2))
        # windows overlap: add.at accumulates every window's maximum at one element
        xp.add.at(grad_input, (indices.reshape((planes,) + indices.shape[2:]) + base).reshape(-1), grad[0].reshape(-1))
        return grad_input.reshape(shape), None


# ---------------------------------------------------------------------------------------------------------
# Front ends (``torch.nn.functional.max_pool2d`` ...)
# ---------------------------------------------------------------------------------------------------------

def _tuple(value, n, name, op):
    value = check_ints(value, name)
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
    stride = kernel_size if stride is None or (isinstance(stride, (tuple, list)) and len(stride) == 0) \
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
    if divisor_override is not None and check_int(divisor_override, "divisor_override") == 0:
        raise RuntimeError(named("divisor must be not zero"))
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
    if not isinstance(output_size, (tuple, list)):
        raise TypeError(named(f"argument 'output_size' must be int or tuple of ints, not {type_name(output_size)}"))
    output_size = tuple(s if o is None else check_int(o, "output_size") for o, s in zip(output_size, input.shape[2:]))
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


def adaptive_avg_pool3d(input, output_size):
    """Average pooling of (N, C, D, H, W) to a fixed (D, H, W); ``None`` in ``output_size`` keeps that size.

        >>> corenn.adaptive_avg_pool3d(corenn.ones(1, 2, 5, 6, 7), (1, 2, 3)).shape
        corenn.Size([1, 2, 1, 2, 3])
    """
    return _adaptive_avg_poolnd(input, output_size, 3)


def max_pool3d(input, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False, return_indices=False):
    """3-d max pooling over (N, C, D, H, W); the same N-d kernel as max_pool2d.

        >>> corenn.max_pool3d(corenn.arange(8.).reshape(1, 1, 2, 2, 2), 2).flatten().tolist()
        [7.0]
    """
    return _max_poolnd(input, kernel_size, stride, padding, dilation, ceil_mode, return_indices, 3)


def avg_pool3d(input, kernel_size, stride=None, padding=0, ceil_mode=False, count_include_pad=True,
               divisor_override=None):
    """3-d average pooling over (N, C, D, H, W).

        >>> corenn.avg_pool3d(corenn.ones(1, 1, 4, 4, 4), 2).shape
        corenn.Size([1, 1, 2, 2, 2])
    """
    return _avg_poolnd(input, kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override, 3)


def _adaptive_max_poolnd(input, output_size, return_indices, n, op=None):
    op = op or f"adaptive_max_pool{n}d"
    input, unbatched = _check_pool_input(input, n, op)
    if isinstance(output_size, numbers.Integral) or output_size is None:
        output_size = (output_size,) * n
    if not isinstance(output_size, (tuple, list)):
        raise TypeError(f"{op}(): argument 'output_size' must be int or tuple of ints, not {type_name(output_size)}")
    if len(output_size) != n:
        raise RuntimeError(f"{op}(): argument 'output_size' must be {n} ints, got {list(output_size)}")
    output_size = tuple(s if o is None else check_int(o, "output_size") for o, s in zip(output_size, input.shape[2:]))
    if any(o < 0 for o in output_size):
        raise RuntimeError(f"{op}(): argument 'output_size' must be non-negative, got {list(output_size)}")
    if not input.dtype.is_floating_point:
        raise RuntimeError(f"\"{op}\" not implemented for '{input.dtype}'")
    out, indices = run("adaptive_max_pool", input, output_size=output_size)
    if unbatched:
        out, indices = out.squeeze(0), indices.squeeze(0)
    return (out, indices) if return_indices else out


def adaptive_max_pool1d(input, output_size, return_indices=False):
    """Max pooling of (N, C, L) to a fixed length, windows ``[floor(i*L/o), ceil((i+1)*L/o))``.

        >>> corenn.adaptive_max_pool1d(corenn.tensor([[[1., 4., 2., 3.]]]), 2).tolist()
        [[[4.0, 3.0]]]
    """
    return _adaptive_max_poolnd(input, output_size, return_indices, 1)


def adaptive_max_pool2d(input, output_size, return_indices=False):
    """Max pooling of (N, C, H, W) to a fixed (H, W); ``return_indices=True`` also gives flat argmax positions.

        >>> corenn.adaptive_max_pool2d(corenn.arange(16.).reshape(1, 1, 4, 4), 1).flatten().tolist()
        [15.0]
    """
    return _adaptive_max_poolnd(input, output_size, return_indices, 2)


def adaptive_max_pool3d(input, output_size, return_indices=False):
    """Max pooling of (N, C, D, H, W) to a fixed (D, H, W).

        >>> corenn.adaptive_max_pool3d(corenn.ones(1, 1, 3, 4, 5), 2).shape
        corenn.Size([1, 1, 2, 2, 2])
    """
    return _adaptive_max_poolnd(input, output_size, return_indices, 3)


def max_pool1d_with_indices(input, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False,
                            return_indices=False):
    """:func:`max_pool1d` that always returns ``(output, indices)`` (``return_indices`` is ignored, as in PyTorch).

        >>> corenn.max_pool1d_with_indices(corenn.tensor([[[1., 3., 2., 4.]]]), 2)[1].tolist()
        [[[1, 3]]]
    """
    return _max_poolnd(input, kernel_size, stride, padding, dilation, ceil_mode, True, 1)


def _unpool_output_size(input, kernel_size, stride, padding, output_size):
    """PyTorch's rule: ``(in - 1) * stride + kernel - 2 * padding`` per dim, or ``output_size`` within a stride."""
    n = len(kernel_size)
    default = [(size - 1) * s + k - 2 * p for size, k, s, p in zip(input.shape[-n:], kernel_size, stride, padding)]
    if output_size is None:
        return default
    output_size = list(check_ints(output_size, "output_size"))
    if len(output_size) == n + 2:
        output_size = output_size[2:]
    if len(output_size) != n:
        raise ValueError(f"output_size should be a sequence containing {n} or {n + 2} elements, but it has a "
                         f"length of '{len(output_size)}'")
    for d in range(n):
        low, high = default[d] - stride[d], default[d] + stride[d]
        if not low < output_size[d] < high:
            raise ValueError(f'invalid output_size "{output_size}" (dim {d} must be between {low} and {high})')
    return output_size


def _max_unpoolnd(input, indices, kernel_size, stride, padding, output_size, n):
    op = f"max_unpool{n}d"
    check_tensor(input, "input", op)
    check_tensor(indices, "indices", op)
    kernel_size = _tuple(kernel_size, n, "kernel_size", op)
    stride = kernel_size if stride is None else _tuple(stride, n, "stride", op)
    padding = _tuple(padding, n, "padding", op)
    output_size = _unpool_output_size(input, kernel_size, stride, padding, output_size)
    if indices.dtype.name != "int64":
        raise RuntimeError(f"elements in indices should be type int64 but got: {indices.dtype.name.capitalize()}")
    if tuple(indices.shape) != tuple(input.shape):
        raise RuntimeError(f"Expected shape of indices to be same as that of the input tensor "
                           f"({list(input.shape)}) but got indices tensor with shape: {list(indices.shape)}")
    kernel_dims = max(n, 2)  # PyTorch unpools 1-d input as 2-d with a trailing size-1 dim
    if input.ndim not in (kernel_dims + 1, kernel_dims + 2) and n > 1 or n == 1 and input.ndim not in (2, 3):
        raise RuntimeError(f"{op}(): Input to max_unpooling{kernel_dims}d should be a {kernel_dims + 1}d or "
                           f"{kernel_dims + 2}d Tensor, but got a tensor with {input.ndim} dimensions.")
    unbatched = input.ndim == n + 1
    if unbatched:
        input, indices = input.unsqueeze(0), indices.unsqueeze(0)
    if n == 1:  # PyTorch's message names the 2-d output plane (L x 1)
        out = run("max_unpool", input.unsqueeze(-1), indices.unsqueeze(-1), output_size=(output_size[0], 1))
        out = out.squeeze(-1)
    else:
        out = run("max_unpool", input, indices, output_size=tuple(output_size))
    return out.squeeze(0) if unbatched else out


def _fractional_max_poolnd(input, kernel_size, output_size, output_ratio, return_indices, random_samples, n):
    import corenn
    op = f"fractional_max_pool{n}d"  # PyTorch's messages name the op, also from the *_with_indices functions
    check_tensor(input, "input", op)
    kernel_size = _tuple(kernel_size, n, "kernel_size", op)
    if output_size is None and output_ratio is None:
        raise ValueError(f"{op} requires specifying either an output_size or an output_ratio")
    if output_size is None:
        ratios = tuple(output_ratio) if isinstance(output_ratio, (tuple, list)) else (output_ratio,) * n
        ratios = [check_number(ratio, "output_ratio") for ratio in ratios]
        output_size = [int(size * ratio) for size, ratio in zip(input.shape[-n:], ratios)]
    output_size = _tuple(output_size, n, "output_size", op)
    if input.ndim not in (n + 1, n + 2):
        raise RuntimeError(f"{op}(): Expected {n + 1}D or {n + 2}D tensor for input, but got: {list(input.shape)}")
    if any(s == 0 for s in input.shape[1:]):
        raise RuntimeError(f"{op}(): Expected input to have non-zero size for non-batch dimensions, but got "
                           f"{list(input.shape)}")
    if not input.dtype.is_floating_point:
        raise RuntimeError(f"\"{op}\" not implemented for an input of dtype '{input.dtype}'")
    names = ("height", "width") if n == 2 else ("time", "height", "width")
    for name, size, k, out in zip(names, input.shape[-n:], kernel_size, output_size):
        # PyTorch's 2-d check allows windows up to the last element, its 3-d one stops one short
        if out + k - 1 > size or n == 3 and out + k - 1 == size:
            suffix = "" if n == 2 else "_out"
            raise RuntimeError(f"{op}{suffix}(): pool {name} {k} too large relative to input {name} {size}")
    unbatched = input.ndim == n + 1
    if unbatched:
        input = input.unsqueeze(0)
    if random_samples is None:
        random_samples = corenn.rand(input.shape[0], input.shape[1], n, dtype=input.dtype, device=input.device)
    check_tensor(random_samples, "_random_samples", op)
    if random_samples.ndim != 3 or random_samples.shape[2] != n:
        raise RuntimeError(f"{op}(): Expect _random_samples to be of shape (N, C, {n}), got "
                           f"{list(random_samples.shape)}")
    if random_samples.shape[0] != input.shape[0]:
        raise RuntimeError("Expect _random_samples to have the same batch size as input.")
    if random_samples.shape[1] != input.shape[1]:
        raise RuntimeError("Expect _random_samples.size(1) equals to input channel size.")
    out, indices = run("fractional_max_pool", input, random_samples.detach().to(input.dtype),
                       kernel_size=kernel_size, output_size=output_size)
    if unbatched:
        out, indices = out.squeeze(0), indices.squeeze(0)
    return (out, indices) if return_indices else out


# The public op functions of this file (what ``from corenn.ops import *`` re-exports as ``corenn.X``).
__all__ = [name for name, value in list(globals().items())
           if not name.startswith("_") and callable(value) and not isinstance(value, type)
           and getattr(value, "__module__", None) == __name__]
