"""What every op file uses: the kernel decorator, broadcasting-gradient reduction, operand coercion."""
from __future__ import annotations

import numbers

from corenn import _dtype
from corenn._argcheck import named, not_a_tensor, type_name
from corenn.autograd.node import Op, run, run1, run2  # noqa: F401 - re-exported for the op files
from corenn.tensor.tensor import Tensor, as_tensor

#: every core kernel, registered for device type "*" through the core's ``corenn_register_kernels``
CORE_KERNELS: dict[str, type] = {}


def kernel(name: str, grad_fn_name: str | None = None):
    """Class decorator: register ``cls`` as the core kernel of op ``name``.

    ``grad_fn_name`` is what ``tensor.grad_fn`` prints (PyTorch's name for the node).
    """
    def decorate(cls):
        cls.op_name = name
        if grad_fn_name is not None:
            cls.grad_fn_name = grad_fn_name
        if name in CORE_KERNELS:
            raise ValueError(f"op {name!r} defined twice")
        CORE_KERNELS[name] = cls
        return cls
    return decorate


def public_function(function, name: str, doc: str | None = None):
    """Give a function made by a factory its public name, in its code too.

    Python's own errors (``exp() takes 1 positional argument but 2 were given``) and
    tracebacks read the code's name, not ``__name__``: without this they would show
    ``_floating_unary.<locals>.unary``.
    """
    function.__name__ = function.__qualname__ = name
    names = {"co_name": name, "co_qualname": name} if hasattr(function.__code__, "co_qualname") else {"co_name": name}
    function.__code__ = function.__code__.replace(**names)
    if doc is not None:
        function.__doc__ = doc
    return function


def sum_to_shape(grad, shape):
    """Reduce a broadcast gradient back to ``shape`` (the inverse of broadcasting)."""
    if grad.shape == shape:
        return grad
    leading = grad.ndim - len(shape)
    axes = tuple(range(leading)) + tuple(
        i + leading for i, size in enumerate(shape) if size == 1 and grad.shape[i + leading] != 1)
    if axes:
        grad = grad.sum(axis=axes, keepdims=True)
    return grad.reshape(shape)


def broadcast_shapes(*shapes) -> tuple:
    """The broadcast shape, or RuntimeError naming the first mismatching sizes (PyTorch's message)."""
    ndim = max(len(s) for s in shapes)
    result = [1] * ndim
    for shape_index, shape in enumerate(shapes):
        offset = ndim - len(shape)
        for i, size in enumerate(shape):
            current = result[offset + i]
            if current == 1:
                result[offset + i] = size
            elif size != 1 and size != current:
                raise RuntimeError(named(f"The size of tensor a ({current}) must match the size of tensor b "
                                         f"({size}) at non-singleton dimension {offset + i} (shapes "
                                         f"{list(shapes[0])} and {list(shape)} cannot be broadcast together)"))
    return tuple(result)


def is_scalar(value) -> bool:
    return isinstance(value, numbers.Number) and not isinstance(value, Tensor)


def promote_pair(input, other):
    """Bring a tensor and a tensor-or-scalar to PyTorch's common dtype before a binary op."""
    if isinstance(other, Tensor):
        if not isinstance(input, Tensor):
            input = _coerce(input, other)
        if input._data.dtype is not other._data.dtype and input._data.dtype != other._data.dtype:
            target = _dtype.result_type(input, other)
            if input.dtype is not target:
                input = input.to(target)
            if other.dtype is not target:
                other = other.to(target)
        return input, other
    if not isinstance(input, Tensor):
        input = _coerce(input, other)
    if is_scalar(other):
        if other.__class__ not in _PYTHON_SCALARS and hasattr(other, "item"):
            other = other.item()  # a numpy scalar counts as the Python number it holds, as in PyTorch
        target = _dtype.dtype_with_scalar(input.dtype, other)
        if target is not input.dtype:
            input = input.to(target)
        elif input._data.dtype.kind == "V" and other.__class__ is not bool:
            # numpy would compute bfloat16 * 2.5 in float32 and keep float32: round the scalar instead
            other = input._data.dtype.type(other)
        elif other.__class__ is int and target.category == 1:
            other = _wrap_integer(other, target)
        return input, other
    return promote_pair(input, _coerce(other, input))


_PYTHON_SCALARS = frozenset({int, float, bool})


def _wrap_integer(value: int, target) -> int:
    """An int scalar out of an integer dtype's range wraps around as in PyTorch (uint8: -3 is 253)."""
    bits = 8 * target.itemsize
    low, high = (-(1 << (bits - 1)), (1 << (bits - 1)) - 1) if target.is_signed else (0, (1 << bits) - 1)
    if low <= value <= high:
        return value
    value &= (1 << bits) - 1
    return value - (1 << bits) if target.is_signed and value > high else value


def _coerce(value, like):
    if isinstance(value, Tensor):
        return value
    if is_scalar(value):
        device = like._device if isinstance(like, Tensor) else None
        return as_tensor(value, device=device)
    if not (hasattr(value, "shape") and hasattr(value, "dtype")):
        # A list or tuple is not an operand (PyTorch: ``t + (1, 2)`` and ``torch.add(t, [1])`` raise TypeError).
        raise TypeError(named(f"expected a Tensor or a number, got {type_name(value)}"))
    try:
        return as_tensor(value, device=like._device if isinstance(like, Tensor) else None)
    except (TypeError, ValueError):
        raise TypeError(named(f"expected a Tensor or a number, got {type_name(value)}")) from None


def to_floating(input: Tensor) -> Tensor:
    """Integer and bool inputs of floating ops (exp, sqrt, ...) compute in the default float dtype."""
    try:
        if input._data.dtype.kind in "fV":  # V: bfloat16 / float8 (ml_dtypes)
            return input
    except AttributeError:
        raise not_a_tensor("input", input) from None
    return input.to(_dtype.get_default_dtype())


def check_tensor(value, name: str, op: str) -> Tensor:
    if not isinstance(value, Tensor):
        raise TypeError(f"{op}(): argument '{name}' must be Tensor, not {type(value).__name__}")
    return value
