"""Adam and AdamW (decoupled weight decay), with AMSGrad."""
from __future__ import annotations

from corenn import _dtype
from corenn.dispatch import kernels
from corenn.optim.optimizer import Optimizer, _ScratchArrays
from corenn.optim.sgd import _by_device, _reject_differentiable
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
    for device, indices in _by_device(params):
        # The update itself is the kernel registered as "adam_update" (corenn/ops/optim_update.py): one lookup
        # per step, so that a plugin (corenn-numba) can replace the whole loop over parameters.
        update = kernels.lookup("adam_update", device.type)
        ctx = update()
        ctx.xp = device._xp
        update.forward(ctx, [params[i]._data for i in indices], [grads[i]._data for i in indices],
                       [exp_avgs[i]._data for i in indices], [exp_avg_sqs[i]._data for i in indices],
                       [max_exp_avg_sqs[i]._data for i in indices] if amsgrad else None,
                       [state_steps[i]._data for i in indices], amsgrad=amsgrad, beta1=beta1, beta2=beta2, lr=lr,
                       weight_decay=weight_decay, eps=eps, maximize=maximize,
                       decoupled_weight_decay=decoupled_weight_decay, scratch=scratch)


def _zero_step() -> Tensor:
    # PyTorch keeps ``step`` as a float32 0-d tensor on the CPU; so does corenn (state dicts look alike)
    from corenn.tensor.tensor import tensor
    return tensor(0.0, dtype=_dtype.float32)


def _zeros_like(p: Tensor) -> Tensor:
    return Tensor._wrap(p._device._xp.zeros_like(p._data), p._device)
