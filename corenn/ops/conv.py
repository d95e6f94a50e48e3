"""Convolution: N-d ``conv`` (serves conv1d/2d/3d) and its adjoint ``conv_transpose``.

Forward is im2col into one batched BLAS matmul over the groups; backward is the
same matmul transposed plus col2im, written as one strided add per kernel offset
(kh*kw adds of whole arrays, much faster than ``xp.add.at`` on the scattered index).
A compiled backend replaces these by op name ("conv", "conv_transpose").
"""
from __future__ import annotations

import functools

import math
import itertools
import numbers

from corenn._argcheck import check_ints, named
from corenn.kernels import recompute_overflow
from corenn.ops._kernel import Op, check_tensor, kernel, run
from corenn import _autocast


# ---------------------------------------------------------------------------------------------------------
# im2col / col2im shared by conv and conv_transpose
# ---------------------------------------------------------------------------------------------------------

def _im2col(xp, x, kernel_size, stride, dilation, out_size):
    """``x`` (N, C, *S) -> contiguous columns (C, *k, N, *out): one copy through a strided view."""
    sN, sC, *s_spatial = x.strides
    shape = (x.shape[1], *kernel_size, x.shape[0], *out_size)
    strides = (sC, *(s * d for s, d in zip(s_spatial, dilation)), sN, *(s * st for s, st in zip(s_spatial, stride)))
    view = xp.lib.stride_tricks.as_strided(x, shape=shape, strides=strides, writeable=False)
    return xp.ascontiguousarray(view)


def _window(offset, stride, dilation, out_size):
    """Slices of the input touched by kernel offset ``offset`` across all output positions."""
    return tuple(slice(o * d, o * d + s * (n - 1) + 1, s) for o, s, d, n in zip(offset, stride, dilation, out_size))


def _col2im(xp, cols, input_shape, kernel_size, stride, dilation, out_size):
    """Adjoint of ``_im2col``: cols (C, *k, N, *out) summed back into an (N, C, *S) array."""
    result = xp.zeros(input_shape, dtype=cols.dtype)
    # (C, *k, N, *out) -> (*k, N, C, *out) so each offset's block adds straight into result[:, :, window]
    nk = len(kernel_size)
    moved = cols.transpose(tuple(range(1, nk + 1)) + (nk + 1, 0) + tuple(range(nk + 2, cols.ndim)))
    for offset in itertools.product(*(range(k) for k in kernel_size)):
        result[(slice(None), slice(None)) + _window(offset, stride, dilation, out_size)] += moved[offset]
    return result


def _conv_output_size(size, kernel_size, stride, padding_total, dilation):
    return (size + padding_total - dilation * (kernel_size - 1) - 1) // stride + 1


def _pad(xp, x, padding):
    if not any(before or after for before, after in padding):
        return x
    return xp.pad(x, ((0, 0), (0, 0)) + tuple(padding))


def _float64(xp, x, weight, bias):
    """The operands in float64, to compute again the outputs that overflowed float32 (``recompute_overflow``)."""
    return x.astype(xp.float64), weight.astype(xp.float64), None if bias is None else bias.astype(xp.float64)


# ---------------------------------------------------------------------------------------------------------
# conv
# ---------------------------------------------------------------------------------------------------------

