"""The compiled loops behind corenn_numba.nn (imported when softmax/log_softmax/cross_entropy first runs, not at
``import corenn``): row softmax and the fused cross-entropy, with a vectorisable exp.

Every function Python calls checks its arguments first (``corenn_numba._checks.entry``); the
cross-entropy loops also check each target they index with, and return the position of the
first one out of range (-1: none) instead of reading outside the logits.
"""
from __future__ import annotations

import math

import numba
import numpy as np
from numba import types
from numba.extending import intrinsic, overload

from corenn_numba._checks import FLOAT64, INT64, array, entry, fail, floats, integer

# Serial, not prange: on the 2-core shared machines a parallel row loop measured 16 ms where the
# serial one takes 1 ms whenever another process held a core (the threads wait at the barrier for a
# descheduled sibling); these loops run at memory speed on one core anyway. ``reassoc`` lets LLVM
# vectorise the row sums (they are summed in float64, so reordering stays far inside float32
# tolerance); no ``nnan``/``ninf``, so nan and inf logits propagate as in the core. error_model="numpy":
# a division by zero gives inf or nan, as in numpy, instead of raising ZeroDivisionError.
_jit = numba.njit(cache=True, fastmath={"reassoc", "contract"}, error_model="numpy")


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


# ---------------------------------------------------------------------------------------------------------
# Argument checks (see corenn_numba._checks): shapes, dtypes and layouts, before any loop runs
# ---------------------------------------------------------------------------------------------------------

def _flag(function, name, value):
    if type(value) is not bool:
        raise TypeError(f"{function}(): argument '{name}' must be a bool, not {type(value).__name__}")


def _real(function, name, value):
    if not isinstance(value, float):
        raise TypeError(f"{function}(): argument '{name}' must be a float, not {type(value).__name__}")


def _check_softmax_rows(x, row_max, out, log):
    dtype = floats("softmax_rows", "x", x, ndim=2)
    array("softmax_rows", "row_max", row_max, dtype, x.shape[:1])
    array("softmax_rows", "out", out, dtype, x.shape, writeable=True)
    _flag("softmax_rows", "log", log)


def _check_softmax_rows_backward(out, grad, grad_in, log):
    dtype = floats("softmax_rows_backward", "out", out, ndim=2)
    array("softmax_rows_backward", "grad", grad, dtype, out.shape)
    array("softmax_rows_backward", "grad_in", grad_in, dtype, out.shape, writeable=True)
    _flag("softmax_rows_backward", "log", log)


def _check_ce(function, x, target, weight, use_weight, ignore_index, smoothing, ndim):
    """What ce_forward/ce_backward (``ndim`` 2) and their (N, C, D) forms (3) share; returns x's dtype and the
    shape of one value per row or point (the target's)."""
    dtype = floats(function, "x", x, ndim=ndim)
    per_row = x.shape[:1] + x.shape[2:]
    if x.shape[1] == 0:
        fail(function, f"argument 'x' must have at least one class, got shape {x.shape}")
    array(function, "target", target, INT64, per_row)
    _flag(function, "use_weight", use_weight)
    array(function, "weight", weight, dtype, (x.shape[1],) if use_weight else None, ndim=1)
    integer(function, "ignore_index", ignore_index, low=-(1 << 63))
    _real(function, "smoothing", smoothing)
    return dtype, per_row


def _check_ce_forward_arrays(function, ndim, x, row_max, target, weight, use_weight, ignore_index, smoothing, loss,
                             log_total, qsum, writes_max):
    dtype, per_row = _check_ce(function, x, target, weight, use_weight, ignore_index, smoothing, ndim)
    array(function, "row_max", row_max, dtype, per_row, writeable=writes_max)
    array(function, "loss", loss, FLOAT64, per_row, writeable=True)
    array(function, "log_total", log_total, dtype, per_row, writeable=True)
    array(function, "qsum", qsum, FLOAT64, per_row, writeable=True)


def _check_ce_backward_arrays(function, ndim, x, row_max, target, weight, use_weight, ignore_index, smoothing,
                              log_total, qsum, scale, grad_x):
    dtype, per_row = _check_ce(function, x, target, weight, use_weight, ignore_index, smoothing, ndim)
    array(function, "row_max", row_max, dtype, per_row)
    array(function, "log_total", log_total, dtype, per_row)
    array(function, "qsum", qsum, FLOAT64, per_row)
    array(function, "scale", scale, FLOAT64, per_row)
    array(function, "grad_x", grad_x, dtype, x.shape, writeable=True)


def _check_ce_forward(*args):
    _check_ce_forward_arrays("ce_forward", 2, *args, writes_max=False)


def _check_ce_backward(*args):
    _check_ce_backward_arrays("ce_backward", 2, *args)


