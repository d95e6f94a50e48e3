"""Adagrad: per-coordinate step sizes from the sum of squared gradients."""
from __future__ import annotations

from corenn.optim.adam import _zero_step
from corenn.optim.optimizer import Optimizer, _effective_grad, _ScratchArrays
from corenn.optim.sgd import _reject_differentiable
from corenn.tensor.tensor import Tensor

__all__ = ["Adagrad", "adagrad"]


class Adagrad(Optimizer):
    """Adagrad (mirrors ``torch.optim.Adagrad``), step for step the same updates.

    ``sum += g * g``; ``p -= clr * g / (sqrt(sum) + eps)`` with
    ``clr = lr / (1 + (t - 1) * lr_decay)``. As in PyTorch the state (``step``, ``sum``
    filled with ``initial_accumulator_value``) exists from construction on.
    Sparse gradients do not exist in corenn.

    Example::

        >>> opt = corenn.optim.Adagrad(model.parameters(), lr=1e-2, lr_decay=1e-4)
        >>> opt.zero_grad(); loss.backward(); opt.step()
    """

    def __init__(self, params, lr: float = 1e-2, lr_decay: float = 0, weight_decay: float = 0,
                 initial_accumulator_value: float = 0, eps: float = 1e-10, foreach: bool | None = None, *,
                 maximize: bool = False, differentiable: bool = False, fused: bool | None = None):
        if isinstance(lr, Tensor) and lr.numel() != 1:
            raise ValueError("Tensor lr must be 1-element")
        if not 0.0 <= lr:
            raise ValueError(f"Invalid learning rate: {lr}")
        if not 0.0 <= lr_decay:
            raise ValueError(f"Invalid lr_decay value: {lr_decay}")
        if not 0.0 <= weight_decay:
            raise ValueError(f"Invalid weight_decay value: {weight_decay}")
        if not 0.0 <= initial_accumulator_value:
            raise ValueError(f"Invalid initial_accumulator_value value: {initial_accumulator_value}")
        if not 0.0 <= eps:
            raise ValueError(f"Invalid epsilon value: {eps}")
        _reject_differentiable(differentiable)
        if fused and foreach:
            raise RuntimeError("`fused` and `foreach` cannot be `True` together.")
        defaults = dict(lr=lr, lr_decay=lr_decay, eps=eps, weight_decay=weight_decay,
                        initial_accumulator_value=initial_accumulator_value, foreach=foreach, maximize=maximize,
                        differentiable=differentiable, fused=fused)
        super().__init__(params, defaults)
        for group in self.param_groups:
            for p in group["params"]:
                self._init_state(p, group)

    def _init_state(self, p, group):
        state = self.state[p]
        state["step"] = _zero_step()
        state["sum"] = Tensor._wrap(p._device._xp.full_like(p._data, group["initial_accumulator_value"]), p._device)

    def __setstate__(self, state):
        super().__setstate__(state)
        for group in self.param_groups:
            group.setdefault("maximize", False)

    def step(self, closure=None):
        """Perform one update from the parameters' ``.grad``; returns ``closure()``'s loss if given."""
        loss = self._run_closure(closure)
        for group in self.param_groups:
            params, grads, sums, steps = [], [], [], []
            for p in group["params"]:
                if p.grad is None:
                    continue
                state = self.state[p]
                if "sum" not in state:  # a group added after construction
                    self._init_state(p, group)
                params.append(p)
                grads.append(p.grad)
                sums.append(state["sum"])
                steps.append(state["step"])
            if not params:
                continue
            adagrad(params, grads, sums, steps, lr=group["lr"], weight_decay=group["weight_decay"],
                    lr_decay=group["lr_decay"], eps=group["eps"], maximize=group["maximize"], scratch=self._scratch())
        return loss


def adagrad(params: list[Tensor], grads: list[Tensor], state_sums: list[Tensor], state_steps: list[Tensor], *,
            lr: float, weight_decay: float, lr_decay: float, eps: float, maximize: bool, scratch=None) -> None:
    """Functional Adagrad over lists (``torch.optim._functional.adagrad``), updating everything in place.

    Example::

        >>> adagrad([w], [w.grad], [s], [step], lr=1e-2, weight_decay=0, lr_decay=0, eps=1e-10, maximize=False)
    """
    lr, weight_decay, lr_decay, eps = float(lr), float(weight_decay), float(lr_decay), float(eps)
    scratch = scratch if scratch is not None else _ScratchArrays()
    for i, param in enumerate(params):
        xp = param._device._xp
        p = param._data
        step_array = state_steps[i]._data
        step_array += 1
        step = float(step_array)
        g = _effective_grad(xp, scratch, grads[i]._data, p, maximize, weight_decay)
        clr = lr / (1 + (step - 1) * lr_decay)
        tmp = scratch.get(xp, p, 0)
        std = scratch.get(xp, p, 1)
        # state_sum.addcmul_(g, g, value=1); std = sqrt(state_sum) + eps
        state_sum = state_sums[i]._data
        state_sum += xp.multiply(g, g, out=tmp)
        xp.sqrt(state_sum, out=std)
        std += eps
        # p.addcdiv_(g, std, value=-clr)
        xp.multiply(g, -clr, out=tmp)
        tmp /= std
        p += tmp
