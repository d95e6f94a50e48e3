"""linear (the dense layer: ``x @ weight.T + bias``, forward and both gradients) on the microkernel.

numpy's matmul hands these to OpenBLAS, which on CPUs newer than its kernel tables (the
development machine's AMD Zen 5) runs its AVX2 kernels at half the machine's vector width.
Here all three products of a dense layer -- ``x @ W.T`` (+ bias, added while storing),
``grad @ W`` and ``grad.T @ x`` -- run on ``_gemm_jit``'s microkernel: the left operand is
packed once per call, each block of output columns packs its slice of the right operand,
and the blocks are split over threads by ``_threads.split``. Transposed operands are
strided views; packing reads them along whichever axis is contiguous.

Handled: float32/float64 with at least ``MIN_ROWS`` rows (batch) and a product big enough
to be worth the packing (``MIN_WORK`` multiply-adds), without a bias or with one bias per
output feature; inputs with more than 2 dims are seen as 2-d. Smaller or other products
(single vectors, integer or float16 dtypes, biases that broadcast) run the core kernel, i.e.
numpy's matmul.
"""
from __future__ import annotations

import numpy as np

from corenn.kernels import KernelOverride, recompute_overflow
from corenn.ops import nn as core_nn

from corenn_numba._base import LazyModule, handles
from corenn_numba._threads import split

gemm = LazyModule("corenn_numba._gemm_jit")

#: Products with fewer rows than a microkernel tile (8) would compute mostly padding: numpy does those.
MIN_ROWS = 8
#: Below this many multiply-adds the packing and the call cost more than BLAS's small-matrix paths.
MIN_WORK = 1 << 16


def matmul(a, b, bias=None, out=None):
    """``a @ b (+ bias)`` for 2-d float arrays of one dtype, any strides, into ``out`` (any strides) or a new array.

    ``bias`` is None or a vector of ``b``'s columns; the compiled loops check every shape.
    """
    m, n = a.shape[0], b.shape[1]
    columns = gemm.nr(a.dtype)
    panels = np.zeros((-(-m // gemm.MR), a.shape[1] * gemm.MR), dtype=a.dtype)
    gemm.pack_rows(a, panels)
    if out is None:
        out = np.empty((m, n), dtype=a.dtype)
    has_bias = bias is not None
    bias = np.ascontiguousarray(bias) if has_bias else np.empty(0, dtype=a.dtype)
    split(gemm.matmul_columns, -(-n // columns), m * n * a.shape[1], panels, m, b, out, bias, has_bias, columns)
    return out


def _worth_it(m, k, n):
    return min(m, n) >= MIN_ROWS and k > 0 and m * k * n >= MIN_WORK


class Linear(KernelOverride, core_nn.Linear):
    """``linear`` for float32/float64 batches: the three products on the microkernel."""

    @staticmethod
    def handles(x, weight, bias=None):
        # A bias that broadcasts ((1,), (), 2-d) is the core's: the microkernel adds one per output column.
        return (x.ndim >= 2 and weight.ndim == 2 and handles(x, weight, bias)
                and (bias is None or bias.shape == weight.shape[:1])
                and _worth_it(x.size // max(x.shape[-1], 1), weight.shape[1], weight.shape[0]))

    @staticmethod
    def forward(ctx, x, weight, bias=None):
        rows = x.size // x.shape[-1]
        x2 = x.reshape(rows, x.shape[-1])
        ctx.save_for_backward(x2, weight)
        ctx.params = (x.shape, bias is not None)
        out = matmul(x2, weight.T, bias)
        # Outputs that overflowed float32 are computed again in float64, as the core does (the additions'
        # order would otherwise decide between nan and +-inf).
        out = recompute_overflow(np, out, lambda: matmul(x2.astype(np.float64), weight.T.astype(np.float64),
                                                         None if bias is None else bias.astype(np.float64)))
        return out.reshape(x.shape[:-1] + (weight.shape[0],))

    @staticmethod
    def backward(ctx, grad):
        x2, weight = ctx.saved
        x_shape, has_bias = ctx.params
        grad2 = grad.reshape(x2.shape[0], weight.shape[0])
        grad_x = grad_weight = grad_bias = None
        need_x, need_weight, *need_bias = ctx.needs_input_grad
        if need_x:
            grad_x = matmul(grad2, weight).reshape(x_shape)
        if need_weight:
            grad_weight = matmul(grad2.T, x2)
        if has_bias and need_bias[0]:
            grad_bias = grad2.sum(axis=0)
        return (grad_x, grad_weight, grad_bias) if has_bias else (grad_x, grad_weight)


OVERRIDES = [("linear", Linear)]
