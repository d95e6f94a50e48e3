"""The checks at the door of compiled code: every entry point validates its arguments before it runs.

numba compiles array indexing without bounds checks, so a loop that trusts a length it was
not given reads or writes past the end of an array: garbage results at best, SIGSEGV at
worst. Every compiled function that Python calls is therefore wrapped by :func:`entry`:
the wrapper checks types, dtypes, layouts, shapes and the sizes and geometry that its
loops index with, then calls the compiled code. The checks are O(1) -- shapes, strides,
dtypes and a few integers, never a pass over the data; data-dependent indices (targets,
scatter positions, saved argmax positions) are checked inside the loops that read them,
where a comparison costs nothing next to the load.

A failed check raises ``TypeError`` (not an array, wrong dtype) or ``ValueError`` (shape,
layout, size or geometry), naming the function and the argument::

    >>> softmax_rows(np.ones((2, 3), np.float32), np.ones(1, np.float32), ...)
    ValueError: softmax_rows(): argument 'row_max' must have shape (2,), got (1,)

Layouts are checked too: an argument of another layout or dtype would not crash, but make
numba compile a new specialisation (seconds), for a call no kernel of this plugin makes.
"""
from __future__ import annotations

import functools

import numpy as np

FLOAT32, FLOAT64, INT64 = np.dtype(np.float32), np.dtype(np.float64), np.dtype(np.int64)
FLOATS = (FLOAT32, FLOAT64)


def entry(check):
    """Decorator: the compiled function runs only after ``check(*args)`` has accepted its arguments.

    The compiled dispatcher stays reachable as ``.compiled`` (compiled callers use the
    undecorated function itself)::

        @entry(_check_row_norm)
        @_jit
        def row_norm(x, weight, bias, eps, out, mean, invstd): ...
    """
    def wrap(compiled):
        @functools.wraps(getattr(compiled, "py_func", compiled))
        def checked(*args):
            check(*args)
            return compiled(*args)

        checked.compiled = compiled
        checked.check = check
        return checked
    return wrap


def fail(function: str, message: str):
    raise ValueError(f"{function}(): {message}")


# Each check first tests the common case in one expression (identity of the dtype, equality of the shape, one
# flags object) and only on a failure works out which rule was broken: a kernel call pays about a tenth of a
# microsecond per argument.

def array(function: str, name: str, a, dtype, shape=None, ndim=None, contiguous=True, writeable=False):
    """``a`` itself, after checking that it is a numpy array of ``dtype`` (one or a tuple), of ``shape`` (or
    ``ndim`` dims), C-contiguous unless ``contiguous`` is False, writeable if ``writeable``."""
    if (type(a) is np.ndarray and (a.dtype is dtype or (type(dtype) is tuple and a.dtype in dtype))
            and (shape is None or a.shape == shape) and (ndim is None or a.ndim == ndim)):
        if not (contiguous or writeable):
            return a
        flags = a.flags
        if (flags.c_contiguous or not contiguous) and (flags.writeable or not writeable):
            return a
    _array_error(function, name, a, dtype, shape, ndim, contiguous, writeable)
    return a


def _array_error(function, name, a, dtype, shape, ndim, contiguous, writeable):
    if type(a) is not np.ndarray:
        raise TypeError(f"{function}(): argument '{name}' must be a numpy array, not {type(a).__name__}")
    if (a.dtype not in dtype) if type(dtype) is tuple else (a.dtype != dtype):
        raise TypeError(f"{function}(): argument '{name}' must be of dtype {dtype}, got {a.dtype}")
    if shape is not None and a.shape != shape:
        fail(function, f"argument '{name}' must have shape {shape}, got {a.shape}")
    if ndim is not None and a.ndim != ndim:
        fail(function, f"argument '{name}' must have {ndim} dimensions, got shape {a.shape}")
    if contiguous and not a.flags.c_contiguous:
        fail(function, f"argument '{name}' must be C-contiguous (strides {a.strides} for shape {a.shape})")
    if writeable and not a.flags.writeable:
        fail(function, f"argument '{name}' must be writeable")


def floats(function: str, name: str, a, shape=None, ndim=None, contiguous=True, writeable=False):
    """:func:`array` for a float32/float64 array; returns its dtype, which the other arrays then share."""
    return array(function, name, a, FLOATS, shape, ndim, contiguous, writeable).dtype


def integer(function: str, name: str, value, low: int = 0, high: int | None = None) -> int:
    """An integer argument in ``[low, high]`` (``high`` None: no upper bound)."""
    if type(value) is int and value >= low and (high is None or value <= high):
        return value
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"{function}(): argument '{name}' must be an int, not {type(value).__name__}")
    if value < low or (high is not None and value > high):
        fail(function, f"argument '{name}' must be in [{low}, {'inf' if high is None else high}], got {value}")
    return int(value)


def integers(function: str, names: str, values, low: int = 0) -> None:
    """Several integer arguments, each at least ``low``; ``names`` is space-separated, one per value."""
    for value in values:
        if type(value) is not int or value < low:
            break
    else:
        return
    for name, value in zip(names.split(), values):
        integer(function, name, value, low)


def work_range(function: str, first, last, items: int) -> None:
    """``first .. last`` is a slice of ``range(items)`` (the work items a thread runs)."""
    if type(first) is int and type(last) is int and 0 <= first <= last <= items:
        return
    integer(function, "first", first, 0, items)
    integer(function, "last", last, first, items)


def index_error(function: str, kind: str, value, size: int) -> IndexError:
    """The IndexError of a compiled loop that found a data-dependent index out of range."""
    return IndexError(f"{function}(): {kind} {int(value)} is out of bounds for size {size}")
