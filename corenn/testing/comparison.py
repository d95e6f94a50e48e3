"""``corenn.testing.assert_close``: PyTorch's ``torch.testing.assert_close``, with its tolerances and messages.

Compares tensors, Python numbers, and sequences or mappings of them (recursively): the
attributes first (shape, device, dtype), then the values elementwise, ``|actual - expected|
<= atol + rtol * |expected|``. Without ``rtol``/``atol`` the tolerances come from the dtypes
(the looser of the two inputs'), as PyTorch's do; integers and booleans must be equal.

Example::

    >>> import corenn
    >>> from corenn.testing import assert_close
    >>> assert_close(corenn.tensor([1.0, 2.0]), corenn.tensor([1.0, 2.0 + 1e-7]))
    >>> try:
    ...     assert_close(corenn.tensor([1.0, 2.0, 3.0]), corenn.tensor([1.0, 2.5, 3.0]))
    ... except AssertionError as error:
    ...     print(str(error).splitlines()[0])
    Tensor-likes are not close!
"""
from __future__ import annotations

import collections.abc
import math
import numbers

import numpy as np

__all__ = ["assert_close"]

# dtype name -> (rtol, atol): PyTorch's defaults.
DEFAULT_TOLERANCES = {
    "float16": (1e-3, 1e-5), "bfloat16": (1.6e-2, 1e-5), "float32": (1.3e-6, 1e-5), "float64": (1e-7, 1e-7),
    "complex64": (1.3e-6, 1e-5), "complex128": (1e-7, 1e-7),
}


def _tolerances(*dtype_names) -> tuple[float, float]:
    pairs = [DEFAULT_TOLERANCES.get(name, (0.0, 0.0)) for name in dtype_names]
    return max(rtol for rtol, _ in pairs), max(atol for _, atol in pairs)


def _is_tensor(value) -> bool:
    from corenn.tensor.tensor import Tensor
    return isinstance(value, Tensor)


def _dtype_name(dtype) -> str:
    return str(dtype).rsplit(".", 1)[-1]


def assert_close(actual, expected, *, allow_subclasses: bool = True, rtol: float | None = None,
                 atol: float | None = None, equal_nan: bool = False, check_device: bool = True,
                 check_dtype: bool = True, check_layout: bool = True, check_stride: bool = False, msg=None) -> None:
    """Raise ``AssertionError`` unless ``actual`` and ``expected`` are close (``torch.testing.assert_close``).

    ``msg`` (a string, or a callable taking the generated message) replaces the message.
    ``check_layout`` is accepted for PyTorch's signature: corenn has one (strided) layout.
    ``check_stride=True`` compares strides too.
    """
    if (rtol is None) != (atol is None):
        raise ValueError(f"Both 'rtol' and 'atol' must be either specified or omitted, "
                         f"but got no {'rtol' if rtol is None else 'atol'}.")
    problem = _compare(actual, expected, rtol, atol, equal_nan, check_device, check_dtype, check_stride,
                       allow_subclasses, path="")
    if problem is None:
        return
    exception_type, message = problem
    if msg is not None:
        message = msg(message) if callable(msg) else msg
    raise exception_type(message)


def _compare(actual, expected, rtol, atol, equal_nan, check_device, check_dtype, check_stride, allow_subclasses,
             path: str):
    """None when close, else (exception type, message)."""
    def located(message):
        return message + (f"\n\nThe failure occurred for item {path}" if path else "")

    if _is_tensor(actual) or _is_tensor(expected):
        if not (_is_tensor(actual) and _is_tensor(expected)):
            return TypeError, located(f"No comparison pair was able to handle inputs of type {type(actual)} and "
                                      f"{type(expected)}.")
        if not allow_subclasses and type(actual) is not type(expected):
            return TypeError, located(f"The values for attribute 'type' do not match: {type(actual)} != "
                                      f"{type(expected)}.")
        problem = _compare_tensors(actual, expected, rtol, atol, equal_nan, check_device, check_dtype, check_stride)
        return None if problem is None else (AssertionError, located(problem))
    if isinstance(actual, (numbers.Number, np.number)) and isinstance(expected, (numbers.Number, np.number)):
        problem = _compare_scalars(actual, expected, rtol, atol, equal_nan, check_dtype)
        return None if problem is None else (AssertionError, located(problem))
    if isinstance(actual, collections.abc.Mapping) and isinstance(expected, collections.abc.Mapping):
        if set(actual) != set(expected):
            return AssertionError, located(f"The keys of the mappings do not match:\n\nMissing keys: "
                                           f"{sorted(map(repr, set(expected) - set(actual)))}\nExtra keys: "
                                           f"{sorted(map(repr, set(actual) - set(expected)))}")
        for key in expected:
            problem = _compare(actual[key], expected[key], rtol, atol, equal_nan, check_device, check_dtype,
                               check_stride, allow_subclasses, f"{path}[{key!r}]")
            if problem is not None:
                return problem
        return None
    if _is_sequence(actual) and _is_sequence(expected):
        if len(actual) != len(expected):
            return AssertionError, located(f"The length of the sequences mismatch: {len(actual)} != {len(expected)}")
        for index, (a, e) in enumerate(zip(actual, expected)):
            problem = _compare(a, e, rtol, atol, equal_nan, check_device, check_dtype, check_stride,
                               allow_subclasses, f"{path}[{index}]")
            if problem is not None:
                return problem
        return None
    return TypeError, located(f"No comparison pair was able to handle inputs of type {type(actual)} and "
                              f"{type(expected)}.")


