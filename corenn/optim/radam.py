"""RAdam: Adam whose adaptive step is switched on only once its variance estimate is tractable."""
from __future__ import annotations

import math

from corenn.optim._per_parameter import PerParameterOptimizer, check_hyperparameters, state_array, with_weight_decay
from corenn.optim.adam import _zero_step, _zeros_like

__all__ = ["RAdam"]


class RAdam(PerParameterOptimizer):
    """RAdam (mirrors ``torch.optim.RAdam``), with ``decoupled_weight_decay`` for RAdamW.

    While the length of the approximated SMA ``rho_t`` is at most 5 the step is plain
    momentum SGD with bias correction; after that Adam's step times the rectification
    term. State: ``step``, ``exp_avg``, ``exp_avg_sq``.

        >>> opt = corenn.optim.RAdam(model.parameters(), lr=1e-3)
    """

    def __init__(self, params, lr: float = 1e-3, betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-8,
                 weight_decay: float = 0, decoupled_weight_decay: bool = False, *, foreach: bool | None = None,
                 maximize: bool = False, capturable: bool = False, differentiable: bool = False):
        check_hyperparameters(lr, eps, weight_decay, betas)
        super().__init__(params, dict(lr=lr, betas=tuple(betas), eps=eps, weight_decay=weight_decay,
                                      decoupled_weight_decay=decoupled_weight_decay, maximize=maximize,
                                      foreach=foreach, capturable=capturable, differentiable=differentiable))

    def _init_state(self, state, param, group):
        state["step"] = _zero_step()
        state["exp_avg"] = _zeros_like(param)
        state["exp_avg_sq"] = _zeros_like(param)

    def _update(self, xp, param, grad, state, group, step):
        beta1, beta2 = group["betas"]
        lr, weight_decay = float(group["lr"]), group["weight_decay"]
        if weight_decay != 0 and group["decoupled_weight_decay"]:
            param *= 1 - lr * weight_decay
        elif weight_decay != 0:
            grad = with_weight_decay(param, grad, weight_decay)
        exp_avg, exp_avg_sq = state_array(state, "exp_avg"), state_array(state, "exp_avg_sq")
        exp_avg += (grad - exp_avg) * (1 - beta1)
        exp_avg_sq *= beta2
        exp_avg_sq += (1 - beta2) * (grad * grad)
        bias_correction1 = 1 - beta1 ** step
        bias_correction2 = 1 - beta2 ** step
        bias_corrected_exp_avg = exp_avg / bias_correction1
        rho_inf = 2 / (1 - beta2) - 1
        rho_t = rho_inf - 2 * step * (beta2 ** step) / bias_correction2
        if rho_t > 5.0:
            rect = math.sqrt((rho_t - 4) * (rho_t - 2) * rho_inf / ((rho_inf - 4) * (rho_inf - 2) * rho_t))
            adaptive_lr = math.sqrt(bias_correction2) / (xp.sqrt(exp_avg_sq) + group["eps"])
            param -= bias_corrected_exp_avg * lr * adaptive_lr * rect
        else:
            param -= bias_corrected_exp_avg * lr
