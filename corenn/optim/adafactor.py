"""Adafactor (Shazeer & Stern, 2018): Adam-like steps with a factored second moment for matrices."""
from __future__ import annotations

import math

from corenn.optim._per_parameter import PerParameterOptimizer, state_array
from corenn.optim.adam import _zero_step, _zeros_like
from corenn.tensor.tensor import Tensor

__all__ = ["Adafactor"]


def _machine_epsilon(dtype) -> float:
    import numpy
    if dtype.kind == "f":
        return float(numpy.finfo(dtype).eps)
    import ml_dtypes  # bfloat16 and the float8 types (dtype kind "V") come from ml_dtypes
    return float(ml_dtypes.finfo(dtype).eps)


def _lerp_(xp, start, end, weight):
    """``start.lerp_(end, weight)`` with PyTorch's two formulas (exact at both ends)."""
    if weight < 0.5:
        start += weight * (end - start)
    else:
        start[...] = end - (end - start) * (1 - weight)


class Adafactor(PerParameterOptimizer):
    """Adafactor as ``torch.optim.Adafactor`` (no first moment; ``beta2_t = 1 - t ** beta2_decay``).

    For a parameter of 2 or more dims the second moment is kept as row and column means of ``g**2``
    (``row_var`` (..., R, 1), ``col_var`` (..., 1, C)), estimated as ``row_var @ col_var / mean(row_var)``;
    a vector keeps a full ``variance``. The step is ``-alpha * u / max(1, rms(u) / d)`` with
    ``u = g / sqrt(max(v, eps1**2))`` and ``alpha = max(eps2, rms(p)) * min(lr, 1 / sqrt(t))``; weight
    decay scales ``p`` by ``1 - lr * weight_decay`` first. ``eps1=None`` is the machine epsilon of the
    parameter's dtype (PyTorch takes the group's first parameter's, the same for one dtype).

        >>> opt = corenn.optim.Adafactor(model.parameters(), lr=1e-2)
    """

    _reduced_state_keys = frozenset({"row_var", "col_var"})

    def __init__(self, params, lr: float = 1e-2, beta2_decay: float = -0.8, eps=(None, 1e-3), d: float = 1.0,
                 weight_decay: float = 0.0, *, foreach: bool | None = None, maximize: bool = False):
        if isinstance(lr, Tensor) and lr.numel() != 1:
            raise ValueError("Tensor lr must be 1-element")
        if not 0.0 <= lr:
            raise ValueError(f"Learning rate should be >= 0 but is: {lr}")
        if not 0.0 >= beta2_decay:
            raise ValueError(f"beta2_decay should be <= 0 but is: {beta2_decay}")
        if eps[0] is not None and not 0.0 <= eps[0]:
            raise ValueError(f"epsilon1 should be >= 0 but is: {eps[0]}")
        if not 0.0 <= eps[1]:
            raise ValueError(f"epsilon2 should be >= 0 but is: {eps[1]}")
        if not 1.0 <= d:
            raise ValueError(f"Clipping threshold d should be >= 1 but is: {d}")
        if not 0.0 <= weight_decay:
            raise ValueError(f"weight_decay should be >= 0 but is: {weight_decay}")
        super().__init__(params, dict(lr=lr, beta2_decay=beta2_decay, eps=eps, d=d, weight_decay=weight_decay,
                                      foreach=foreach, maximize=maximize))

    def _init_state(self, state, param, group):
        if param.dtype.is_complex:
            raise RuntimeError("Adafactor does not support complex parameters")
        state["step"] = _zero_step()
        grad = param.grad
        if grad.ndim > 1:
            xp = grad._device._xp
            row_shape, col_shape = list(grad.shape), list(grad.shape)
            row_shape[-1], col_shape[-2] = 1, 1
            state["row_var"] = Tensor._wrap(xp.zeros(row_shape, dtype=grad._data.dtype), grad._device)
            state["col_var"] = Tensor._wrap(xp.zeros(col_shape, dtype=grad._data.dtype), grad._device)
        else:
            state["variance"] = _zeros_like(grad)

    def _update(self, xp, param, grad, state, group, step):
        lr, d, weight_decay = float(group["lr"]), group["d"], group["weight_decay"]
        eps1, eps2 = group["eps"]
        if eps1 is None:
            eps1 = _machine_epsilon(param.dtype)
        one_minus_beta2 = step ** group["beta2_decay"]
        rho = min(lr, 1 / step ** 0.5)
        alpha = max(eps2, float(xp.sqrt((param * param).sum())) / math.sqrt(param.size)) * rho
        if weight_decay != 0:
            param *= 1 - lr * weight_decay
        if grad.ndim > 1:
            row_var, col_var = state_array(state, "row_var"), state_array(state, "col_var")
            squared = grad * grad
            _lerp_(xp, row_var, squared.sum(axis=-1, keepdims=True) / grad.shape[-1], one_minus_beta2)
            _lerp_(xp, col_var, squared.sum(axis=-2, keepdims=True) / grad.shape[-2], one_minus_beta2)
            estimate = xp.matmul(row_var, col_var)
            estimate /= xp.maximum(row_var.mean(axis=-2, keepdims=True), eps1)
        else:
            variance = state_array(state, "variance")
            _lerp_(xp, variance, grad * grad, one_minus_beta2)
            estimate = variance.copy()
        update = 1 / xp.sqrt(xp.maximum(estimate, eps1 * eps1)) * grad
        denom = max(1.0, float(xp.sqrt((update * update).sum())) / (math.sqrt(update.size) * d))
        param -= (alpha / denom) * update.astype(param.dtype, copy=False)
