"""The compiled loops behind corenn_numba.nn (imported when softmax/log_softmax/cross_entropy first runs, not at
``import corenn``): row softmax and the fused cross-entropy, with a vectorisable exp."""
from __future__ import annotations

import math

import numba
import numpy as np
from numba import types
from numba.extending import intrinsic, overload

# Serial, not prange: on the 2-core shared machines a parallel row loop measured 16 ms where the
# serial one takes 1 ms whenever another process held a core (the threads wait at the barrier for a
# descheduled sibling); these loops run at memory speed on one core anyway. ``reassoc`` lets LLVM
# vectorise the row sums (they are summed in float64, so reordering stays far inside float32
# tolerance); no ``nnan``/``ninf``, so nan and inf logits propagate as in the core.
_jit = numba.njit(cache=True, fastmath={"reassoc", "contract"})


# ---------------------------------------------------------------------------------------------------------
# exp of a non-positive argument, vectorisable
# ---------------------------------------------------------------------------------------------------------
# ``math.exp`` compiles to a libm call per element, which LLVM cannot vectorise: a scalar exp loop ran
# 5x slower than numpy's SIMD ``np.exp`` on these machines. These are Cody-Waite range reduction plus a
# polynomial, with 2**n built from its bits: measured max relative error 6e-8 for float32 (Cephes
# coefficients; numpy's own float32 exp: 2e-7) and 3e-16 for float64 (degree-12 Taylor on |r| <= ln2/2).
# Only arguments <= 0 occur here (logits minus their max or log-sum-exp), so there is no overflow branch.

@intrinsic
def _float32_from_bits(typingctx, bits):
    def codegen(context, builder, signature, args):
        return builder.bitcast(args[0], context.get_value_type(types.float32))
    return types.float32(types.int32), codegen


@intrinsic
def _float64_from_bits(typingctx, bits):
    def codegen(context, builder, signature, args):
        return builder.bitcast(args[0], context.get_value_type(types.float64))
    return types.float64(types.int64), codegen


@numba.njit(inline="always")
def _exp32(x):
    low = np.float32(-87.3)  # exp(-87.3) is the smallest normal float32: below it the result is 0
    clamped = max(x, low)
    n = math.floor(clamped * np.float32(1.44269504088896341) + np.float32(0.5))
    r = clamped - n * np.float32(0.693359375)
    r = r - n * np.float32(-2.12194440e-4)
    p = np.float32(1.9875691500e-4)
    p = p * r + np.float32(1.3981999507e-3)
    p = p * r + np.float32(8.3334519073e-3)
    p = p * r + np.float32(4.1665795894e-2)
    p = p * r + np.float32(1.6666665459e-1)
    p = p * r + np.float32(5.0000001201e-1)
    p = p * r * r + r + np.float32(1.0)
    result = p * _float32_from_bits((np.int32(n) + np.int32(127)) << np.int32(23))
    return result if x >= low else (np.float32(0.0) if x < low else x)  # the last case: nan stays nan


@numba.njit(inline="always")
def _exp64(x):
    low = -708.0
    clamped = max(x, low)
    n = math.floor(clamped * 1.4426950408889634 + 0.5)
    r = clamped - n * 6.93147180369123816490e-01
    r = r - n * 1.90821492927058770002e-10
    p = 1.0 / 479001600.0
    for k in (39916800.0, 3628800.0, 362880.0, 40320.0, 5040.0, 720.0, 120.0, 24.0, 6.0, 2.0, 1.0):
        p = p * r + 1.0 / k
    p = p * r + 1.0
    result = p * _float64_from_bits((np.int64(n) + np.int64(1023)) << np.int64(52))
    return result if x >= low else (0.0 if x < low else x)


def _exp_nonpositive(x):
    """``exp(x)`` for ``x <= 0`` in x's precision (compiled: see the overload below)."""
    return math.exp(x)


@overload(_exp_nonpositive)
def _exp_nonpositive_overload(x):
    if x == types.float32:
        return lambda x: _exp32(x)
    return lambda x: _exp64(x)


@_jit
def softmax_rows(x, row_max, out, log):
    # row_max comes from numpy's ``max(axis=-1)``: SIMD and nan-propagating, where a compiled
    # compare-and-select loop does not vectorise (2.5x slower, measured).
    rows, cols = x.shape
    for i in range(rows):
        m = row_max[i]
        if log:
            total = 0.0
            for j in range(cols):
                total += _exp_nonpositive(x[i, j] - m)
            shift = m + math.log(total)
            for j in range(cols):
                out[i, j] = x[i, j] - shift
        else:
            total = 0.0
            for j in range(cols):
                e = _exp_nonpositive(x[i, j] - m)
                out[i, j] = e
                total += e
            inv = 1.0 / total
            for j in range(cols):
                out[i, j] *= inv


@_jit
def softmax_rows_backward(out, grad, grad_in, log):
    rows, cols = out.shape
    for i in range(rows):
        if log:  # d/dx of x - lse(x): g - softmax * sum(g)
            total = 0.0
            for j in range(cols):
                total += grad[i, j]
            for j in range(cols):
                grad_in[i, j] = grad[i, j] - _exp_nonpositive(out[i, j]) * total
        else:  # softmax * (g - sum(g * softmax))
            total = 0.0
            for j in range(cols):
                total += grad[i, j] * out[i, j]
            for j in range(cols):
                grad_in[i, j] = out[i, j] * (grad[i, j] - total)


@_jit
def ce_forward(x, row_max, target, weight, use_weight, ignore_index, smoothing, loss, lse, qsum):
    rows, classes = x.shape
    spread = smoothing / classes
    weight_total = 0.0
    if use_weight:
        for c in range(classes):
            weight_total += weight[c]
    for i in range(rows):
        t = target[i]
        m = row_max[i]
        total = 0.0
        for c in range(classes):
            total += _exp_nonpositive(x[i, c] - m)
        log_total = math.log(total)
        lse[i] = m + log_total
        if t == ignore_index:
            loss[i] = 0.0
            qsum[i] = 0.0
            continue
        picked = x[i, t] - m
        if use_weight:
            row_q = (1.0 - smoothing) * weight[t]
            dot = row_q * picked
            if smoothing != 0.0:
                spread_dot = 0.0
                for c in range(classes):
                    spread_dot += weight[c] * (x[i, c] - m)
                dot += spread * spread_dot
                row_q += spread * weight_total
        else:
            row_q = 1.0
            dot = (1.0 - smoothing) * picked
            if smoothing != 0.0:
                spread_dot = 0.0
                for c in range(classes):
                    spread_dot += x[i, c] - m
                dot += spread * spread_dot
        qsum[i] = row_q
        loss[i] = row_q * log_total - dot


@_jit
def ce_backward(x, target, weight, use_weight, ignore_index, smoothing, lse, qsum, scale, grad_x):
    rows, classes = x.shape
    spread = smoothing / classes
    for i in range(rows):
        t = target[i]
        s = scale[i]
        if t == ignore_index:
            for c in range(classes):
                grad_x[i, c] = 0.0
            continue
        row_q = qsum[i] * s
        row_lse = lse[i]
        if use_weight:
            for c in range(classes):
                grad_x[i, c] = (_exp_nonpositive(x[i, c] - row_lse) * row_q - spread * weight[c] * s)
            grad_x[i, t] -= (1.0 - smoothing) * weight[t] * s
        else:
            for c in range(classes):
                grad_x[i, c] = _exp_nonpositive(x[i, c] - row_lse) * row_q - spread * s
            grad_x[i, t] -= (1.0 - smoothing) * s
