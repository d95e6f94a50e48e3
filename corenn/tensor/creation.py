"""Tensor factories: zeros, ones, empty, full, arange, linspace, eye and the ``*_like`` forms."""
from __future__ import annotations

import builtins
import math
import numbers

import numpy as _np

from corenn import _dtype, dispatch
from corenn._argcheck import check_dtype, check_int, check_ints, check_number, named, not_tensors, type_name
import importlib as _importlib

_tensor_module = _importlib.import_module("corenn.tensor.tensor")  # the module; corenn.tensor.tensor is the function
from corenn.tensor.tensor import Tensor

__all__ = ["zeros", "ones", "empty", "full", "arange", "linspace", "logspace", "eye", "zeros_like", "ones_like",
           "empty_like", "full_like", "scalar_tensor"]


def _size(size, kwargs_size=None) -> tuple:
    if kwargs_size is not None:  # zeros(size=(2, 3)), as pytorch/examples gat writes torch.empty(size=...)
        if size:
            raise TypeError(named("got multiple values for argument 'size'"))
        if not isinstance(kwargs_size, (tuple, list)):
            raise TypeError(named(f"argument 'size' must be tuple of ints, not {type_name(kwargs_size)}"))
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


def zeros(*sizes, size=None, out=None, dtype=None, device=None, requires_grad=False, layout=None):
    """A tensor of zeros: ``zeros(2, 3)``, ``zeros((2, 3))`` or ``zeros(size=(2, 3))``."""
    return _filled("zeros", _size(sizes, size), dtype, device, requires_grad)


def ones(*sizes, size=None, out=None, dtype=None, device=None, requires_grad=False, layout=None):
    """A tensor of ones."""
    return _filled("ones", _size(sizes, size), dtype, device, requires_grad)


def empty(*sizes, size=None, out=None, dtype=None, device=None, requires_grad=False, layout=None,
          memory_format=None, pin_memory=False):
    """An uninitialised tensor (its values are whatever memory held)."""
    return _filled("empty", _size(sizes, size), dtype, device, requires_grad)


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


# ---------------------------------------------------------------------------------------------------------
# Window functions (signal processing): symmetric, or periodic (the symmetric window one longer, its last
# value dropped), computed in float64 and rounded once
# ---------------------------------------------------------------------------------------------------------

def _window(name, window_length, periodic, dtype, device, requires_grad, values):
    window_length = check_int(window_length, "window_length")
    if window_length < 0:
        raise RuntimeError(named(f"{name} requires non-negative window_length, got window_length={window_length}"))
    dtype = _dtype.get_default_dtype() if dtype is None else check_dtype(dtype)
    if not dtype.is_floating_point:
        raise RuntimeError(named(f"{name} expects floating point dtypes, got: {dtype}"))
    target, xp = _place(device)
    if window_length <= 1:
        array = xp.ones(window_length, dtype="float64")
    else:
        length = window_length + 1 if periodic else window_length
        array = values(xp, xp.arange(length, dtype="float64"), length)[:window_length]
    return _make(array.astype(dtype.numpy), target, requires_grad)


def _cosine_sum(*coefficients):
    """``a0 - a1 cos(2 pi n / (N - 1)) + a2 cos(4 pi n / (N - 1)) - ...`` (the generalised cosine windows)."""
    def values(xp, n, length):
        phase = 2 * math.pi * n / (length - 1)
        return sum((-1) ** k * a * xp.cos(k * phase) for k, a in enumerate(coefficients))
    return values


def hann_window(window_length, periodic=True, *, dtype=None, layout=None, device=None, requires_grad=False):
    """The Hann window ``0.5 - 0.5 cos(2 pi n / (N - 1))`` (``torch.hann_window``).

    Example::

        >>> corenn.hann_window(4)
        tensor([0.0000, 0.5000, 1.0000, 0.5000])
    """
    return _window("hann_window", window_length, periodic, dtype, device, requires_grad, _cosine_sum(0.5, 0.5))


def hamming_window(window_length, periodic=True, alpha=0.54, beta=0.46, *, dtype=None, layout=None, device=None,
                   requires_grad=False):
    """The Hamming window ``alpha - beta cos(2 pi n / (N - 1))`` (``torch.hamming_window``)."""
    alpha, beta = check_number(alpha, "alpha"), check_number(beta, "beta")
    return _window("hamming_window", window_length, periodic, dtype, device, requires_grad,
                   _cosine_sum(alpha, beta))


