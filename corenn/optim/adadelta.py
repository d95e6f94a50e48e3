"""Adadelta: step sizes from running averages of squared gradients and squared updates."""
from __future__ import annotations

from corenn.optim._per_parameter import PerParameterOptimizer, check_hyperparameters, state_array, with_weight_decay
from corenn.optim.adam import _zero_step, _zeros_like

__all__ = ["Adadelta"]


class Adadelta(PerParameterOptimizer):
    """Adadelta (mirrors ``torch.optim.Adadelta``).

    ``v = rho * v + (1 - rho) * g^2``; ``delta = sqrt(u + eps) / sqrt(v + eps) * g``;
    ``u = rho * u + (1 - rho) * delta^2``; ``p -= lr * delta``. State per parameter:
    ``step``, ``square_avg`` (v), ``acc_delta`` (u).

        >>> opt = corenn.optim.Adadelta(model.parameters(), lr=1.0)
        >>> opt.zero_grad(); loss.backward(); opt.step()
    """

    def __init__(self, params, lr: float = 1.0, rho: float = 0.9, eps: float = 1e-6, weight_decay: float = 0,
                 foreach: bool | None = None, *, capturable: bool = False, maximize: bool = False,
                 differentiable: bool = False):
        check_hyperparameters(lr, eps, weight_decay)
        if not 0.0 <= rho <= 1.0:
            raise ValueError(f"Invalid rho value: {rho}")
        super().__init__(params, dict(lr=lr, rho=rho, eps=eps, weight_decay=weight_decay, foreach=foreach,
                                      capturable=capturable, maximize=maximize, differentiable=differentiable))

    def _init_state(self, state, param, group):
        state["step"] = _zero_step()
        state["square_avg"] = _zeros_like(param)
        state["acc_delta"] = _zeros_like(param)

    def _update(self, xp, param, grad, state, group, step):
        rho, eps = group["rho"], group["eps"]
        grad = with_weight_decay(param, grad, group["weight_decay"])
        square_avg, acc_delta = state_array(state, "square_avg"), state_array(state, "acc_delta")
        square_avg *= rho
        square_avg += (1 - rho) * (grad * grad)
        std = xp.sqrt(square_avg + eps)
        delta = xp.sqrt(acc_delta + eps) / std * grad
        acc_delta *= rho
        acc_delta += (1 - rho) * (delta * delta)
        param -= float(group["lr"]) * delta
