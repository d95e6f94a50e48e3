"""The compiled loops behind corenn_numba.norms (imported when a norm first runs, not at ``import corenn``)."""
from __future__ import annotations

import math

import numba
import numpy as np

# Serial like the rest of this plugin's memory-bound loops (see corenn_numba._nn_jit); ``reassoc`` lets
# LLVM vectorise the float64 sums.
_jit = numba.njit(cache=True, fastmath={"reassoc", "contract"})


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


@_jit
def channel_affine(x, mean, invstd, weight, bias, out):
    n, channels, spatial = x.shape
    for i in range(n):
        for c in range(channels):
            scale = invstd[c] * weight[c]
            shift = bias[c] - mean[c] * scale
            for s in range(spatial):
                out[i, c, s] = x[i, c, s] * scale + shift


@_jit
def batch_norm_backward(x, mean, invstd, weight, grad, batch_stats, grad_x, grad_weight, grad_bias):
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
                shift = bias[c] - m_x * scale
                for s in range(spatial):
                    out[i, c, s] = x[i, c, s] * scale + shift


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
