"""The compiled loops behind corenn_numba.norms (imported when a norm first runs, not at ``import corenn``).

Statistics accumulate in float64, so a float32 variance cannot overflow (the core computes again
in float64 where its float32 one does). Every function Python calls checks its arguments first
(``corenn_numba._checks.entry``).
"""
from __future__ import annotations

import math

import numba
import numpy as np

from corenn_numba._checks import FLOAT64, array, entry, fail, floats, integer

# Serial like the rest of this plugin's memory-bound loops (see corenn_numba._nn_jit); ``reassoc`` lets
# LLVM vectorise the float64 sums. error_model="numpy": with eps=0 a constant group's 1/sqrt(0) is inf
# and its normalised values nan, as in the core and PyTorch, where the default raised ZeroDivisionError.
_jit = numba.njit(cache=True, fastmath={"reassoc", "contract"}, error_model="numpy")


def _real(function, name, value):
    if not isinstance(value, float):
        raise TypeError(f"{function}(): argument '{name}' must be a float, not {type(value).__name__}")


def _check_channels(function, x, names_and_arrays, dtype=None, writeable=()):
    """``x`` (N, C, S) and per-channel vectors (C,) of x's dtype (``dtype`` when given)."""
    x_dtype = floats(function, "x", x, ndim=3)
    for name, a in names_and_arrays:
        array(function, name, a, dtype or x_dtype, x.shape[1:2], writeable=name in writeable)
    return x_dtype


def _check_channel_stats(x, mean, var):
    _check_channels("channel_stats", x, (("mean", mean), ("var", var)), FLOAT64, writeable=("mean", "var"))
    if x.shape[0] * x.shape[2] == 0:
        fail("channel_stats", f"argument 'x' has no elements per channel (shape {x.shape})")


def _check_channel_affine(x, mean, invstd, weight, bias, out):
    dtype = _check_channels("channel_affine", x, (("mean", mean), ("invstd", invstd), ("weight", weight),
                                                  ("bias", bias)))
    array("channel_affine", "out", out, dtype, x.shape, writeable=True)


def _check_batch_norm_backward(x, mean, invstd, weight, grad, batch_stats, grad_x, grad_weight, grad_bias):
    dtype = _check_channels("batch_norm_backward", x, (("mean", mean), ("invstd", invstd), ("weight", weight),
                                                       ("grad_weight", grad_weight), ("grad_bias", grad_bias)),
                            writeable=("grad_weight", "grad_bias"))
    array("batch_norm_backward", "grad", grad, dtype, x.shape)
    array("batch_norm_backward", "grad_x", grad_x, dtype, x.shape, writeable=True)
    if type(batch_stats) is not bool:
        raise TypeError(f"batch_norm_backward(): argument 'batch_stats' must be a bool, not "
                        f"{type(batch_stats).__name__}")


def _check_rows(function, x, weight, per_row, per_column):
    """``x`` (M, K) with ``weight`` (K,), and the (M,) and (K,) arrays named in ``per_row``/``per_column``
    (the writeable ones are the outputs: named ``out``, ``grad_*``, or given with a True)."""
    dtype = floats(function, "x", x, ndim=2)
    if x.shape[1] == 0:
        fail(function, f"argument 'x' has no elements per row (shape {x.shape})")
    array(function, "weight", weight, dtype, x.shape[1:])
    for name, a, writeable in per_row:
        array(function, name, a, dtype, x.shape[:1], writeable=writeable)
    for name, a, writeable in per_column:
        array(function, name, a, dtype, x.shape[1:], writeable=writeable)
    return dtype


def _check_row_norm(x, weight, bias, eps, out, mean, invstd):
    dtype = _check_rows("row_norm", x, weight, (("mean", mean, True), ("invstd", invstd, True)),
                        (("bias", bias, False),))
    array("row_norm", "out", out, dtype, x.shape, writeable=True)
    _real("row_norm", "eps", eps)


def _check_row_norm_backward(x, weight, grad, mean, invstd, grad_x, grad_weight, grad_bias):
    dtype = _check_rows("row_norm_backward", x, weight, (("mean", mean, False), ("invstd", invstd, False)),
                        (("grad_weight", grad_weight, True), ("grad_bias", grad_bias, True)))
    array("row_norm_backward", "grad", grad, dtype, x.shape)
    array("row_norm_backward", "grad_x", grad_x, dtype, x.shape, writeable=True)


