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

import math

import numba
import numpy as np

from corenn.ops import normalization as core_norm

from corenn_numba._base import handles

# Serial like the rest of this plugin's memory-bound loops (see corenn_numba.nn); ``reassoc`` lets
# LLVM vectorise the float64 sums.
_jit = numba.njit(cache=True, fastmath={"reassoc", "contract"})


def _ok(x, weight, bias):
    return handles(x, weight, bias) and x.size > 0 and x.flags.c_contiguous


def _or_ones(array, size, dtype):
    return array if array is not None else np.ones(size, dtype=dtype)


def _or_zeros(array, size, dtype):
    return array if array is not None else np.zeros(size, dtype=dtype)


# ---------------------------------------------------------------------------------------------------------
# batch_norm: statistics per channel over (N, spatial); x viewed as (N, C, S)
# ---------------------------------------------------------------------------------------------------------

@_jit
def _channel_stats(x, mean, var):
    n, channels, spatial = x.shape
    count = n * spatial
    totals = np.zeros(channels)
    for i in range(n):
        for c in range(channels):
            t = 0.0
            for s in range(spatial):
                t += x[i, c, s]
            totals[c] += t
    for c in range(channels):
        mean[c] = totals[c] / count
        totals[c] = 0.0
    for i in range(n):
        for c in range(channels):
            m = mean[c]
            t = 0.0
            for s in range(spatial):
                d = x[i, c, s] - m
                t += d * d
            totals[c] += t
    for c in range(channels):
        var[c] = totals[c] / count


@_jit
def _channel_affine(x, mean, invstd, weight, bias, out):
    n, channels, spatial = x.shape
    for i in range(n):
        for c in range(channels):
            scale = invstd[c] * weight[c]
            shift = bias[c] - mean[c] * scale
            for s in range(spatial):
                out[i, c, s] = x[i, c, s] * scale + shift


@_jit
def _batch_norm_backward(x, mean, invstd, weight, grad, batch_stats, grad_x, grad_weight, grad_bias):
    n, channels, spatial = x.shape
    count = n * spatial
    sum_g = np.zeros(channels)
    sum_gx = np.zeros(channels)
    for i in range(n):
        for c in range(channels):
            m = mean[c]
            s_g = 0.0
            s_gx = 0.0
            for s in range(spatial):
                g = grad[i, c, s]
                s_g += g
                s_gx += g * (x[i, c, s] - m)
            sum_g[c] += s_g
            sum_gx[c] += s_gx
    for c in range(channels):
        sum_gx[c] *= invstd[c]  # sum(g * xhat)
        grad_weight[c] = sum_gx[c]
        grad_bias[c] = sum_g[c]
    for i in range(n):
        for c in range(channels):
            m = mean[c]
            k = invstd[c] * weight[c]
            if batch_stats:
                mean_g = sum_g[c] / count
                mean_gx = sum_gx[c] * invstd[c] / count  # the xhat factor folded in
                for s in range(spatial):
                    grad_x[i, c, s] = k * (grad[i, c, s] - mean_g - (x[i, c, s] - m) * mean_gx)
            else:
                for s in range(spatial):
                    grad_x[i, c, s] = k * grad[i, c, s]


def _as_ncs(x):
    return x.reshape(x.shape[0], x.shape[1], -1)


class BatchNorm(core_norm.BatchNorm):
    """Batch norm in two compiled passes (train: statistics + output), running stats as the core."""

    @staticmethod
    def forward(ctx, x, weight=None, bias=None, *, running_mean, running_var, use_batch_stats, momentum, eps):
        # (N, C) input (BatchNorm1d without length): per-channel loops of one element measured no faster
        # than numpy's column reductions (0.7-1.0x), so the core keeps that layout.
        if not _ok(x, weight, bias) or x.ndim == 2 or x.size == x.shape[0] * x.shape[1] or (
                not use_batch_stats and running_mean.dtype.kind != "f"):
            ctx.fallback = True
            return core_norm.BatchNorm.forward(ctx, x, weight, bias, running_mean=running_mean,
                                               running_var=running_var, use_batch_stats=use_batch_stats,
                                               momentum=momentum, eps=eps)
        ctx.fallback = False
        channels = x.shape[1]
        x3 = _as_ncs(x)
        if use_batch_stats:
            mean64, var64 = np.empty(channels), np.empty(channels)
            _channel_stats(x3, mean64, var64)
            mean, var = mean64.astype(x.dtype), var64.astype(x.dtype)
            if running_mean is not None:  # the core's update, verbatim
                count = x.size // x.shape[1]
                running_mean *= 1 - momentum
                running_mean += (momentum * mean).astype(running_mean.dtype, copy=False)
                running_var *= 1 - momentum
                running_var += (momentum * count / max(count - 1, 1) * var).astype(running_var.dtype, copy=False)
        else:
            mean, var = running_mean.astype(x.dtype, copy=False), running_var
        invstd = (1.0 / np.sqrt(var + eps)).astype(x.dtype, copy=False)
        out = np.empty_like(x)
        _channel_affine(x3, mean, invstd, _or_ones(weight, channels, x.dtype), _or_zeros(bias, channels, x.dtype),
                        _as_ncs(out))
        ctx.save_for_backward(x, mean, invstd, weight)
        ctx.batch_stats, ctx.has_bias = use_batch_stats, bias is not None
        return out

    @staticmethod
    def backward(ctx, grad):
        if ctx.fallback:
            return core_norm.BatchNorm.backward(ctx, grad)
        x, mean, invstd, weight = ctx.saved
        channels = x.shape[1]
        grad = np.ascontiguousarray(grad, dtype=x.dtype)
        grad_x = np.empty_like(x)
        grad_weight = np.empty(channels, dtype=x.dtype)
        grad_bias = np.empty(channels, dtype=x.dtype)
        _batch_norm_backward(_as_ncs(x), mean, invstd, _or_ones(weight, channels, x.dtype), _as_ncs(grad),
                             ctx.batch_stats, _as_ncs(grad_x), grad_weight, grad_bias)
        return _affine_grads(ctx, grad_x, grad_weight, grad_bias, weight is not None)


