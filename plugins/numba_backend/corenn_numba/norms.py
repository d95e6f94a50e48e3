"""batch_norm (train and eval), layer_norm and group_norm, compiled with numba.

The core normalises in six to eight whole-array numpy passes, each writing a temporary
(centered, its square, xhat, xhat * weight, + bias); here each normalisation is one
statistics pass per group of elements (two for the variance: mean first, then squared
deviations, so large offsets do not cancel) and one output pass, with float64
accumulators. Backward recomputes ``xhat`` from the saved input and the per-group
mean/invstd instead of keeping an ``xhat`` the size of the input, and produces the
input, weight and bias gradients in the same two passes.

Running statistics are updated exactly as the core does it (same formula, same
order, in numpy on the per-channel vectors): only the batch statistics themselves
come from the compiled loop.

Handled: float32/float64 C-contiguous inputs with weight/bias of the same dtype (or
None); batch_norm needs a spatial extent (N, C, L...) -- on plain (N, C) the core's
column reductions are as fast. Anything else runs the core kernel.

Example (nothing changes for the user; the dispatcher picks these kernels)::

    >>> import corenn
    >>> bn = corenn.nn.BatchNorm2d(16)
    >>> bn(corenn.randn(8, 16, 4, 4)).shape
    corenn.Size([8, 16, 4, 4])
"""
from __future__ import annotations

import numpy as np

from corenn.kernels import KernelOverride
from corenn.ops import normalization as core_norm

from corenn_numba._base import LazyModule, handles

jit = LazyModule("corenn_numba._norms_jit")  # the compiled loops; numba is imported when one first runs


def _ok(x, weight, bias):
    """float32/float64, C-contiguous, not empty, with weight and bias of the same dtype (or None)."""
    return handles(x, weight, bias) and x.size > 0 and x.flags.c_contiguous


def _or_ones(array, size, dtype):
    """The affine weight as the loops take it: flat and contiguous; ones when there is none."""
    return np.ascontiguousarray(array).reshape(-1) if array is not None else np.ones(size, dtype=dtype)


def _or_zeros(array, size, dtype):
    return np.ascontiguousarray(array).reshape(-1) if array is not None else np.zeros(size, dtype=dtype)


# ---------------------------------------------------------------------------------------------------------
# batch_norm: statistics per channel over (N, spatial); x viewed as (N, C, S)
# ---------------------------------------------------------------------------------------------------------


def _as_ncs(x):
    return x.reshape(x.shape[0], x.shape[1], -1)


class BatchNorm(KernelOverride, core_norm.BatchNorm):
    """Batch norm in two compiled passes (train: statistics + output), running stats as the core."""

    @staticmethod
    def handles(x, weight=None, bias=None, *, running_mean, running_var, use_batch_stats, momentum, eps):
        # (N, C) input (BatchNorm1d without length): per-channel loops of one element measured no faster
        # than numpy's column reductions (0.7-1.0x), so the core keeps that layout.
        return (_ok(x, weight, bias) and x.ndim > 2 and x.size != x.shape[0] * x.shape[1]
                and (use_batch_stats or running_mean.dtype.kind == "f"))

    @staticmethod
    def forward(ctx, x, weight=None, bias=None, *, running_mean, running_var, use_batch_stats, momentum, eps):
        channels = x.shape[1]
        x3 = _as_ncs(x)
        if use_batch_stats:
            mean64, var64 = np.empty(channels), np.empty(channels)
            jit.channel_stats(x3, mean64, var64)
            mean = mean64.astype(x.dtype)
            if running_mean is not None:  # the core's update, verbatim
                var = var64.astype(x.dtype)
                if not np.isfinite(var).all():
                    var = var64  # overflowed x's dtype: the core's statistics are float64 then too
                count = x.size // x.shape[1]
                running_mean *= 1 - momentum
                running_mean += (momentum * mean).astype(running_mean.dtype, copy=False)
                running_var *= 1 - momentum
                running_var += (momentum * count / max(count - 1, 1) * var).astype(running_var.dtype, copy=False)
            var = var64  # invstd from the float64 variance: a float32 one may have overflowed
        else:
            mean, var = np.ascontiguousarray(running_mean, dtype=x.dtype), running_var
        with np.errstate(divide="ignore"):  # eps=0 and a constant channel: inf, then nan, as in the core
            invstd = np.ascontiguousarray(1.0 / np.sqrt(var + eps), dtype=x.dtype)
        out = np.empty_like(x)
        jit.channel_affine(x3, mean, invstd, _or_ones(weight, channels, x.dtype), _or_zeros(bias, channels, x.dtype),
                        _as_ncs(out))
        ctx.save_for_backward(x, mean, invstd, weight)
        ctx.batch_stats, ctx.has_bias = use_batch_stats, bias is not None
        return out

    @staticmethod
    def backward(ctx, grad):
        x, mean, invstd, weight = ctx.saved
        channels = x.shape[1]
        grad = np.ascontiguousarray(grad, dtype=x.dtype)
        grad_x = np.empty_like(x)
        grad_weight = np.empty(channels, dtype=x.dtype)
        grad_bias = np.empty(channels, dtype=x.dtype)
        jit.batch_norm_backward(_as_ncs(x), mean, invstd, _or_ones(weight, channels, x.dtype), _as_ncs(grad),
                                bool(ctx.batch_stats), _as_ncs(grad_x), grad_weight, grad_bias)
        return _affine_grads(ctx, grad_x, grad_weight, grad_bias, weight is not None)