def blackman_window(window_length, periodic=True, *, dtype=None, layout=None, device=None, requires_grad=False):
    """The Blackman window ``0.42 - 0.5 cos(2 pi n / (N - 1)) + 0.08 cos(4 pi n / (N - 1))``."""
    return _window("blackman_window", window_length, periodic, dtype, device, requires_grad,
                   _cosine_sum(0.42, 0.5, 0.08))


def bartlett_window(window_length, periodic=True, *, dtype=None, layout=None, device=None, requires_grad=False):
    """The triangular Bartlett window ``1 - |2 n / (N - 1) - 1|`` (``torch.bartlett_window``)."""
    return _window("bartlett_window", window_length, periodic, dtype, device, requires_grad,
                   lambda xp, n, length: 1 - xp.abs(2 * n / (length - 1) - 1))


def kaiser_window(window_length, periodic=True, beta=12.0, *, dtype=None, layout=None, device=None,
                  requires_grad=False):
    """The Kaiser window ``I0(beta sqrt(1 - (2 n / (N - 1) - 1)^2)) / I0(beta)`` (``torch.kaiser_window``)."""
    beta = check_number(beta, "beta")
    if beta < 0:
        raise RuntimeError(named(f"kaiser_window requires non-negative beta, got beta={beta}"))

    def values(xp, n, length):
        ratio = 2 * n / (length - 1) - 1
        return xp.i0(beta * xp.sqrt(xp.clip(1 - ratio * ratio, 0, None))) / xp.i0(beta)
    return _window("kaiser_window", window_length, periodic, dtype, device, requires_grad, values)


# ---------------------------------------------------------------------------------------------------------
# Layout-aware allocation and conversion
# ---------------------------------------------------------------------------------------------------------

def empty_strided(size, stride, *, dtype=None, layout=None, device=None, requires_grad=False, pin_memory=False):
    """An uninitialised tensor of ``size`` whose ``stride()`` is ``stride`` (``torch.empty_strided``)."""
    size, stride = _size((size,)), check_ints(stride, "stride")
    if len(size) != len(stride):
        raise RuntimeError(named("mismatch in length of strides and shape"))
    if any(s < 0 for s in stride):
        raise RuntimeError(named("empty_strided: negative strides are not supported"))
    target, xp = _place(device)
    dtype = _dtype.get_default_dtype() if dtype is None else check_dtype(dtype)
    extent = 1 + sum((n - 1) * s for n, s in zip(size, stride)) if all(size) else 0
    storage = xp.empty(max(extent, 1), dtype=dtype.numpy)
    itemsize = storage.dtype.itemsize
    array = xp.lib.stride_tricks.as_strided(storage, size, tuple(s * itemsize for s in stride))
    return _make(array, target, requires_grad)


def empty_permuted(size, physical_layout, *, dtype=None, layout=None, device=None, requires_grad=False,
                   pin_memory=False):
    """An uninitialised tensor of ``size`` laid out in memory in the order ``physical_layout`` (outer first)."""
    size, order = _size((size,)), check_ints(physical_layout, "physical_layout")
    if sorted(order) != list(builtins.range(len(size))):
        raise RuntimeError(named(f"Dimension order {list(order)} is not a permutation of the dims of size "
                                 f"{list(size)}"))
    target, xp = _place(device)
    dtype = _dtype.get_default_dtype() if dtype is None else check_dtype(dtype)
    physical = xp.empty([size[d] for d in order], dtype=dtype.numpy)
    inverse = [order.index(d) for d in builtins.range(len(size))]
    return _make(physical.transpose(inverse), target, requires_grad)


