"""Gradient clipping (mirrors ``torch.nn.utils.clip_grad``): rescale or clamp ``.grad`` in place.

Example::

    >>> params = [nn.Parameter(corenn.ones(4))]
    >>> params[0].grad = corenn.full((4,), 3.0)
    >>> nn.utils.clip_grad_norm_(params, max_norm=1.0)
    tensor(6.)
    >>> params[0].grad
    tensor([0.5000, 0.5000, 0.5000, 0.5000])
"""
from __future__ import annotations

import math
import warnings

from corenn.autograd.grad_mode import no_grad
from corenn.tensor.tensor import Tensor

__all__ = ["clip_grad_norm_", "clip_grad_norm", "clip_grad_value_", "get_total_norm", "clip_grads_with_norm_"]


def _as_list(tensors) -> list:
    if isinstance(tensors, Tensor):
        return [tensors]
    return list(tensors)


def get_total_norm(tensors, norm_type: float = 2.0, error_if_nonfinite: bool = False, foreach=None) -> Tensor:
    """The ``norm_type``-norm of all ``tensors`` together, as if concatenated into one vector.

    Example::

        >>> nn.utils.get_total_norm([corenn.tensor([3.0]), corenn.tensor([4.0])])
        tensor(5.)
    """
    from corenn.ops.movement import stack
    from corenn.tensor.tensor import tensor as make_tensor
    tensors = [t for t in _as_list(tensors) if t is not None]
    norm_type = float(norm_type)
    if not tensors:
        return make_tensor(0.0)
    devices = {t.device for t in tensors}
    if len(devices) > 1:
        raise RuntimeError(f"get_total_norm: all tensors must be on one device, found {sorted(map(str, devices))}")
    with no_grad():
        if math.isinf(norm_type):
            per_tensor = [t.abs().max() if t.numel() else t.new_zeros(()) for t in tensors]
            total = stack([n.to(per_tensor[0].dtype) for n in per_tensor]).max()
        else:
            per_tensor = [t.norm(norm_type) for t in tensors]
            total = stack([n.to(per_tensor[0].dtype) for n in per_tensor]).norm(norm_type)
    if error_if_nonfinite and not math.isfinite(total.item()):
        raise RuntimeError(f"The total norm of order {norm_type} for gradients from `parameters` is non-finite, so it "
                           "cannot be clipped. To disable this error and scale the gradients by the non-finite norm "
                           "anyway, set `error_if_nonfinite=False`")
    return total


def clip_grads_with_norm_(parameters, max_norm: float, total_norm: Tensor, foreach=None) -> None:
    """Scale the gradients by ``max_norm / (total_norm + 1e-6)`` when that is below 1.

    Example::

        >>> p = nn.Parameter(corenn.ones(2)); p.grad = corenn.tensor([3.0, 4.0])
        >>> nn.utils.clip_grads_with_norm_([p], 1.0, nn.utils.get_total_norm([p.grad]))
        >>> p.grad
        tensor([0.6000, 0.8000])
    """
    grads = [p.grad for p in _as_list(parameters) if p.grad is not None]
    if not grads:
        return
    coefficient = float(max_norm) / (float(total_norm) + 1e-6)
    if coefficient >= 1.0:
        return  # PyTorch multiplies by the clamped coefficient 1.0: a no-op
    with no_grad():
        for g in grads:
            g.mul_(coefficient)


def clip_grad_norm_(parameters, max_norm: float, norm_type: float = 2.0, error_if_nonfinite: bool = False,
                    foreach=None) -> Tensor:
    """Rescale gradients in place so their total norm is at most ``max_norm``; returns the norm before clipping.

    ``norm_type`` may be ``float('inf')``. With ``error_if_nonfinite=True`` a NaN or
    infinite total norm raises RuntimeError instead of spreading NaNs into the grads.

    Example::

        >>> net = nn.Linear(3, 1)
        >>> (net(corenn.randn(3)) * 100).sum().backward()
        >>> before = nn.utils.clip_grad_norm_(net.parameters(), max_norm=0.5)
        >>> bool(nn.utils.get_total_norm([p.grad for p in net.parameters()]) <= 0.5 + 1e-6)
        True
    """
    parameters = _as_list(parameters)
    grads = [p.grad for p in parameters if p.grad is not None]
    total_norm = get_total_norm(grads, norm_type, error_if_nonfinite)
    clip_grads_with_norm_(parameters, max_norm, total_norm)
    return total_norm


def clip_grad_norm(parameters, max_norm: float, norm_type: float = 2.0, error_if_nonfinite: bool = False,
                   foreach=None) -> Tensor:
    """Deprecated alias of :func:`clip_grad_norm_` (warns, as PyTorch does).

    Example::

        >>> nn.utils.clip_grad_norm_(params, 1.0)   # use this instead
    """
    warnings.warn("`torch.nn.utils.clip_grad_norm` is now deprecated in favor of `torch.nn.utils.clip_grad_norm_`.",
                  FutureWarning, stacklevel=2)
    return clip_grad_norm_(parameters, max_norm, norm_type, error_if_nonfinite, foreach)


def clip_grad_value_(parameters, clip_value: float, foreach=None) -> None:
    """Clamp every gradient in place to ``[-clip_value, clip_value]``.

    Example::

        >>> p = nn.Parameter(corenn.ones(3)); p.grad = corenn.tensor([-5.0, 0.5, 5.0])
        >>> nn.utils.clip_grad_value_([p], clip_value=1.0)
        >>> p.grad
        tensor([-1.0000,  0.5000,  1.0000])
    """
    clip_value = float(clip_value)
    with no_grad():
        for p in _as_list(parameters):
            if p.grad is not None:
                p.grad.clamp_(min=-clip_value, max=clip_value)
