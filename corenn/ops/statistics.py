"""Order statistics, histograms and sample statistics: median, mode, kthvalue, quantile, cummax/cummin,
logcumsumexp, histc/histogram/bincount, searchsorted/bucketize, diff, cov/corrcoef, trapezoid, renorm.

The selecting ops (median, mode, kthvalue, cummax, ...) find their indices on the array and read the
values with ``gather``: the gradient goes to the selected elements, as in PyTorch.
"""
from __future__ import annotations

import builtins
import math
import numbers
import warnings

from corenn import _dtype
from corenn._argcheck import check_int, check_ints, check_number, named, not_tensors
from corenn.ops._kernel import Op, kernel, run, to_floating
from corenn.ops.movement import cat, gather, movedim, narrow, reshape, sort, squeeze, unsqueeze
from corenn.ops.reduce import return_types, sum as _sum
from corenn.tensor.tensor import Tensor, _normalize_dim


def _wrap(array, like):
    return Tensor._wrap(array, like._device)


def _index_tensor(array, like):
    return Tensor._wrap(array.astype("int64", copy=False), like._device)


def _last(xp, data, axis):
    """``data`` with ``axis`` moved last (a view)."""
    return xp.moveaxis(data, axis, -1)


def _select(input, axis, indices, keepdim):
    """The values of ``input`` at ``indices`` (an array shaped as the result with ``axis`` kept) and the indices."""
    index = _index_tensor(indices, input)
    values = gather(input, axis, index)
    if not keepdim:
        values, index = squeeze(values, axis), squeeze(index, axis)
    return values, index


def _reduction_axis(input, dim, op):
    if not isinstance(input, Tensor):
        raise not_tensors(input=input)
    axis = _normalize_dim(dim, input.ndim)
    if input.ndim and input.shape[axis] == 0:
        raise IndexError(named(f"Expected reduction dim {axis} to have non-zero size.", op))
    return axis


def _scalar_pair(kind, input):
    """A 0-d input reduces to itself with index 0, as in PyTorch."""
    zero = Tensor._wrap(input._device._xp.zeros((), "int64"), input._device)
    return getattr(return_types, kind)(input.clone(), zero)


# ---------------------------------------------------------------------------------------------------------
# Order statistics
# ---------------------------------------------------------------------------------------------------------

