"""Reductions: sum, mean, prod, max/min, var/std, logsumexp, norm, all/any, cumulative ops."""
from __future__ import annotations

import builtins
from collections import namedtuple

from corenn import _dtype
from corenn._argcheck import check_dtype, check_number, named, not_tensors
from corenn.ops._kernel import Op, kernel, run, to_floating
from corenn.tensor.tensor import Tensor, _normalize_dim
from corenn import _autocast


class return_types:
    """Named results of ops that return several tensors, as ``torch.return_types``."""

    max = namedtuple("max", ["values", "indices"])
    min = namedtuple("min", ["values", "indices"])
    sort = namedtuple("sort", ["values", "indices"])
    topk = namedtuple("topk", ["values", "indices"])
    kthvalue = namedtuple("kthvalue", ["values", "indices"])
    median = namedtuple("median", ["values", "indices"])
    mode = namedtuple("mode", ["values", "indices"])
    var_mean = namedtuple("var_mean", ["var", "mean"])
    std_mean = namedtuple("std_mean", ["std", "mean"])
    aminmax = namedtuple("aminmax", ["min", "max"])
    cummax = namedtuple("cummax", ["values", "indices"])
    cummin = namedtuple("cummin", ["values", "indices"])
    nanmedian = namedtuple("nanmedian", ["values", "indices"])
    slogdet = namedtuple("slogdet", ["sign", "logabsdet"])
    svd = namedtuple("svd", ["U", "S", "V"])
    triangular_solve = namedtuple("triangular_solve", ["solution", "cloned_coefficient"])
    lu_unpack = namedtuple("lu_unpack", ["P", "L", "U"])
    histogram = namedtuple("histogram", ["hist", "bin_edges"])
    histogramdd = namedtuple("histogramdd", ["hist", "bin_edges"])
    geqrf = namedtuple("geqrf", ["a", "tau"])


def _axes(dim, ndim):
    """``dim`` argument -> tuple of non-negative axes, or None for all axes."""
    if dim is None:
        return None
    if isinstance(dim, (tuple, list)):
        if len(dim) == 0:
            return None
        axes = tuple(_normalize_dim(d, ndim) for d in dim)
        if len(set(axes)) != len(axes):
            raise RuntimeError(f"dim {axes} appears multiple times in the list of dims")
        return axes
    return (_normalize_dim(dim, ndim),)


def _expand_reduced(xp, grad, shape, axes, keepdim):
    """Broadcast a reduction's gradient back over the reduced axes."""
    if axes is None:
        return xp.broadcast_to(grad.reshape((1,) * len(shape)), shape)
    if not keepdim:
        grad = xp.expand_dims(grad, axes)
    return xp.broadcast_to(grad, shape)


def _count(shape, axes):
    n = 1
    for i in (range(len(shape)) if axes is None else axes):
        n *= shape[i]
    return n


@kernel("sum", "SumBackward1")
class Sum(Op):
    @staticmethod
    def forward(ctx, a, axes=None, keepdim=False, dtype=None):
        ctx.shape, ctx.axes, ctx.keepdim = a.shape, axes, keepdim
        if axes is None:
            ctx.grad_fn_name = "SumBackward0"
        if dtype is None and a.dtype.kind == "V":  # bfloat16: accumulate in float32, round once (as PyTorch)
            return a.sum(axis=axes, keepdims=keepdim, dtype="float32").astype(a.dtype)
        return a.sum(axis=axes, keepdims=keepdim, dtype=dtype)

    @staticmethod
    def backward(ctx, grad):
        return _expand_reduced(ctx.xp, grad, ctx.shape, ctx.axes, ctx.keepdim)


@kernel("mean", "MeanBackward1")
class Mean(Op):
    @staticmethod
    def forward(ctx, a, axes=None, keepdim=False):
        ctx.shape, ctx.axes, ctx.keepdim = a.shape, axes, keepdim
        if axes is None:
            ctx.grad_fn_name = "MeanBackward0"
        if a.dtype.kind == "V":  # bfloat16: accumulate in float32, round once (as PyTorch)
            return a.mean(axis=axes, keepdims=keepdim, dtype="float32").astype(a.dtype)
        return a.mean(axis=axes, keepdims=keepdim)

    @staticmethod
    def backward(ctx, grad):
        n = _count(ctx.shape, ctx.axes)
        return _expand_reduced(ctx.xp, grad / n if n else grad, ctx.shape, ctx.axes, ctx.keepdim)