def _conv(xp, x, weight, bias, stride, padding, dilation, groups):
    """The conv as (O, N, *out), with the im2col columns (g, C/g * k, N*L) backward reuses."""
    kernel_size = weight.shape[2:]
    padded = _pad(xp, x, padding)
    out_size = tuple(_conv_output_size(s, k, st, 0, d)
                     for s, k, st, d in zip(padded.shape[2:], kernel_size, stride, dilation))
    cols = _im2col(xp, padded, kernel_size, stride, dilation, out_size)
    n, out_channels = x.shape[0], weight.shape[0]
    depth = weight.shape[1] * math.prod(kernel_size)  # C/g * k; sizes spelt out: with N = 0, -1 is ambiguous
    cols_g = cols.reshape(groups, depth, n * math.prod(out_size))     # (g, C/g * k, N*L)
    weight_g = weight.reshape(groups, out_channels // groups, depth)  # (g, O/g, C/g * k)
    out = xp.matmul(weight_g, cols_g).reshape(out_channels, n, *out_size)
    if bias is not None:
        out += bias.reshape((-1,) + (1,) * (out.ndim - 1))
    return out, cols_g, padded.shape, out_size


def _conv_transpose(xp, x, weight, bias, stride, padding, output_padding, dilation, groups):
    """The transposed conv (N, C_out, *out), with x as (g, C_in/g, N*L) for backward and the uncropped size."""
    n, in_channels = x.shape[:2]
    kernel_size = weight.shape[2:]
    out_per_group = weight.shape[1]
    in_size = x.shape[2:]
    full_size = tuple((s - 1) * st + d * (k - 1) + 1 + op
                      for s, st, d, k, op in zip(in_size, stride, dilation, kernel_size, output_padding))
    # sizes spelt out: with N = 0, -1 is ambiguous
    x_g = xp.ascontiguousarray(x.swapaxes(0, 1)).reshape(groups, in_channels // groups, n * math.prod(in_size))
    weight_g = weight.reshape(groups, in_channels // groups, out_per_group * math.prod(kernel_size))
    cols = xp.matmul(weight_g.swapaxes(1, 2), x_g)                     # (g, C_out/g * k, N*L)
    cols = cols.reshape(groups * out_per_group, *kernel_size, n, *in_size)
    full = _col2im(xp, cols, (n, groups * out_per_group) + full_size, kernel_size, stride, dilation, in_size)
    out = full[(slice(None), slice(None)) + tuple(slice(p, f - p) for p, f in zip(padding, full_size))]
    if bias is not None:
        out = out + bias.reshape((-1,) + (1,) * (out.ndim - 2))
    return out, x_g, full_size


def _in_float32(op_class):
    """bfloat16 (ml_dtypes) inputs: ``op_class``'s kernel runs in float32 (BLAS) and each result is rounded once,
    as PyTorch's CPU kernels do; other dtypes run it unchanged, behind one dtype test."""
    forward, backward = op_class.forward, op_class.backward

    @functools.wraps(forward)  # the kernel reference reads the forward signature
    def forward_any(ctx, x, weight, bias=None, **params):
        if x.dtype.kind != "V":
            return forward(ctx, x, weight, bias, **params)
        ctx.low_precision = x.dtype
        out = forward(ctx, x.astype("float32"), weight.astype("float32"),
                      None if bias is None else bias.astype("float32"), **params)
        return out.astype(x.dtype)

    @functools.wraps(backward)
    def backward_any(ctx, grad):
        low_precision = ctx.__dict__.get("low_precision") if hasattr(ctx, "__dict__") else None
        if low_precision is None:
            return backward(ctx, grad)
        grads = backward(ctx, grad.astype("float32"))
        return tuple(None if g is None else g.astype(low_precision) for g in grads)
    op_class.forward, op_class.backward = staticmethod(forward_any), staticmethod(backward_any)
    return op_class


@kernel("conv", "ConvolutionBackward0")
@_in_float32
class Conv(Op):
    """``x`` (N, C, *S), ``weight`` (O, C/groups, *k), ``bias`` (O,) or None.

    ``padding`` is one ``(before, after)`` pair per spatial dim (asymmetric for 'same').
    """

    @staticmethod
    def forward(ctx, x, weight, bias=None, *, stride, padding, dilation, groups):
        xp = ctx.xp
        geometry = (stride, padding, dilation, groups)
        out, cols_g, padded_shape, out_size = _conv(xp, x, weight, bias, *geometry)
        out = recompute_overflow(xp, out, lambda: _conv(xp, *_float64(xp, x, weight, bias), *geometry)[0])
        ctx.save_for_backward(cols_g, weight)
        ctx.params = (x.shape, padded_shape, padding, stride, dilation, groups, out_size, bias is not None)
        # (N, O, *out) made contiguous once here: every later op (activation, pooling, their backward)
        # then works on a plain layout instead of paying for copies in its own reshapes.
        return xp.ascontiguousarray(out.swapaxes(0, 1))

    @staticmethod
    def backward(ctx, grad):
        xp = ctx.xp
        cols_g, weight = ctx.saved
        x_shape, padded_shape, padding, stride, dilation, groups, out_size, has_bias = ctx.params
        out_channels = weight.shape[0]
        grad_g = xp.ascontiguousarray(grad.swapaxes(0, 1)).reshape(groups, out_channels // groups, cols_g.shape[2])
        grad_x = grad_weight = grad_bias = None
        if ctx.needs_input_grad[1]:
            grad_weight = xp.matmul(grad_g, cols_g.swapaxes(1, 2)).reshape(weight.shape)
        if has_bias and ctx.needs_input_grad[2]:
            grad_bias = grad_g.reshape(out_channels, cols_g.shape[2]).sum(axis=1)
        if ctx.needs_input_grad[0]:
            weight_g = weight.reshape(groups, out_channels // groups, cols_g.shape[1])
            grad_cols = xp.matmul(weight_g.swapaxes(1, 2), grad_g)
            grad_cols = grad_cols.reshape(padded_shape[1], *weight.shape[2:], x_shape[0], *out_size)
            grad_padded = _col2im(xp, grad_cols, padded_shape, weight.shape[2:], stride, dilation, out_size)
            grad_x = grad_padded[(slice(None), slice(None)) + tuple(
                slice(before, before + size) for (before, _), size in zip(padding, x_shape[2:]))]
        return (grad_x, grad_weight, grad_bias) if has_bias else (grad_x, grad_weight)


@kernel("conv_transpose", "ConvolutionBackward0")
@_in_float32
class ConvTranspose(Op):
    """The adjoint of ``conv``: ``x`` (N, C_in, *S), ``weight`` (C_in, C_out/groups, *k), ``bias`` (C_out,)."""

    @staticmethod
    def forward(ctx, x, weight, bias=None, *, stride, padding, output_padding, dilation, groups):
        xp = ctx.xp
        geometry = (stride, padding, output_padding, dilation, groups)
        out, x_g, full_size = _conv_transpose(xp, x, weight, bias, *geometry)
        out = recompute_overflow(xp, out, lambda: _conv_transpose(xp, *_float64(xp, x, weight, bias), *geometry)[0])
        ctx.save_for_backward(x_g, weight)
        ctx.params = (x.shape, full_size, padding, stride, dilation, groups, bias is not None)
        return out

    @staticmethod
    def backward(ctx, grad):
        xp = ctx.xp
        x_g, weight = ctx.saved
        x_shape, full_size, padding, stride, dilation, groups, has_bias = ctx.params
        in_channels = x_shape[1]
        kernel_size = weight.shape[2:]
        # Restore the cropped border (its gradient is zero) and run the forward conv on the gradient.
        extra = tuple((p, f - p - s) for p, f, s in zip(padding, full_size, grad.shape[2:]))
        grad_full = _pad(xp, grad, extra)
        cols = _im2col(xp, grad_full, kernel_size, stride, dilation, x_shape[2:])
        cols_g = cols.reshape(groups, weight.shape[1] * math.prod(kernel_size),
                              x_shape[0] * math.prod(x_shape[2:]))  # (g, C_out/g * k, N*L)
        grad_x = grad_weight = grad_bias = None
        if ctx.needs_input_grad[0]:
            weight_g = weight.reshape(groups, in_channels // groups, cols_g.shape[1])
            grad_x = xp.matmul(weight_g, cols_g).reshape(in_channels, x_shape[0], *x_shape[2:]).swapaxes(0, 1)
        if ctx.needs_input_grad[1]:
            grad_weight = xp.matmul(x_g, cols_g.swapaxes(1, 2)).reshape(weight.shape)
        if has_bias and ctx.needs_input_grad[2]:
            grad_bias = grad.sum(axis=(0,) + tuple(range(2, grad.ndim)))
        return (grad_x, grad_weight, grad_bias) if has_bias else (grad_x, grad_weight)



# ---------------------------------------------------------------------------------------------------------
# Front ends (``torch.conv2d`` / ``torch.nn.functional.conv2d`` ...)
# ---------------------------------------------------------------------------------------------------------

def _tuple(value, n, name, op):
    value = check_ints(value, name)
    if len(value) == 1:
        return value * n
    if len(value) != n:
        raise RuntimeError(f"{op}: expected {name} to be a single integer value or a list of {n} values to match "
                           f"the convolution dimensions, but got {name}={list(value)}")
    return value


def _check_conv_input(input, weight, bias, n, op, transposed, groups):
    check_tensor(input, "input", op)
    check_tensor(weight, "weight", op)
    if weight.ndim != n + 2:
        raise RuntimeError(f"{op}: expected weight to be {n + 2}-dimensional, but got weight of size "
                           f"{list(weight.shape)}")
    if input.ndim not in (n + 1, n + 2):
        raise RuntimeError(f"Expected {n + 1}D (unbatched) or {n + 2}D (batched) input to {op}, but got input of "
                           f"size: {list(input.shape)}")
    if input.dtype is not weight.dtype:
        raise RuntimeError(named(f"Input type ({input.dtype}) and weight type ({weight.dtype}) should be the same",
                                 op))
    if not isinstance(groups, numbers.Integral) or groups < 1:
        raise RuntimeError(f"{op}: non-positive groups is not supported (got groups={groups})")
    channels = input.shape[1] if input.ndim == n + 2 else input.shape[0]
    expected = weight.shape[0] if transposed else weight.shape[1] * groups
    if channels != expected:
        kind = "weight of size" if not transposed else "weight of size"
        raise RuntimeError(named(f"Given groups={groups}, {kind} {list(weight.shape)}, expected "
                                 f"input{list(input.shape)} to have {expected} channels, but got {channels} channels "
                                 "instead", op))
    out_channels = weight.shape[1] * groups if transposed else weight.shape[0]
    if weight.shape[0] == 0:
        raise RuntimeError(f"{op}: Given groups={groups}, expected weight to be at least 1 at dimension 0, but got "
                           f"weight of size {list(weight.shape)} instead")
    if (weight.shape[0] % groups) != 0:
        raise RuntimeError(f"{op}: weight's first dimension {weight.shape[0]} is not divisible by groups={groups}")
    if bias is not None:
        check_tensor(bias, "bias", op)
        if tuple(bias.shape) != (out_channels,):
            raise RuntimeError(named(f"Given weight of size {list(weight.shape)}, expected bias to be 1-dimensional "
                                     f"with {out_channels} elements, but got bias of size {list(bias.shape)} instead",
                                     op))


def _convnd(input, weight, bias, stride, padding, dilation, groups, n):
    op = f"conv{n}d"
    _check_conv_input(input, weight, bias, n, op, False, groups)
    stride = _tuple(stride, n, "stride", op)
    dilation = _tuple(dilation, n, "dilation", op)
    if any(s <= 0 for s in stride):
        raise RuntimeError(f"{op}: non-positive stride is not supported (got stride={list(stride)})")
    if any(d <= 0 for d in dilation):
        raise RuntimeError(f"{op}: dilation should be greater than zero (got dilation={list(dilation)})")
    kernel_size = weight.shape[2:]
    if isinstance(padding, str):
        if padding == "valid":
            pairs = ((0, 0),) * n
        elif padding == "same":
            if any(s != 1 for s in stride):
                raise ValueError("padding='same' is not supported for strided convolutions")
            # The extra element of an odd total goes after, as PyTorch pads it.
            pairs = tuple((d * (k - 1) // 2, d * (k - 1) - d * (k - 1) // 2) for d, k in zip(dilation, kernel_size))
        else:
            raise ValueError(f"Invalid padding string {padding!r}, should be one of {{'valid', 'same'}}")
    else:
        padding = _tuple(padding, n, "padding", op)
        if any(p < 0 for p in padding):
            raise RuntimeError(f"{op}: negative padding is not supported (got padding={list(padding)})")
        pairs = tuple((p, p) for p in padding)
    unbatched = input.ndim == n + 1
    if unbatched:
        input = input.unsqueeze(0)
    for size, k, d, (before, after) in zip(input.shape[2:], kernel_size, dilation, pairs):
        if size + before + after < d * (k - 1) + 1:
            raise RuntimeError(named(f"Calculated padded input size per channel: ({size + before + after}). Kernel "
                                     f"size: ({d * (k - 1) + 1}). Kernel size can't be greater than actual input size",
                                     op))
    params = dict(stride=stride, padding=pairs, dilation=dilation, groups=int(groups))
    out = run("conv", input, weight, **params) if bias is None else run("conv", input, weight, bias, **params)
    return out.squeeze(0) if unbatched else out


@_autocast.autocast_op(_autocast.LOWER)
def conv1d(input, weight, bias=None, stride=1, padding=0, dilation=1, groups=1):
    """1-d convolution (cross-correlation) of ``input`` (N, C, L) with ``weight`` (O, C/groups, k).

    ``padding`` is an int, a 1-tuple, ``'valid'`` or ``'same'``.

        >>> corenn.conv1d(corenn.ones(1, 1, 5), corenn.ones(1, 1, 3)).tolist()
        [[[3.0, 3.0, 3.0]]]
    """
    return _convnd(input, weight, bias, stride, padding, dilation, groups, 1)


@_autocast.autocast_op(_autocast.LOWER)
def conv2d(input, weight, bias=None, stride=1, padding=0, dilation=1, groups=1):
    """2-d convolution of ``input`` (N, C, H, W) with ``weight`` (O, C/groups, kh, kw).

        >>> corenn.conv2d(corenn.ones(1, 1, 4, 4), corenn.ones(2, 1, 3, 3), padding=1).shape
        corenn.Size([1, 2, 4, 4])
    """
    return _convnd(input, weight, bias, stride, padding, dilation, groups, 2)


@_autocast.autocast_op(_autocast.LOWER)
def conv3d(input, weight, bias=None, stride=1, padding=0, dilation=1, groups=1):
    """3-d convolution of ``input`` (N, C, D, H, W) with ``weight`` (O, C/groups, kd, kh, kw).

        >>> corenn.conv3d(corenn.ones(1, 1, 3, 3, 3), corenn.ones(1, 1, 3, 3, 3)).item()
        27.0
    """
    return _convnd(input, weight, bias, stride, padding, dilation, groups, 3)


def _conv_transposend(input, weight, bias, stride, padding, output_padding, groups, dilation, n):
    op = f"conv_transpose{n}d"
    _check_conv_input(input, weight, bias, n, op, True, groups)
    stride = _tuple(stride, n, "stride", op)
    padding = _tuple(padding, n, "padding", op)
    output_padding = _tuple(output_padding, n, "output_padding", op)
    dilation = _tuple(dilation, n, "dilation", op)
    if any(s <= 0 for s in stride) or any(d <= 0 for d in dilation) or any(p < 0 for p in padding):
        raise RuntimeError(f"{op}: stride and dilation must be positive and padding non-negative (got stride="
                           f"{list(stride)}, dilation={list(dilation)}, padding={list(padding)})")
    if any(not (op_ < s or op_ < d) for op_, s, d in zip(output_padding, stride, dilation)):
        raise RuntimeError(f"{op}: output padding must be smaller than either stride or dilation, but got "
                           f"output_padding={list(output_padding)}, stride={list(stride)}, dilation={list(dilation)}")
    unbatched = input.ndim == n + 1
    if unbatched:
        input = input.unsqueeze(0)
    for size, st, p, d, k, op_ in zip(input.shape[2:], stride, padding, dilation, weight.shape[2:], output_padding):
        if (size - 1) * st - 2 * p + d * (k - 1) + op_ + 1 <= 0:
            raise RuntimeError(f"{op}: the padding {list(padding)} is too large for input of size "
                               f"{list(input.shape)}: the output would be empty")
    params = dict(stride=stride, padding=padding, output_padding=output_padding, dilation=dilation,
                  groups=int(groups))
    out = (run("conv_transpose", input, weight, **params) if bias is None
           else run("conv_transpose", input, weight, bias, **params))
    return out.squeeze(0) if unbatched else out


@_autocast.autocast_op(_autocast.LOWER)
def conv_transpose1d(input, weight, bias=None, stride=1, padding=0, output_padding=0, groups=1, dilation=1):
    """1-d transposed convolution (the gradient of conv1d); ``weight`` is (C_in, C_out/groups, k).

        >>> corenn.conv_transpose1d(corenn.ones(1, 1, 3), corenn.ones(1, 1, 2)).tolist()
        [[[1.0, 2.0, 2.0, 1.0]]]
    """
    return _conv_transposend(input, weight, bias, stride, padding, output_padding, groups, dilation, 1)


@_autocast.autocast_op(_autocast.LOWER)
def conv_transpose2d(input, weight, bias=None, stride=1, padding=0, output_padding=0, groups=1, dilation=1):
    """2-d transposed convolution; ``weight`` is (C_in, C_out/groups, kh, kw).

        >>> corenn.conv_transpose2d(corenn.ones(1, 4, 5, 5), corenn.ones(4, 2, 3, 3), stride=2).shape
        corenn.Size([1, 2, 11, 11])
    """
    return _conv_transposend(input, weight, bias, stride, padding, output_padding, groups, dilation, 2)


@_autocast.autocast_op(_autocast.LOWER)
def conv_transpose3d(input, weight, bias=None, stride=1, padding=0, output_padding=0, groups=1, dilation=1):
    """3-d transposed convolution; ``weight`` is (C_in, C_out/groups, kd, kh, kw).

        >>> corenn.conv_transpose3d(corenn.ones(1, 2, 2, 2, 2), corenn.ones(2, 1, 2, 2, 2), stride=2).shape
        corenn.Size([1, 1, 4, 4, 4])
    """
    return _conv_transposend(input, weight, bias, stride, padding, output_padding, groups, dilation, 3)


# The public op functions of this file (what ``from corenn.ops import *`` re-exports as ``corenn.X``).
__all__ = [name for name, value in list(globals().items())
           if not name.startswith("_") and callable(value) and not isinstance(value, type)
           and getattr(value, "__module__", None) == __name__]
