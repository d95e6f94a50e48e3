"""Neural-network primitives that deserve their own kernels: softmax, log_softmax, linear."""
from __future__ import annotations

from corenn.ops._kernel import Op, kernel, run, to_floating
from corenn.tensor.tensor import _normalize_dim


@kernel("softmax", "SoftmaxBackward0")
class Softmax(Op):
    @staticmethod
    def forward(ctx, a, axis):
        xp = ctx.xp
        # exp never overflows: the largest term is e^0 (an empty input has no max, and needs no shift)
        shifted = a - a.max(axis=axis, keepdims=True) if a.size else a
        exp = xp.exp(shifted)
        out = exp / exp.sum(axis=axis, keepdims=True)
        ctx.save_for_backward(out)
        ctx.axis = axis
        return out

    @staticmethod
    def backward(ctx, grad):
        (out,) = ctx.saved
        return out * (grad - (grad * out).sum(axis=ctx.axis, keepdims=True))


@kernel("log_softmax", "LogSoftmaxBackward0")
class LogSoftmax(Op):
    @staticmethod
    def forward(ctx, a, axis):
        xp = ctx.xp
        shifted = a - a.max(axis=axis, keepdims=True) if a.size else a
        out = shifted - xp.log(xp.exp(shifted).sum(axis=axis, keepdims=True))
        ctx.save_for_backward(out)
        ctx.axis = axis
        return out

    @staticmethod
    def backward(ctx, grad):
        (out,) = ctx.saved
        return grad - ctx.xp.exp(out) * grad.sum(axis=ctx.axis, keepdims=True)


def _softmax_dim(ndim):
    # PyTorch's legacy implicit-dim choice, for calls without dim.
    return 0 if ndim in (0, 1, 3) else 1


def softmax(input, dim=None, dtype=None):
    """``exp(x) / sum(exp(x))`` along ``dim``, computed without overflow."""
    if dtype is not None:
        input = input.to(dtype)
    input = to_floating(input)
    if dim is None:
        dim = _softmax_dim(input.ndim)
    if input.ndim == 0:
        return run("softmax", input.reshape(1), axis=0).reshape(())
    return run("softmax", input, axis=_normalize_dim(dim, input.ndim))


def log_softmax(input, dim=None, dtype=None):
    """``log(softmax(x))`` along ``dim``, computed as ``x - logsumexp(x)``."""
    if dtype is not None:
        input = input.to(dtype)
    input = to_floating(input)
    if dim is None:
        dim = _softmax_dim(input.ndim)
    if input.ndim == 0:
        return run("log_softmax", input.reshape(1), axis=0).reshape(())
    return run("log_softmax", input, axis=_normalize_dim(dim, input.ndim))


@kernel("linear", "AddmmBackward0")
class Linear(Op):
    """``x @ weight.T + bias`` as one node: the dense layer's hot path."""

    @staticmethod
    def forward(ctx, x, weight, bias=None):
        ctx.save_for_backward(x, weight)
        ctx.has_bias = bias is not None
        out = x @ weight.T
        if bias is not None:
            out += bias
        return out

    @staticmethod
    def backward(ctx, grad):
        x, weight = ctx.saved
        grad_x = grad @ weight
        if x.ndim == 1:
            grad_weight = ctx.xp.outer(grad, x)
        else:
            flat_grad = grad.reshape(-1, grad.shape[-1])
            grad_weight = flat_grad.T @ x.reshape(-1, x.shape[-1])
        grad_bias = None
        if ctx.has_bias:
            grad_bias = grad.reshape(-1, grad.shape[-1]).sum(axis=0) if grad.ndim > 1 else grad
        # one gradient per positional input: a bias-free call has two
        return (grad_x, grad_weight, grad_bias) if ctx.has_bias else (grad_x, grad_weight)


def linear(input, weight, bias=None):
    """``input @ weight.T + bias`` (``torch.nn.functional.linear``)."""
    if input.shape[-1] != weight.shape[-1]:
        rows = 1
        for s in input.shape[:-1]:
            rows *= s
        raise RuntimeError(f"mat1 and mat2 shapes cannot be multiplied ({rows}x{input.shape[-1]} and "
                           f"{weight.shape[-1]}x{weight.shape[0]})")
    if input.dtype is not weight.dtype:
        raise RuntimeError(f"mat1 and mat2 must have the same dtype, but got {input.dtype} and {weight.dtype}")
    if bias is None:
        return run("linear", input, weight)
    return run("linear", input, weight, bias)


# The public op functions of this file (what ``from corenn.ops import *`` re-exports as ``corenn.X``).
__all__ = [name for name, value in list(globals().items())
           if not name.startswith("_") and callable(value) and not isinstance(value, type)
           and getattr(value, "__module__", None) == __name__]