@kernel("prod", "ProdBackward1")
class Prod(Op):
    @staticmethod
    def forward(ctx, a, axis=None, keepdim=False):
        out = a.prod(axis=axis, keepdims=keepdim)
        ctx.save_for_backward(a, out)
        ctx.axis, ctx.keepdim = axis, keepdim
        if axis is None:
            ctx.grad_fn_name = "ProdBackward0"
        return out

    @staticmethod
    def backward(ctx, grad):
        a, out = ctx.saved
        xp = ctx.xp
        axes = None if ctx.axis is None else (ctx.axis,)
        grad = _expand_reduced(xp, grad, a.shape, axes, ctx.keepdim)
        out = _expand_reduced(xp, out, a.shape, axes, ctx.keepdim)
        if (a != 0).all().item():
            return grad * out / a
        # With zeros, the product of all *other* elements: exclusive prefix x exclusive suffix.
        flat = a.reshape(-1) if ctx.axis is None else xp.moveaxis(a, ctx.axis, -1)
        ones = xp.ones_like(flat[..., :1])
        prefix = xp.cumprod(xp.concatenate([ones, flat[..., :-1]], axis=-1), axis=-1)
        suffix = xp.flip(xp.cumprod(xp.concatenate([ones, xp.flip(flat, -1)[..., :-1]], axis=-1), axis=-1), -1)
        others = prefix * suffix
        others = others.reshape(a.shape) if ctx.axis is None else xp.moveaxis(others, -1, ctx.axis)
        return grad * others


@kernel("amax", "AmaxBackward0")
class Amax(Op):
    @staticmethod
    def forward(ctx, a, axes=None, keepdim=False, mode="max"):
        out = a.max(axis=axes, keepdims=keepdim) if mode == "max" else a.min(axis=axes, keepdims=keepdim)
        ctx.save_for_backward(a, out)
        ctx.axes, ctx.keepdim = axes, keepdim
        if axes is None:
            ctx.grad_fn_name = "MaxBackward1" if mode == "max" else "MinBackward1"
        elif mode == "min":
            ctx.grad_fn_name = "AminBackward0"
        return out

    @staticmethod
    def backward(ctx, grad):
        a, out = ctx.saved
        xp = ctx.xp
        # Ties share the gradient evenly (PyTorch's amax/amin and full max/min).
        hits = a == _expand_reduced(xp, out, a.shape, ctx.axes, ctx.keepdim)
        count = hits.sum(axis=ctx.axes, keepdims=True).astype(grad.dtype)  # an int count would make it float64
        grad = _expand_reduced(xp, grad, a.shape, ctx.axes, ctx.keepdim)
        return grad * hits / count


@kernel("max_dim", "MaxBackward0")
class MaxDim(Op):
    num_outputs = 2
    differentiable_outputs = (True, False)

    @staticmethod
    def forward(ctx, a, axis, keepdim=False, mode="max"):
        xp = ctx.xp
        indices = a.argmax(axis=axis) if mode == "max" else a.argmin(axis=axis)
        indices = xp.expand_dims(indices, axis)
        values = xp.take_along_axis(a, indices, axis)
        ctx.save_for_backward(indices)
        ctx.shape, ctx.axis, ctx.keepdim = a.shape, axis, keepdim
        if mode == "min":
            ctx.grad_fn_name = "MinBackward0"
        if not keepdim:
            values, indices = values.squeeze(axis), indices.squeeze(axis)
        return values, indices.astype(xp.int64, copy=False)

    @staticmethod
    def backward(ctx, grads):
        grad = grads[0]
        (indices,) = ctx.saved
        xp = ctx.xp
        if not ctx.keepdim:
            grad = xp.expand_dims(grad, ctx.axis)
        grad_input = xp.zeros(ctx.shape, dtype=grad.dtype)
        xp.put_along_axis(grad_input, indices, grad, ctx.axis)
        return grad_input


