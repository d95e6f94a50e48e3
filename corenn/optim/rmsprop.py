"""RMSprop, plain or centered, with momentum and weight decay."""
from __future__ import annotations

from corenn.optim.adam import _zero_step, _zeros_like
from corenn.optim.optimizer import Optimizer, _effective_grad, _ScratchArrays
from corenn.optim.sgd import _reject_differentiable
from corenn.tensor.tensor import Tensor

__all__ = ["RMSprop", "rmsprop"]


class RMSprop(Optimizer):
    """RMSprop (mirrors ``torch.optim.RMSprop``), step for step the same updates.

    ``v = alpha * v + (1 - alpha) * g * g``; the step divides ``g`` by ``sqrt(v) + eps``
    (``centered=True`` subtracts the squared running mean of ``g`` from ``v`` first);
    with ``momentum`` the divided gradient feeds a momentum buffer. State per
    parameter: ``step``, ``square_avg``, and ``momentum_buffer`` / ``grad_avg`` when used.

    Example::

        >>> opt = corenn.optim.RMSprop(model.parameters(), lr=1e-2, momentum=0.9, centered=True)
        >>> opt.zero_grad(); loss.backward(); opt.step()
    """

    def __init__(self, params, lr: float = 1e-2, alpha: float = 0.99, eps: float = 1e-8, weight_decay: float = 0,
                 momentum: float = 0, centered: bool = False, capturable: bool = False, foreach: bool | None = None,
                 maximize: bool = False, differentiable: bool = False):
        if isinstance(lr, Tensor) and lr.numel() != 1:
            raise ValueError("Tensor lr must be 1-element")
        if not 0.0 <= lr:
            raise ValueError(f"Invalid learning rate: {lr}")
        if not 0.0 <= eps:
            raise ValueError(f"Invalid epsilon value: {eps}")
        if not 0.0 <= momentum:
            raise ValueError(f"Invalid momentum value: {momentum}")
        if not 0.0 <= weight_decay:
            raise ValueError(f"Invalid weight_decay value: {weight_decay}")
        if not 0.0 <= alpha:
            raise ValueError(f"Invalid alpha value: {alpha}")
        _reject_differentiable(differentiable)
        defaults = dict(lr=lr, momentum=momentum, alpha=alpha, eps=eps, centered=centered, weight_decay=weight_decay,
                        capturable=capturable, foreach=foreach, maximize=maximize, differentiable=differentiable)
        super().__init__(params, defaults)

    def __setstate__(self, state):
        super().__setstate__(state)
        for group in self.param_groups:
            group.setdefault("momentum", 0)
            group.setdefault("centered", False)
            group.setdefault("maximize", False)

    def step(self, closure=None):
        """Perform one update from the parameters' ``.grad``; returns ``closure()``'s loss if given."""
        loss = self._run_closure(closure)
        for group in self.param_groups:
            params, grads, square_avgs, grad_avgs, buffers, steps = [], [], [], [], [], []
            for p in group["params"]:
                if p.grad is None:
                    continue
                state = self.state[p]
                if len(state) == 0:
                    state["step"] = _zero_step()
                    state["square_avg"] = _zeros_like(p)
                    if group["momentum"] > 0:
                        state["momentum_buffer"] = _zeros_like(p)
                    if group["centered"]:
                        state["grad_avg"] = _zeros_like(p)
                params.append(p)
                grads.append(p.grad)
                square_avgs.append(state["square_avg"])
                steps.append(state["step"])
                if group["momentum"] > 0:
                    buffers.append(state["momentum_buffer"])
                if group["centered"]:
                    grad_avgs.append(state["grad_avg"])
            if not params:
                continue
            rmsprop(params, grads, square_avgs, grad_avgs, buffers, steps, lr=group["lr"], alpha=group["alpha"],
                    eps=group["eps"], weight_decay=group["weight_decay"], momentum=group["momentum"],
                    centered=group["centered"], maximize=group["maximize"], scratch=self._scratch())
        return loss


def rmsprop(params: list[Tensor], grads: list[Tensor], square_avgs: list[Tensor], grad_avgs: list[Tensor],
            momentum_buffer_list: list[Tensor], state_steps: list[Tensor], *, lr: float, alpha: float, eps: float,
            weight_decay: float, momentum: float, centered: bool, maximize: bool, scratch=None) -> None:
    """Functional RMSprop over lists (``torch.optim._functional.rmsprop``), updating everything in place.

    Example::

        >>> rmsprop([w], [w.grad], [v], [], [], [step], lr=1e-2, alpha=0.99, eps=1e-8,
        ...         weight_decay=0, momentum=0, centered=False, maximize=False)
    """
    lr, alpha, eps, weight_decay, momentum = float(lr), float(alpha), float(eps), float(weight_decay), float(momentum)
    scratch = scratch if scratch is not None else _ScratchArrays()
    for i, param in enumerate(params):
        xp = param._device._xp
        p = param._data
        state_steps[i]._data += 1
        g = _effective_grad(xp, scratch, grads[i]._data, p, maximize, weight_decay)
        tmp = scratch.get(xp, p, 0)
        avg = scratch.get(xp, p, 1)

        # square_avg.mul_(alpha).addcmul_(g, g, value=1 - alpha)
        square_avg = square_avgs[i]._data
        square_avg *= alpha
        xp.multiply(g, 1 - alpha, out=tmp)
        tmp *= g
        square_avg += tmp
        if centered:
            # grad_avg.lerp_(g, 1 - alpha); avg = sqrt(square_avg - grad_avg**2)
            grad_avg = grad_avgs[i]._data
            xp.subtract(g, grad_avg, out=tmp)
            tmp *= 1 - alpha
            grad_avg += tmp
            xp.multiply(grad_avg, grad_avg, out=avg)
            xp.subtract(square_avg, avg, out=avg)
            xp.sqrt(avg, out=avg)
        else:
            xp.sqrt(square_avg, out=avg)
        avg += eps

        if momentum > 0:
            # buf.mul_(momentum).addcdiv_(g, avg); p.add_(buf, alpha=-lr)
            buf = momentum_buffer_list[i]._data
            buf *= momentum
            buf += xp.divide(g, avg, out=tmp)
            p -= xp.multiply(buf, lr, out=tmp)
        else:
            # p.addcdiv_(g, avg, value=-lr)
            xp.multiply(g, -lr, out=tmp)
            tmp /= avg
            p += tmp
