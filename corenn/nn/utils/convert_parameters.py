"""Flatten parameters into one vector and back (mirrors ``torch.nn.utils.convert_parameters``).

Example::

    >>> net = nn.Linear(3, 2)
    >>> vec = nn.utils.parameters_to_vector(net.parameters())
    >>> vec.shape
    corenn.Size([8])
    >>> nn.utils.vector_to_parameters(vec * 0, net.parameters())
    >>> float(net.weight.abs().sum())
    0.0
"""
from __future__ import annotations

from corenn.tensor.tensor import Tensor

__all__ = ["parameters_to_vector", "vector_to_parameters"]


def _check_same_device(param, device):
    if device is None:
        return param.device
    if param.device != device:
        raise TypeError("Found two parameters on different devices, this is currently not supported.")
    return device


def parameters_to_vector(parameters) -> Tensor:
    """One 1-D tensor holding every parameter's values, in order (a copy; it records a graph).

    Example::

        >>> nn.utils.parameters_to_vector([corenn.ones(2, 2), corenn.zeros(1)])
        tensor([1., 1., 1., 1., 0.])
    """
    from corenn.ops.movement import cat
    device = None
    flat = []
    for param in parameters:
        device = _check_same_device(param, device)
        flat.append(param.reshape(-1))
    return cat(flat)


def vector_to_parameters(vec: Tensor, parameters) -> None:
    """Copy consecutive slices of the 1-D ``vec`` into the parameters, in order.

    Each parameter's data becomes a view of ``vec`` (as in PyTorch). ``vec`` must hold
    exactly as many elements as the parameters together.

    Example::

        >>> p = nn.Parameter(corenn.zeros(2, 2))
        >>> nn.utils.vector_to_parameters(corenn.arange(4.0), [p])
        >>> p
        Parameter containing:
        tensor([[0., 1.],
                [2., 3.]], requires_grad=True)
    """
    if not isinstance(vec, Tensor):
        raise TypeError(f"expected corenn.Tensor, but got: {type(vec).__name__}")
    if vec.dim() != 1:
        raise RuntimeError(f"vector_to_parameters: expected a 1-D vector, got shape {list(vec.shape)}")
    parameters = list(parameters)
    total = sum(p.numel() for p in parameters)
    if total != vec.numel():
        raise RuntimeError(f"vector_to_parameters: the vector has {vec.numel()} elements but the parameters hold "
                           f"{total}")
    device = None
    pointer = 0
    for param in parameters:
        device = _check_same_device(param, device)
        n = param.numel()
        param.data = vec[pointer:pointer + n].view_as(param).data
        pointer += n