@kernel("argmax")
class Argmax(Op):
    differentiable = False

    @staticmethod
    def forward(ctx, a, axis=None, keepdim=False, mode="max"):
        xp = ctx.xp
        out = a.argmax(axis=axis, keepdims=keepdim) if mode == "max" else a.argmin(axis=axis, keepdims=keepdim)
        return xp.asarray(out, dtype=xp.int64)


@kernel("var", "VarBackward0")
class Var(Op):
    @staticmethod
    def forward(ctx, a, axes=None, correction=1, keepdim=False):
        mean = a.mean(axis=axes, keepdims=True)
        centered = a - mean
        n = _count(a.shape, axes)
        divisor = builtins.max(n - correction, 0)
        out = (centered * centered).sum(axis=axes, keepdims=keepdim) / divisor if divisor else \
            (centered * centered).sum(axis=axes, keepdims=keepdim) * float("nan")
        ctx.save_for_backward(centered)
        ctx.axes, ctx.keepdim, ctx.divisor = axes, keepdim, divisor
        return out.astype(a.dtype, copy=False)

    @staticmethod
    def backward(ctx, grad):
        (centered,) = ctx.saved
        grad = _expand_reduced(ctx.xp, grad, centered.shape, ctx.axes, ctx.keepdim)
        return grad * (2.0 / ctx.divisor) * centered if ctx.divisor else grad * float("nan")


@kernel("logsumexp", "LogsumexpBackward0")
class Logsumexp(Op):
    @staticmethod
    def forward(ctx, a, axes, keepdim=False):
        xp = ctx.xp
        peak = a.max(axis=axes, keepdims=True)
        peak = xp.where(xp.isfinite(peak), peak, 0)  # all -inf rows stay -inf instead of nan
        out = xp.log(xp.exp(a - peak).sum(axis=axes, keepdims=True)) + peak
        ctx.save_for_backward(a, out)
        ctx.axes, ctx.keepdim = axes, keepdim
        return out if keepdim else out.squeeze(axis=axes)

    @staticmethod
    def backward(ctx, grad):
        a, out = ctx.saved
        xp = ctx.xp
        grad = _expand_reduced(xp, grad, a.shape, ctx.axes, ctx.keepdim)
        return grad * xp.exp(a - out)


@kernel("norm2", "LinalgVectorNormBackward0")
class Norm2(Op):
    @staticmethod
    def forward(ctx, a, axes=None, keepdim=False):
        xp = ctx.xp
        out = xp.sqrt((a * a).sum(axis=axes, keepdims=keepdim))
        ctx.save_for_backward(a, out)
        ctx.axes, ctx.keepdim = axes, keepdim
        return out

    @staticmethod
    def backward(ctx, grad):
        a, out = ctx.saved
        xp = ctx.xp
        out = _expand_reduced(xp, out, a.shape, ctx.axes, ctx.keepdim)
        grad = _expand_reduced(xp, grad, a.shape, ctx.axes, ctx.keepdim)
        # The subgradient 0 at the zero vector, as PyTorch chooses.
        return grad * a / xp.where(out == 0, 1, out) * (out != 0)


@kernel("all")
class All(Op):
    differentiable = False

    @staticmethod
    def forward(ctx, a, axes=None, keepdim=False):
        out = a.all(axis=axes, keepdims=keepdim)
        return out.astype(a.dtype) if a.dtype == ctx.xp.uint8 else out  # uint8 in, uint8 out (PyTorch)


@kernel("any")
class Any(Op):
    differentiable = False

    @staticmethod
    def forward(ctx, a, axes=None, keepdim=False):
        out = a.any(axis=axes, keepdims=keepdim)
        return out.astype(a.dtype) if a.dtype == ctx.xp.uint8 else out  # uint8 in, uint8 out (PyTorch)