def _is_sequence(value) -> bool:
    return isinstance(value, collections.abc.Sequence) and not isinstance(value, (str, bytes))


def _attribute_mismatch(name, actual, expected) -> str:
    return f"The values for attribute '{name}' do not match: {actual} != {expected}."


def _compare_tensors(actual, expected, rtol, atol, equal_nan, check_device, check_dtype, check_stride):
    if actual.shape != expected.shape:
        return _attribute_mismatch("shape", actual.shape, expected.shape)
    if check_device and actual.device != expected.device:
        return _attribute_mismatch("device", actual.device, expected.device)
    if check_dtype and actual.dtype != expected.dtype:
        return _attribute_mismatch("dtype", actual.dtype, expected.dtype)
    if check_stride and actual.stride() != expected.stride():
        return _attribute_mismatch("stride()", actual.stride(), expected.stride())
    if rtol is None:
        rtol, atol = _tolerances(_dtype_name(actual.dtype), _dtype_name(expected.dtype))
    a = np.asarray(actual.detach().cpu().numpy())
    e = np.asarray(expected.detach().cpu().numpy())
    if a.dtype != e.dtype:  # check_dtype=False: compare in the promoted dtype, as PyTorch does
        common = np.promote_types(a.dtype, e.dtype)
        a, e = a.astype(common), e.astype(common)
    if a.ndim == 0:
        return _compare_scalars(a.item(), e.item(), rtol, atol, equal_nan, False)
    close = _isclose(a, e, rtol, atol, equal_nan)
    if close.all():
        return None
    return _tensor_mismatch(a, e, close, rtol, atol)


def _isclose(a, e, rtol, atol, equal_nan):
    if a.dtype.kind in "biu":
        if rtol == 0 and atol == 0:
            return a == e
        a, e = a.astype(np.float64), e.astype(np.float64)
    with np.errstate(invalid="ignore", over="ignore"):
        return np.isclose(a, e, rtol=rtol, atol=atol, equal_nan=equal_nan)


def _tensor_mismatch(a, e, close, rtol, atol) -> str:
    equality = rtol == 0 and atol == 0
    total, mismatched = close.size, int((~close).sum())
    if a.dtype.kind in "biu":
        a, e = a.astype(np.int64), e.astype(np.int64)
        absolute = np.abs(a - e)
        relative_dtype = np.float32  # PyTorch divides integer tensors in the default float dtype
    else:
        relative_dtype = a.dtype
        with np.errstate(invalid="ignore", over="ignore"):
            absolute = np.abs(a - e)
    with np.errstate(divide="ignore", invalid="ignore"):
        relative = (absolute.astype(relative_dtype) / np.abs(e).astype(relative_dtype))
    lines = [f"Tensor-likes are {'not equal' if equality else 'not close'}!", "",
             f"Mismatched elements: {mismatched} / {total} ({mismatched / total * 100:.1f}%)"]
    for label, values, allowed in (("absolute", absolute, atol), ("relative", relative, rtol)):
        flat = values.reshape(-1)
        position = int(np.argmax(np.isnan(flat))) if np.isnan(flat).any() else int(np.argmax(flat))
        index = tuple(int(i) for i in np.unravel_index(position, values.shape))
        suffix = "" if equality else f" (up to {allowed} allowed)"
        lines.append(f"Greatest {label} difference: {flat[position].item()} at index {index}{suffix}")
    return "\n".join(lines)


def _compare_scalars(actual, expected, rtol, atol, equal_nan, check_dtype):
    if check_dtype and type(actual) is not type(expected) and not (
            isinstance(actual, numbers.Real) and isinstance(expected, numbers.Real)
            and isinstance(actual, float) == isinstance(expected, float)):
        return _attribute_mismatch("type", type(actual), type(expected))
    if rtol is None:
        floating = isinstance(actual, (float, complex)) or isinstance(expected, (float, complex))
        rtol, atol = (1e-7, 1e-7) if floating else (0.0, 0.0)
    if actual == expected or (equal_nan and _is_nan(actual) and _is_nan(expected)):
        return None
    absolute = abs(actual - expected)
    if absolute <= atol + rtol * abs(expected):
        return None
    relative = absolute / abs(expected) if expected != 0 else math.inf
    equality = rtol == 0 and atol == 0
    return (f"Scalars are {'not equal' if equality else 'not close'}!\n\nExpected {expected} but got {actual}.\n"
            f"Absolute difference: {absolute}{'' if equality else f' (up to {atol} allowed)'}\n"
            f"Relative difference: {relative}{'' if equality else f' (up to {rtol} allowed)'}")


def _is_nan(value) -> bool:
    return isinstance(value, (float, complex)) and value != value
