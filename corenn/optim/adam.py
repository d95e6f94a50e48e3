"""Adam and AdamW (decoupled weight decay), with AMSGrad."""
from __future__ import annotations

import math

from corenn import _dtype
from corenn.optim.optimizer import Optimizer, _effective_grad, _ScratchArrays
from corenn.optim.sgd import _reject_differentiable
from corenn.tensor.tensor import Tensor

__all__ = ["Adam", "AdamW", "adam"]


class Adam(Optimizer):
    """Adam (mirrors ``torch.optim.Adam``), step for step the same updates.

    Per parameter: ``m = lerp(m, g, 1 - beta1)``, ``v = beta2 * v + (1 - beta2) * g * g``,
    ``p -= lr / (1 - beta1**t) * m / (sqrt(v) / sqrt(1 - beta2**t) + eps)``; ``amsgrad``
    uses the running maximum of ``v``. ``weight_decay`` adds ``wd * p`` to the gradient
    (L2), or with ``decoupled_weight_decay=True`` (what :class:`AdamW` sets) shrinks
    ``p *= 1 - lr * wd`` first. State per parameter: ``step`` (a float32 0-d tensor),
    ``exp_avg``, ``exp_avg_sq`` and, with amsgrad, ``max_exp_avg_sq``.

    Example::

        >>> w = corenn.randn(3, 1, requires_grad=True)
        >>> opt = corenn.optim.Adam([w], 0.1)
        >>> loss = ((x @ w) - y).pow(2).mean()
        >>> opt.zero_grad(); loss.backward(); opt.step()
    """

    def __init__(self, params, lr: float = 1e-3, betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-8,
                 weight_decay: float = 0, amsgrad: bool = False, *, foreach: bool | None = None,
                 maximize: bool = False, capturable: bool = False, differentiable: bool = False,
                 fused: bool | None = None, decoupled_weight_decay: bool = False):
        if isinstance(lr, Tensor) and lr.numel() != 1:
            raise ValueError("Tensor lr must be 1-element")
        if not 0.0 <= lr:
            raise ValueError(f"Invalid learning rate: {lr}")
        if not 0.0 <= eps:
            raise ValueError(f"Invalid epsilon value: {eps}")
        if not isinstance(betas, (tuple, list)) or len(betas) != 2:
            raise ValueError(f"betas must be a pair (beta1, beta2), got {betas!r}")
        if not 0.0 <= betas[0] < 1.0:
            raise ValueError(f"Invalid beta parameter at index 0: {betas[0]}")
        if not 0.0 <= betas[1] < 1.0:
            raise ValueError(f"Invalid beta parameter at index 1: {betas[1]}")
        if not 0.0 <= weight_decay:
            raise ValueError(f"Invalid weight_decay value: {weight_decay}")
        _reject_differentiable(differentiable)
        if fused and foreach:
            raise RuntimeError("`fused` and `foreach` cannot be `True` together.")
        defaults = dict(lr=lr, betas=tuple(float(b) for b in betas), eps=eps, weight_decay=weight_decay,
                        amsgrad=amsgrad, maximize=maximize, foreach=foreach, capturable=capturable,
                        differentiable=differentiable, fused=fused, decoupled_weight_decay=decoupled_weight_decay)
        super().__init__(params, defaults)

    def __setstate__(self, state):
        super().__setstate__(state)
        for group in self.param_groups:
            group.setdefault("amsgrad", False)
            group.setdefault("maximize", False)
            group.setdefault("decoupled_weight_decay", False)

    def step(self, closure=None):
        """Perform one update from the parameters' ``.grad``; returns ``closure()``'s loss if given."""
        loss = self._run_closure(closure)
        for group in self.param_groups:
            params, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs, steps = [], [], [], [], [], []
            amsgrad = group["amsgrad"]
            for p in group["params"]:
                if p.grad is None:
                    continue
                state = self.state[p]
                if len(state) == 0:
                    state["step"] = _zero_step()
                    state["exp_avg"] = _zeros_like(p)
                    state["exp_avg_sq"] = _zeros_like(p)
                    if amsgrad:
                        state["max_exp_avg_sq"] = _zeros_like(p)
                params.append(p)
                grads.append(p.grad)
                exp_avgs.append(state["exp_avg"])
                exp_avg_sqs.append(state["exp_avg_sq"])
                if amsgrad:
                    max_exp_avg_sqs.append(state["max_exp_avg_sq"])
                steps.append(state["step"])
            if not params:
                continue
            beta1, beta2 = group["betas"]
            adam(params, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs, steps, amsgrad=amsgrad, beta1=beta1,
                 beta2=beta2, lr=group["lr"], weight_decay=group["weight_decay"], eps=group["eps"],
                 maximize=group["maximize"], decoupled_weight_decay=group["decoupled_weight_decay"],
                 scratch=self._scratch())
        return loss