@kernel("cumsum", "CumsumBackward0")
class Cumsum(Op):
    @staticmethod
    def forward(ctx, a, axis, dtype=None):
        ctx.axis = axis
        return ctx.xp.cumsum(a, axis=axis, dtype=dtype)

    @staticmethod
    def backward(ctx, grad):
        return _reversed_cumsum(ctx.xp, grad, ctx.axis)


def _reversed_cumsum(xp, x, axis):
    """Sums from each position to the end along ``axis``: what a cumulative sum's backward needs."""
    return xp.flip(xp.cumsum(xp.flip(x, axis), axis=axis), axis)


@kernel("cumprod", "CumprodBackward0")
class Cumprod(Op):
    @staticmethod
    def forward(ctx, a, axis):
        out = ctx.xp.cumprod(a, axis=axis)
        ctx.save_for_backward(a, out)
        ctx.axis = axis
        return out

    @staticmethod
    def backward(ctx, grad):
        a, out = ctx.saved
        xp = ctx.xp
        axis = ctx.axis
        if (a != 0).all().item():
            return _reversed_cumsum(xp, grad * out, axis) / a
        # Zeros present: grad_i = sum_{j>=i} grad_j * prod_{k<=j, k!=i} a_k, computed per position.
        moved_a, moved_grad = xp.moveaxis(a, axis, -1), xp.moveaxis(grad, axis, -1)
        n = moved_a.shape[-1]
        result = xp.zeros_like(moved_a)
        for i in range(n):
            others = moved_a.copy()
            others[..., i] = 1
            partial = xp.cumprod(others, axis=-1)
            result[..., i] = (moved_grad[..., i:] * partial[..., i:]).sum(axis=-1)
        return xp.moveaxis(result, -1, axis)


# ---------------------------------------------------------------------------------------------------------
# Front ends
# ---------------------------------------------------------------------------------------------------------

def sum(input, dim=None, keepdim=False, *, dtype=None):  # noqa: A001
    """Sum over ``dim`` (all dims if None); integer and bool inputs sum to int64 (``torch.sum``)."""
    if not isinstance(input, Tensor):
        raise not_tensors(input=input)
    axes = _axes(dim, input.ndim)
    if dtype is None and not input.dtype.is_floating_point:
        dtype = _dtype.int64
    return run("sum", input, axes=axes, keepdim=keepdim, dtype=None if dtype is None else check_dtype(dtype).numpy)


def nansum(input, dim=None, keepdim=False):
    from corenn.ops.elementwise import isnan, where
    return sum(where(isnan(input), 0.0, input), dim, keepdim)


def mean(input, dim=None, keepdim=False, *, dtype=None):
    """Arithmetic mean over ``dim``; floating inputs only, as in PyTorch."""
    if not isinstance(input, Tensor):
        raise not_tensors(input=input)
    if dtype is not None:
        input = input.to(check_dtype(dtype))
    if not input.dtype.is_floating_point:
        raise RuntimeError(named("could not infer output dtype. Input dtype must be either a floating point or "
                                 f"complex dtype. Got: {_short_name(input.dtype)}"))
    return run("mean", input, axes=_axes(dim, input.ndim), keepdim=keepdim)


def _short_name(d):
    return {"float16": "Half", "float32": "Float", "float64": "Double", "int8": "Char", "int16": "Short",
            "int32": "Int", "int64": "Long", "uint8": "Byte", "bool": "Bool"}[d.name]


@_autocast.autocast_op(_autocast.FLOAT32)
def prod(input, dim=None, keepdim=False, *, dtype=None):
    if not isinstance(input, Tensor):
        raise not_tensors(input=input)
    if dtype is not None:
        input = input.to(check_dtype(dtype))
    elif not input.dtype.is_floating_point:
        input = input.to(_dtype.int64)
    axis = None if dim is None else _normalize_dim(dim, input.ndim)
    return run("prod", input, axis=axis, keepdim=keepdim)


