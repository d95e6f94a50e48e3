"""Tensor factories: zeros, ones, empty, full, arange, linspace, eye and the ``*_like`` forms."""
from __future__ import annotations

import math
import numbers

from corenn import _dtype, dispatch
from corenn._argcheck import check_dtype, check_int, check_number, named, not_tensors, type_name
import importlib as _importlib

_tensor_module = _importlib.import_module("corenn.tensor.tensor")  # the module; corenn.tensor.tensor is the function
from corenn.tensor.tensor import Tensor

__all__ = ["zeros", "ones", "empty", "full", "arange", "linspace", "logspace", "eye", "zeros_like", "ones_like",
           "empty_like", "full_like", "scalar_tensor"]


def _size(size, kwargs_size=None) -> tuple:
    if kwargs_size is not None:
        size = (kwargs_size,)
    if len(size) == 1 and isinstance(size[0], (tuple, list)):
        size = tuple(size[0])
    result = []
    for s in size:
        if isinstance(s, Tensor) and s.numel() == 1:
            s = s.item()
        if not isinstance(s, numbers.Integral) or isinstance(s, bool):
            raise TypeError(named(f"argument 'size' must be a sequence of integers, got {type_name(s)} ({s!r})"))
        if s < 0:
            raise RuntimeError(named(f"Trying to create tensor with negative dimension {s}: {list(size)}"))
        result.append(int(s))
    return tuple(result)


def _place(device):
    """(device, array module, backend) for a creation call."""
    if device is None:
        target = _tensor_module._CPU
    else:
        target = dispatch.resolve_device(device)
    return target, target._xp


def _make(array, device, requires_grad):
    t = Tensor._wrap(array, device)
    if requires_grad:
        t.requires_grad_(True)
    return t


def _filled(fill, size, dtype, device, requires_grad):
    target, xp = _place(device)
    dtype = _dtype.get_default_dtype() if dtype is None else check_dtype(dtype)
    array = getattr(xp, fill)(size, dtype=dtype.numpy)
    return _make(array, target, requires_grad)


def zeros(*size, out=None, dtype=None, device=None, requires_grad=False, layout=None):
    """A tensor of zeros: ``zeros(2, 3)`` or ``zeros((2, 3))``."""
    return _filled("zeros", _size(size), dtype, device, requires_grad)


def ones(*size, out=None, dtype=None, device=None, requires_grad=False, layout=None):
    """A tensor of ones."""
    return _filled("ones", _size(size), dtype, device, requires_grad)


def empty(*size, out=None, dtype=None, device=None, requires_grad=False, layout=None, memory_format=None,
          pin_memory=False):
    """An uninitialised tensor (its values are whatever memory held)."""
    return _filled("empty", _size(size), dtype, device, requires_grad)


def full(size, fill_value, *, out=None, dtype=None, device=None, requires_grad=False, layout=None):
    """A tensor filled with ``fill_value``; the dtype follows the value (bool, int64 or float32)."""
    fill_value = check_number(fill_value, "fill_value")
    target, xp = _place(device)
    dtype = _dtype.scalar_dtype(fill_value) if dtype is None else check_dtype(dtype)
    return _make(xp.full(_size((size,) if isinstance(size, numbers.Integral) else (size,)), fill_value,
                         dtype=dtype.numpy), target, requires_grad)


def scalar_tensor(value, *, dtype=None, device=None, requires_grad=False):
    return full((), value, dtype=_dtype.get_default_dtype() if dtype is None else dtype, device=device,
                requires_grad=requires_grad)


