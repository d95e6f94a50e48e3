"""Fused optimizer updates: ``sgd_update`` and ``adam_update`` (Adam, AdamW) as one compiled pass per parameter.

The core's updates (corenn/ops/optim_update.py) are four to twelve whole-array numpy
operations per parameter, each streaming the parameter-sized arrays through memory
again. Here each parameter is updated by one compiled loop that reads the parameter,
its gradient and its state once and writes them once, vectorised; a parallel
(``prange``) version exists but is off by default (see ``PARALLEL_MIN_ELEMENTS``:
on a machine with few cores it loses to the thread pools of BLAS). Results are the core's bit for bit (same order of
operations, scalars in the arrays' dtype, no fastmath).

Handled per parameter: numpy float32/float64 arrays, C-contiguous, with gradient and
state of the same dtype and layout. Any other parameter (float16, a non-contiguous
gradient, ...) is updated by the core's per-parameter update, in the same step.

numba itself is imported on the first step, not when corenn loads the plugin.

Example (nothing changes for the user; ``opt.step()`` finds these kernels by name)::

    >>> opt = corenn.optim.AdamW(model.parameters(), lr=1e-3)
    >>> loss.backward(); opt.step()     # one fused pass per parameter
"""
from __future__ import annotations

import sys

import numpy as np

from corenn.kernels import KernelOverride
from corenn.ops import optim_update as core

from corenn_numba._base import LazyModule, handles

#: Parameters with at least this many elements are updated by all of numba's threads. Off by default:
#: alone, the parallel loop halves Adam's update of a 400k-element parameter on the 2-core development
#: machine (93 -> 51 us), but in a training step it runs right after BLAS and PyTorch-style thread pools
#: whose threads are still spinning, and the MLP step went from 3.1 ms to 8-16 ms (numba's omp layer) --
#: the serial loop already streams memory 3-5x faster than numpy's passes. Set it (e.g. ``1 << 17``) on a
#: machine with idle cores to try the parallel loops; tests run both.
PARALLEL_MIN_ELEMENTS = sys.maxsize

jit = LazyModule("corenn_numba._optim_jit")  # the compiled loops; imports numba on the first step


_placeholders: dict = {}


def _placeholder(dtype):
    """A one-element array standing for an argument the loop does not read (see _optim_jit's docstring)."""
    array = _placeholders.get(dtype)
    if array is None:
        array = _placeholders[dtype] = np.zeros(1, dtype)
    return array


def _flat(*arrays):
    """Flat views of C-contiguous arrays of one float dtype and one size, or None when the loops cannot take them."""
    if not handles(*arrays):
        return None
    size = arrays[0].size
    for a in arrays:
        if a is not None and (not a.flags.c_contiguous or a.size != size):
            return None
    if not all(a.flags.writeable for k, a in enumerate(arrays) if k != 1 and a is not None):
        return None  # the parameter and the state are written in place (arrays[1] is the gradient)
    return [None if a is None else a.reshape(-1) for a in arrays]


class SGDUpdate(KernelOverride, core.SGDUpdate):
    """``sgd_update``: one fused pass per parameter (effective gradient, momentum buffer, parameter)."""

    @staticmethod
    def forward(ctx, params, grads, momentum_buffers, *, lr: float, momentum: float, dampening: float,
                weight_decay: float, nesterov: bool, maximize: bool, scratch):
        has_momentum = momentum != 0
        for i, p in enumerate(params):
            buf = momentum_buffers[i] if has_momentum else None
            flat = _flat(p, grads[i], buf)
            if flat is None:
                buf = core.SGDUpdate.update_one(ctx.xp, scratch, p, grads[i], buf, lr=lr, momentum=momentum,
                                                dampening=dampening, weight_decay=weight_decay, nesterov=nesterov,
                                                maximize=maximize)
                if has_momentum:
                    momentum_buffers[i] = buf
                continue
            p_flat, g_flat, buf_flat = flat
            first = has_momentum and buf is None
            if first:
                buf = np.empty_like(p)
                momentum_buffers[i] = buf
                buf_flat = buf.reshape(-1)
            elif not has_momentum:
                buf_flat = _placeholder(p.dtype)  # not read; an alias of p would keep the loop scalar
            # scalars in the arrays' dtype: float32 arithmetic must stay float32, as numpy's is
            scalar = p.dtype.type
            loop = jit.sgd_parallel if p.size >= PARALLEL_MIN_ELEMENTS else jit.sgd_serial
            loop(p_flat, g_flat, buf_flat, scalar(lr), scalar(momentum), scalar(1 - dampening), scalar(weight_decay),
                 bool(nesterov), bool(maximize), has_momentum, first)


class AdamUpdate(KernelOverride, core.AdamUpdate):
    """``adam_update``: one fused pass per parameter (both moments, AMSGrad maximum, parameter)."""

    @staticmethod
    def forward(ctx, params, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs, steps, *, amsgrad: bool, beta1: float,
                beta2: float, lr: float, weight_decay: float, eps: float, maximize: bool,
                decoupled_weight_decay: bool, scratch):
        for i, p in enumerate(params):
            vmax = max_exp_avg_sqs[i] if amsgrad else None
            flat = _flat(p, grads[i], exp_avgs[i], exp_avg_sqs[i], vmax)
            if flat is None:
                core.AdamUpdate.update_one(ctx.xp, scratch, p, grads[i], exp_avgs[i], exp_avg_sqs[i], vmax, steps[i],
                                           beta1=beta1, beta2=beta2, lr=lr, weight_decay=weight_decay, eps=eps,
                                           maximize=maximize, decoupled_weight_decay=decoupled_weight_decay)
                continue
            p_flat, g_flat, m_flat, v_flat, vmax_flat = flat
            step_size, bias_correction2_sqrt = core.AdamUpdate.step_scalars(steps[i], beta1=beta1, beta2=beta2, lr=lr)
            decoupled = decoupled_weight_decay and weight_decay != 0
            scalar = p.dtype.type
            loop = jit.adam_parallel if p.size >= PARALLEL_MIN_ELEMENTS else jit.adam_serial
            loop(p_flat, g_flat, m_flat, v_flat, _placeholder(p.dtype) if vmax_flat is None else vmax_flat,
                 scalar(1 - beta1), scalar(beta2), scalar(1 - beta2),
                 scalar(1 - lr * weight_decay) if decoupled else scalar(1),
                 scalar(0 if decoupled else weight_decay), scalar(eps), scalar(-step_size),
                 scalar(bias_correction2_sqrt), bool(maximize), bool(amsgrad))


OVERRIDES = [("sgd_update", SGDUpdate), ("adam_update", AdamUpdate)]
