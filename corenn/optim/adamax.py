"""Adamax: Adam with the infinity norm in place of the second moment."""
from __future__ import annotations

from corenn.optim._per_parameter import PerParameterOptimizer, check_hyperparameters, state_array, with_weight_decay
from corenn.optim.adam import _zero_step, _zeros_like

__all__ = ["Adamax"]


class Adamax(PerParameterOptimizer):
    """Adamax (mirrors ``torch.optim.Adamax``).

    ``m = lerp(m, g, 1 - beta1)``; ``u = max(beta2 * u, |g| + eps)``;
    ``p -= lr / (1 - beta1**t) * m / u``. State: ``step``, ``exp_avg``, ``exp_inf``.

        >>> opt = corenn.optim.Adamax(model.parameters(), lr=2e-3)
    """

    def __init__(self, params, lr: float = 2e-3, betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-8,
                 weight_decay: float = 0, foreach: bool | None = None, *, maximize: bool = False,
                 differentiable: bool = False, capturable: bool = False):
        check_hyperparameters(lr, eps, weight_decay, betas)
        super().__init__(params, dict(lr=lr, betas=tuple(betas), eps=eps, weight_decay=weight_decay,
                                      foreach=foreach, maximize=maximize, differentiable=differentiable,
                                      capturable=capturable))

    def _init_state(self, state, param, group):
        state["step"] = _zero_step()
        state["exp_avg"] = _zeros_like(param)
        state["exp_inf"] = _zeros_like(param)

    def _update(self, xp, param, grad, state, group, step):
        beta1, beta2 = group["betas"]
        grad = with_weight_decay(param, grad, group["weight_decay"])
        exp_avg, exp_inf = state_array(state, "exp_avg"), state_array(state, "exp_inf")
        exp_avg += (grad - exp_avg) * (1 - beta1)
        exp_inf *= beta2
        xp.maximum(exp_inf, xp.abs(grad) + group["eps"], out=exp_inf)
        clr = float(group["lr"]) / (1 - beta1 ** step)
        param -= clr * (exp_avg / exp_inf)
