"""Optimizer updates as dispatchable kernels: ``sgd_update`` and ``adam_update`` (Adam and AdamW).

``corenn.optim.SGD`` / ``Adam`` / ``AdamW`` look the kernel up once per step
(``corenn.dispatch.kernels.lookup("sgd_update", device_type)``) and hand it the raw
arrays of all their parameters at once, so a plugin can replace a whole update loop
by registering a kernel under the same name (corenn-numba fuses each update into one
pass over memory). The kernels record nothing for autograd (``differentiable = False``)
and are not called through ``run``: their inputs are lists of arrays, updated in place.

The core kernels keep PyTorch's order of operations (``torch.optim``'s single-tensor
path), so trajectories match PyTorch's step for step. An override must update the
same arrays in the same way; :meth:`SGDUpdate.update_one` / :meth:`AdamUpdate.update_one`
are the per-parameter core updates it can fall back to for arrays it does not handle.

Example::

    >>> from corenn.dispatch import kernels
    >>> update = kernels.lookup("sgd_update", "cpu")
    >>> ctx = update(); ctx.xp = numpy
    >>> update.forward(ctx, [w], [g], [None], lr=0.1, momentum=0.9, dampening=0.0, weight_decay=0.0,
    ...                nesterov=False, maximize=False, scratch=ScratchArrays())   # w -= 0.1 * g
"""
from __future__ import annotations

import math

from corenn.ops._kernel import Op, kernel

__all__: list[str] = []  # nothing public at corenn.*: optimizers reach these through the kernel registry


class ScratchArrays:
    """Temporaries that the update kernels reuse from step to step, per (slot, dtype, array type, device).

    A fresh multi-megabyte numpy temporary is usually fresh memory from the OS, and touching
    it costs page faults: allocating Adam's five temporaries per parameter every step made
    its update four times slower than the arithmetic. Views of one flat array per slot
    serve every parameter shape, so the extra memory is a few times the largest parameter.

    Example::

        >>> scratch = ScratchArrays()
        >>> tmp = scratch.get(numpy, w, 0)   # shaped and typed like w, contents undefined
    """

    __slots__ = ("_arrays",)

    def __init__(self):
        self._arrays = {}

    def get(self, xp, like, slot: int):
        """An uninitialised array shaped and typed like ``like`` (valid until the next ``get`` of ``slot``)."""
        key = (slot, like.dtype, type(like), getattr(like, "device", None))
        flat = self._arrays.get(key)
        if flat is None or flat.size < like.size:
            flat = self._arrays[key] = xp.empty(like.size, dtype=like.dtype)
        return flat[:like.size].reshape(like.shape)


def effective_grad(xp, scratch: ScratchArrays, grad, param, maximize: bool, weight_decay: float):
    """The gradient an update uses: negated for ``maximize``, plus ``weight_decay * param`` (L2), as PyTorch orders it.

    Returns ``grad`` itself when neither applies; otherwise scratch slot 2 (slot 0 is used on the way).

    Example::

        >>> g = effective_grad(numpy, scratch, grad, param, maximize=False, weight_decay=0.01)  # grad + 0.01 * param
    """
    if not maximize and weight_decay == 0:
        return grad
    out = scratch.get(xp, grad, 2)
    if maximize:
        xp.negative(grad, out=out)
    else:
        xp.copyto(out, grad)
    if weight_decay != 0:
        decay = xp.multiply(param, weight_decay, out=scratch.get(xp, grad, 0))
        out += decay
    return out


