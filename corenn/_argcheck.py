"""Argument errors that name the public function that was called, as PyTorch's do.

A check deep inside corenn (a dim out of range, a tensor where a number was expected)
does not know which public function the user called: ``corenn.lerp(a, b)`` fails inside
``sub``, and ``Linear`` inside ``F.linear``. :func:`api_name` finds out on the error path
only, so a call that succeeds pays nothing: it walks the stack from the failing check
out to the first frame outside corenn and takes the outermost op function or Tensor
method on the way (files under ``corenn/ops``, ``corenn/tensor``, ``corenn/nn/functional.py``),
passing through the array library and a plugin's kernel.

    >>> import corenn
    >>> corenn.ones(2, 3).sum(dim=5)
    Traceback (most recent call last):
    IndexError: sum(): Dimension out of range (expected to be in range of [-2, 1], but got 5)
"""
from __future__ import annotations

import numbers
import os
import re
import sys

from corenn import _dtype

_CORENN = os.path.dirname(os.path.abspath(__file__)) + os.sep
_API_FILES = tuple(_CORENN + path for path in ("ops" + os.sep, "tensor" + os.sep,
                                               os.path.join("nn", "functional.py"), "__init__.py"))
_NOT_API = frozenset({"forward", "backward", "apply", "getitem", "setitem"})  # indexing reads as PyTorch's


def api_name(default: str | None = None) -> str | None:
    """The public corenn function or Tensor method the user called, or ``default`` if none is found.

    Only for building an error message: it reads the interpreter's stack.
    """
    name = default
    frame = sys._getframe(1)
    while frame is not None:
        code = frame.f_code
        filename = code.co_filename
        if not filename.startswith(_CORENN):
            if not _passes_through(frame):
                break  # the caller's own code: what it called from here is not what failed
        elif filename.startswith(_API_FILES):
            code_name = code.co_name
            if code_name[0] not in "_<" and code_name not in _NOT_API:
                name = code_name
        frame = frame.f_back
    return name


def _passes_through(frame) -> bool:
    """Frames outside corenn that sit between an op and its failure: array libraries, a plugin's kernel."""
    code = frame.f_code
    if code.co_name in _NOT_API and code.co_varnames[:1] == ("ctx",):
        return True  # a kernel's forward/backward (a plugin's, or a custom autograd.Function's)
    return frame.f_globals.get("__name__", "").partition(".")[0] in ("numpy", "numba", "cupy")


def named(message: str, default: str | None = None) -> str:
    """``message`` led by ``"name(): "``, the public function being called, unless it already names it.

    A message led by another function's name (``mean():`` raised for ``var_mean``) is led by the
    called function's instead.
    """
    name = api_name(default)
    if name is None or message.startswith(name + "("):
        return message
    match = _LEADING_NAME.match(message)
    if match:
        message = message[match.end():]
    return f"{name}(): {message}"


_LEADING_NAME = re.compile(r"\w+\(\): ")


def type_name(value) -> str:
    """How PyTorch's argument errors spell a value's type: ``Tensor``, ``int``, ``NoneType``, ``list``."""
    return "Tensor" if isinstance(value, _Tensor) else type(value).__name__


def not_a_tensor(argument: str, value, default: str | None = None) -> TypeError:
    """The TypeError for a non-tensor passed where a tensor is needed (PyTorch's wording)."""
    return TypeError(named(f"argument '{argument}' must be Tensor, not {type_name(value)}", default))


def not_tensors(**arguments) -> TypeError:
    """The TypeError for the first of ``arguments`` that is not a Tensor; for front ends, once a check failed::

        if not (isinstance(input, Tensor) and isinstance(other, Tensor)):
            raise not_tensors(input=input, other=other)
    """
    for argument, value in arguments.items():
        if not isinstance(value, _Tensor):
            return not_a_tensor(argument, value)
    return TypeError(named(f"expected Tensors for {', '.join(arguments)}"))


def check_int(value, argument: str) -> int:
    """``value`` as an int (an int, a numpy integer, a one-element integer tensor), else a TypeError naming it."""
    if value.__class__ is int:
        return value
    if not isinstance(value, bool):
        try:
            return value.__index__()
        except (AttributeError, TypeError):
            pass
    raise TypeError(named(f"argument '{argument}' must be int, not {type_name(value)}"))


def check_ints(value, argument: str) -> tuple:
    """An int or a sequence of ints as a tuple of ints, else the TypeError naming the function and ``argument``."""
    if isinstance(value, (tuple, list)):
        try:
            return tuple([item if item.__class__ is int else _index(item) for item in value])
        except TypeError:
            pass
    else:
        try:
            return (value if value.__class__ is int else _index(value),)
        except TypeError:
            pass
    raise TypeError(named(f"argument '{argument}' must be int or tuple of ints, not {_describe(value)}"))


def _index(value) -> int:
    if isinstance(value, bool) or not hasattr(value, "__index__"):
        raise TypeError(type(value).__name__)
    return value.__index__()


def _describe(value) -> str:
    if isinstance(value, (tuple, list)):
        return f"{type(value).__name__} of {', '.join(sorted({type_name(item) for item in value}))}"
    return type_name(value)


def check_dtype(value, argument: str = "dtype"):
    """``value`` if it is a ``corenn.dtype``, else the TypeError naming the function and ``argument``."""
    if isinstance(value, _dtype.dtype):
        return value
    raise TypeError(named(f"{argument} must be a corenn.dtype such as corenn.float32, not {type_name(value)}"))


def check_number(value, argument: str):
    """``value`` as a Python number (a one-element tensor gives its item), else a TypeError naming it."""
    if value.__class__ in (int, float, bool):
        return value
    if isinstance(value, _Tensor) and value.numel() == 1:
        return value.item()
    if isinstance(value, numbers.Number):
        return value
    raise TypeError(named(f"argument '{argument}' must be a number, not {type_name(value)}"))


_Tensor = None  # bound by corenn/__init__ once Tensor exists