def _check_groups(function, x, groups, weight, stats):
    """``x`` (N, C, S) in ``groups`` groups of channels, ``weight`` (C,) and the (N, groups) statistics."""
    dtype = floats(function, "x", x, ndim=3)
    groups = integer(function, "groups", groups, 1, max(x.shape[1], 1))
    if x.shape[1] % groups or x.shape[2] == 0 or x.shape[1] == 0:
        fail(function, f"argument 'x' of shape {x.shape} does not split into {groups} non-empty groups of channels")
    array(function, "weight", weight, dtype, x.shape[1:2])
    for name, a, writeable in stats:
        array(function, name, a, dtype, (x.shape[0], groups), writeable=writeable)
    return dtype


def _check_group_norm(x, groups, weight, bias, eps, out, mean, invstd):
    dtype = _check_groups("group_norm", x, groups, weight, (("mean", mean, True), ("invstd", invstd, True)))
    array("group_norm", "bias", bias, dtype, x.shape[1:2])
    array("group_norm", "out", out, dtype, x.shape, writeable=True)
    _real("group_norm", "eps", eps)


def _check_group_norm_backward(x, groups, weight, grad, mean, invstd, grad_x, grad_weight, grad_bias):
    dtype = _check_groups("group_norm_backward", x, groups, weight, (("mean", mean, False),
                                                                     ("invstd", invstd, False)))
    array("group_norm_backward", "grad", grad, dtype, x.shape)
    array("group_norm_backward", "grad_x", grad_x, dtype, x.shape, writeable=True)
    array("group_norm_backward", "grad_weight", grad_weight, dtype, x.shape[1:2], writeable=True)
    array("group_norm_backward", "grad_bias", grad_bias, dtype, x.shape[1:2], writeable=True)


@entry(_check_channel_stats)
@_jit
def channel_stats(x, mean, var):
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


@entry(_check_channel_affine)
@_jit
def channel_affine(x, mean, invstd, weight, bias, out):
    n, channels, spatial = x.shape
    for i in range(n):
        for c in range(channels):
            scale = invstd[c] * weight[c]
            m, b = mean[c], bias[c]
            for s in range(spatial):
                # (x - mean) first, as the core: x * scale - mean * scale cancels badly when x is far from 0
                out[i, c, s] = (x[i, c, s] - m) * scale + b


@entry(_check_batch_norm_backward)
@_jit
def batch_norm_backward(x, mean, invstd, weight, grad, batch_stats, grad_x, grad_weight, grad_bias):
    n, channels, spatial = x.shape
    count = n * spatial
    sum_g = np.zeros(channels)
    sum_gx = np.zeros(channels)
    # Products with xhat, not with x - mean: g * (x - mean) overflows float32 for data around 1e38, where the
    # normalised values (and the core's products with them) stay small.
    for i in range(n):
        for c in range(channels):
            m = mean[c]
            inv = invstd[c]
            s_g = 0.0
            s_gx = 0.0
            for s in range(spatial):
                g = grad[i, c, s]
                s_g += g
                s_gx += g * ((x[i, c, s] - m) * inv)
            sum_g[c] += s_g
            sum_gx[c] += s_gx  # sum(g * xhat)
    for c in range(channels):
        grad_weight[c] = sum_gx[c]
        grad_bias[c] = sum_g[c]
    for i in range(n):
        for c in range(channels):
            m = mean[c]
            inv = invstd[c]
            k = inv * weight[c]
            if batch_stats:
                mean_g = sum_g[c] / count
                mean_gx = sum_gx[c] / count
                for s in range(spatial):
                    grad_x[i, c, s] = k * (grad[i, c, s] - mean_g - ((x[i, c, s] - m) * inv) * mean_gx)
            else:
                for s in range(spatial):
                    grad_x[i, c, s] = k * grad[i, c, s]


@entry(_check_row_norm)
@_jit
def row_norm(x, weight, bias, eps, out, mean, invstd):
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


@entry(_check_row_norm_backward)
@_jit
def row_norm_backward(x, weight, grad, mean, invstd, grad_x, grad_weight, grad_bias):
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


@entry(_check_group_norm)
@_jit
def group_norm(x, groups, weight, bias, eps, out, mean, invstd):
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
                b = bias[c]
                for s in range(spatial):
                    out[i, c, s] = (x[i, c, s] - m_x) * scale + b  # (x - mean) first: see channel_affine


@entry(_check_group_norm_backward)
@_jit
def group_norm_backward(x, groups, weight, grad, mean, invstd, grad_x, grad_weight, grad_bias):
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
                c_gx = 0.0  # sum over this channel of g * xhat (xhat first: see batch_norm_backward)
                for s in range(spatial):
                    gr = grad[i, c, s]
                    c_g += gr
                    c_gx += gr * ((x[i, c, s] - m) * inv)
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