@kernel("sgd_update")
class SGDUpdate(Op):
    """SGD with momentum, dampening, Nesterov and weight decay over lists of arrays, in place.

    ``momentum_buffers[i]`` is parameter ``i``'s buffer, or ``None`` before its first
    momentum step: the kernel then puts a new buffer (a copy of the gradient, as PyTorch
    starts it) into that slot of the list. Without momentum the list is not used.
    """

    differentiable = False
    mutates_inputs = True

    @staticmethod
    def forward(ctx, params, grads, momentum_buffers, *, lr: float, momentum: float, dampening: float,
                weight_decay: float, nesterov: bool, maximize: bool, scratch: ScratchArrays):
        xp = ctx.xp
        for i, p in enumerate(params):
            buf = momentum_buffers[i] if momentum != 0 else None
            buf = SGDUpdate.update_one(xp, scratch, p, grads[i], buf, lr=lr, momentum=momentum, dampening=dampening,
                                       weight_decay=weight_decay, nesterov=nesterov, maximize=maximize)
            if momentum != 0:
                momentum_buffers[i] = buf

    @staticmethod
    def update_one(xp, scratch, p, grad, buf, *, lr, momentum, dampening, weight_decay, nesterov, maximize):
        """Update one parameter array ``p`` in place; returns its momentum buffer (new on the first step)."""
        g = effective_grad(xp, scratch, grad, p, maximize, weight_decay)
        if momentum != 0:
            if buf is None:
                buf = g.copy()  # the first step starts the buffer at the gradient itself (no dampening)
            else:
                buf *= momentum
                if dampening != 0:
                    buf += xp.multiply(g, 1 - dampening, out=scratch.get(xp, p, 0))
                else:
                    buf += g
            if nesterov:
                step = xp.multiply(buf, momentum, out=scratch.get(xp, p, 1))  # g + momentum * buf
                step += g
                g = step
            else:
                g = buf
        p -= xp.multiply(g, lr, out=scratch.get(xp, p, 0))  # p.add_(g, alpha=-lr)
        return buf

    @staticmethod
    def backward(ctx, grad):
        raise RuntimeError("sgd_update updates parameters in place outside autograd; it has no backward")


@kernel("adam_update")
class AdamUpdate(Op):
    """Adam / AdamW (``decoupled_weight_decay``) with AMSGrad over lists of arrays, in place.

    ``steps[i]`` is parameter ``i``'s step count, a 0-d array the kernel increments;
    ``max_exp_avg_sqs`` is used only with ``amsgrad``.
    """

    differentiable = False
    mutates_inputs = True

    @staticmethod
    def forward(ctx, params, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs, steps, *, amsgrad: bool, beta1: float,
                beta2: float, lr: float, weight_decay: float, eps: float, maximize: bool,
                decoupled_weight_decay: bool, scratch: ScratchArrays):
        xp = ctx.xp
        for i, p in enumerate(params):
            AdamUpdate.update_one(xp, scratch, p, grads[i], exp_avgs[i], exp_avg_sqs[i],
                                  max_exp_avg_sqs[i] if amsgrad else None, steps[i], beta1=beta1, beta2=beta2, lr=lr,
                                  weight_decay=weight_decay, eps=eps, maximize=maximize,
                                  decoupled_weight_decay=decoupled_weight_decay)

    @staticmethod
    def step_scalars(step_array, *, beta1, beta2, lr):
        """Increment the step count; returns ``(step_size, bias_correction2_sqrt)`` for this step."""
        step_array += 1
        step = float(step_array)
        return lr / (1 - beta1 ** step), math.sqrt(1 - beta2 ** step)

    @staticmethod
    def update_one(xp, scratch, p, grad, exp_avg, exp_avg_sq, max_exp_avg_sq, step_array, *, beta1, beta2, lr,
                   weight_decay, eps, maximize, decoupled_weight_decay):
        """Update one parameter array ``p`` and its moments in place (``max_exp_avg_sq`` is None without amsgrad)."""
        step_size, bias_correction2_sqrt = AdamUpdate.step_scalars(step_array, beta1=beta1, beta2=beta2, lr=lr)
        if weight_decay != 0 and decoupled_weight_decay:
            p *= 1 - lr * weight_decay
            g = effective_grad(xp, scratch, grad, p, maximize, 0.0)
        else:
            g = effective_grad(xp, scratch, grad, p, maximize, weight_decay)
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

        if max_exp_avg_sq is not None:
            xp.maximum(max_exp_avg_sq, exp_avg_sq, out=max_exp_avg_sq)
            xp.sqrt(max_exp_avg_sq, out=denom)
        else:
            xp.sqrt(exp_avg_sq, out=denom)
        denom /= bias_correction2_sqrt
        denom += eps
        # p.addcdiv_(exp_avg, denom, value=-step_size)
        xp.multiply(exp_avg, -step_size, out=tmp)
        tmp /= denom
        p += tmp

    @staticmethod
    def backward(ctx, grad):
        raise RuntimeError("adam_update updates parameters in place outside autograd; it has no backward")
