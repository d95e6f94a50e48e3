"""``Parameter`` and ``Buffer``: tensors that a :class:`~corenn.nn.Module` registers when assigned to it.

Example::

    >>> import corenn
    >>> from corenn import nn
    >>> p = nn.Parameter(corenn.zeros(2))
    >>> p
    Parameter containing:
    tensor([0., 0.], requires_grad=True)
"""
from __future__ import annotations

from corenn.tensor.tensor import Tensor

__all__ = ["Parameter", "Buffer"]


class Parameter(Tensor):
    """A tensor that is a learnable part of a module (mirrors ``torch.nn.Parameter``).

    Assigning a ``Parameter`` to a module attribute registers it, so it shows up in
    ``module.parameters()`` and the module's ``state_dict``. The parameter shares
    ``data``'s array (no copy) and is a leaf of the autograd graph.

    Example::

        >>> w = nn.Parameter(corenn.ones(3))
        >>> isinstance(w, corenn.Tensor), w.requires_grad
        (True, True)
        >>> (w * 2).sum().backward()
        >>> w.grad
        tensor([2., 2., 2.])
    """

    __slots__ = ()

    def __new__(cls, data: Tensor | None = None, requires_grad: bool = True):
        if data is None:
            from corenn.tensor.creation import empty
            data = empty(0)
        if not isinstance(data, Tensor):
            raise TypeError(f"Parameter(): data must be a Tensor (or None), got {type(data).__name__}")
        # A parameter is a fresh leaf over the same memory: ``Parameter(t)`` then ``p.add_(1)`` changes ``t``.
        p = cls._wrap(data._data, data._device)
        if requires_grad:
            p.requires_grad_(True)
        return p

    def __repr__(self):
        return "Parameter containing:\n" + super().__repr__()

    __str__ = __repr__


class _BufferMeta(type):
    # ``Buffer(t)`` returns a plain Tensor marked as a buffer, so ``isinstance`` looks at the mark
    # (as in PyTorch, where assigning such a tensor to a module registers it as a buffer).
    def __instancecheck__(cls, instance):
        if cls is Buffer:
            return isinstance(instance, Tensor) and getattr(instance, "_is_buffer", False)
        return super().__instancecheck__(instance)


class Buffer(Tensor, metaclass=_BufferMeta):
    """A tensor that a module registers as a buffer when assigned to it (``torch.nn.Buffer``).

    ``persistent=False`` keeps it out of the module's ``state_dict``.

    Example::

        >>> m = nn.Module()
        >>> m.running = nn.Buffer(corenn.zeros(2))
        >>> list(dict(m.named_buffers()))
        ['running']
    """

    __slots__ = ()

    def __new__(cls, data: Tensor | None = None, *, persistent: bool = True):
        if data is None:
            from corenn.tensor.creation import empty
            data = empty(0)
        if not isinstance(data, Tensor):
            raise TypeError(f"Buffer(): data must be a Tensor (or None), got {type(data).__name__}")
        t = data.detach()
        t._requires_grad = data._requires_grad
        t.persistent = persistent
        t._is_buffer = True
        return t