def _affine_grads(ctx, grad_x, grad_weight, grad_bias, has_weight):
    """Only the gradients the graph asks for (``ctx.needs_input_grad``)."""
    needs = ctx.needs_input_grad
    return (grad_x if needs[0] else None,
            grad_weight if has_weight and needs[1] else None,
            grad_bias if ctx.has_bias and needs[2] else None)


# ---------------------------------------------------------------------------------------------------------
# layer_norm: statistics per row over the last n_dims axes; x viewed as (M, K)
# ---------------------------------------------------------------------------------------------------------


class LayerNorm(KernelOverride, core_norm.LayerNorm):
    """Layer norm, one compiled pass per row for statistics and output."""

    @staticmethod
    def handles(x, weight=None, bias=None, *, n_dims, eps):
        return _ok(x, weight, bias)

    @staticmethod
    def forward(ctx, x, weight=None, bias=None, *, n_dims, eps):
        cols = int(np.prod(x.shape[x.ndim - n_dims:], dtype=np.int64))
        rows = x.size // cols
        x2 = x.reshape(rows, cols)
        out = np.empty_like(x)
        mean = np.empty(rows, dtype=x.dtype)
        invstd = np.empty(rows, dtype=x.dtype)
        weight_flat = _or_ones(weight, cols, x.dtype)
        jit.row_norm(x2, weight_flat, _or_zeros(bias, cols, x.dtype), float(eps), out.reshape(rows, cols), mean,
                     invstd)
        ctx.save_for_backward(x, mean, invstd, weight)
        ctx.n_dims, ctx.has_bias = n_dims, bias is not None
        return out

    @staticmethod
    def backward(ctx, grad):
        x, mean, invstd, weight = ctx.saved
        rows = mean.shape[0]
        cols = x.size // rows
        grad = np.ascontiguousarray(grad, dtype=x.dtype)
        grad_x = np.empty_like(x)
        grad_weight = np.empty(cols, dtype=x.dtype)
        grad_bias = np.empty(cols, dtype=x.dtype)
        jit.row_norm_backward(x.reshape(rows, cols), _or_ones(weight, cols, x.dtype),
                           grad.reshape(rows, cols), mean, invstd, grad_x.reshape(rows, cols), grad_weight, grad_bias)
        affine_shape = x.shape[x.ndim - ctx.n_dims:]
        return _affine_grads(ctx, grad_x, grad_weight.reshape(affine_shape), grad_bias.reshape(affine_shape),
                             weight is not None)


# ---------------------------------------------------------------------------------------------------------
# group_norm: statistics per (sample, group of channels); per-channel affine; x viewed as (N, C, S)
# ---------------------------------------------------------------------------------------------------------


class GroupNorm(KernelOverride, core_norm.GroupNorm):
    """Group norm, one compiled pass per (sample, group) for statistics and output."""

    @staticmethod
    def handles(x, weight=None, bias=None, *, num_groups, eps):
        return _ok(x, weight, bias)

    @staticmethod
    def forward(ctx, x, weight=None, bias=None, *, num_groups, eps):
        channels = x.shape[1]
        out = np.empty_like(x)
        mean = np.empty((x.shape[0], num_groups), dtype=x.dtype)
        invstd = np.empty((x.shape[0], num_groups), dtype=x.dtype)
        jit.group_norm(_as_ncs(x), int(num_groups), _or_ones(weight, channels, x.dtype),
                       _or_zeros(bias, channels, x.dtype), float(eps), _as_ncs(out), mean, invstd)
        ctx.save_for_backward(x, mean, invstd, weight)
        ctx.num_groups, ctx.has_bias = num_groups, bias is not None
        return out

    @staticmethod
    def backward(ctx, grad):
        x, mean, invstd, weight = ctx.saved
        channels = x.shape[1]
        grad = np.ascontiguousarray(grad, dtype=x.dtype)
        grad_x = np.empty_like(x)
        grad_weight = np.empty(channels, dtype=x.dtype)
        grad_bias = np.empty(channels, dtype=x.dtype)
        jit.group_norm_backward(_as_ncs(x), int(ctx.num_groups), _or_ones(weight, channels, x.dtype), _as_ncs(grad),
                                mean, invstd, _as_ncs(grad_x), grad_weight, grad_bias)
        return _affine_grads(ctx, grad_x, grad_weight, grad_bias, weight is not None)


OVERRIDES = [("batch_norm", BatchNorm), ("layer_norm", LayerNorm), ("group_norm", GroupNorm)]