class AdamW(Adam):
    """Adam with decoupled weight decay (mirrors ``torch.optim.AdamW``): ``p *= 1 - lr * weight_decay`` each step.

    Example::

        >>> opt = corenn.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=1e-2)
    """

    def __init__(self, params, lr: float = 1e-3, betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-8,
                 weight_decay: float = 1e-2, amsgrad: bool = False, *, maximize: bool = False,
                 foreach: bool | None = None, capturable: bool = False, differentiable: bool = False,
                 fused: bool | None = None):
        super().__init__(params, lr, betas, eps, weight_decay, amsgrad, foreach=foreach, maximize=maximize,
                         capturable=capturable, differentiable=differentiable, fused=fused,
                         decoupled_weight_decay=True)

    def __setstate__(self, state):
        super().__setstate__(state)
        for group in self.param_groups:
            group["decoupled_weight_decay"] = True  # an AdamW state never loads as plain Adam


def adam(params: list[Tensor], grads: list[Tensor], exp_avgs: list[Tensor], exp_avg_sqs: list[Tensor],
         max_exp_avg_sqs: list[Tensor], state_steps: list[Tensor], *, amsgrad: bool, beta1: float, beta2: float,
         lr: float, weight_decay: float, eps: float, maximize: bool, decoupled_weight_decay: bool = False,
         scratch=None) -> None:
    """Functional Adam/AdamW over lists (``torch.optim._functional.adam``), updating everything in place.

    Example::

        >>> adam([w], [w.grad], [m], [v], [], [step], amsgrad=False, beta1=0.9, beta2=0.999,
        ...      lr=1e-3, weight_decay=0, eps=1e-8, maximize=False)
    """
    lr, beta1, beta2, weight_decay, eps = float(lr), float(beta1), float(beta2), float(weight_decay), float(eps)
    scratch = scratch if scratch is not None else _ScratchArrays()
    for i, param in enumerate(params):
        xp = param._device._xp
        p = param._data
        step_array = state_steps[i]._data
        step_array += 1
        step = float(step_array)
        if weight_decay != 0 and decoupled_weight_decay:
            p *= 1 - lr * weight_decay
            g = _effective_grad(xp, scratch, grads[i]._data, p, maximize, 0.0)
        else:
            g = _effective_grad(xp, scratch, grads[i]._data, p, maximize, weight_decay)
        exp_avg = exp_avgs[i]._data
        exp_avg_sq = exp_avg_sqs[i]._data
        tmp = scratch.get(xp, p, 0)
        denom = scratch.get(xp, p, 1)

        # exp_avg.lerp_(g, 1 - beta1), in PyTorch's form for weights below 0.5: m + w * (g - m)
        xp.subtract(g, exp_avg, out=tmp)
        tmp *= 1 - beta1
        exp_avg += tmp
        # exp_avg_sq.mul_(beta2).addcmul_(g, g, value=1 - beta2)
        exp_avg_sq *= beta2
        xp.multiply(g, 1 - beta2, out=tmp)
        tmp *= g
        exp_avg_sq += tmp

        bias_correction1 = 1 - beta1 ** step
        bias_correction2 = 1 - beta2 ** step
        step_size = lr / bias_correction1
        bias_correction2_sqrt = math.sqrt(bias_correction2)
        if amsgrad:
            max_sq = max_exp_avg_sqs[i]._data
            xp.maximum(max_sq, exp_avg_sq, out=max_sq)
            xp.sqrt(max_sq, out=denom)
        else:
            xp.sqrt(exp_avg_sq, out=denom)
        denom /= bias_correction2_sqrt
        denom += eps
        # p.addcdiv_(exp_avg, denom, value=-step_size)
        xp.multiply(exp_avg, -step_size, out=tmp)
        tmp /= denom
        p += tmp


def _zero_step() -> Tensor:
    # PyTorch keeps ``step`` as a float32 0-d tensor on the CPU; so does corenn (state dicts look alike)
    from corenn.tensor.tensor import tensor
    return tensor(0.0, dtype=_dtype.float32)


def _zeros_like(p: Tensor) -> Tensor:
    return Tensor._wrap(p._device._xp.zeros_like(p._data), p._device)
