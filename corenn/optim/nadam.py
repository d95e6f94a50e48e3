"""NAdam: Adam with Nesterov momentum and a momentum-decay schedule."""
from __future__ import annotations

from corenn import _dtype
from corenn.optim._per_parameter import PerParameterOptimizer, check_hyperparameters, state_array, with_weight_decay
from corenn.optim.adam import _zero_step, _zeros_like

__all__ = ["NAdam"]


class NAdam(PerParameterOptimizer):
    """NAdam (mirrors ``torch.optim.NAdam``), with ``decoupled_weight_decay`` for NAdamW.

    ``mu_t = beta1 * (1 - 0.5 * 0.96 ** (t * momentum_decay))``; the step mixes the
    current gradient and the first moment, each with its own bias correction through
    the running product of the ``mu_t``. State: ``step``, ``mu_product``, ``exp_avg``, ``exp_avg_sq``.

        >>> opt = corenn.optim.NAdam(model.parameters(), lr=2e-3)
    """

    def __init__(self, params, lr: float = 2e-3, betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-8,
                 weight_decay: float = 0, momentum_decay: float = 4e-3, decoupled_weight_decay: bool = False, *,
                 foreach: bool | None = None, maximize: bool = False, capturable: bool = False,
                 differentiable: bool = False):
        check_hyperparameters(lr, eps, weight_decay, betas)
        if not 0.0 <= momentum_decay:
            raise ValueError(f"Invalid momentum_decay value: {momentum_decay}")
        super().__init__(params, dict(lr=lr, betas=tuple(betas), eps=eps, weight_decay=weight_decay,
                                      momentum_decay=momentum_decay, decoupled_weight_decay=decoupled_weight_decay,
                                      maximize=maximize, foreach=foreach, capturable=capturable,
                                      differentiable=differentiable))

    def _init_state(self, state, param, group):
        from corenn.tensor.tensor import tensor
        state["step"] = _zero_step()
        state["mu_product"] = tensor(1.0, dtype=_dtype.float32)   # a float32 0-d tensor, as PyTorch keeps it
        state["exp_avg"] = _zeros_like(param)
        state["exp_avg_sq"] = _zeros_like(param)

    def _update(self, xp, param, grad, state, group, step):
        beta1, beta2 = group["betas"]
        lr, eps, weight_decay, momentum_decay = float(group["lr"]), group["eps"], group["weight_decay"], \
            group["momentum_decay"]
        bias_correction2 = 1 - beta2 ** step
        if weight_decay != 0 and group["decoupled_weight_decay"]:
            param *= 1 - lr * weight_decay
        elif weight_decay != 0:
            grad = with_weight_decay(param, grad, weight_decay)
        mu = beta1 * (1.0 - 0.5 * (0.96 ** (step * momentum_decay)))
        mu_next = beta1 * (1.0 - 0.5 * (0.96 ** ((step + 1) * momentum_decay)))
        mu_product = state_array(state, "mu_product")
        mu_product *= mu                                       # float32 arithmetic, as PyTorch's tensor
        exp_avg, exp_avg_sq = state_array(state, "exp_avg"), state_array(state, "exp_avg_sq")
        exp_avg += (grad - exp_avg) * (1 - beta1)
        exp_avg_sq *= beta2
        exp_avg_sq += (1 - beta2) * (grad * grad)
        denom = xp.sqrt(exp_avg_sq / bias_correction2) + eps
        product = float(mu_product)
        product_next = product * mu_next
        param += (-lr * (1.0 - mu) / (1.0 - product)) * (grad / denom)
        param += ((-lr * mu_next) / (1.0 - product_next)) * (exp_avg / denom)