def asarray(obj, *, dtype=None, device=None, copy=None, requires_grad=False):
    """``obj`` as a tensor, sharing memory with a tensor or numpy array when it can (``torch.asarray``).

    ``copy=True`` always copies; ``copy=False`` raises ValueError when sharing is impossible.
    """
    if dtype is not None:
        check_dtype(dtype)
    target = None if device is None else dispatch.resolve_device(device)
    shared = None
    if isinstance(obj, Tensor):
        shared = obj
    elif isinstance(obj, _np.ndarray) and (target is None or target.type == "cpu"):
        _dtype.from_numpy(obj.dtype)
        shared = Tensor._wrap(obj, _tensor_module._CPU)
    if shared is not None:
        same_place = target is None or target == shared._device
        same_type = dtype is None or dtype is shared.dtype
        if copy is False and not (same_place and same_type):
            reason = f"with dtype '{shared.dtype}' into dtype '{dtype}'" if not same_type else \
                f"on {shared.device} into {target}"
            raise ValueError(named(f"can't alias tensor {reason}."))
        result = shared
        if not same_type or not same_place:
            result = shared.detach().to(device=target, dtype=dtype)
        elif copy:
            result = shared.detach().clone()
        if requires_grad:
            result = result if result is not shared else shared.detach()
            result.requires_grad_(True)
        return result
    if copy is False:
        raise ValueError(named(f"can't alias {type_name(obj)} into a tensor without copying"))
    try:
        result = _tensor_module.tensor(obj, dtype=dtype, device=device)
    except TypeError as error:
        if str(error).startswith("could not convert data"):  # no dtype to infer: PyTorch's RuntimeError
            raise RuntimeError(named(f"Could not infer dtype of {type(obj).__name__}")) from None
        raise TypeError(named(f"argument 'obj': {error}")) from None
    if requires_grad:
        result.requires_grad_(True)
    return result


def frombuffer(buffer, *, dtype, count=-1, offset=0, requires_grad=False):
    """A 1-D tensor sharing memory with an object that exposes the buffer protocol (``torch.frombuffer``)."""
    dtype = check_dtype(dtype)
    count, offset = check_int(count, "count"), check_int(offset, "offset")
    view = memoryview(buffer)
    total = view.nbytes
    itemsize = _np.dtype(dtype.numpy).itemsize
    if offset < 0 or offset >= total:
        raise ValueError(named(f"both buffer length ({total}) and offset ({offset}) must be positive and offset must "
                               "be less than buffer length"))
    if count == 0 or count < -1:
        raise ValueError(named(f"both buffer length ({total}) and count ({count}) must not be 0"))
    if count == -1:
        if (total - offset) % itemsize:
            raise ValueError(named(f"buffer length ({total - offset} after offset) must be a multiple of element size "
                                   f"({itemsize})"))
        count = (total - offset) // itemsize
    elif offset + count * itemsize > total:
        raise ValueError(named(f"requested buffer length ({count} * {itemsize} bytes) after offset ({offset} bytes) "
                               f"must not be greater than actual buffer length ({total} bytes)"))
    if view.readonly:
        import warnings
        warnings.warn("The given buffer is not writable, and PyTorch does not support non-writable tensors. This "
                      "means you can write to the underlying (supposedly non-writable) buffer using the tensor.",
                      UserWarning, stacklevel=2)
    array = _np.frombuffer(buffer, dtype=dtype.numpy, count=count, offset=offset)
    return _make(array, _tensor_module._CPU, requires_grad)


def fill(input, value):
    """A tensor like ``input`` filled with ``value`` (a number or a 0-d tensor, which gets the gradient)."""
    from corenn.ops.elementwise import where
    if not isinstance(input, Tensor):
        raise not_tensors(input=input)
    if isinstance(value, Tensor) and value.ndim:
        raise RuntimeError(named(f"fill only supports 0-dimension value tensor but got tensor with {value.ndim} "
                                 "dimensions."))
    if not isinstance(value, Tensor):  # a number is cast to input's dtype, as PyTorch casts it (3.5 -> 3 for int64)
        value = full((), check_number(value, "value"), device=input.device)
    everywhere = ones(input.shape, dtype=_dtype.bool_, device=input.device)
    # through where: a 0-d tensor value gets the gradient, and input its (zero) one, as in PyTorch
    return where(everywhere, value.to(input.dtype), input)


def fill_(input, value):
    """Fill ``input`` with ``value`` in place (``torch.fill_``)."""
    if not isinstance(input, Tensor):
        raise not_tensors(input=input)
    return input.fill_(value)


def zero_(input):
    """Fill ``input`` with zeros in place (``torch.zero_``)."""
    if not isinstance(input, Tensor):
        raise not_tensors(input=input)
    return input.zero_()