def _check_ce_forward_planes(*args):
    _check_ce_forward_arrays("ce_forward_planes", 3, *args, writes_max=True)


def _check_ce_backward_planes(*args):
    _check_ce_backward_arrays("ce_backward_planes", 3, *args)


# ---------------------------------------------------------------------------------------------------------
# softmax / log_softmax over rows
# ---------------------------------------------------------------------------------------------------------

@entry(_check_softmax_rows)
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
            log_total = math.log(total)
            for j in range(cols):
                # (x - m) first: m + log(total) would lose log(total) to rounding when |m| is large
                out[i, j] = (x[i, j] - m) - log_total
        else:
            total = 0.0
            for j in range(cols):
                e = _exp_nonpositive(x[i, j] - m)
                out[i, j] = e
                total += e
            inv = 1.0 / total
            for j in range(cols):
                out[i, j] *= inv


@entry(_check_softmax_rows_backward)
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


# ---------------------------------------------------------------------------------------------------------
# cross-entropy on (N, C) rows
# ---------------------------------------------------------------------------------------------------------

@_jit
def _first_bad_target(target, ignore_index, classes):
    """The position of the first target that is neither ``ignore_index`` nor a class index, or -1."""
    for i in range(target.shape[0]):
        t = target[i]
        if t != ignore_index and (t < 0 or t >= classes):
            return i
    return -1


@entry(_check_ce_forward)
@_jit
def ce_forward(x, row_max, target, weight, use_weight, ignore_index, smoothing, loss, log_total, qsum):
    """Per row: ``loss``, ``log_total`` = log(sum(exp(x - row_max))) and ``qsum`` (the coefficients' sum);
    returns the row of the first target out of range (nothing written), or -1.

    The log-sum-exp is kept as ``row_max`` and ``log_total``, not their sum: with large logits their sum
    would round ``log_total`` away, and backward's ``exp(x - lse)`` with it.
    """
    rows, classes = x.shape
    bad = _first_bad_target(target, ignore_index, classes)
    if bad >= 0:
        return bad
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
        row_log_total = math.log(total)
        log_total[i] = row_log_total
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
                    # in float64: a float32 product of a weight and a logit near 3e38 would overflow where
                    # the core's (and the (N, C, D) loop's) sum of the same terms does not
                    spread_dot += np.float64(weight[c]) * (x[i, c] - m)
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
        loss[i] = row_q * row_log_total - dot
    return -1


@entry(_check_ce_backward)
@_jit
def ce_backward(x, row_max, target, weight, use_weight, ignore_index, smoothing, log_total, qsum, scale, grad_x):
    """``grad_x``: the gradient of ``scale``-weighted losses, with softmax = exp((x - row_max) - log_total);
    returns the row of the first target out of range (nothing written), or -1."""
    rows, classes = x.shape
    bad = _first_bad_target(target, ignore_index, classes)
    if bad >= 0:
        return bad
    spread = smoothing / classes
    for i in range(rows):
        t = target[i]
        s = scale[i]
        m, lt = row_max[i], log_total[i]
        if t == ignore_index:
            # No gradient, but nan where the row's probabilities are nan (inf or nan logits), as in the core
            # and PyTorch: 0 * softmax, not 0.
            for c in range(classes):
                grad_x[i, c] = _exp_nonpositive((x[i, c] - m) - lt) * 0.0
            continue
        row_q = qsum[i] * s
        if use_weight:
            for c in range(classes):
                grad_x[i, c] = (_exp_nonpositive((x[i, c] - m) - lt) * row_q - spread * weight[c] * s)
            grad_x[i, t] -= (1.0 - smoothing) * weight[t] * s
        else:
            for c in range(classes):
                grad_x[i, c] = _exp_nonpositive((x[i, c] - m) - lt) * row_q - spread * s
            grad_x[i, t] -= (1.0 - smoothing) * s
    return -1


# ---------------------------------------------------------------------------------------------------------
# cross-entropy on (N, C, D) logits (segmentation-style (N, C, d1, ...) seen with D = d1 * ...)
# ---------------------------------------------------------------------------------------------------------
# The class axis is strided, so the loops run over classes outside and the D points inside: every
# inner loop is a contiguous pass over one (n, c) row of D points, which LLVM vectorises, with the
# per-point running max, sums and log-sum-exp in small arrays of D elements.

