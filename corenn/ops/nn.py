"""Neural-network primitives that deserve their own kernels: softmax, log_softmax, linear."""
from __future__ import annotations

import math

from corenn._argcheck import check_dtype, not_tensors
from corenn.kernels import recompute_overflow
from corenn.ops._kernel import Op, check_tensor, kernel, run, sum_to_shape, to_floating
from corenn.tensor.tensor import Tensor, _normalize_dim
from corenn import _autocast


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
    if not isinstance(input, Tensor):
        raise not_tensors(input=input)
    if dtype is not None:
        input = input.to(check_dtype(dtype))
    input = to_floating(input)
    if dim is None:
        dim = _softmax_dim(input.ndim)
    if input.ndim == 0:
        return run("softmax", input.reshape(1), axis=0).reshape(())
    return run("softmax", input, axis=_normalize_dim(dim, input.ndim))


def log_softmax(input, dim=None, dtype=None):
    """``log(softmax(x))`` along ``dim``, computed as ``x - logsumexp(x)``."""
    if not isinstance(input, Tensor):
        raise not_tensors(input=input)
    if dtype is not None:
        input = input.to(check_dtype(dtype))
    input = to_floating(input)
    if dim is None:
        dim = _softmax_dim(input.ndim)
    if input.ndim == 0:
        return run("log_softmax", input.reshape(1), axis=0).reshape(())
    return run("log_softmax", input, axis=_normalize_dim(dim, input.ndim))


def _linear(x, weight, bias):
    if x.dtype.kind == "V":  # bfloat16 (ml_dtypes): BLAS in float32, rounded once, as PyTorch's CPU kernels
        return _linear(x.astype("float32"), weight.astype("float32"),
                       None if bias is None else bias.astype("float32")).astype(x.dtype)
    out = x @ weight.T
    if bias is not None:
        out += bias
    return out


@kernel("linear", "AddmmBackward0")
class Linear(Op):
    """``x @ weight.T + bias`` as one node: the dense layer's hot path.

    ``bias`` broadcasts against the output without enlarging it (``F.linear`` checks):
    usually ``(out_features,)``, but ``(1,)``, ``()`` and 2-d biases are valid too.
    """

    @staticmethod
    def forward(ctx, x, weight, bias=None):
        ctx.save_for_backward(x, weight)
        ctx.bias_shape = None if bias is None else bias.shape
        xp = ctx.xp
        out = _linear(x, weight, bias)
        return recompute_overflow(xp, out, lambda: _linear(x.astype(xp.float64), weight.astype(xp.float64),
                                                           None if bias is None else bias.astype(xp.float64)))

    @staticmethod
    def backward(ctx, grad):
        x, weight = ctx.saved
        bias_shape = ctx.bias_shape
        low_precision = x.dtype if x.dtype.kind == "V" else None
        if low_precision is not None:  # bfloat16: gradients computed in float32, each rounded once
            grad, x, weight = grad.astype("float32"), x.astype("float32"), weight.astype("float32")
        grad_x = grad_weight = grad_bias = None
        if ctx.needs_input_grad[0]:
            grad_x = grad @ weight
        rows = math.prod(x.shape[:-1])  # spelt out: reshape(-1, 0) is ambiguous (in_ or out_features 0)
        if ctx.needs_input_grad[1]:
            if x.ndim == 1:
                grad_weight = ctx.xp.outer(grad, x)
            else:
                grad_weight = grad.reshape(rows, grad.shape[-1]).T @ x.reshape(rows, x.shape[-1])
        if bias_shape is not None and ctx.needs_input_grad[2]:
            if bias_shape == grad.shape[-1:]:
                grad_bias = grad.reshape(rows, grad.shape[-1]).sum(axis=0)
            else:  # a bias that broadcasts: (1,), (), (rows, 1), ...
                grad_bias = sum_to_shape(grad, bias_shape)
        if low_precision is not None:
            grad_x, grad_weight, grad_bias = (None if g is None else g.astype(low_precision)
                                              for g in (grad_x, grad_weight, grad_bias))
        # one gradient per positional input: a bias-free call has two
        return (grad_x, grad_weight) if bias_shape is None else (grad_x, grad_weight, grad_bias)