def range(start, end, step=1, *, out=None, dtype=None, layout=None, device=None,  # noqa: A001
          requires_grad=False):
    """Values from ``start`` to ``end`` inclusive by ``step``, in the default float dtype (deprecated in PyTorch)."""
    import warnings
    warnings.warn("torch.range is deprecated and will be removed in a future release because its behavior is "
                  "inconsistent with Python's range builtin. Instead, use torch.arange, which produces values in "
                  "[start, end).", UserWarning, stacklevel=2)
    start, end, step = check_number(start, "start"), check_number(end, "end"), check_number(step, "step")
    if step == 0:
        raise RuntimeError(named("step must be nonzero"))
    if (end - start) * step < 0:
        raise RuntimeError(named("upper bound and larger bound inconsistent with step sign"))
    dtype = _dtype.get_default_dtype() if dtype is None else check_dtype(dtype)
    target, xp = _place(device)
    count = int(math.floor((end - start) / step)) + 1
    array = xp.arange(count, dtype="float64") * step + start
    return _make(array.astype(dtype.numpy), target, requires_grad)


def new(self, *args, device=None):
    """``Tensor.new``, PyTorch's legacy constructor: this tensor's dtype (and device unless given).

    ``t.new(2, 3)`` or ``t.new(corenn.Size([2, 3]))`` is uninitialised, ``t.new([1, 2])`` copies the
    data, ``t.new(other)`` with the same dtype shares ``other``'s data, ``t.new()`` is empty.
    """
    from corenn.tensor.tensor import Size
    if not isinstance(self, Tensor):
        raise not_tensors(self=self)
    device = self.device if device is None else device
    if not args:
        return empty(0, dtype=self.dtype, device=device)
    if len(args) == 1 and isinstance(args[0], Tensor):
        if args[0].dtype is not self.dtype:
            raise TypeError(named(f"expected a tensor of dtype {self.dtype}, got {args[0].dtype}"))
        return args[0].detach()
    if len(args) == 1 and isinstance(args[0], (list, tuple)) and not isinstance(args[0], Size):
        return _tensor_module.tensor(args[0], dtype=self.dtype, device=device)
    first = args[0]
    if len(args) == 1 and (isinstance(first, bool) or not isinstance(first, (numbers.Integral, Size))):
        raise TypeError(named(f"data must be a sequence (got {type_name(first)})"))
    return empty(*args, dtype=self.dtype, device=device)


def new_empty_strided(self, size, stride, *, dtype=None, device=None, requires_grad=False, layout=None,
                      pin_memory=False):
    """``Tensor.new_empty_strided``: :func:`empty_strided` with this tensor's dtype and device by default."""
    if not isinstance(self, Tensor):
        raise not_tensors(self=self)
    return empty_strided(size, stride, dtype=dtype or self.dtype, device=device or self.device,
                         requires_grad=requires_grad)


def from_file(filename, shared=None, size=0, *, dtype=None, layout=None, device=None, pin_memory=False,
              requires_grad=False):
    """``size`` elements of ``dtype`` read from the start of a file (``torch.from_file``).

    ``shared=True`` maps the file, so writes to the tensor go to the file; otherwise the tensor
    holds a private copy.
    """
    import os
    if not isinstance(filename, (str, os.PathLike)):
        raise TypeError(named(f"argument 'filename' (position 1) must be str, not {type_name(filename)}"))
    size = check_int(size, "size")
    if size < 0:
        raise RuntimeError(named(f"size must be non-negative, got {size}"))
    dtype = _dtype.get_default_dtype() if dtype is None else check_dtype(dtype)
    itemsize = _np.dtype(dtype.numpy).itemsize
    path = os.fspath(filename)
    try:
        length = os.path.getsize(path)
    except OSError as error:
        mode = "read-write" if shared else "read-only"
        raise RuntimeError(named(f"unable to open file <{path}> in {mode} mode: {error.strerror} ({error.errno})")) \
            from None
    if length < size * itemsize:
        raise RuntimeError(named(f"file <{path}> size <{length}> is smaller than the required mapping size "
                                 f"<{size * itemsize}>"))
    if size == 0:
        array = _np.empty(0, dtype=dtype.numpy)
    elif shared:
        # a plain ndarray over the mapping (its base keeps the file mapped): results of ops stay plain arrays
        array = _np.memmap(path, dtype=dtype.numpy, mode="r+", shape=(size,)).view(_np.ndarray)
    else:
        array = _np.fromfile(path, dtype=dtype.numpy, count=size)
    target, _ = _place(device)
    if target is not _tensor_module._CPU:
        return _make(array, _tensor_module._CPU, False).to(target).requires_grad_(requires_grad)
    return _make(array, target, requires_grad)


__all__ += ["hann_window", "hamming_window", "blackman_window", "bartlett_window", "kaiser_window", "empty_strided",
            "empty_permuted", "asarray", "frombuffer", "fill", "fill_", "zero_", "range", "from_file"]