@entry(_check_ce_forward_planes)
@_jit
def ce_forward_planes(x, row_max, target, weight, use_weight, ignore_index, smoothing, loss, log_total, qsum):
    """``ce_forward`` for (N, C, D) logits and (N, D) targets: writes ``row_max`` (the max over classes) too;
    ``row_max``, ``loss``, ``log_total`` and ``qsum`` are (N, D)."""
    n_images, classes, points = x.shape
    for b in range(n_images):
        bad = _first_bad_target(target[b], ignore_index, classes)
        if bad >= 0:
            return b * points + bad
    spread = smoothing / classes
    weight_total = 0.0
    if use_weight:
        for c in range(classes):
            weight_total += weight[c]
    total = np.empty(points)
    spread_dot = np.empty(points)
    for b in range(n_images):
        image, image_target, m = x[b], target[b], row_max[b]
        for d in range(points):
            m[d] = image[0, d]
        for c in range(1, classes):
            row = image[c]
            for d in range(points):
                v = row[d]
                if v > m[d] or v != v:  # numpy's max: a nan wins
                    m[d] = v
        for d in range(points):
            total[d] = 0.0
            spread_dot[d] = 0.0
        for c in range(classes):
            row = image[c]
            for d in range(points):
                total[d] += _exp_nonpositive(row[d] - m[d])
        if smoothing != 0.0:
            for c in range(classes):
                row = image[c]
                w = weight[c] if use_weight else 1.0
                for d in range(points):
                    spread_dot[d] += w * (row[d] - m[d])
        for d in range(points):
            point_log_total = math.log(total[d])
            log_total[b, d] = point_log_total
            t = image_target[d]
            if t == ignore_index:
                loss[b, d] = 0.0
                qsum[b, d] = 0.0
                continue
            w = weight[t] if use_weight else 1.0
            row_q = (1.0 - smoothing) * w
            dot = row_q * (image[t, d] - m[d]) + spread * spread_dot[d]
            if smoothing != 0.0:
                row_q += spread * (weight_total if use_weight else classes)
            qsum[b, d] = row_q
            loss[b, d] = row_q * point_log_total - dot
    return -1


@entry(_check_ce_backward_planes)
@_jit
def ce_backward_planes(x, row_max, target, weight, use_weight, ignore_index, smoothing, log_total, qsum, scale,
                       grad_x):
    """``ce_backward`` for (N, C, D) logits: ``row_max``, ``log_total``, ``qsum`` and ``scale`` are (N, D)."""
    n_images, classes, points = x.shape
    for b in range(n_images):
        bad = _first_bad_target(target[b], ignore_index, classes)
        if bad >= 0:
            return b * points + bad
    spread = smoothing / classes
    row_q = np.empty(points)
    for b in range(n_images):
        for d in range(points):
            # An ignored point has qsum 0, and its gradient is zeroed below.
            row_q[d] = qsum[b, d] * scale[b, d]
        m, lt = row_max[b], log_total[b]
        for c in range(classes):
            row, out = x[b, c], grad_x[b, c]
            w = weight[c] if use_weight else 1.0
            for d in range(points):
                out[d] = _exp_nonpositive((row[d] - m[d]) - lt[d]) * row_q[d] - spread * w * scale[b, d]
        for d in range(points):
            t = target[b, d]
            if t == ignore_index:  # 0 * softmax, nan where it is nan (see ce_backward)
                for c in range(classes):
                    grad_x[b, c, d] = _exp_nonpositive((x[b, c, d] - m[d]) - lt[d]) * 0.0
            else:
                grad_x[b, t, d] -= (1.0 - smoothing) * (weight[t] if use_weight else 1.0) * scale[b, d]
    return -1


# ---------------------------------------------------------------------------------------------------------
# relu, forward and backward, over flat arrays
# ---------------------------------------------------------------------------------------------------------

def _check_relu(x, out):
    dtype = floats("relu", "x", x, ndim=1)
    array("relu", "out", out, dtype, x.shape, writeable=True)


def _check_relu_backward(out, grad, grad_in):
    dtype = floats("relu_backward", "out", out, ndim=1)
    array("relu_backward", "grad", grad, dtype, out.shape)
    array("relu_backward", "grad_in", grad_in, dtype, out.shape, writeable=True)


# Plain compare-and-select loops, which LLVM vectorises; numpy's ``maximum`` carries nan through a slower
# path (measured 250 us on 802,816 float32s, where its ``add`` takes 69).
@entry(_check_relu)
@numba.njit(cache=True)
def relu(x, out):
    """``out = maximum(x, 0)`` as numpy computes it: nan stays nan, -0.0 becomes 0.0."""
    zero = x.dtype.type(0)
    for k in range(x.shape[0]):
        value = x[k]
        out[k] = value if value > zero or value != value else zero
    return out


@entry(_check_relu_backward)
@numba.njit(cache=True)
def relu_backward(out, grad, grad_in):
    """``grad_in = grad * (out > 0)`` as the core computes it: a nan or inf gradient times 0 is nan."""
    one, zero = out.dtype.type(1), out.dtype.type(0)
    for k in range(out.shape[0]):
        grad_in[k] = grad[k] * (one if out[k] > zero else zero)
    return grad_in
