"""softmax, log_softmax and the fused cross-entropy, compiled with numba.

The core builds each of these from five to ten whole-array numpy passes (max,
subtract, exp, sum, divide, one-hot, ...), each allocating a temporary the size of
the input. Here one compiled loop per row does the work in cache: two passes over a
row for softmax, and cross-entropy never materialises the one-hot/coefficient
matrix ``q`` nor the probabilities -- backward recomputes ``exp(x - lse)`` from the
logits and the per-row log-sum-exp, which is cheaper than writing and re-reading a
saved (N, C) array.

Handled: float32/float64 C-contiguous inputs with the softmax axis last; cross-entropy
with class-index targets on (N, C) and (N, C, d1, ...) logits, any ``ignore_index``/
``weight``/``label_smoothing``/reduction (the (N, C, D) loops run over classes outside and
points inside, so the class axis needs no transpose). Everything else (probability targets,
float16, integer inputs, empty tensors, other softmax axes) runs the core kernel.

Example (nothing changes for the user; the dispatcher picks these kernels)::

    >>> import corenn, corenn.nn.functional as F
    >>> logits = corenn.randn(4, 10, requires_grad=True)
    >>> F.cross_entropy(logits, corenn.tensor([1, 0, 9, 3]), label_smoothing=0.1).backward()
"""
from __future__ import annotations

import numpy as np

from corenn.kernels import KernelOverride, check_targets
from corenn.ops import elementwise as core_elementwise
from corenn.ops import loss as core_loss
from corenn.ops import nn as core_nn

from corenn_numba._base import LazyModule, handles

jit = LazyModule("corenn_numba._nn_jit")  # the compiled loops; numba is imported when one first runs


def _rows_ok(a, axis) -> bool:
    """The compiled row loops need a float32/float64, C-contiguous, non-empty input reduced over its last axis."""
    return handles(a) and a.size > 0 and axis == a.ndim - 1 and a.flags.c_contiguous


# ---------------------------------------------------------------------------------------------------------
# softmax / log_softmax over the last axis
# ---------------------------------------------------------------------------------------------------------


def _as_rows(a):
    return a.reshape(-1, a.shape[-1])


def _row_max(a):
    return a.reshape(-1, a.shape[-1]).max(axis=1)


def _row_kernel(core_cls, log: bool):
    """The override of ``softmax`` (``log=False``) or ``log_softmax``: one compiled pass per row of the last axis."""

    class RowSoftmax(KernelOverride, core_cls):
        handles = staticmethod(_rows_ok)

        @staticmethod
        def forward(ctx, a, axis):
            out = np.empty_like(a)
            jit.softmax_rows(_as_rows(a), _row_max(a), _as_rows(out), log)
            ctx.save_for_backward(out)
            ctx.axis = axis
            return out

        @staticmethod
        def backward(ctx, grad):
            (out,) = ctx.saved
            grad = np.ascontiguousarray(grad, dtype=out.dtype)
            grad_in = np.empty_like(out)
            jit.softmax_rows_backward(_as_rows(out), _as_rows(grad), _as_rows(grad_in), log)
            return grad_in

    RowSoftmax.__name__ = RowSoftmax.__qualname__ = core_cls.__name__
    RowSoftmax.__doc__ = (f"``{'log_' if log else ''}softmax`` over the last axis in one compiled pass per row "
                          "(other axes: the core kernel).")
    return RowSoftmax


Softmax = _row_kernel(core_nn.Softmax, log=False)
LogSoftmax = _row_kernel(core_nn.LogSoftmax, log=True)


# ---------------------------------------------------------------------------------------------------------
# cross_entropy: log_softmax + nll + label smoothing in one pass per row
# ---------------------------------------------------------------------------------------------------------
#
# With coefficients q_c = w_c * ((1 - s) [c == t] + s / C) for a kept target t (0 for an ignored one),
# loss = sum(q) * log(sum exp(x - m)) - sum_c q_c (x_c - m) and d loss / d x = softmax(x) * sum(q) - q.
# Only sum(q) and the log-sum-exp are kept per row; q is re-derived from the target in backward.


