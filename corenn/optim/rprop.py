"""Rprop: per-element step sizes grown or shrunk by the sign agreement of successive gradients."""
from __future__ import annotations

from corenn.optim._per_parameter import PerParameterOptimizer, check_hyperparameters, state_array
from corenn.optim.adam import _zero_step, _zeros_like

__all__ = ["Rprop"]


class Rprop(PerParameterOptimizer):
    """Resilient backpropagation (mirrors ``torch.optim.Rprop``).

    Where the gradient keeps its sign the element's step size grows by ``etas[1]``, where it
    flips it shrinks by ``etas[0]`` (and that element skips this update), clamped to
    ``step_sizes``; ``p -= sign(g) * step_size``. State: ``step``, ``prev``, ``step_size``.

        >>> opt = corenn.optim.Rprop(model.parameters(), lr=1e-2)
    """

    def __init__(self, params, lr: float = 1e-2, etas: tuple[float, float] = (0.5, 1.2),
                 step_sizes: tuple[float, float] = (1e-6, 50), *, capturable: bool = False,
                 foreach: bool | None = None, maximize: bool = False, differentiable: bool = False):
        check_hyperparameters(lr)
        if not 0.0 < etas[0] < 1.0 < etas[1]:
            raise ValueError(f"Invalid eta values: {etas[0]}, {etas[1]}")
        super().__init__(params, dict(lr=lr, etas=tuple(etas), step_sizes=tuple(step_sizes), foreach=foreach,
                                      maximize=maximize, differentiable=differentiable, capturable=capturable))

    def _init_state(self, state, param, group):
        state["step"] = _zero_step()
        state["prev"] = _zeros_like(param)
        step_size = _zeros_like(param)
        step_size._data[...] = float(group["lr"])
        state["step_size"] = step_size

    def _update(self, xp, param, grad, state, group, step):
        etaminus, etaplus = group["etas"]
        step_size_min, step_size_max = group["step_sizes"]
        prev, step_size = state_array(state, "prev"), state_array(state, "step_size")
        agreement = xp.sign(grad * prev)
        factor = xp.where(agreement > 0, etaplus, xp.where(agreement < 0, etaminus, 1.0)).astype(step_size.dtype)
        step_size *= factor
        xp.clip(step_size, step_size_min, step_size_max, out=step_size)
        grad = xp.where(agreement < 0, 0, grad).astype(grad.dtype)    # a sign flip skips this element's update
        param -= xp.sign(grad) * step_size
        prev[...] = grad

