"""Automatic differentiation: ``backward``, ``grad``, custom ``Function`` and ``gradcheck``.

The graph and the backward walk live in :mod:`corenn.autograd.node`.
"""
from __future__ import annotations

from typing import Sequence

from corenn.autograd import node as _node
from corenn.autograd.function import Function, FunctionCtx, once_differentiable  # noqa: F401
from corenn.autograd.grad_mode import (enable_grad, inference_mode, is_grad_enabled,  # noqa: F401
                                       is_inference_mode_enabled, no_grad, set_grad_enabled)
from corenn.autograd.gradcheck import GradcheckError, gradcheck  # noqa: F401

__all__ = ["backward", "grad", "Function", "gradcheck", "no_grad", "enable_grad", "set_grad_enabled",
           "inference_mode"]


def _as_tuple(x):
    if x is None:
        return None
    if isinstance(x, _node._Tensor):
        return (x,)
    return tuple(x)


def _root_grads(outputs, grad_outputs):
    grads = []
    for i, out in enumerate(outputs):
        if not out._requires_grad:
            raise RuntimeError(f"element {i} of tensors does not require grad and does not have a grad_fn")
        g = None if grad_outputs is None else grad_outputs[i]
        if g is None:
            if out._data.size != 1:
                raise RuntimeError("grad can be implicitly created only for scalar outputs")
            grads.append(out._device._xp.ones_like(out._data))  # on out's device index, not the current one
            continue
        if not isinstance(g, _node._Tensor):
            raise TypeError(f"gradient for output {i} must be a Tensor or None, got {type(g).__name__}")
        if g._data.shape != out._data.shape:
            raise RuntimeError(f"Mismatch in shape: grad_output[{i}] has a shape of {g.shape!r} and output[{i}] "
                               f"has a shape of {out.shape!r}.")
        # As PyTorch's validate_outputs: a 0-dim gradient moves to the output's device, any other
        # device is an error; another dtype is cast to the output's.
        if g._device is not out._device:
            if g._data.ndim != 0:
                raise RuntimeError(f"invalid gradient at index {i} - expected device {out._device} but got {g._device}")
            g = g.to(out._device)
        if g._data.dtype != out._data.dtype:
            g = g.to(out.dtype)
        grads.append(g._data)
    return grads


def backward(tensors, grad_tensors=None, retain_graph=None, create_graph=False, inputs=None) -> None:
    """Accumulate gradients of ``tensors`` into the ``.grad`` of the leaves (``torch.autograd.backward``)."""
    if create_graph:
        raise NotImplementedError("create_graph=True (higher-order gradients) is not supported by corenn yet")
    outputs = _as_tuple(tensors)
    grad_outputs = _as_tuple(grad_tensors)
    if grad_outputs is not None and len(grad_outputs) != len(outputs):
        raise RuntimeError(f"got {len(grad_outputs)} gradients for {len(outputs)} tensors")
    roots = _root_grads(outputs, grad_outputs)
    if inputs is not None:
        inputs = _as_tuple(inputs)
        grads = _node.run_backward(outputs, roots, retain_graph=bool(retain_graph), inputs=inputs, allow_unused=True)
        for t, g in zip(inputs, grads):
            if g is not None:
                _node._deliver_to_leaf(t, g, True, None, None) if t._grad_fn is None else _accumulate_non_leaf(t, g)
        return
    _node.run_backward(outputs, roots, retain_graph=bool(retain_graph))


def _accumulate_non_leaf(t, g):
    t.grad = _node._make(g.copy(), t._device, None, 0) if t.grad is None else t.grad + _node._make(g, t._device,
                                                                                                  None, 0)


def grad(outputs, inputs, grad_outputs=None, retain_graph=None, create_graph=False, only_inputs=True,
         allow_unused=None, is_grads_batched=False, materialize_grads=False):
    """Gradients of ``outputs`` with respect to ``inputs``, returned rather than accumulated.

    Example::

        >>> x = corenn.tensor(1.0, requires_grad=True)
        >>> corenn.autograd.grad(-(x * x), x)[0]
        tensor(-2.)
    """
    if create_graph:
        raise NotImplementedError("create_graph=True (higher-order gradients) is not supported by corenn yet")
    outputs = _as_tuple(outputs)
    inputs = _as_tuple(inputs)
    for i, t in enumerate(inputs):
        if not isinstance(t, _node._Tensor):
            raise TypeError(f"grad(): inputs[{i}] must be a Tensor, got {type(t).__name__}")
        if not t._requires_grad:
            raise RuntimeError(f"One of the differentiated Tensors (input {i}) does not require grad")
    grad_outputs = _as_tuple(grad_outputs)
    roots = _root_grads(outputs, grad_outputs)
    allow = bool(allow_unused) or materialize_grads
    arrays = _node.run_backward(outputs, roots, retain_graph=bool(retain_graph), inputs=inputs, allow_unused=allow,
                                accumulate=False)
    results = []
    for t, g in zip(inputs, arrays):
        if g is None:
            results.append(t.new_zeros(t.shape) if materialize_grads else None)
        else:
            if g.shape != t._data.shape:
                g = t._device._xp.broadcast_to(g, t._data.shape)
            results.append(_node._make(g.copy() if not g.flags.owndata else g, t._device, None, 0))
    return tuple(results)


class graph:
    """Namespace mirroring ``torch.autograd.graph`` for the node type."""

    Node = _node.Node


def _sequence(x) -> Sequence:
    return x if isinstance(x, (list, tuple)) else (x,)


def __getattr__(name):
    # ``corenn.autograd.profiler``: an import path a plugin registers.
    from corenn import import_paths
    return import_paths.module_getattr(__name__, name)