class CrossEntropy(KernelOverride, core_loss.CrossEntropy):
    """Fused cross-entropy for class-index targets on (N, C) and (N, C, d1, ...) logits (probability targets:
    the core kernel)."""

    @staticmethod
    def handles(logits, target, weight=None, *, ignore_index, label_smoothing, reduction, prob_target):
        return (not prob_target and handles(logits, weight) and logits.size > 0
                and target.dtype.kind in "iu" and target.shape == logits.shape[:1] + logits.shape[2:])

    @staticmethod
    def forward(ctx, logits, target, weight=None, *, ignore_index, label_smoothing, reduction, prob_target):
        classes = logits.shape[1]
        # The core's own bounds check, so a bad target raises the same IndexError either way.
        check_targets(np, target, target != ignore_index, classes)
        dtype = logits.dtype
        planes = logits.ndim > 2
        # (N, C, d1, ...) as (N, C, D): the planes loops read the class axis strided, without a transpose.
        x = np.ascontiguousarray(logits).reshape(logits.shape[0], classes, -1) if planes else \
            np.ascontiguousarray(logits)
        flat_target = np.ascontiguousarray(target, dtype=np.int64).reshape(x.shape[:1] + x.shape[2:])
        use_weight = weight is not None
        weight_arr = np.ascontiguousarray(weight) if use_weight else np.zeros(1, dtype=dtype)
        loss = np.empty(flat_target.shape, dtype=np.float64)
        # The log-sum-exp as max + log(sum(exp(x - max))), both in the logits' dtype: backward's
        # exp((x - max) - log_total) stays in it, and keeps its precision for large logits.
        log_total = np.empty(flat_target.shape, dtype=dtype)
        qsum = np.empty(flat_target.shape, dtype=np.float64)
        ignore_index, label_smoothing = int(ignore_index), float(label_smoothing)
        if planes:
            row_max = np.empty(flat_target.shape, dtype=dtype)
            bad = jit.ce_forward_planes(x, row_max, flat_target, weight_arr, use_weight, ignore_index,
                                        label_smoothing, loss, log_total, qsum)
        else:
            row_max = x.max(axis=1)  # numpy's: vectorised, and a nan wins
            bad = jit.ce_forward(x, row_max, flat_target, weight_arr, use_weight, ignore_index, label_smoothing,
                                 loss, log_total, qsum)
        _check_target(bad, flat_target, classes)
        # Each sample's loss is rounded to the logits' dtype and the reduction runs in it, as in the core and
        # PyTorch: a weighted loss or a sum that overflows float32 is inf there, and so here.
        loss = loss.astype(dtype)
        denominator = None
        if reduction == "none":
            result = loss.reshape(target.shape)
        else:
            total = loss.sum()
            if reduction == "sum":
                result = total
            else:
                valid = flat_target != ignore_index
                denominator = valid.sum() if weight is None else weight[flat_target[valid]].sum()
                with np.errstate(invalid="ignore", divide="ignore", over="ignore"):  # all ignored: nan, as the core
                    result = total / denominator
        ctx.save_for_backward(x, row_max, flat_target, weight_arr, log_total, qsum, denominator)
        ctx.use_weight, ctx.ignore_index, ctx.label_smoothing = use_weight, ignore_index, label_smoothing
        ctx.reduction, ctx.logits_shape = reduction, logits.shape
        return np.asarray(result, dtype=dtype)

    @staticmethod
    def backward(ctx, grad):
        if not ctx.needs_input_grad[0]:
            return None, None, None
        x, row_max, target, weight, log_total, qsum, denominator = ctx.saved
        if ctx.reduction == "none":
            scale = np.ascontiguousarray(grad, dtype=np.float64).reshape(target.shape)
        else:
            factor = float(grad)
            if ctx.reduction == "mean":  # every target ignored: nothing contributed, the gradient is 0 (as the core)
                factor = factor / float(denominator) if denominator != 0 else 0.0
            scale = np.full(target.shape, factor)
        grad_x = np.empty_like(x)
        run = jit.ce_backward_planes if x.ndim == 3 else jit.ce_backward
        bad = run(x, row_max, target, weight, ctx.use_weight, ctx.ignore_index, ctx.label_smoothing, log_total, qsum,
                  scale, grad_x)
        _check_target(bad, target, x.shape[1])
        return grad_x.reshape(ctx.logits_shape), None, None


def _check_target(bad, target, classes):
    """The IndexError for a target the compiled loop found out of range (-1: none was)."""
    if bad >= 0:
        raise IndexError(f"Target {int(target.reshape(-1)[bad])} is out of bounds (expected a class index in "
                         f"[0, {classes - 1}])")


class Relu(KernelOverride, core_elementwise.Relu):
    """``relu`` for float32/float64 arrays: one compiled pass each way, with the core's values (see ``_nn_jit.relu``)."""

    @staticmethod
    def handles(a):
        return handles(a) and a.size > 0

    @staticmethod
    def forward(ctx, a):
        flat = np.ascontiguousarray(a).reshape(-1)
        out = jit.relu(flat, np.empty_like(flat)).reshape(a.shape)
        ctx.save_for_backward(out)
        return out

    @staticmethod
    def backward(ctx, grad):
        (out,) = ctx.saved
        flat = out.reshape(-1)
        grad = np.ascontiguousarray(grad, dtype=out.dtype).reshape(-1)
        return jit.relu_backward(flat, grad, np.empty_like(flat)).reshape(out.shape)


OVERRIDES = [("softmax", Softmax), ("log_softmax", LogSoftmax), ("cross_entropy", CrossEntropy), ("relu", Relu)]
