"""The compiled loops behind corenn_numba.optim (imported on the first optimizer step, not at ``import corenn``).

Each loop does one parameter's whole update in a single pass over its arrays, in the
same order of operations as the core's numpy update, with every scalar already in the
arrays' dtype: float32 arithmetic stays float32 as numpy does it, so the results are the
core's bit for bit (no ``fastmath``: it would let LLVM reorder and contract them).

Arrays that a loop does not use (the momentum buffer without momentum, the AMSGrad
maximum without amsgrad) are passed as a separate one-element placeholder, never as an
alias of a used array: LLVM vectorises a loop only after checking at run time that its
arrays do not overlap, and an alias fails that check.

Serial and parallel versions are separate functions (not one function compiled twice)
because numba's on-disk cache keys entries by function and signature, not by options.

Each checks its arguments first (``corenn_numba._checks.entry``): every array the loop reads is
as long as the parameter, so no index runs past an array's end.
"""
from __future__ import annotations

import numba
import numpy as np
from numba import prange

from corenn_numba._checks import array, entry, floats


def _check_update(function, arrays, optional, scalars, flags):
    """``arrays`` (name, array) are 1-d, C-contiguous, of the parameter's dtype and size, the parameter and
    the state writeable; ``optional`` (name, array, used) the same when used, else a placeholder of the
    dtype; ``scalars`` numpy scalars of that dtype (float32 arithmetic stays float32); ``flags`` bools."""
    (first_name, p), *rest = arrays
    dtype = floats(function, first_name, p, None, 1, True, True)
    shape = p.shape
    for name, a in rest:
        array(function, name, a, dtype, shape, None, True, name != "g")
    for name, a, used in optional:
        array(function, name, a, dtype, shape if used else None, 1, True, used)
    scalar = dtype.type
    for name, value in scalars:
        if type(value) is not scalar:
            raise TypeError(f"{function}(): argument '{name}' must be a {dtype} scalar, not {type(value).__name__}")
    for name, value in flags:
        if type(value) is not bool:
            raise TypeError(f"{function}(): argument '{name}' must be a bool, not {type(value).__name__}")


def _check_sgd(p, g, buf, lr, momentum, keep, weight_decay, nesterov, maximize, has_momentum, first):
    _check_update("sgd_update", (("p", p), ("g", g)), (("buf", buf, has_momentum),),
                  (("lr", lr), ("momentum", momentum), ("keep", keep), ("weight_decay", weight_decay)),
                  (("nesterov", nesterov), ("maximize", maximize), ("has_momentum", has_momentum), ("first", first)))


def _check_adam(p, g, m, v, vmax, beta1c, beta2, beta2c, shrink, weight_decay, eps, neg_step_size,
                bias_correction2_sqrt, maximize, amsgrad):
    _check_update("adam_update", (("p", p), ("g", g), ("m", m), ("v", v)), (("vmax", vmax, amsgrad),),
                  (("beta1c", beta1c), ("beta2", beta2), ("beta2c", beta2c), ("shrink", shrink),
                   ("weight_decay", weight_decay), ("eps", eps), ("neg_step_size", neg_step_size),
                   ("bias_correction2_sqrt", bias_correction2_sqrt)),
                  (("maximize", maximize), ("amsgrad", amsgrad)))

# error_model="numpy": x / 0 gives inf as in numpy; numba's default ("python") checks every division for
# ZeroDivisionError, and that branch keeps LLVM from vectorising the loop (Adam: 14x slower).
_serial = numba.njit(cache=True, error_model="numpy")
_parallel = numba.njit(cache=True, parallel=True, error_model="numpy")

# The loop bodies are written out in each function: a shared per-element helper (inlined by numba or by
# LLVM) kept the Adam loop scalar, 13x slower. Keep each serial/parallel pair identical but for prange.


@entry(_check_sgd)
@_serial
def sgd_serial(p, g, buf, lr, momentum, keep, weight_decay, nesterov, maximize, has_momentum, first):
    for i in range(p.size):
        gi = -g[i] if maximize else g[i]
        if weight_decay != 0:
            gi = gi + p[i] * weight_decay
        if has_momentum:
            # keep = 1 - dampening (x * 1 is exact); the first buffer is the gradient itself, as in PyTorch
            b = gi if first else buf[i] * momentum + gi * keep
            buf[i] = b
            gi = b * momentum + gi if nesterov else b
        p[i] = p[i] - gi * lr


@entry(_check_sgd)
@_parallel
def sgd_parallel(p, g, buf, lr, momentum, keep, weight_decay, nesterov, maximize, has_momentum, first):
    for i in prange(p.size):
        gi = -g[i] if maximize else g[i]
        if weight_decay != 0:
            gi = gi + p[i] * weight_decay
        if has_momentum:
            b = gi if first else buf[i] * momentum + gi * keep
            buf[i] = b
            gi = b * momentum + gi if nesterov else b
        p[i] = p[i] - gi * lr


@entry(_check_adam)
@_serial
def adam_serial(p, g, m, v, vmax, beta1c, beta2, beta2c, shrink, weight_decay, eps, neg_step_size,
                bias_correction2_sqrt, maximize, amsgrad):
    for i in range(p.size):
        pi = p[i] * shrink if shrink != 1 else p[i]  # AdamW: p *= 1 - lr * weight_decay first
        gi = -g[i] if maximize else g[i]
        if weight_decay != 0:  # L2 (Adam); AdamW passes 0 here
            gi = gi + pi * weight_decay
        mi = m[i] + (gi - m[i]) * beta1c  # lerp(m, g, 1 - beta1) in PyTorch's form
        vi = v[i] * beta2 + gi * beta2c * gi
        m[i] = mi
        v[i] = vi
        if amsgrad:
            vi = np.maximum(vmax[i], vi)
            vmax[i] = vi
        denom = np.sqrt(vi) / bias_correction2_sqrt + eps
        p[i] = pi + mi * neg_step_size / denom


@entry(_check_adam)
@_parallel
def adam_parallel(p, g, m, v, vmax, beta1c, beta2, beta2c, shrink, weight_decay, eps, neg_step_size,
                  bias_correction2_sqrt, maximize, amsgrad):
    for i in prange(p.size):
        pi = p[i] * shrink if shrink != 1 else p[i]
        gi = -g[i] if maximize else g[i]
        if weight_decay != 0:
            gi = gi + pi * weight_decay
        mi = m[i] + (gi - m[i]) * beta1c
        vi = v[i] * beta2 + gi * beta2c * gi
        m[i] = mi
        v[i] = vi
        if amsgrad:
            vi = np.maximum(vmax[i], vi)
            vmax[i] = vi
        denom = np.sqrt(vi) / bias_correction2_sqrt + eps
        p[i] = pi + mi * neg_step_size / denom