def _max_or_min(mode, input, dim=None, keepdim=False, *, other=None):
    if not isinstance(input, Tensor):
        raise not_tensors(input=input)
    if isinstance(dim, Tensor):
        other, dim = dim, None
    if other is not None:
        from corenn.ops.elementwise import maximum, minimum
        return maximum(input, other) if mode == "max" else minimum(input, other)
    if dim is None:
        if input.numel() == 0:
            raise RuntimeError(f"{mode}(): Expected reduction dim to be specified for input.numel() == 0. Specify "
                               "the reduction dim with the 'dim' argument.")
        return run("amax", input, axes=None, keepdim=False, mode=mode)
    axis = _normalize_dim(dim, input.ndim)
    if input.ndim == 0:
        return getattr(return_types, mode)(input.clone(), Tensor._wrap(input._device._xp.zeros((), "int64"),
                                                                       input._device))
    if input.shape[axis] == 0:
        raise IndexError(f"{mode}(): Expected reduction dim {axis} to have non-zero size.")
    values, indices = run("max_dim", input, axis=axis, keepdim=keepdim, mode=mode)
    return getattr(return_types, mode)(values, indices)


def max(input, dim=None, keepdim=False, *, out=None):  # noqa: A001
    """Largest element; with ``dim``, ``(values, indices)``; with a tensor, the elementwise maximum."""
    return _max_or_min("max", input, dim, keepdim)


def min(input, dim=None, keepdim=False, *, out=None):  # noqa: A001
    """Smallest element; with ``dim``, ``(values, indices)``; with a tensor, the elementwise minimum."""
    return _max_or_min("min", input, dim, keepdim)


def amax(input, dim=(), keepdim=False):
    if not isinstance(input, Tensor):
        raise not_tensors(input=input)
    return run("amax", input, axes=_axes(dim, input.ndim), keepdim=keepdim, mode="max")


def amin(input, dim=(), keepdim=False):
    if not isinstance(input, Tensor):
        raise not_tensors(input=input)
    return run("amax", input, axes=_axes(dim, input.ndim), keepdim=keepdim, mode="min")


def aminmax(input, *, dim=None, keepdim=False):
    return return_types.aminmax(amin(input, dim if dim is not None else (), keepdim),
                                amax(input, dim if dim is not None else (), keepdim))


def argmax(input, dim=None, keepdim=False):
    if not isinstance(input, Tensor):
        raise not_tensors(input=input)
    axis = None if dim is None else _normalize_dim(dim, input.ndim)
    if axis is None and keepdim:
        return run("argmax", input.reshape(-1), axis=0, keepdim=False).reshape((1,) * input.ndim)
    return run("argmax", input, axis=axis, keepdim=keepdim, mode="max")


def argmin(input, dim=None, keepdim=False):
    if not isinstance(input, Tensor):
        raise not_tensors(input=input)
    axis = None if dim is None else _normalize_dim(dim, input.ndim)
    if axis is None and keepdim:
        return run("argmax", input.reshape(-1), axis=0, keepdim=False, mode="min").reshape((1,) * input.ndim)
    return run("argmax", input, axis=axis, keepdim=keepdim, mode="min")


def _correction(unbiased, correction):
    if correction is not None:
        return check_number(correction, "correction")
    if unbiased is None:
        return 1
    return 1 if unbiased else 0


def var(input, dim=None, unbiased=None, keepdim=False, *, correction=None):
    """Variance with Bessel's ``correction`` (1 by default; 0 for the population variance)."""
    if isinstance(dim, bool):  # var(input, unbiased) legacy form
        dim, unbiased = None, dim
    input = to_floating(input)
    return run("var", input, axes=_axes(dim, input.ndim), correction=_correction(unbiased, correction),
               keepdim=keepdim)


def std(input, dim=None, unbiased=None, keepdim=False, *, correction=None):
    from corenn.ops.elementwise import sqrt
    result = sqrt(var(input, dim, unbiased, keepdim, correction=correction))
    if result._grad_fn is not None:
        result._grad_fn.grad_fn_name = "StdBackward0"  # the node that ends std, named as PyTorch names it
    return result


def var_mean(input, dim=None, unbiased=None, keepdim=False, *, correction=None):
    return return_types.var_mean(var(input, dim, unbiased, keepdim, correction=correction),
                                 mean(input, dim, keepdim))


def std_mean(input, dim=None, unbiased=None, keepdim=False, *, correction=None):
    return return_types.std_mean(std(input, dim, unbiased, keepdim, correction=correction),
                                 mean(input, dim, keepdim))