def _affine_grads(ctx, grad_x, grad_weight, grad_bias, has_weight):
    """Only the gradients the graph asks for (``ctx.next_edges[i] is None``: not needed)."""
    return (grad_x if ctx.next_edges[0] is not None else None,
            grad_weight if has_weight and ctx.next_edges[1] is not None else None,
            grad_bias if ctx.has_bias and ctx.next_edges[2] is not None else None)


# ---------------------------------------------------------------------------------------------------------
# layer_norm: statistics per row over the last n_dims axes; x viewed as (M, K)
# ---------------------------------------------------------------------------------------------------------

@_jit
def _row_norm(x, weight, bias, eps, out, mean, invstd):
    rows, cols = x.shape
    for i in range(rows):
        t = 0.0
        for k in range(cols):
            t += x[i, k]
        m = t / cols
        t = 0.0
        for k in range(cols):
            d = x[i, k] - m
            t += d * d
        mean[i] = m
        invstd[i] = 1.0 / math.sqrt(t / cols + eps)
        inv = invstd[i]  # rounded to x's dtype, as the core keeps it
        m_x = mean[i]
        for k in range(cols):
            out[i, k] = (x[i, k] - m_x) * inv * weight[k] + bias[k]


@_jit
def _row_norm_backward(x, weight, grad, mean, invstd, grad_x, grad_weight, grad_bias):
    rows, cols = x.shape
    acc_w = np.zeros(cols)
    acc_b = np.zeros(cols)
    for i in range(rows):
        m = mean[i]
        inv = invstd[i]
        s_g = 0.0
        s_gx = 0.0
        for k in range(cols):
            g = grad[i, k]
            xhat = (x[i, k] - m) * inv
            gw = g * weight[k]
            s_g += gw
            s_gx += gw * xhat
            acc_w[k] += g * xhat
            acc_b[k] += g
        mean_g = s_g / cols
        mean_gx = s_gx / cols
        for k in range(cols):
            xhat = (x[i, k] - m) * inv
            grad_x[i, k] = inv * (grad[i, k] * weight[k] - mean_g - xhat * mean_gx)
    for k in range(cols):
        grad_weight[k] = acc_w[k]
        grad_bias[k] = acc_b[k]


class LayerNorm(core_norm.LayerNorm):
    """Layer norm, one compiled pass per row for statistics and output."""

    @staticmethod
    def forward(ctx, x, weight=None, bias=None, *, n_dims, eps):
        if not _ok(x, weight, bias):
            ctx.fallback = True
            return core_norm.LayerNorm.forward(ctx, x, weight, bias, n_dims=n_dims, eps=eps)
        ctx.fallback = False
        cols = int(np.prod(x.shape[x.ndim - n_dims:], dtype=np.int64))
        rows = x.size // cols
        x2 = x.reshape(rows, cols)
        out = np.empty_like(x)
        mean = np.empty(rows, dtype=x.dtype)
        invstd = np.empty(rows, dtype=x.dtype)
        weight_flat = _or_ones(weight, cols, x.dtype).reshape(-1)
        _row_norm(x2, weight_flat, _or_zeros(bias, cols, x.dtype).reshape(-1), eps, out.reshape(rows, cols), mean,
                  invstd)
        ctx.save_for_backward(x, mean, invstd, weight)
        ctx.n_dims, ctx.has_bias = n_dims, bias is not None
        return out

    @staticmethod
    def backward(ctx, grad):
        if ctx.fallback:
            return core_norm.LayerNorm.backward(ctx, grad)
        x, mean, invstd, weight = ctx.saved
        rows = mean.shape[0]
        cols = x.size // rows
        grad = np.ascontiguousarray(grad, dtype=x.dtype)
        grad_x = np.empty_like(x)
        grad_weight = np.empty(cols, dtype=x.dtype)
        grad_bias = np.empty(cols, dtype=x.dtype)
        _row_norm_backward(x.reshape(rows, cols), _or_ones(weight, cols, x.dtype).reshape(-1),
                           grad.reshape(rows, cols), mean, invstd, grad_x.reshape(rows, cols), grad_weight, grad_bias)
        affine_shape = x.shape[x.ndim - ctx.n_dims:]
        return _affine_grads(ctx, grad_x, grad_weight.reshape(affine_shape), grad_bias.reshape(affine_shape),
                             weight is not None)