def _check_linear_bias(bias, input, weight):
    """PyTorch's rule: the bias broadcasts to the output without enlarging it, with at most 2 dims when the input
    has at most 2 (``addmm``'s rule)."""
    check_tensor(bias, "bias", "linear")
    if bias.dtype is not input.dtype:
        raise RuntimeError(f"linear(): expected bias of dtype {input.dtype}, like input and weight, but got "
                           f"{bias.dtype}")
    out_shape = tuple(input.shape[:-1]) + (weight.shape[0],)
    if input.ndim == 1:
        out_shape = (1,) + out_shape  # a vector input is one row of addmm
    fits = (bias.ndim <= (2 if input.ndim <= 2 else len(out_shape))
            and all(b in (1, o) for b, o in zip(reversed(bias.shape), reversed(out_shape))))
    if not fits:
        raise RuntimeError(f"linear(): expected bias of size [{weight.shape[0]}] (or one that broadcasts to the "
                           f"output of size {list(out_shape[input.ndim == 1:])}), but got bias of size "
                           f"{list(bias.shape)}")


@_autocast.autocast_op(_autocast.LOWER)
def linear(input, weight, bias=None):
    """``input @ weight.T + bias`` (``torch.nn.functional.linear``).

    ``bias`` is usually ``(out_features,)``; any bias that broadcasts to the output without
    enlarging it works, as in PyTorch (``(1,)``, ``()``, ``(rows, out_features)``...).

        >>> F.linear(corenn.ones(2, 3), corenn.ones(4, 3), corenn.ones(1)).tolist()[0]
        [4.0, 4.0, 4.0, 4.0]
    """
    check_tensor(input, "input", "linear")
    check_tensor(weight, "weight", "linear")
    if input.ndim == 0 or weight.ndim == 0:
        raise RuntimeError(f"linear(): both arguments to linear need to be at least 1D, but they are {input.ndim}D "
                           f"and {weight.ndim}D")
    if weight.ndim > 2:
        raise RuntimeError(f"linear(): weight must be a matrix (out_features, in_features), got a {weight.ndim}-D "
                           f"tensor of size {list(weight.shape)}")
    if input.shape[-1] != weight.shape[-1]:
        rows = 1
        for s in input.shape[:-1]:
            rows *= s
        raise RuntimeError(f"linear(): mat1 and mat2 shapes cannot be multiplied ({rows}x{input.shape[-1]} and "
                           f"{weight.shape[-1]}x{weight.shape[0]})")
    if input.dtype is not weight.dtype:
        raise RuntimeError(f"linear(): mat1 and mat2 must have the same dtype, but got {input.dtype} and "
                           f"{weight.dtype}")
    if weight.ndim == 1:  # a vector: one output feature, dropped from the result's shape (as PyTorch does)
        if bias is not None:
            raise RuntimeError("linear(): weight must be a matrix (out_features, in_features) when a bias is "
                               "given, but got a 1-D weight")
        return run("linear", input, weight.unsqueeze(0)).squeeze(-1)
    if bias is None:
        return run("linear", input, weight)
    _check_linear_bias(bias, input, weight)
    if input.ndim == 1 and bias.ndim == 2:
        bias = bias.reshape(-1)  # (1, out) against a (out,) output, as PyTorch takes it
    return run("linear", input, weight, bias)


# The public op functions of this file (what ``from corenn.ops import *`` re-exports as ``corenn.X``).
__all__ = [name for name, value in list(globals().items())
           if not name.startswith("_") and callable(value) and not isinstance(value, type)
           and getattr(value, "__module__", None) == __name__]