def logsumexp(input, dim, keepdim=False):
    """``log(sum(exp(input), dim))`` computed without overflow."""
    input = to_floating(input)
    axes = _axes(dim, input.ndim)
    if axes is None:
        axes = tuple(range(input.ndim))
    return run("logsumexp", input, axes=axes, keepdim=keepdim)


def norm(input, p="fro", dim=None, keepdim=False, dtype=None):
    """Vector p-norm over ``dim`` (all elements by default); ``'fro'`` is the 2-norm of the flattened input."""
    from corenn.ops.elementwise import abs as abs_, pow as pow_
    if not isinstance(input, Tensor):
        raise not_tensors(input=input)
    if dtype is not None:
        input = input.to(check_dtype(dtype))
    input = to_floating(input)
    axes = _axes(dim, input.ndim)
    if not isinstance(p, str) and p is not None:
        p = check_number(p, "p")
    if p in ("fro", 2, 2.0, None):
        return run("norm2", input, axes=axes, keepdim=keepdim)
    if p in (float("inf"), "inf"):
        return amax(abs_(input), () if axes is None else axes, keepdim)
    if p in (float("-inf"), "-inf"):
        return amin(abs_(input), () if axes is None else axes, keepdim)
    if p == 0:
        return sum((input != 0).to(input.dtype), axes, keepdim)
    if p == 1:
        return sum(abs_(input), axes, keepdim)
    if isinstance(p, str):
        raise RuntimeError(named(f"unsupported norm type {p!r}"))
    # sum(|x|^p)^(1/p), with PyTorch's gradient where the power rule divides by zero: a zero
    # element (0 < p < 1, p < 0) and an all-zero slice (p > 1) get 0, not nan. The zeros take a
    # stand-in of 1 on the differentiated branch of ``where``, which passes them no gradient.
    from corenn.ops.elementwise import where
    magnitude = abs_(input)
    zero = magnitude == 0
    powered = where(zero, 0.0 if p > 0 else float("inf"), pow_(where(zero, 1.0, magnitude), p))
    total = sum(powered, axes, keepdim)
    empty = total == 0
    return where(empty, 0.0, pow_(where(empty, 1.0, total), 1.0 / p))


def all(input, dim=None, keepdim=False):  # noqa: A001
    if not isinstance(input, Tensor):
        raise not_tensors(input=input)
    return run("all", input, axes=_axes(dim, input.ndim), keepdim=keepdim)


def any(input, dim=None, keepdim=False):  # noqa: A001
    if not isinstance(input, Tensor):
        raise not_tensors(input=input)
    return run("any", input, axes=_axes(dim, input.ndim), keepdim=keepdim)


def count_nonzero(input, dim=None):
    if not isinstance(input, Tensor):
        raise not_tensors(input=input)
    return sum(input != 0, dim)


def cumsum(input, dim, *, dtype=None):
    if not isinstance(input, Tensor):
        raise not_tensors(input=input)
    axis = _normalize_dim(dim, input.ndim)
    if dtype is None and not input.dtype.is_floating_point:
        dtype = _dtype.int64
    elif dtype is not None:
        check_dtype(dtype)
    if input.ndim == 0:
        return input.clone() if dtype is None else input.to(dtype)
    return run("cumsum", input, axis=axis, dtype=None if dtype is None else dtype.numpy)


def cumprod(input, dim, *, dtype=None):
    if not isinstance(input, Tensor):
        raise not_tensors(input=input)
    if dtype is not None:
        input = input.to(check_dtype(dtype))
    elif not input.dtype.is_floating_point:
        input = input.to(_dtype.int64)
    if input.ndim == 0:
        return input.clone()
    return run("cumprod", input, axis=_normalize_dim(dim, input.ndim))


# The public op functions of this file (what ``from corenn.ops import *`` re-exports as ``corenn.X``).
__all__ = [name for name, value in list(globals().items())
           if not name.startswith("_") and callable(value) and not isinstance(value, type)
           and getattr(value, "__module__", None) == __name__]
