"""softmax, log_softmax and the fused cross-entropy, compiled with numba.

The core builds each of these from five to ten whole-array numpy passes (max,
subtract, exp, sum, divide, one-hot, ...), each allocating a temporary the size of
the input. Here one compiled loop per row does the work in cache: two passes over a
row for softmax, and cross-entropy never materialises the one-hot/coefficient
matrix ``q`` nor the probabilities -- backward recomputes ``exp(x - lse)`` from the
logits and the per-row log-sum-exp, which is cheaper than writing and re-reading a
saved (N, C) array.

Handled: float32/float64 C-contiguous inputs with the softmax axis last; cross-entropy
with class-index targets on (N, C) logits, any ``ignore_index``/``weight``/
``label_smoothing``/reduction. Everything else (probability targets, (N, C, d1, ...)
logits, float16, integer inputs, empty tensors, other softmax axes) runs the core kernel.

Example (nothing changes for the user; the dispatcher picks these kernels)::

    >>> import corenn, corenn.nn.functional as F
    >>> logits = corenn.randn(4, 10, requires_grad=True)
    >>> F.cross_entropy(logits, corenn.tensor([1, 0, 9, 3]), label_smoothing=0.1).backward()
"""
from __future__ import annotations

import numpy as np

from corenn.kernels import KernelOverride, check_targets
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
    """Fused cross-entropy for class-index targets (probability targets: the core kernel)."""

    @staticmethod
    def handles(logits, target, weight=None, *, ignore_index, label_smoothing, reduction, prob_target):
        # (N, C, d1, ...) logits: moving the class axis last costs two transposes and the rows are short
        # (a 8x21x32x32 segmentation loss measured 0.4x the core), so the core kernel keeps them.
        return (not prob_target and logits.ndim == 2 and handles(logits, weight) and logits.size > 0
                and target.dtype.kind in "iu")

    @staticmethod
    def forward(ctx, logits, target, weight=None, *, ignore_index, label_smoothing, reduction, prob_target):
        classes = logits.shape[1]
        # The core's own bounds check, so a bad target raises the same IndexError either way.
        check_targets(np, target, target != ignore_index, classes)
        rows = np.ascontiguousarray(logits)
        flat_target = target.reshape(-1).astype(np.int64, copy=False)
        dtype = logits.dtype
        use_weight = weight is not None
        weight_arr = weight if use_weight else np.zeros(1, dtype=dtype)
        loss = np.empty(rows.shape[0], dtype=np.float64)
        lse = np.empty(rows.shape[0], dtype=dtype)  # logits' dtype: backward's exp(x - lse) stays in it
        qsum = np.empty(rows.shape[0], dtype=np.float64)
        jit.ce_forward(rows, rows.max(axis=1), flat_target, weight_arr, use_weight, ignore_index, label_smoothing,
                       loss, lse, qsum)
        if reduction == "none":
            result = loss.reshape(target.shape)
            denominator = None
        else:
            total = loss.sum()
            if reduction == "sum":
                result = total
                denominator = None
            else:
                valid = flat_target != ignore_index
                denominator = valid.sum() if weight is None else weight[flat_target[valid]].sum(dtype=np.float64)
                with np.errstate(invalid="ignore", divide="ignore"):  # all targets ignored: nan, as the core
                    result = total / denominator
        ctx.save_for_backward(rows, flat_target, weight_arr, lse, qsum)
        ctx.use_weight, ctx.ignore_index, ctx.label_smoothing = use_weight, ignore_index, label_smoothing
        ctx.reduction, ctx.denominator = reduction, denominator
        return np.asarray(result, dtype=dtype)

    @staticmethod
    def backward(ctx, grad):
        if not ctx.needs_input_grad[0]:
            return None, None, None
        rows, target, weight, lse, qsum = ctx.saved
        if ctx.reduction == "none":
            scale = np.ascontiguousarray(grad, dtype=np.float64).reshape(-1)
        else:
            factor = float(grad) / ctx.denominator if ctx.reduction == "mean" else float(grad)
            scale = np.full(rows.shape[0], factor)
        grad_rows = np.empty_like(rows)
        jit.ce_backward(rows, target, weight, ctx.use_weight, ctx.ignore_index, ctx.label_smoothing, lse, qsum,
                     scale, grad_rows)
        return grad_rows, None, None


OVERRIDES = [("softmax", Softmax), ("log_softmax", LogSoftmax), ("cross_entropy", CrossEntropy)]
