"""The shared step loop of the optimizers whose update is one parameter at a time (Adadelta, Adamax, NAdam,
RAdam, ASGD, Rprop).

Each subclass says how a parameter's state starts (``_init_state``) and how one parameter moves
(``_update``, on raw arrays of the parameter's array module ``xp``, in place). The updates follow
PyTorch's single-tensor code path (what it runs on the CPU) operation for operation, so trajectories
agree to float32 rounding.
"""
from __future__ import annotations

from corenn.optim.optimizer import Optimizer
from corenn.optim.sgd import _reject_differentiable
from corenn.tensor.tensor import Tensor


def check_hyperparameters(lr, eps=None, weight_decay=None, betas=None) -> None:
    """PyTorch's ValueErrors for the hyperparameters most optimizers share."""
    if isinstance(lr, Tensor) and lr.numel() != 1:
        raise ValueError("Tensor lr must be 1-element")
    if not 0.0 <= lr:
        raise ValueError(f"Invalid learning rate: {lr}")
    if eps is not None and not 0.0 <= eps:
        raise ValueError(f"Invalid epsilon value: {eps}")
    if weight_decay is not None and not 0.0 <= weight_decay:
        raise ValueError(f"Invalid weight_decay value: {weight_decay}")
    if betas is not None:
        if not isinstance(betas, (tuple, list)) or len(betas) != 2:
            raise ValueError(f"betas must be a pair (beta1, beta2), got {betas!r}")
        for i, beta in enumerate(betas):
            if not 0.0 <= beta < 1.0:
                raise ValueError(f"Invalid beta parameter at index {i}: {beta}")


class PerParameterOptimizer(Optimizer):
    """Base of the per-parameter optimizers: ``step`` runs ``_update`` for every parameter that has a grad."""

    def __init__(self, params, defaults: dict) -> None:
        _reject_differentiable(defaults.get("differentiable", False))
        super().__init__(params, defaults)

    def __setstate__(self, state):
        super().__setstate__(state)
        for group in self.param_groups:
            group.setdefault("maximize", False)

    def step(self, closure=None):
        """Perform one update from the parameters' ``.grad``; returns ``closure()``'s loss if given."""
        loss = self._run_closure(closure)
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is None:
                    continue
                state = self.state[p]
                if len(state) == 0:
                    self._init_state(state, p, group)
                grad = p.grad._data
                if group.get("maximize", False):
                    grad = -grad
                state["step"]._data += 1
                self._update(p._device._xp, p._data, grad, state, group, float(state["step"]._data))
        return loss

    def _init_state(self, state: dict, param: Tensor, group: dict) -> None:
        raise NotImplementedError

    def _update(self, xp, param, grad, state: dict, group: dict, step: float) -> None:
        raise NotImplementedError


def state_array(state: dict, key: str):
    """The raw array of a state tensor (updated in place)."""
    return state[key]._data


def with_weight_decay(param, grad, weight_decay: float):
    """``grad + weight_decay * param`` (L2 penalty), a new array; ``grad`` itself when there is none."""
    return grad + weight_decay * param if weight_decay != 0 else grad
