"""Compiled loops behind corenn_numba.pooling: one pass per (image, channel) plane.

Imported on first use (through ``LazyModule``), so ``import corenn`` does not import numba.
All work on 2-d planes (1-d pooling arrives with a height of 1) of C-contiguous
(N, C, H, W) arrays, and follow PyTorch's CPU kernels window for window: the same
window bounds at padded and ceil-mode borders, the same divisors, the first maximum
winning ties and a NaN winning over numbers.

Serial loops, like the rest of this plugin's memory-bound kernels: pooling reads each
input element once or a few times and runs at memory speed on one core, while a
parallel region on the shared 2-core machines stalls whenever another process holds
the second core.
"""
from __future__ import annotations

import numba
import numpy as np

_jit = numba.njit(cache=True)


@_jit
def max_pool(x, out, indices, kh, kw, sh, sw, ph, pw, dh, dw):
    """``out``/``indices`` (N, C, OH, OW): window maxima of ``x`` and their flat positions in the plane."""
    n, channels, height, width = x.shape
    out_h, out_w = out.shape[2], out.shape[3]
    for b in range(n):
        for c in range(channels):
            plane = x[b, c]
            for y in range(out_h):
                h0 = y * sh - ph
                for q in range(out_w):
                    w0 = q * sw - pw
                    best = plane[0, 0]  # a placeholder of the right type: the first element in the window replaces it
                    best_index = -1
                    for i in range(kh):
                        ih = h0 + i * dh
                        if ih < 0 or ih >= height:
                            continue
                        for j in range(kw):
                            iw = w0 + j * dw
                            if iw < 0 or iw >= width:
                                continue
                            value = plane[ih, iw]
                            # PyTorch's rule: strictly greater wins (first maximum on ties), NaN always wins.
                            if best_index < 0 or value > best or value != value:
                                best = value
                                best_index = ih * width + iw
                    # A dilated window can miss the input entirely: -inf and index -1, as the core gives.
                    out[b, c, y, q] = best if best_index >= 0 else -np.inf
                    indices[b, c, y, q] = best_index


@_jit
def max_pool_backward(grad, indices, grad_x):
    """``grad_x`` (N, C, H, W), zeroed by the caller, += ``grad`` at the saved argmax positions."""
    n, channels = grad.shape[0], grad.shape[1]
    size = grad.shape[2] * grad.shape[3]
    for b in range(n):
        for c in range(channels):
            target = grad_x[b, c].reshape(-1)
            source = grad[b, c].reshape(-1)
            where = indices[b, c].reshape(-1)
            for k in range(size):
                if where[k] >= 0:  # -1: a window that missed the input has no gradient to give
                    target[where[k]] += source[k]


@_jit
def _avg_window(start, k, stride, pad, size, count_include_pad):
    """PyTorch's avg-pool window along one dim: clipped ``[lo, hi)`` and the count it divides by."""
    lo = start * stride - pad
    hi = min(lo + k, size + pad)
    span = hi - lo
    lo = max(lo, 0)
    hi = min(hi, size)
    return lo, hi, span if count_include_pad else hi - lo


@_jit
def avg_pool(x, out, kh, kw, sh, sw, ph, pw, count_include_pad, divisor_override):
    """``out`` (N, C, OH, OW): window means of ``x``; ``divisor_override`` > 0 replaces the count."""
    n, channels, height, width = x.shape
    out_h, out_w = out.shape[2], out.shape[3]
    for b in range(n):
        for c in range(channels):
            plane = x[b, c]
            for y in range(out_h):
                h_lo, h_hi, h_count = _avg_window(y, kh, sh, ph, height, count_include_pad)
                for q in range(out_w):
                    w_lo, w_hi, w_count = _avg_window(q, kw, sw, pw, width, count_include_pad)
                    total = 0.0
                    for ih in range(h_lo, h_hi):
                        for iw in range(w_lo, w_hi):
                            total += plane[ih, iw]
                    divisor = divisor_override if divisor_override > 0 else h_count * w_count
                    out[b, c, y, q] = total / divisor


@_jit
def avg_pool_backward(grad, grad_x, kh, kw, sh, sw, ph, pw, count_include_pad, divisor_override):
    """``grad_x`` (N, C, H, W), zeroed by the caller, += each output's gradient spread over its window."""
    n, channels, height, width = grad_x.shape
    out_h, out_w = grad.shape[2], grad.shape[3]
    for b in range(n):
        for c in range(channels):
            plane = grad_x[b, c]
            for y in range(out_h):
                h_lo, h_hi, h_count = _avg_window(y, kh, sh, ph, height, count_include_pad)
                for q in range(out_w):
                    w_lo, w_hi, w_count = _avg_window(q, kw, sw, pw, width, count_include_pad)
                    divisor = divisor_override if divisor_override > 0 else h_count * w_count
                    share = grad[b, c, y, q] / divisor
                    for ih in range(h_lo, h_hi):
                        for iw in range(w_lo, w_hi):
                            plane[ih, iw] += share


@_jit
def _adaptive_window(i, size, out):
    """Window ``[floor(i*size/out), ceil((i+1)*size/out))``, as PyTorch and the core compute it."""
    return (i * size) // out, -((-(i + 1) * size) // out)


@_jit
def adaptive_avg_pool(x, out):
    """``out`` (N, C, OH, OW): means of ``x`` over the adaptive windows."""
    n, channels, height, width = x.shape
    out_h, out_w = out.shape[2], out.shape[3]
    for b in range(n):
        for c in range(channels):
            plane = x[b, c]
            for y in range(out_h):
                h_lo, h_hi = _adaptive_window(y, height, out_h)
                for q in range(out_w):
                    w_lo, w_hi = _adaptive_window(q, width, out_w)
                    total = 0.0
                    for ih in range(h_lo, h_hi):
                        for iw in range(w_lo, w_hi):
                            total += plane[ih, iw]
                    out[b, c, y, q] = total / ((h_hi - h_lo) * (w_hi - w_lo))


@_jit
def adaptive_avg_pool_backward(grad, grad_x):
    """``grad_x`` (N, C, H, W), zeroed by the caller, += each output's gradient spread over its window."""
    n, channels, height, width = grad_x.shape
    out_h, out_w = grad.shape[2], grad.shape[3]
    for b in range(n):
        for c in range(channels):
            plane = grad_x[b, c]
            for y in range(out_h):
                h_lo, h_hi = _adaptive_window(y, height, out_h)
                for q in range(out_w):
                    w_lo, w_hi = _adaptive_window(q, width, out_w)
                    share = grad[b, c, y, q] / ((h_hi - h_lo) * (w_hi - w_lo))
                    for ih in range(h_lo, h_hi):
                        for iw in range(w_lo, w_hi):
                            plane[ih, iw] += share