def _median_positions(xp, data, ignore_nan):
    """Index (along the last axis) of the lower median; a slice with nan gives its first nan unless ignored."""
    order = xp.argsort(data, axis=-1, kind="stable")  # nan sorts last
    missing = xp.isnan(data) if data.dtype.kind in "fV" else xp.zeros(data.shape, bool)
    size = data.shape[-1]
    if ignore_nan:
        count = size - missing.sum(axis=-1)
        rank = xp.where(count > 0, (count - 1) // 2, 0)
        return xp.take_along_axis(order, rank[..., None], -1)
    picked = order[..., (size - 1) // 2:(size - 1) // 2 + 1]
    first_nan = xp.argmax(missing, axis=-1)[..., None]
    return xp.where(missing.any(axis=-1, keepdims=True), first_nan, picked)


@kernel("median_all", "MedianBackward0")
class MedianAll(Op):
    """The median of all elements; ties share the gradient evenly (PyTorch's evenly_distribute_backward)."""

    @staticmethod
    def forward(ctx, a, ignore_nan=False):
        xp = ctx.xp
        flat = a.reshape(-1)
        out = flat[_median_positions(xp, flat, ignore_nan)].reshape(())
        ctx.save_for_backward(a, out)
        if ignore_nan:
            ctx.grad_fn_name = "NanmedianBackward0"
        return out

    @staticmethod
    def backward(ctx, grad):
        a, out = ctx.saved
        xp = ctx.xp
        hits = xp.isnan(a) if a.dtype.kind in "fV" and xp.isnan(out).item() else a == out
        return xp.where(hits, grad / hits.sum().astype(grad.dtype), xp.zeros((), dtype=grad.dtype))


def _median(kind, input, dim, keepdim):
    ignore_nan = kind == "nanmedian"
    if not isinstance(input, Tensor):
        raise not_tensors(input=input)
    xp = input._device._xp
    if dim is None:
        flat = reshape(input, -1)
        if flat.numel() == 0:
            return _wrap(xp.full((), float("nan"), dtype=input.dtype.numpy), input)
        return run("median_all", input, ignore_nan=ignore_nan)
    axis = _reduction_axis(input, dim, kind)
    if input.ndim == 0:
        return _scalar_pair(kind, input)
    positions = xp.moveaxis(_median_positions(xp, _last(xp, input._data, axis), ignore_nan), -1, axis)
    return getattr(return_types, kind)(*_select(input, axis, positions, keepdim))


def median(input, dim=None, keepdim=False):
    """The lower median of all elements, or ``(values, indices)`` along ``dim``; nan if a slice holds one.

    Example::

        >>> corenn.median(corenn.tensor([3.0, 1.0, 4.0, 1.5]))
        tensor(1.5000)
    """
    return _median("median", input, dim, keepdim)


def nanmedian(input, dim=None, keepdim=False):
    """``median`` ignoring nan (nan only for a slice of nothing but nan)."""
    return _median("nanmedian", input, dim, keepdim)


def kthvalue(input, k, dim=-1, keepdim=False):
    """The ``k``-th smallest element (1-based) along ``dim`` and its index (``torch.kthvalue``)."""
    k = check_int(k, "k")
    axis = _reduction_axis(input, dim, "kthvalue")
    size = input.shape[axis] if input.ndim else 1
    if not 1 <= k <= size:
        raise RuntimeError(named(f"kthvalue(): selected number k out of range for dimension {axis}"))
    if input.ndim == 0:
        return _scalar_pair("kthvalue", input)
    xp = input._device._xp
    moved = _last(xp, input._data, axis)
    order = xp.argsort(moved, axis=-1, kind="stable")
    chosen = order[..., k - 1].copy()
    rows, picks = moved.reshape(-1, moved.shape[-1]), chosen.reshape(-1)
    if input._device.type == "cpu":
        # Among equal values PyTorch's CPU kernel reports the index its quickselect lands on: replay it
        # on the rows where the k-th value is tied (any index is right elsewhere; CUDA's differs anyway).
        values = xp.take_along_axis(rows, picks[:, None], -1)
        tied = (rows == values).sum(axis=-1) > 1
        if rows.dtype.kind in "fV":
            tied |= xp.isnan(values[:, 0])
        for r in xp.nonzero(tied)[0].tolist():
            picks[r] = _quickselect_index(rows[r].tolist(), k - 1)
    positions = xp.moveaxis(picks.reshape(chosen.shape)[..., None], -1, axis)
    return return_types.kthvalue(*_select(input, axis, positions, keepdim))


def _quickselect_index(values, k):
    """The original index of the element that PyTorch's CPU quickselect (ATen's SortingUtils.h) puts at ``k``.

    nan counts as the largest value, as there.
    """
    def greater(x, y):
        return (x != x and y == y) or x > y

    index = list(range(len(values)))

    def swap(i, j):
        values[i], values[j] = values[j], values[i]
        index[i], index[j] = index[j], index[i]

    left, right = 0, len(values) - 1
    while right > left:
        if right == left + 1:
            if greater(values[left], values[right]):
                swap(left, right)
            break
        middle = left + (right - left) // 2  # median of three as pivot
        swap(middle, left + 1)
        if greater(values[left + 1], values[right]):
            swap(left + 1, right)
        if greater(values[left], values[right]):
            swap(left, right)
        if greater(values[left + 1], values[left]):
            swap(left + 1, left)
        i, j, pivot = left + 1, right, values[left]
        while True:
            i += 1
            while greater(pivot, values[i]):
                i += 1
            j -= 1
            while greater(values[j], pivot):
                j -= 1
            if j < i:
                break
            swap(i, j)
        swap(left, j)
        if j <= k:
            left = i
        if j >= k:
            right = j - 1
    return index[k]


def mode(input, dim=-1, keepdim=False):
    """The most frequent value along ``dim`` (the smallest among equally frequent) and its last index.

    The last index is PyTorch's for slices of up to 16 elements; for longer ones PyTorch's CPU kernel
    reports wherever its (unstable) ``std::sort`` left the run's last element.
    """
    axis = _reduction_axis(input, dim, "mode")
    if input.ndim == 0:
        return _scalar_pair("mode", input)
    xp = input._device._xp
    moved = _last(xp, input._data, axis)
    rows = moved.reshape(-1, moved.shape[-1])
    size = rows.shape[1]
    # Runs of equal values in each sorted row: the first run to reach the longest length holds the
    # smallest of the most frequent values.
    ordered = xp.sort(rows, axis=1)
    starts = xp.concatenate([xp.ones((rows.shape[0], 1), dtype=bool), ordered[:, 1:] != ordered[:, :-1]], axis=1)
    places = xp.arange(size)
    run_start = xp.maximum.accumulate(xp.where(starts, places, 0), axis=1)
    run_length = places - run_start + 1
    first_longest = xp.argmax(run_length == run_length.max(axis=1, keepdims=True), axis=1)
    most = xp.take_along_axis(ordered, first_longest[:, None], 1)
    positions = size - 1 - xp.argmax(xp.flip(rows == most, 1), axis=1)  # its last occurrence, as PyTorch
    positions = xp.moveaxis(positions.reshape(moved.shape[:-1] + (1,)), -1, axis)
    return return_types.mode(*_select(input, axis, positions, keepdim))


def msort(input):
    """``input`` sorted along its first dimension (``torch.msort``)."""
    if not isinstance(input, Tensor):
        raise not_tensors(input=input)
    return sort(input, 0).values


def _running_extreme(kind, input, dim):
    if not isinstance(input, Tensor):
        raise not_tensors(input=input)
    axis = _normalize_dim(dim, input.ndim)
    if input.ndim == 0:
        return _scalar_pair(kind, input)
    xp = input._device._xp
    moved = _last(xp, input._data, axis)
    positions = xp.zeros(moved.shape, dtype=xp.int64)
    if moved.shape[-1]:
        best = moved[..., 0].copy()
        current = xp.zeros(moved.shape[:-1], dtype=xp.int64)
        floating = moved.dtype.kind in "fV"
        for i in range(1, moved.shape[-1]):
            value = moved[..., i]
            # PyTorch's rule: a tie moves the index forward, and nan, once seen, stays (a later nan moves it)
            better = value >= best if kind == "cummax" else value <= best
            if floating:
                better = better | xp.isnan(value)
            best = xp.where(better, value, best)
            current = xp.where(better, i, current)
            positions[..., i] = current
    positions = xp.moveaxis(positions, -1, axis)
    return getattr(return_types, kind)(*_select(input, axis, positions, keepdim=True))


def cummax(input, dim):
    """Running maximum along ``dim`` and where it was reached (``torch.cummax``).

    Example::

        >>> corenn.cummax(corenn.tensor([1, 3, 2, 5]), 0).indices
        tensor([0, 1, 1, 3])
    """
    return _running_extreme("cummax", input, dim)


def cummin(input, dim):
    """Running minimum along ``dim`` and where it was reached (``torch.cummin``)."""
    return _running_extreme("cummin", input, dim)


@kernel("logcumsumexp", "LogcumsumexpBackward0")
class Logcumsumexp(Op):
    @staticmethod
    def forward(ctx, a, axis):
        out = ctx.xp.logaddexp.accumulate(a, axis=axis)
        ctx.save_for_backward(a, out)
        ctx.axis = axis
        return out

    @staticmethod
    def backward(ctx, grad):
        # grad_j = sum_{i >= j} grad_i exp(a_j - out_i), summed in log space for each sign of grad (PyTorch's way).
        a, out = ctx.saved
        xp = ctx.xp
        axis = ctx.axis

        def reversed_logcumsumexp(x):
            return xp.flip(xp.logaddexp.accumulate(xp.flip(x, axis), axis=axis), axis)

        negative_infinity = xp.asarray(-xp.inf, dtype=grad.dtype)
        log_positive = xp.where(grad > 0, xp.log(xp.where(grad > 0, grad, 1)), negative_infinity)
        log_negative = xp.where(grad < 0, xp.log(xp.where(grad < 0, -grad, 1)), negative_infinity)
        return (xp.exp(reversed_logcumsumexp(log_positive - out) + a)
                - xp.exp(reversed_logcumsumexp(log_negative - out) + a))


def logcumsumexp(input, dim):
    """``log(cumsum(exp(input), dim))`` without overflow (``torch.logcumsumexp``).

    Example::

        >>> corenn.logcumsumexp(corenn.tensor([0.0, 0.0]), 0)
        tensor([0.0000, 0.6931])
    """
    if not isinstance(input, Tensor):
        raise not_tensors(input=input)
    if not input.dtype.is_floating_point:
        raise NotImplementedError(named(f"\"logcumsumexp_out_cpu\" not implemented for "
                                        f"'{_SHORT.get(input.dtype.name, input.dtype.name)}'"))
    axis = _normalize_dim(dim, input.ndim)
    if input.ndim == 0:
        return input.clone()
    return run("logcumsumexp", input, axis=axis)


# ---------------------------------------------------------------------------------------------------------
# Quantiles and means
# ---------------------------------------------------------------------------------------------------------

_INTERPOLATIONS = ("linear", "lower", "higher", "midpoint", "nearest")


def _quantile(op, input, q, dim, keepdim, interpolation):
    from corenn.ops.elementwise import lerp, where
    if not isinstance(input, Tensor):
        raise not_tensors(input=input)
    if not input.dtype.is_floating_point or input.dtype.name not in ("float32", "float64"):
        raise RuntimeError(named(f"{op}() input tensor must be either float or double dtype"))
    if input.numel() == 0:
        raise RuntimeError(named(f"{op}() input tensor must be non-empty"))
    if interpolation not in _INTERPOLATIONS:
        raise RuntimeError(named(f"{op}() interpolation must be one of linear, lower, higher, midpoint or nearest. Got "
                                 f"{interpolation}"))
    xp = input._device._xp
    scalar_q = not isinstance(q, Tensor)
    if scalar_q:
        q_values = xp.asarray([check_number(q, "q")], dtype="float64")
    else:
        if q.ndim > 1:
            raise RuntimeError(named(f"{op}() q must be a scalar or 1D tensor"))
        if q.dtype is not input.dtype:
            raise RuntimeError(named(f"{op}() q tensor must be same dtype as the input tensor"))
        q_values = q._data.reshape(-1).astype("float64")
        scalar_q = q.ndim == 0
    if ((q_values < 0) | (q_values > 1)).any().item():
        raise RuntimeError(named(f"{op}() q values must be in the range [0, 1]"))
    if dim is None:
        source, axis = reshape(input, -1), 0
    else:
        axis = _normalize_dim(dim, input.ndim)
        source = input if input.ndim else reshape(input, 1)
    ordered = movedim(sort(source, axis).values, axis, -1)      # nan last
    data = ordered._data
    size = data.shape[-1]
    missing = xp.isnan(data)
    valid = (size - missing.sum(axis=-1, keepdims=True)) if op == "nanquantile" else \
        xp.full(data.shape[:-1] + (1,), size)
    # Ranks into the valid prefix; a slice with nan (quantile) or of nan only (nanquantile) reads a nan.
    has_nan = missing.any(axis=-1, keepdims=True) if op == "quantile" else (valid == 0)
    dtype = input.dtype.numpy
    last = xp.maximum(valid - 1, 0).astype(dtype)
    ranks = q_values.astype(dtype) * last                          # shape (..., Q), in the input's precision
    if interpolation == "lower":
        ranks = xp.floor(ranks)
    elif interpolation == "higher":
        ranks = xp.ceil(ranks)
    elif interpolation == "nearest":
        ranks = xp.round(ranks)                                    # half to even, as torch.round
    ranks = xp.where(has_nan, size - 1, ranks)
    below = xp.floor(ranks).astype("int64")
    above = xp.ceil(ranks).astype("int64")
    low = gather(ordered, -1, _index_tensor(below, input))
    high = gather(ordered, -1, _index_tensor(above, input))
    if interpolation == "midpoint":
        weights = _wrap(xp.where(below == above, 0.0, 0.5).astype(dtype), input)
    elif interpolation == "linear" and isinstance(q, Tensor) and q.requires_grad:
        # PyTorch's weights are ``q * (n - 1) - floor(...)``: q gets a gradient through them
        spread = reshape(q, (1,) * (ranks.ndim - 1) + (-1,)) * _wrap(last, input) - _wrap(below.astype(dtype), input)
        weights = where(_wrap(has_nan, input), 0.0, spread)
    else:
        weights = _wrap((ranks - below).astype(dtype), input)
    result = lerp(low, high, weights)
    result = movedim(result, -1, 0)                                # the q dimension leads
    if dim is None:
        result = reshape(result, (result.shape[0],) + ((1,) * input.ndim if keepdim else ()))
    elif keepdim and input.ndim:
        result = unsqueeze(result, axis + 1)
    return reshape(result, result.shape[1:]) if scalar_q else result


def quantile(input, q, dim=None, keepdim=False, *, interpolation="linear"):
    """The ``q``-quantiles (a number or a 1-D tensor in [0, 1]) over ``dim`` or all elements (``torch.quantile``).

    ``interpolation`` between the two nearest ranks: linear, lower, higher, midpoint or nearest; a
    tensor ``q`` adds a leading dimension. A slice holding nan gives nan.

    Example::

        >>> corenn.quantile(corenn.tensor([1.0, 2.0, 3.0, 4.0]), 0.5)
        tensor(2.5000)
    """
    return _quantile("quantile", input, q, dim, keepdim, interpolation)


def nanquantile(input, q, dim=None, keepdim=False, *, interpolation="linear"):
    """``quantile`` ignoring nan (nan only for a slice of nothing but nan)."""
    return _quantile("nanquantile", input, q, dim, keepdim, interpolation)


def nanmean(input, dim=None, keepdim=False, *, dtype=None):
    """The mean of the non-nan elements (``torch.nanmean``); floating inputs only."""
    from corenn.ops.elementwise import isnan, where
    from corenn.ops.reduce import _axes
    if not isinstance(input, Tensor):
        raise not_tensors(input=input)
    if dtype is not None:
        input = input.to(dtype)
    if not input.dtype.is_floating_point:
        raise RuntimeError(named("nanmean(): expected input to have floating point or complex dtype but got "
                                 f"{_SHORT.get(input.dtype.name, input.dtype.name)}"))
    present = ~isnan(input)
    axes = _axes(dim, input.ndim)
    total = _sum(where(present, input, 0.0), axes, keepdim)
    return total / _sum(present, axes, keepdim).to(input.dtype)


_SHORT = {"int64": "Long", "int32": "Int", "int16": "Short", "int8": "Char", "uint8": "Byte", "bool": "Bool"}


# ---------------------------------------------------------------------------------------------------------
# Histograms and searching (not differentiable, as in PyTorch)
# ---------------------------------------------------------------------------------------------------------

def histc(input, bins=100, min=0, max=0):  # noqa: A002
    """Counts of ``input`` in ``bins`` equal bins over ``[min, max]`` (the data's range if both are 0).

    Elements outside the range are ignored; the result has ``input``'s dtype (``torch.histc``).

    Example::

        >>> corenn.histc(corenn.tensor([1.0, 2.0, 1.0]), bins=4, min=0, max=3)
        tensor([0., 2., 1., 0.])
    """
    if not isinstance(input, Tensor):
        raise not_tensors(input=input)
    if not input.dtype.is_floating_point:
        raise NotImplementedError(named(f"\"histogram_cpu\" not implemented for '{_SHORT.get(input.dtype.name)}'"))
    bins = check_int(bins, "bins")
    low, high = check_number(min, "min"), check_number(max, "max")
    if bins <= 0:
        raise RuntimeError(named("torch.histc: bins must be > 0, but got " + str(bins) + " for dimension 0"))
    xp = input._device._xp
    data = input._data.reshape(-1)
    if low == high and data.size:
        low, high = data.min().item(), data.max().item()
    if low == high:
        low, high = low - 1, high + 1
    if low > high:
        raise RuntimeError(named("torch.histc: max must be larger than min"))
    if not (math.isfinite(low) and math.isfinite(high)):
        raise RuntimeError(named(f"torch.histc: range of [{low}, {high}] is not finite"))
    kept = data[(data >= low) & (data <= high)]
    # PyTorch's linear interpolation of the bin, computed in the input's precision; the maximum goes last.
    dtype = data.dtype
    position = ((kept - dtype.type(low)) * dtype.type(bins) / (dtype.type(high) - dtype.type(low))).astype("int64")
    position = xp.minimum(position, bins - 1)
    counts = xp.bincount(position, minlength=bins)[:bins]
    return _wrap(counts.astype(dtype), input)


def histogram(input, bins, *, range=None, weight=None, density=False):  # noqa: A002
    """``(hist, bin_edges)``: counts (or weights) of ``input`` in ``bins`` (a count or the edges themselves).

    ``range=(min, max)`` bounds equal bins (the data's range by default); ``density`` normalises to a
    probability density (``torch.histogram``).
    """
    if not isinstance(input, Tensor):
        raise not_tensors(input=input)
    if not input.dtype.is_floating_point:
        raise RuntimeError(named("torch.histogram: input tensor and bins tensors should have the same dtype, but got "
                                 f"input {input.dtype} and bins {input.dtype}"))
    xp = input._device._xp
    data = input._data.reshape(-1)
    dtype = data.dtype
    if isinstance(bins, Tensor):
        if bins.ndim != 1:
            raise RuntimeError(named(f"torch.histogram(): bins tensor should have one dimension, but got {bins.ndim} "
                                     "dimensions"))
        if bins.dtype is not input.dtype:
            raise RuntimeError(named("torch.histogram: input tensor and bins tensors should have the same dtype, but "
                                     f"got input {input.dtype} and bins {bins.dtype}"))
        if bins.shape[0] < 2:
            raise RuntimeError(named(f"torch.histogram(): bins tensor should have at least 2 edges, got "
                                     f"{bins.shape[0]}"))
        edges = bins._data.copy()
    else:
        count = check_int(bins, "bins")
        if count <= 0:
            raise RuntimeError(named(f"torch.histogram(): bins must be > 0, but got {count} for dimension 0"))
        if range is not None:
            low, high = (check_number(v, "range") for v in range)
        elif data.size:
            low, high = data.min().item(), data.max().item()
        else:
            low, high = 0.0, 0.0
        if low > high:
            raise RuntimeError(named(f"torch.histogram(): max must be larger than min, but got min {low} max {high}"))
        if low == high:
            low, high = low - 0.5, high + 0.5
        edges = xp.linspace(low, high, count + 1).astype(dtype)
    if weight is not None:
        if not isinstance(weight, Tensor) or weight.shape != input.shape:
            raise RuntimeError(named("torch.histogram: if weight tensor is provided it should have the same shape as "
                                     "the input tensor excluding its innermost dimension"))
        weights = weight._data.reshape(-1)
    else:
        weights = xp.ones(data.shape, dtype=dtype)
    inside = (data >= edges[0]) & (data <= edges[-1])
    position = xp.searchsorted(edges, data[inside], side="right") - 1
    position = xp.minimum(position, edges.shape[0] - 2)  # the last edge closes the last bin
    hist = xp.zeros(edges.shape[0] - 1, dtype=dtype)
    xp.add.at(hist, position, weights[inside].astype(dtype))
    if density:
        hist = hist / (hist.sum() * xp.diff(edges))
    return return_types.histogram(_wrap(hist.astype(dtype), input), _wrap(edges, input))


def bincount(input, weights=None, minlength=0):
    """Counts of each value of a 1-D non-negative integer tensor, or the sums of ``weights`` (``torch.bincount``).

    Example::

        >>> corenn.bincount(corenn.tensor([0, 1, 1, 3]))
        tensor([1, 2, 0, 1])
    """
    if not isinstance(input, Tensor):
        raise not_tensors(input=input)
    minlength = check_int(minlength, "minlength")
    if minlength < 0:
        raise RuntimeError(named("minlength should be >= 0"))
    if input.ndim != 1 or input.dtype.is_floating_point or input.dtype is _dtype.bool_ or \
            (input.numel() and input._data.min().item() < 0):
        raise RuntimeError(named("bincount only supports 1-d non-negative integral inputs."))
    xp = input._device._xp
    if weights is None:
        return _wrap(xp.bincount(input._data, minlength=minlength).astype("int64"), input)
    if not isinstance(weights, Tensor):
        raise not_tensors(weights=weights)
    if weights.ndim != 1 or weights.shape[0] != input.shape[0]:
        raise RuntimeError(named("weights should be 1-d and have the same length as input"))
    dtype = weights.dtype.numpy if weights.dtype.name in ("float32", "float16") else "float64"
    counts = xp.zeros(builtins.max(minlength, int(input._data.max()) + 1 if input.numel() else 0), dtype=dtype)
    xp.add.at(counts, input._data, weights._data.astype(dtype))  # summed in order, in the weights' precision
    return _wrap(counts, input)


def _search_result(xp, array, out_int32, like):
    return Tensor._wrap(array.astype("int32" if out_int32 else "int64"), like._device)


def searchsorted(sorted_sequence, input, *, out_int32=False, right=False, side=None, sorter=None, out=None):
    """Indices where ``input``'s values would go in the innermost dimension of ``sorted_sequence``.

    ``right`` (or ``side='right'``) puts equal values after their matches; ``sorter`` gives the
    order that sorts an unsorted sequence (``torch.searchsorted``).

    Example::

        >>> corenn.searchsorted(corenn.tensor([1, 3, 5, 7]), corenn.tensor([3, 6]))
        tensor([1, 3])
    """
    if not isinstance(sorted_sequence, Tensor):
        raise not_tensors(sorted_sequence=sorted_sequence)
    if side is not None:
        if side not in ("left", "right"):
            raise RuntimeError(named(f"torch.searchsorted(): side can only be 'left' or 'right' but got {side}"))
        if right and side == "left":
            raise RuntimeError(named("torch.searchsorted(): side and right can't be set to opposites, got side of left "
                                     "while right was True"))
        right = side == "right"
    xp = sorted_sequence._device._xp
    scalar = not isinstance(input, Tensor)
    values = xp.asarray(check_number(input, "input")) if scalar else input._data
    boundaries = sorted_sequence._data
    if sorter is not None:
        if not isinstance(sorter, Tensor) or sorter.shape != sorted_sequence.shape:
            raise RuntimeError(named("torch.searchsorted(): boundary and sorter must have the same size, but got "
                                     f"boundary tensor {list(sorted_sequence.shape)}and got sorter tensor "
                                     f"{list(getattr(sorter, 'shape', []))}"))
        boundaries = xp.take_along_axis(boundaries, sorter._data, -1)
    way = "right" if right else "left"
    if boundaries.ndim == 1:
        return _search_result(xp, xp.searchsorted(boundaries, values, side=way), out_int32, sorted_sequence)
    if scalar or values.shape[:-1] != boundaries.shape[:-1]:
        raise RuntimeError(named("torch.searchsorted(): boundaries tensor should be 1 dimension or the first N-1 "
                                 "dimensions of boundaries tensor and input value tensor must match, but we got "
                                 f"boundaries tensor {list(boundaries.shape)} and input value tensor "
                                 f"{list(values.shape)}"))
    flat_bounds = boundaries.reshape(-1, boundaries.shape[-1])
    flat_values = values.reshape(-1, values.shape[-1])
    result = xp.stack([xp.searchsorted(b, v, side=way) for b, v in zip(flat_bounds, flat_values)]) \
        if flat_bounds.shape[0] else xp.zeros(flat_values.shape, "int64")
    return _search_result(xp, result.reshape(values.shape), out_int32, sorted_sequence)


def bucketize(input, boundaries, *, out_int32=False, right=False, out=None):
    """The bucket of each value: ``boundaries[i-1] < x <= boundaries[i]`` (``right=True``: ``<= x <``).

    Example::

        >>> corenn.bucketize(corenn.tensor([1, 6]), corenn.tensor([1, 3, 5]), right=True)
        tensor([1, 3])
    """
    if not isinstance(boundaries, Tensor):
        raise not_tensors(boundaries=boundaries)
    if not isinstance(input, (Tensor, numbers.Number)):
        raise TypeError(named(f"argument 'input' must be Tensor or a number, not {type(input).__name__}"))
    if boundaries.ndim != 1:
        raise RuntimeError(named(f"boundaries tensor must be 1 dimension, but got dim({boundaries.ndim})"))
    return searchsorted(boundaries, input, out_int32=out_int32, right=right)


def unique_consecutive(input, return_inverse=False, return_counts=False, dim=None):
    """Collapse runs of equal consecutive elements (or slices along ``dim``) (``torch.unique_consecutive``)."""
    if not isinstance(input, Tensor):
        raise not_tensors(input=input)
    xp = input._device._xp
    if dim is None:
        data = input._data.reshape(-1)
        changes = data[1:] != data[:-1]
    else:
        axis = _normalize_dim(dim, input.ndim)
        data = xp.moveaxis(input._data, axis, 0)
        changes = (data[1:] != data[:-1]).reshape(builtins.max(data.shape[0] - 1, 0), -1).any(axis=1)
    starts = xp.concatenate([xp.ones(builtins.min(data.shape[0], 1), bool), changes])
    groups = xp.cumsum(starts) - 1
    values = data[starts]
    if dim is not None:
        values = xp.moveaxis(values, 0, axis)
    result = [_wrap(xp.ascontiguousarray(values), input)]
    if return_inverse:
        inverse = groups.reshape(input.shape) if dim is None else groups
        result.append(_index_tensor(inverse, input))
    if return_counts:
        bounds = xp.concatenate([xp.nonzero(starts)[0], xp.asarray([data.shape[0]])])
        result.append(_index_tensor(xp.diff(bounds), input))
    return result[0] if len(result) == 1 else tuple(result)


# ---------------------------------------------------------------------------------------------------------
# Differences, integrals and sample statistics (composites: their gradients come from the ops they use)
# ---------------------------------------------------------------------------------------------------------

def diff(input, n=1, dim=-1, prepend=None, append=None):
    """The ``n``-th forward difference along ``dim``, after joining ``prepend`` and ``append`` (``torch.diff``).

    Example::

        >>> corenn.diff(corenn.tensor([1, 3, 6, 10]))
        tensor([2, 3, 4])
    """
    from corenn.ops.elementwise import logical_xor
    if not isinstance(input, Tensor):
        raise not_tensors(input=input)
    if input.ndim == 0:
        raise RuntimeError(named("diff expects input to be at least one-dimensional"))
    n = check_int(n, "n")
    if n < 0:
        raise RuntimeError(named(f"order must be non-negative but got {n}"))
    axis = _normalize_dim(dim, input.ndim)
    pieces = [t for t in (prepend, input, append) if t is not None]
    for extra, name in ((prepend, "prepend"), (append, "append")):
        if extra is not None:
            if not isinstance(extra, Tensor):
                raise not_tensors(**{name: extra})
            if extra.ndim != input.ndim:
                raise RuntimeError(named("diff expects prepend or append to be the same dimension as input"))
    result = cat(pieces, axis) if len(pieces) > 1 else input
    for _ in range(n):
        length = result.shape[axis]
        if length == 0:
            break
        later, earlier = narrow(result, axis, 1, length - 1), narrow(result, axis, 0, length - 1)
        result = logical_xor(later, earlier) if result.dtype is _dtype.bool_ else later - earlier
    return result if result is not input else input.clone()


def _spacing(y, x, dx, axis, op):
    """The widths of the trapezoids along ``axis``: ``diff(x)`` broadcast like ``y``, or the number ``dx``."""
    if x is None:
        return 1.0 if dx is None else check_number(dx, "dx")
    if isinstance(x, Tensor):
        if x.ndim == 1:
            if x.shape[0] != y.shape[axis]:
                raise RuntimeError(named(f"{op}: There must be one `x` value for each sample point"))
            widths = diff(x)
            shape = [1] * y.ndim
            shape[axis] = widths.shape[0]
            return reshape(widths, shape)
        return diff(x, dim=axis)
    return check_number(x, "dx")


def trapezoid(y, x=None, *, dx=None, dim=-1):
    """The trapezoidal rule's integral of ``y`` along ``dim`` over sample points ``x`` or spacing ``dx``.

    Example::

        >>> corenn.trapezoid(corenn.tensor([1.0, 2.0, 3.0]))
        tensor(4.)
    """
    axis, doubled_areas = _doubled_trapezoids("trapezoid", y, x, dx, dim)
    if doubled_areas is None:
        return _sum(y, axis)
    return _sum(doubled_areas, axis) / 2


def trapz(y, x=None, *, dx=None, dim=-1):
    """The same integral as :func:`trapezoid` (``torch.trapz``)."""
    return trapezoid(y, x, dx=dx, dim=dim)


def cumulative_trapezoid(y, x=None, *, dx=None, dim=-1):
    """The running trapezoidal integral of ``y`` along ``dim``: one element fewer than ``y`` there."""
    from corenn.ops.reduce import cumsum
    axis, doubled_areas = _doubled_trapezoids("cumulative_trapezoid", y, x, dx, dim)
    if doubled_areas is None:
        return y.clone()
    return cumsum(doubled_areas / 2, axis)


def _doubled_trapezoids(name, y, x, dx, dim):
    """``(axis, areas)``: twice the area of each trapezoid between neighbouring samples of ``y`` along ``dim``.

    ``areas`` is None when ``y`` has no samples there. Halving is left to the caller, which
    halves the sum (``trapezoid``) or each area (``cumulative_trapezoid``), as PyTorch does.
    """
    if not isinstance(y, Tensor):
        raise not_tensors(y=y)
    if x is not None and dx is not None:
        raise RuntimeError(named(f"{name}: received both x and dx, but only one of them may be given"))
    if y.ndim == 0:
        raise IndexError(named(f"Dimension out of range (expected to be in range of [-1, 0], but got {dim})"))
    axis = _normalize_dim(dim, y.ndim)
    length = y.shape[axis]
    if length == 0:
        return axis, None
    widths = _spacing(y, x, dx, axis, name)
    heights = narrow(y, axis, 1, length - 1) + narrow(y, axis, 0, length - 1)
    return axis, heights * widths


def cov(input, *, correction=1, fweights=None, aweights=None):
    """The covariance matrix of the variables in ``input``'s rows (observations in columns), ``torch.cov``.

    ``fweights`` (integer frequencies) and ``aweights`` (observation weights) weight the columns.

    Example::

        >>> corenn.cov(corenn.tensor([[0.0, 1.0, 2.0], [2.0, 1.0, 0.0]]))
        tensor([[ 1., -1.],
                [-1.,  1.]])
    """
    from corenn.ops.linalg import matmul
    from corenn.ops.movement import t as transpose_
    if not isinstance(input, Tensor):
        raise not_tensors(input=input)
    if input.ndim > 2:
        raise RuntimeError(named("cov(): expected input to have two or fewer dimensions but got an input with "
                                 f"{input.ndim} dimensions"))
    correction = check_number(correction, "correction")
    x = reshape(input, (1, -1)) if input.ndim < 2 else input
    x = to_floating(x)
    observations = x.shape[1]
    weights = None
    for given, name in ((fweights, "fweights"), (aweights, "aweights")):
        if given is None:
            continue
        if not isinstance(given, Tensor):
            raise not_tensors(**{name: given})
        if given.ndim > 1:
            raise RuntimeError(named(f"cov(): expected {name} to have one or fewer dimensions but got {name} with "
                                     f"{given.ndim} dimensions"))
        if given.numel() != observations:
            raise RuntimeError(named(f"cov(): expected {name} to have the same numel as there are observations in the "
                                     f"input but got {given.numel()} != {observations}"))
        if name == "fweights" and given.dtype.is_floating_point:
            raise RuntimeError(named("cov(): expected fweights to have integral dtype but got fweights with "
                                     f"{given.dtype} dtype"))
        if name == "aweights" and not given.dtype.is_floating_point:
            raise RuntimeError(named("cov(): expected aweights to have floating point dtype but got aweights with "
                                     f"{given.dtype} dtype"))
        if given.numel() and given._data.min().item() < 0:
            raise RuntimeError(named(f"cov(): {name} cannot be negative"))
        given = reshape(given, -1).to(x.dtype)
        weights = given if weights is None else weights * given
    if weights is None:
        average = _sum(x, 1) / observations
        total = observations
    else:
        total = _sum(weights)
        average = _sum(x * weights, 1) / total
    if weights is not None and aweights is not None and correction != 0:
        normalizer = total - correction * _sum(weights * reshape(aweights, -1).to(x.dtype)) / total
    else:
        normalizer = total - correction
    if float(normalizer) <= 0:
        warnings.warn("cov(): degrees of freedom is <= 0. Correction should be strictly less than the number of "
                      "observations.", UserWarning, stacklevel=2)
        normalizer = normalizer * 0
    centered = x - unsqueeze(average, 1)
    product = matmul(centered, transpose_(centered if weights is None else centered * weights))
    return squeeze(product / normalizer)


def corrcoef(input):
    """Pearson correlation coefficients of the variables in ``input``'s rows, clipped to [-1, 1]."""
    from corenn.ops.elementwise import clamp, sqrt
    from corenn.ops.movement import diagonal
    if not isinstance(input, Tensor):
        raise not_tensors(input=input)
    if input.ndim > 2:
        raise RuntimeError(named("corrcoef(): expected input to have two or fewer dimensions but got an input with "
                                 f"{input.ndim} dimensions"))
    c = cov(input)
    if c.ndim == 0:
        return c / c
    scale = sqrt(diagonal(c))
    c = c / unsqueeze(scale, 1) / unsqueeze(scale, 0)
    return clamp(c, -1, 1)


def renorm(input, p, dim, maxnorm):
    """Scale each slice along ``dim`` whose ``p``-norm exceeds ``maxnorm`` down to that norm (``torch.renorm``)."""
    from corenn.ops.elementwise import where
    from corenn.ops.reduce import norm
    if not isinstance(input, Tensor):
        raise not_tensors(input=input)
    p, maxnorm = check_number(p, "p"), check_number(maxnorm, "maxnorm")
    if p <= 0:
        raise RuntimeError(named("renorm: non-positive-norm not supported"))
    if maxnorm < 0:
        raise RuntimeError(named(f"renorm: expected maxnorm to be >= 0 but got {maxnorm}"))
    if input.ndim <= 1:
        raise RuntimeError(named(f"renorm: input needs at least 2 dimensions, got {input.ndim} dimensions"))
    if not input.dtype.is_floating_point:
        raise RuntimeError(named(f"linalg.vector_norm: Expected a floating point or complex tensor as input. Got "
                                 f"{_SHORT.get(input.dtype.name, input.dtype.name)}"))
    axis = _normalize_dim(dim, input.ndim)
    others = tuple(d for d in range(input.ndim) if d != axis)
    norms = norm(input, p, others, keepdim=True)
    # PyTorch's factor, 1e-7 included: a slice just over the limit lands just under it
    return input * where(norms > maxnorm, maxnorm / (norms + 1e-7), 1.0)


def sum_to_size(input, *size):
    """``input`` summed down to ``size``, which ``input`` must expand from (``Tensor.sum_to_size``)."""
    from corenn.ops.movement import _sizes
    if not isinstance(input, Tensor):
        raise not_tensors(input=input)
    size = _sizes(size)
    shape = tuple(input.shape)
    if len(size) > len(shape) or builtins.any(s != 1 and s != shape[len(shape) - len(size) + i]
                                              for i, s in enumerate(size)):
        raise RuntimeError(named(f"size {{{list(size)}}} is not expandable to size {{{list(shape)}}}."))
    leading = len(shape) - len(size)
    result = _sum(input, tuple(range(leading))) if leading else input
    ones = tuple(i for i, s in enumerate(size) if s == 1 and result.shape[i] != 1)
    if ones:
        result = _sum(result, ones, keepdim=True)
    return result if result is not input else input


def isin(elements, test_elements, *, assume_unique=False, invert=False):
    """Whether each of ``elements`` is in ``test_elements`` (either may be a number), ``torch.isin``."""
    if not isinstance(elements, Tensor) and not isinstance(test_elements, Tensor):
        raise not_tensors(elements=elements)
    like = elements if isinstance(elements, Tensor) else test_elements
    xp = like._device._xp
    values = elements._data if isinstance(elements, Tensor) else xp.asarray(check_number(elements, "elements"))
    tests = test_elements._data if isinstance(test_elements, Tensor) else \
        xp.asarray([check_number(test_elements, "test_elements")])
    found = xp.isin(values, tests, invert=bool(invert))
    return _wrap(xp.asarray(found, dtype=bool), like)


def nonzero_static(input, *, size, fill_value=-1):
    """``nonzero(input)`` padded with ``fill_value`` (or cut) to exactly ``size`` rows (``torch.nonzero_static``)."""
    from corenn.ops.movement import nonzero
    if not isinstance(input, Tensor):
        raise not_tensors(input=input)
    size, fill_value = check_int(size, "size"), check_int(fill_value, "fill_value")
    if size < 0:
        raise RuntimeError(named(f"nonzero_static: 'size' must be an non-negative integer, but got size: {size}"))
    found = nonzero(input)._data
    xp = input._device._xp
    rows = xp.full((size, found.shape[1]), fill_value, dtype="int64")
    kept = builtins.min(size, found.shape[0])
    rows[:kept] = found[:kept]
    return _index_tensor(rows, input)


def histogramdd(input, bins, *, range=None, weight=None, density=False):  # noqa: A002
    """The D-dimensional histogram of the points in ``input``'s last dimension: ``(hist, bin_edges)``.

    ``bins`` is a count (for every dimension), a count per dimension, or a list of edge tensors.
    """
    if not isinstance(input, Tensor):
        raise not_tensors(input=input)
    if not input.dtype.is_floating_point:
        raise RuntimeError(named("torch.histogramdd: input tensor should be a floating-point tensor, got "
                                 f"{input.dtype}"))
    if input.ndim < 1:
        raise RuntimeError(named("torch.histogramdd: input tensor should have at least 1 dimension, but got 0"))
    if input.shape[-1] == 0:
        raise RuntimeError(named("torch.histogramdd: input's innermost dimension (the point's coordinates) is "
                                 "empty"))
    xp = input._device._xp
    points = input._data.reshape(-1, input.shape[-1])
    dims = points.shape[1]
    if isinstance(bins, (list, tuple)) and bins and builtins.all(isinstance(b, Tensor) for b in bins):
        edges = [b._data for b in bins]
    else:
        if isinstance(bins, numbers.Integral) and not isinstance(bins, bool):
            counts = [int(bins)] * dims
        elif isinstance(bins, (list, tuple)):
            counts = list(check_ints(bins, "bins"))
        else:
            raise TypeError(named(f"argument 'bins' must be int, a list of ints or a list of Tensors, not "
                                  f"{type(bins).__name__}"))
        if builtins.any(c <= 0 for c in counts):
            raise RuntimeError(named(f"torch.histogramdd(): bins must be > 0, but got {counts}"))
        if len(counts) != dims:
            raise RuntimeError(named(f"torch.histogramdd: expected {dims} sequences of bin edges for each dimension of "
                                     f"the input tensor, but got {len(counts)}"))
        edges = []
        for d, count in enumerate(counts):
            if range is not None:
                low, high = check_number(range[2 * d], "range"), check_number(range[2 * d + 1], "range")
            elif points.shape[0]:
                low, high = points[:, d].min().item(), points[:, d].max().item()
            else:
                low, high = 0.0, 0.0
            if low == high:
                low, high = low - 0.5, high + 0.5
            edges.append(xp.linspace(low, high, count + 1).astype(points.dtype))
    inside = xp.ones(points.shape[0], dtype=bool)
    positions = []
    for d, e in enumerate(edges):
        column = points[:, d]
        inside &= (column >= e[0]) & (column <= e[-1])
        positions.append(xp.minimum(xp.searchsorted(e, column, side="right") - 1, e.shape[0] - 2))
    weights = xp.ones(points.shape[0], dtype=points.dtype) if weight is None else \
        weight._data.reshape(-1).astype(points.dtype)
    hist = xp.zeros([e.shape[0] - 1 for e in edges], dtype=points.dtype)
    xp.add.at(hist, tuple(p[inside] for p in positions), weights[inside])
    if density:
        volume = xp.ones_like(hist)
        for d, e in enumerate(edges):
            shape = [1] * dims
            shape[d] = e.shape[0] - 1
            volume = volume * xp.diff(e).reshape(shape)
        hist = hist / (hist.sum() * volume)
    return return_types.histogramdd(_wrap(hist, input), tuple(_wrap(e, input) for e in edges))


def gradient(input, *, spacing=1, dim=None, edge_order=1):
    """The derivative of ``input`` sampled on a grid, by central differences (one tensor per dimension).

    ``spacing``: a number, one number per dimension, or the sample coordinates (1-D tensors) per
    dimension; ``edge_order`` 1 or 2 at the borders (``torch.gradient``). Coordinates are constants:
    the gradient flows to ``input`` only.
    """
    if not isinstance(input, Tensor):
        raise not_tensors(input=input)
    if edge_order not in (1, 2):
        raise RuntimeError(named("torch.gradient only supports edge_order=1 and edge_order=2."))
    if dim is None:
        dims = list(range(input.ndim))
    else:
        dims = [_normalize_dim(d, input.ndim) for d in check_ints(dim, "dim")]
    if isinstance(spacing, (list, tuple)):
        if len(spacing) != len(dims):
            raise RuntimeError(named("torch.gradient expected spacing to be unspecified, a scalar or it's spacing and "
                                     "dim arguments to have the same length, but got a spacing argument of length "
                                     f"{len(spacing)} and a dim argument of length {len(dims)}."))
        spacings = list(spacing)
    else:
        spacings = [spacing] * len(dims)
    for d in dims:
        if input.shape[d] < edge_order + 1:
            raise RuntimeError(named("torch.gradient expected each dimension size to be at least edge_order+1"))
    input = to_floating(input)
    xp = input._device._xp
    results = []
    for d, step in zip(dims, spacings):
        def part(start, stop=None):
            n = input.shape[d]
            start = start % n if start < 0 else start
            stop = n if stop is None else (stop % n if stop < 0 else stop)
            return narrow(input, d, start, stop - start)

        if isinstance(step, Tensor):
            dx = xp.diff(step._data.astype(input.dtype.numpy))
            shape = [1] * input.ndim
            shape[d] = -1

            def constant(values):
                return _wrap(xp.asarray(values).reshape(shape), input)
            dx1, dx2 = dx[:-1], dx[1:]
            center = (constant(-dx2 / (dx1 * (dx1 + dx2))) * part(0, -2) + constant((dx2 - dx1) / (dx1 * dx2))
                      * part(1, -1) + constant(dx1 / (dx2 * (dx1 + dx2))) * part(2))
            if edge_order == 1:
                first = (part(1, 2) - part(0, 1)) / dx[0].item()
                last = (part(-1) - part(-2, -1)) / dx[-1].item()
            else:
                a, b = dx[0].item(), dx[1].item()
                first = (-(2 * a + b) / (a * (a + b)) * part(0, 1) + (a + b) / (a * b) * part(1, 2)
                         - a / (b * (a + b)) * part(2, 3))
                a, b = dx[-1].item(), dx[-2].item()
                last = (a / (b * (a + b)) * part(-3, -2) - (a + b) / (a * b) * part(-2, -1)
                        + (2 * a + b) / (a * (a + b)) * part(-1))
        else:
            step = check_number(step, "spacing")
            center = (part(2) - part(0, -2)) / step / 2
            if edge_order == 1:
                first, last = (part(1, 2) - part(0, 1)) / step, (part(-1) - part(-2, -1)) / step
            else:
                first = (-1.5 * part(0, 1) + 2 * part(1, 2) - 0.5 * part(2, 3)) / step
                last = (0.5 * part(-3, -2) - 2 * part(-2, -1) + 1.5 * part(-1)) / step
        results.append(cat([first, center, last], d))
    return tuple(results)


# The public op functions of this file (what ``from corenn.ops import *`` re-exports as ``corenn.X``).
__all__ = [name for name, value in list(globals().items())
           if not name.startswith("_") and callable(value) and not isinstance(value, type)
           and getattr(value, "__module__", None) == __name__ and name != "sum_to_size"]  # a Tensor method only