# ---------------------------------------------------------------------------------------------------------
# group_norm: statistics per (sample, group of channels); per-channel affine; x viewed as (N, C, S)
# ---------------------------------------------------------------------------------------------------------

@_jit
def _group_norm(x, groups, weight, bias, eps, out, mean, invstd):
    n, channels, spatial = x.shape
    per_group = channels // groups
    count = per_group * spatial
    for i in range(n):
        for g in range(groups):
            c0 = g * per_group
            t = 0.0
            for c in range(c0, c0 + per_group):
                for s in range(spatial):
                    t += x[i, c, s]
            m = t / count
            t = 0.0
            for c in range(c0, c0 + per_group):
                for s in range(spatial):
                    d = x[i, c, s] - m
                    t += d * d
            mean[i, g] = m
            invstd[i, g] = 1.0 / math.sqrt(t / count + eps)
            inv = invstd[i, g]  # rounded to x's dtype, as the core keeps it
            m_x = mean[i, g]
            for c in range(c0, c0 + per_group):
                scale = inv * weight[c]
                shift = bias[c] - m_x * scale
                for s in range(spatial):
                    out[i, c, s] = x[i, c, s] * scale + shift


@_jit
def _group_norm_backward(x, groups, weight, grad, mean, invstd, grad_x, grad_weight, grad_bias):
    n, channels, spatial = x.shape
    per_group = channels // groups
    count = per_group * spatial
    acc_w = np.zeros(channels)
    acc_b = np.zeros(channels)
    for i in range(n):
        for g in range(groups):
            c0 = g * per_group
            m = mean[i, g]
            inv = invstd[i, g]
            s_g = 0.0
            s_gx = 0.0
            for c in range(c0, c0 + per_group):
                c_g = 0.0
                c_gx = 0.0
                for s in range(spatial):
                    gr = grad[i, c, s]
                    c_g += gr
                    c_gx += gr * (x[i, c, s] - m)
                c_gx *= inv  # sum over this channel of g * xhat
                acc_w[c] += c_gx
                acc_b[c] += c_g
                s_g += c_g * weight[c]
                s_gx += c_gx * weight[c]
            mean_g = s_g / count
            mean_gx = s_gx / count
            for c in range(c0, c0 + per_group):
                w = weight[c]
                for s in range(spatial):
                    xhat = (x[i, c, s] - m) * inv
                    grad_x[i, c, s] = inv * (grad[i, c, s] * w - mean_g - xhat * mean_gx)
    for c in range(channels):
        grad_weight[c] = acc_w[c]
        grad_bias[c] = acc_b[c]


class GroupNorm(core_norm.GroupNorm):
    """Group norm, one compiled pass per (sample, group) for statistics and output."""

    @staticmethod
    def forward(ctx, x, weight=None, bias=None, *, num_groups, eps):
        if not _ok(x, weight, bias):
            ctx.fallback = True
            return core_norm.GroupNorm.forward(ctx, x, weight, bias, num_groups=num_groups, eps=eps)
        ctx.fallback = False
        channels = x.shape[1]
        out = np.empty_like(x)
        mean = np.empty((x.shape[0], num_groups), dtype=x.dtype)
        invstd = np.empty((x.shape[0], num_groups), dtype=x.dtype)
        _group_norm(_as_ncs(x), num_groups, _or_ones(weight, channels, x.dtype), _or_zeros(bias, channels, x.dtype),
                    eps, _as_ncs(out), mean, invstd)
        ctx.save_for_backward(x, mean, invstd, weight)
        ctx.num_groups, ctx.has_bias = num_groups, bias is not None
        return out

    @staticmethod
    def backward(ctx, grad):
        if ctx.fallback:
            return core_norm.GroupNorm.backward(ctx, grad)
        x, mean, invstd, weight = ctx.saved
        channels = x.shape[1]
        grad = np.ascontiguousarray(grad, dtype=x.dtype)
        grad_x = np.empty_like(x)
        grad_weight = np.empty(channels, dtype=x.dtype)
        grad_bias = np.empty(channels, dtype=x.dtype)
        _group_norm_backward(_as_ncs(x), ctx.num_groups, _or_ones(weight, channels, x.dtype), _as_ncs(grad), mean,
                             invstd, _as_ncs(grad_x), grad_weight, grad_bias)
        return _affine_grads(ctx, grad_x, grad_weight, grad_bias, weight is not None)


OVERRIDES = [("batch_norm", BatchNorm), ("layer_norm", LayerNorm), ("group_norm", GroupNorm)]
