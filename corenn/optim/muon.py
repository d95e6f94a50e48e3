"""Muon (Jordan et al., 2024): momentum whose update is orthogonalized by a Newton-Schulz iteration."""
from __future__ import annotations

import math

from corenn.optim._per_parameter import PerParameterOptimizer, state_array
from corenn.optim.adam import _zeros_like
from corenn.tensor.tensor import Tensor

__all__ = ["Muon"]

EPS = 1e-7
DEFAULT_A, DEFAULT_B, DEFAULT_C = 3.4445, -4.7750, 2.0315
DEFAULT_NS_STEPS = 5


def _bfloat16(xp, x):
    """``x`` (float32) rounded to bfloat16 (nearest, ties to even) and held in float32.

    PyTorch runs Muon's iteration in bfloat16: each matmul accumulates in float32 and rounds its result
    once; rounding here at the same places reproduces it (up to float32 summation order).
    """
    # On the float32 bit pattern, read as int32: two's-complement sums wrap exactly as unsigned ones
    # would, and -65536 is the mask 0xFFFF0000 (keep the sign, exponent and top 7 mantissa bits).
    bits = xp.asarray(x, dtype=xp.float32).view(xp.int32)  # same-size dtypes: a view at any strides
    rounded = (bits + (((bits >> 16) & 1) + 0x7FFF)) & xp.int32(-65536)
    rounded = xp.where(xp.isnan(x), bits | xp.int32(0x00400000), rounded)  # NaN stays NaN
    return rounded.astype(xp.int32).view(xp.float32)


def _zeropower_via_newtonschulz(xp, grad, ns_coefficients, ns_steps, eps):
    """PyTorch's quintic Newton-Schulz iteration towards the orthogonal factor of ``grad`` (2-d), in bfloat16."""
    if ns_steps >= 100:
        raise ValueError("Number of steps must be less than 100 for computational efficiency")
    if grad.ndim != 2:
        raise ValueError("Input tensor gradient must be a 2D matrix")
    if len(ns_coefficients) != 3:
        raise ValueError("Coefficients must be a tuple of exactly 3 values")
    a, b, c = ns_coefficients
    x = _bfloat16(xp, grad.astype(xp.float32))
    tall = grad.shape[0] > grad.shape[1]
    if tall:
        x = x.T
    norm = _bfloat16(xp, xp.sqrt((x * x).sum(dtype=xp.float32)))
    norm = max(float(norm), float(_bfloat16(xp, xp.float32(eps))))
    x = _bfloat16(xp, x / xp.float32(norm))
    for _ in range(ns_steps):
        gram = _bfloat16(xp, x @ x.T)
        gram_update = _bfloat16(xp, xp.float32(b) * gram + xp.float32(c) * (gram @ gram))
        x = _bfloat16(xp, xp.float32(a) * x + gram_update @ x)
    return x.T if tall else x


def _adjust_lr(lr, adjust_lr_fn, shape):
    rows, columns = shape[:2]
    if adjust_lr_fn is None or adjust_lr_fn == "original":
        ratio = math.sqrt(max(1, rows / columns))
    elif adjust_lr_fn == "match_rms_adamw":
        ratio = 0.2 * math.sqrt(max(rows, columns))
    else:
        ratio = 1.0
    return lr * ratio


class Muon(PerParameterOptimizer):
    """Muon as ``torch.optim.Muon``, for 2-d parameters (hidden layers' weights; use AdamW for the rest).

    ``buf = lerp(buf, g, 1 - momentum)``; the update ``lerp(g, buf, momentum)`` (Nesterov) or ``buf`` is
    orthogonalized by ``ns_steps`` Newton-Schulz steps with ``ns_coefficients``, in bfloat16 as PyTorch
    computes it; then ``p *= 1 - lr * weight_decay`` and ``p -= lr * sqrt(max(1, rows / cols)) * update``
    (``adjust_lr_fn='match_rms_adamw'``: ``0.2 * sqrt(max(rows, cols))``).

        >>> opt = corenn.optim.Muon([p for p in model.parameters() if p.ndim == 2], lr=0.02)
    """

    def __init__(self, params, lr: float = 1e-3, weight_decay: float = 0.1, momentum: float = 0.95,
                 nesterov: bool = True, ns_coefficients=(DEFAULT_A, DEFAULT_B, DEFAULT_C), eps: float = EPS,
                 ns_steps: int = DEFAULT_NS_STEPS, adjust_lr_fn: str | None = None):
        if isinstance(lr, Tensor) and lr.numel() != 1:
            raise ValueError("Tensor lr must be 1-element")
        if not 0.0 <= lr:
            raise ValueError(f"Learning rate should be >= 0 but is: {lr}")
        if not 0.0 <= momentum:
            raise ValueError(f"momentum should be >= 0 but is: {momentum}")
        if not 0.0 <= weight_decay:
            raise ValueError(f"weight decay should be >= 0 but is: {weight_decay}")
        if adjust_lr_fn is not None and adjust_lr_fn not in ("original", "match_rms_adamw"):
            raise ValueError(f"Adjust learning rate function {adjust_lr_fn} is not supported")
        super().__init__(params, dict(lr=lr, weight_decay=weight_decay, momentum=momentum, nesterov=nesterov,
                                      ns_coefficients=ns_coefficients, eps=eps, ns_steps=ns_steps,
                                      adjust_lr_fn=adjust_lr_fn))
        for group in self.param_groups:
            for p in group["params"]:
                if p.ndim != 2:
                    raise ValueError(f"Muon only supports 2D parameters whereas we found a parameter with size: "
                                     f"{p.size()}")

    def step(self, closure=None):
        """One Muon update of every parameter with a gradient; returns ``closure()``'s loss if given."""
        loss = self._run_closure(closure)
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is None:
                    continue
                if p.dtype.is_complex:
                    raise RuntimeError("Muon does not support complex parameters")
                state = self.state[p]
                if "momentum_buffer" not in state:
                    state["momentum_buffer"] = _zeros_like(p.grad)
                self._update(p._device._xp, p._data, p.grad._data, state, group, 0.0)
        return loss

    def _update(self, xp, param, grad, state, group, step):
        if grad.ndim != 2:
            raise ValueError("Param gradient must be a 2D matrix")
        momentum, lr = group["momentum"], float(group["lr"])
        buf = state_array(state, "momentum_buffer")
        _lerp_(buf, grad, 1 - momentum)
        if group["nesterov"]:
            update = grad.copy()
            _lerp_(update, buf, momentum)
        else:
            update = buf
        update = _zeropower_via_newtonschulz(xp, update, group["ns_coefficients"], group["ns_steps"], group["eps"])
        adjusted = _adjust_lr(lr, group["adjust_lr_fn"], param.shape)
        param *= 1 - lr * group["weight_decay"]
        param -= (adjusted * update).astype(param.dtype, copy=False)


def _lerp_(start, end, weight):
    """``start.lerp_(end, weight)`` with PyTorch's two formulas."""
    if weight < 0.5:
        start += weight * (end - start)
    else:
        start[...] = end - (end - start) * (1 - weight)
