"""ASGD: SGD with a decaying step and a running (Polyak) average of the iterates."""
from __future__ import annotations

from corenn import _dtype
from corenn.optim._per_parameter import PerParameterOptimizer, check_hyperparameters, state_array, with_weight_decay
from corenn.optim.adam import _zero_step, _zeros_like

__all__ = ["ASGD"]


class ASGD(PerParameterOptimizer):
    """Averaged SGD (mirrors ``torch.optim.ASGD``).

    ``p *= 1 - lambd * eta``; ``p -= eta * g``; ``ax`` averages the iterates from step ``t0``
    on; ``eta = lr / (1 + lambd * lr * t) ** alpha``. State: ``step``, ``eta``, ``mu``, ``ax``.

        >>> opt = corenn.optim.ASGD(model.parameters(), lr=1e-2, t0=100)
    """

    def __init__(self, params, lr: float = 1e-2, lambd: float = 1e-4, alpha: float = 0.75, t0: float = 1e6,
                 weight_decay: float = 0, foreach: bool | None = None, maximize: bool = False,
                 differentiable: bool = False, capturable: bool = False):
        check_hyperparameters(lr, None, weight_decay)
        super().__init__(params, dict(lr=lr, lambd=lambd, alpha=alpha, t0=t0, weight_decay=weight_decay,
                                      foreach=foreach, maximize=maximize, differentiable=differentiable,
                                      capturable=capturable))

    def _init_state(self, state, param, group):
        from corenn.tensor.tensor import tensor
        state["step"] = _zero_step()
        state["eta"] = tensor(float(group["lr"]), dtype=_dtype.float32)   # float32 0-d tensors, as PyTorch's
        state["mu"] = tensor(1.0, dtype=_dtype.float32)
        state["ax"] = _zeros_like(param)

    def _update(self, xp, param, grad, state, group, step):
        lr, lambd, alpha, t0 = float(group["lr"]), group["lambd"], group["alpha"], group["t0"]
        grad = with_weight_decay(param, grad, group["weight_decay"])
        eta, mu, ax = state_array(state, "eta"), state_array(state, "mu"), state_array(state, "ax")
        eta_value = float(eta)
        param *= 1 - lambd * eta_value
        param -= eta_value * grad
        if float(mu) != 1:
            ax += (param - ax) * mu
        else:
            ax[...] = param
        eta[...] = lr / ((1 + lambd * lr * step) ** alpha)
        mu[...] = 1 / max(1, step - t0)
