"""Stochastic gradient descent with momentum, dampening, Nesterov momentum and weight decay."""
from __future__ import annotations

from corenn.dispatch import kernels
from corenn.optim.optimizer import Optimizer, _ScratchArrays
from corenn.tensor.tensor import Tensor

__all__ = ["SGD", "sgd"]


class SGD(Optimizer):
    """Stochastic gradient descent (mirrors ``torch.optim.SGD``), step for step the same updates.

    With ``g`` the gradient: ``g += weight_decay * p``; with momentum,
    ``buf = momentum * buf + (1 - dampening) * g`` (``buf = g`` on the first step) and
    ``g = g + momentum * buf`` (Nesterov) or ``g = buf``; then ``p -= lr * g``.
    ``maximize=True`` ascends. ``foreach``/``fused`` are accepted for compatibility and
    select nothing: corenn has one implementation, on raw arrays.

    Example::

        >>> opt = corenn.optim.SGD(model.parameters(), lr=1e-4, weight_decay=1e-2, momentum=0.9)
        >>> loss = model(x).abs().sum()
        >>> opt.zero_grad(); loss.backward(); opt.step()
    """

    def __init__(self, params, lr: float = 1e-3, momentum: float = 0, dampening: float = 0,
                 weight_decay: float = 0, nesterov: bool = False, *, maximize: bool = False,
                 foreach: bool | None = None, differentiable: bool = False, fused: bool | None = None):
        if lr < 0.0:
            raise ValueError(f"Invalid learning rate: {lr}")
        if momentum < 0.0:
            raise ValueError(f"Invalid momentum value: {momentum}")
        if weight_decay < 0.0:
            raise ValueError(f"Invalid weight_decay value: {weight_decay}")
        if nesterov and (momentum <= 0 or dampening != 0):
            raise ValueError("Nesterov momentum requires a momentum and zero dampening")
        _reject_differentiable(differentiable)
        defaults = dict(lr=lr, momentum=momentum, dampening=dampening, weight_decay=weight_decay, nesterov=nesterov,
                        maximize=maximize, foreach=foreach, differentiable=differentiable, fused=fused)
        super().__init__(params, defaults)

    def __setstate__(self, state):
        super().__setstate__(state)
        for group in self.param_groups:
            group.setdefault("nesterov", False)
            group.setdefault("maximize", False)

    def step(self, closure=None):
        """Perform one update from the parameters' ``.grad``; returns ``closure()``'s loss if given."""
        loss = self._run_closure(closure)
        state = self.state
        for group in self.param_groups:
            params, grads, buffers = [], [], []
            for p in group["params"]:
                if p.grad is not None:
                    params.append(p)
                    grads.append(p.grad)
                    buffers.append(state[p].get("momentum_buffer") if group["momentum"] != 0 else None)
            if not params:
                continue
            sgd(params, grads, buffers, lr=group["lr"], momentum=group["momentum"], dampening=group["dampening"],
                weight_decay=group["weight_decay"], nesterov=group["nesterov"], maximize=group["maximize"],
                scratch=self._scratch())
            if group["momentum"] != 0:
                for p, buf in zip(params, buffers):
                    state[p]["momentum_buffer"] = buf
        return loss


def sgd(params: list[Tensor], grads: list[Tensor], momentum_buffer_list: list, *, lr: float, momentum: float,
        dampening: float, weight_decay: float, nesterov: bool, maximize: bool, scratch=None) -> None:
    """Functional SGD over lists (``torch.optim._functional.sgd``); new momentum buffers go into the list.

    Example::

        >>> bufs = [None]
        >>> sgd([w], [w.grad], bufs, lr=0.1, momentum=0.9, dampening=0, weight_decay=0,
        ...     nesterov=False, maximize=False)
    """
    lr, momentum, dampening, weight_decay = float(lr), float(momentum), float(dampening), float(weight_decay)
    scratch = scratch if scratch is not None else _ScratchArrays()
    for device, indices in _by_device(params):
        # The update itself is the kernel registered as "sgd_update" (corenn/ops/optim_update.py): one lookup
        # per step, so that a plugin (corenn-numba) can replace the whole loop over parameters.
        update = kernels.lookup("sgd_update", device.type)
        ctx = update()
        ctx.xp = device._xp
        buffers = None
        if momentum != 0:
            buffers = [None if momentum_buffer_list[i] is None else momentum_buffer_list[i]._data for i in indices]
        update.forward(ctx, [params[i]._data for i in indices], [grads[i]._data for i in indices], buffers, lr=lr,
                       momentum=momentum, dampening=dampening, weight_decay=weight_decay, nesterov=nesterov,
                       maximize=maximize, scratch=scratch)
        if momentum != 0:
            for i, buf in zip(indices, buffers):
                if momentum_buffer_list[i] is None:  # the kernel started this buffer
                    momentum_buffer_list[i] = Tensor._wrap(buf, device)


def _by_device(params: list[Tensor]):
    """``[(device, [indices of params on it]), ...]``: update kernels are looked up per device type."""
    first = params[0]._device if params else None
    if all(p._device is first for p in params):
        return [(first, range(len(params)))] if params else []
    groups: dict = {}
    for i, p in enumerate(params):
        groups.setdefault(p._device, []).append(i)
    return list(groups.items())


def _reject_differentiable(differentiable: bool) -> None:
    if differentiable:
        raise ValueError("differentiable=True is not supported: corenn optimizers update parameters in place "
                         "outside autograd")