def arange(start, end=None, step=1, *, out=None, dtype=None, device=None, requires_grad=False, layout=None):
    """Values from ``start`` to ``end`` (exclusive) by ``step``; int64 unless an argument is a float."""
    if end is None:
        start, end = 0, start
    values = [check_number(v, name) for v, name in ((start, "start"), (end, "end"), (step, "step"))]
    start, end, step = values
    if step == 0:
        raise RuntimeError("step must be nonzero")
    if (end - start) * step < 0:
        raise RuntimeError(f"upper bound and larger bound inconsistent with step sign (start={start}, end={end}, "
                           f"step={step})")
    if dtype is None:
        dtype = _dtype.int64 if all(isinstance(v, numbers.Integral) for v in values) else _dtype.get_default_dtype()
    check_dtype(dtype)
    target, xp = _place(device)
    count = max(0, math.ceil((end - start) / step))
    # Computed in float64 (or int64) and then cast, as PyTorch's accumulate type does.
    array = (xp.arange(count, dtype="float64" if dtype.is_floating_point else "int64") * step + start)
    return _make(array.astype(dtype.numpy), target, requires_grad)


def linspace(start, end, steps, *, out=None, dtype=None, device=None, requires_grad=False, layout=None):
    """``steps`` evenly spaced values from ``start`` to ``end`` inclusive."""
    start, end, steps = check_number(start, "start"), check_number(end, "end"), check_int(steps, "steps")
    if steps < 0:
        raise RuntimeError("linspace(): number of steps must be non-negative")
    target, xp = _place(device)
    dtype = _dtype.get_default_dtype() if dtype is None else check_dtype(dtype)
    array = xp.linspace(float(start), float(end), int(steps), dtype="float64")
    if not dtype.is_floating_point:
        array = xp.trunc(array)
    return _make(array.astype(dtype.numpy), target, requires_grad)


def logspace(start, end, steps, base=10.0, *, dtype=None, device=None, requires_grad=False):
    start, end, steps = check_number(start, "start"), check_number(end, "end"), check_int(steps, "steps")
    base = check_number(base, "base")
    if steps < 0:
        raise RuntimeError("logspace(): number of steps must be non-negative")
    target, xp = _place(device)
    dtype = _dtype.get_default_dtype() if dtype is None else check_dtype(dtype)
    array = base ** xp.linspace(float(start), float(end), int(steps), dtype="float64")
    return _make(array.astype(dtype.numpy), target, requires_grad)


def eye(n, m=None, *, out=None, dtype=None, device=None, requires_grad=False, layout=None):
    """The ``n x m`` identity matrix."""
    n, m = check_int(n, "n"), n if m is None else check_int(m, "m")
    if n < 0 or m < 0:
        raise RuntimeError(f"eye(): n and m must be greater or equal to 0, got n={n}, m={m}")
    target, xp = _place(device)
    dtype = _dtype.get_default_dtype() if dtype is None else check_dtype(dtype)
    return _make(xp.eye(n, m, dtype=dtype.numpy), target, requires_grad)


def zeros_like(input, *, dtype=None, device=None, requires_grad=False, layout=None, memory_format=None):
    if not isinstance(input, Tensor):
        raise not_tensors(input=input)
    return zeros(input.shape, dtype=dtype or input.dtype, device=device or input.device, requires_grad=requires_grad)


def ones_like(input, *, dtype=None, device=None, requires_grad=False, layout=None, memory_format=None):
    if not isinstance(input, Tensor):
        raise not_tensors(input=input)
    return ones(input.shape, dtype=dtype or input.dtype, device=device or input.device, requires_grad=requires_grad)


def empty_like(input, *, dtype=None, device=None, requires_grad=False, layout=None, memory_format=None):
    if not isinstance(input, Tensor):
        raise not_tensors(input=input)
    return empty(input.shape, dtype=dtype or input.dtype, device=device or input.device, requires_grad=requires_grad)


def full_like(input, fill_value, *, dtype=None, device=None, requires_grad=False, layout=None, memory_format=None):
    if not isinstance(input, Tensor):
        raise not_tensors(input=input)
    return full(input.shape, fill_value, dtype=dtype or input.dtype, device=device or input.device,
                requires_grad=requires_grad)
