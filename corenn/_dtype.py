"""Data types and PyTorch's type-promotion rules.

A ``corenn.dtype`` names an element type independently of the array library
that stores it; backends translate it to their own dtype (numpy and cupy
share numpy's dtype objects).

Promotion follows PyTorch, not numpy: categories rank bool < integer <
floating, a Python scalar only decides the category (``float32_tensor * 2.5``
stays float32), and integer tensors meeting a float scalar become the default
float dtype (float32), where numpy would give float64.
"""
from __future__ import annotations

import numpy as np

__all__ = ["dtype", "float16", "float32", "float64", "int8", "int16", "int32", "int64", "uint8", "bool",
           "get_default_dtype", "set_default_dtype", "promote_types", "result_type"]

_BOOL, _INT, _FLOAT = 0, 1, 2


class dtype:
    """An element type: ``corenn.float32``, ``corenn.int64``, ... (mirrors ``torch.dtype``)."""

    __slots__ = ("name", "numpy", "category", "itemsize", "is_floating_point", "is_signed")

    def __init__(self, name: str, numpy_dtype, category: int):
        self.name = name
        self.numpy = np.dtype(numpy_dtype)
        self.category = category
        self.itemsize = self.numpy.itemsize
        self.is_floating_point = category == _FLOAT
        self.is_signed = category == _FLOAT or self.numpy.kind == "i"

    @property
    def is_complex(self) -> bool:
        return False

    def __repr__(self):
        return f"corenn.{self.name}"

    def __reduce__(self):
        # Pickling (e.g. into worker processes) must return the singleton.
        return (_by_name.__getitem__, (self.name,))


float16 = dtype("float16", np.float16, _FLOAT)
float32 = dtype("float32", np.float32, _FLOAT)
float64 = dtype("float64", np.float64, _FLOAT)
int8 = dtype("int8", np.int8, _INT)
int16 = dtype("int16", np.int16, _INT)
int32 = dtype("int32", np.int32, _INT)
int64 = dtype("int64", np.int64, _INT)
uint8 = dtype("uint8", np.uint8, _INT)
bool_ = dtype("bool", np.bool_, _BOOL)
globals()["bool"] = bool_  # corenn.bool, like torch.bool, without shadowing the builtin inside this module

half, float, double = float16, float32, float64  # noqa: A001 - PyTorch's aliases
short, int, long = int16, int32, int64  # noqa: A001

ALL = (float16, float32, float64, int8, int16, int32, int64, uint8, bool_)
_by_name = {d.name: d for d in ALL}
_by_numpy = {d.numpy: d for d in ALL}

_default_float = float32


def from_numpy(numpy_dtype) -> dtype:
    """The corenn dtype for a numpy dtype; TypeError for types corenn does not support."""
    try:
        return _by_numpy[np.dtype(numpy_dtype)]
    except (KeyError, TypeError):
        if getattr(numpy_dtype, "__module__", "").startswith("ml_dtypes") or \
                getattr(getattr(numpy_dtype, "type", None), "__module__", "").startswith("ml_dtypes"):
            add_low_precision_dtypes()
            if np.dtype(numpy_dtype) in _by_numpy:
                return _by_numpy[np.dtype(numpy_dtype)]
        supported = ", ".join(d.name for d in ALL)
        raise TypeError(f"numpy dtype {numpy_dtype!r} is not supported by corenn; supported: {supported}") from None


def to_numpy(d: dtype) -> np.dtype:
    """The numpy dtype that stores ``d``."""
    return d.numpy


def get_default_dtype() -> dtype:
    """The floating dtype that Python floats and integer division produce (float32 unless changed)."""
    return _default_float


def set_default_dtype(d: dtype) -> None:
    """Change the default floating dtype (float32 or float64, as in PyTorch)."""
    global _default_float
    if not isinstance(d, dtype) or not d.is_floating_point:
        raise TypeError(f"only floating-point types are supported as the default type, got {d!r}")
    _default_float = d


def promote_types(a: dtype, b: dtype) -> dtype:
    """The smallest dtype both ``a`` and ``b`` convert to safely (``torch.promote_types``)."""
    if a is b:
        return a
    try:
        return _promotion_table[a, b]
    except (KeyError, TypeError):
        if isinstance(a, dtype) and isinstance(b, dtype):  # only float8 pairs are left out of the table
            raise RuntimeError(f"Promotion for Float8 Types is not supported, attempted to promote {a.name} and "
                               f"{b.name}") from None
        bad, argument = (a, "type1") if not isinstance(a, dtype) else (b, "type2")
        raise TypeError(f"promote_types(): argument '{argument}' must be corenn.dtype, not "
                        f"{type(bad).__name__}") from None


def _compute_promotion(a: dtype, b: dtype) -> dtype:
    if a.category != b.category:
        return a if a.category > b.category else b
    if a.category == _BOOL:
        return a
    # Within a category numpy's rules agree with PyTorch's (uint8+int8 -> int16, f16+f32 -> f32).
    return _by_numpy[np.promote_types(a.numpy, b.numpy)]


_promotion_table = {(a, b): _compute_promotion(a, b) for a in ALL for b in ALL}


def scalar_category(value) -> int:
    if isinstance(value, builtins_bool):
        return _BOOL
    if isinstance(value, builtins_int):
        return _INT
    return _FLOAT


import builtins as _builtins  # noqa: E402

builtins_bool, builtins_int, builtins_float = _builtins.bool, _builtins.int, _builtins.float


def scalar_dtype(value) -> dtype:
    """The dtype ``corenn.tensor(value)`` gets for a Python scalar."""
    if isinstance(value, builtins_bool):
        return bool_
    if isinstance(value, builtins_int):
        return int64
    return _default_float


def dtype_with_scalar(tensor_dtype: dtype, value) -> dtype:
    """Result dtype of a tensor combined with a Python scalar: the scalar only lifts the category."""
    category = scalar_category(value)
    if category <= tensor_dtype.category:
        return tensor_dtype
    return int64 if category == _INT else _default_float


def result_type(*operands) -> dtype:
    """``torch.result_type`` over tensors and Python scalars.

    Dimensioned tensors decide first, then 0-d tensors, then scalars -- each only when it
    lifts the category, as PyTorch's ``result_type`` does.
    """
    from corenn.tensor.tensor import Tensor

    dims, zero_dims, scalars = None, None, None
    for op in operands:
        if isinstance(op, Tensor):
            if op.ndim:
                dims = op.dtype if dims is None else promote_types(dims, op.dtype)
            else:
                zero_dims = op.dtype if zero_dims is None else promote_types(zero_dims, op.dtype)
        else:
            d = scalar_dtype(op)
            scalars = d if scalars is None else promote_types(scalars, d)
    result = None
    for candidate in (dims, zero_dims, scalars):
        if candidate is None:
            continue
        if result is None or candidate.category > result.category:
            result = candidate
    return result


# --- low-precision floats through ml_dtypes (loaded on first use: importing ml_dtypes takes tens of ms) ----

# (corenn name, ml_dtypes name); PyTorch's float8 types that ml_dtypes spells the same way.
_LOW_PRECISION = (("bfloat16", "bfloat16"), ("float8_e4m3fn", "float8_e4m3fn"), ("float8_e5m2", "float8_e5m2"),
                  ("float8_e4m3fnuz", "float8_e4m3fnuz"), ("float8_e5m2fnuz", "float8_e5m2fnuz"))
LOW_PRECISION_NAMES = frozenset(name for name, _ in _LOW_PRECISION) | {"bfloat16"}
FLOAT8_NAMES = frozenset(name for name, _ in _LOW_PRECISION if name.startswith("float8"))


def add_low_precision_dtypes() -> None:
    """Register ``bfloat16`` and the float8 dtypes (numpy dtypes of ``ml_dtypes``); idempotent.

    Promotion follows PyTorch: ``bfloat16`` with ``float16`` gives ``float32``, with a wider float
    the wider one, with an integer or bool ``bfloat16``. A float8 type promotes with nothing but
    itself: ``promote_types`` raises RuntimeError, as in PyTorch.
    """
    if "bfloat16" in _by_name:
        return
    try:
        import ml_dtypes
    except ImportError:
        raise ImportError("corenn.bfloat16 and the float8 dtypes need the ml_dtypes package: "
                          "pip install 'corenn[bfloat16]' (or pip install ml_dtypes)") from None
    global ALL
    added = []
    for name, ml_name in _LOW_PRECISION:
        new = dtype(name, getattr(ml_dtypes, ml_name), _FLOAT)
        globals()[name] = new
        _by_name[name] = new
        _by_numpy[new.numpy] = new
        added.append(new)
    ALL = ALL + tuple(added)
    bfloat16 = _by_name["bfloat16"]
    for a in ALL:
        for b in ALL:
            if (a, b) in _promotion_table:
                continue
            if a.name in FLOAT8_NAMES or b.name in FLOAT8_NAMES:
                continue  # PyTorch refuses float8 with any other dtype: promote_types raises
            if a.category != b.category:
                _promotion_table[a, b] = a if a.category > b.category else b
            elif {a, b} == {bfloat16, float16}:
                _promotion_table[a, b] = float32
            else:  # bfloat16 with float32 / float64
                _promotion_table[a, b] = a if a.itemsize > b.itemsize else b


def low_precision_dtype(name: str) -> dtype:
    """``corenn.bfloat16`` etc., registering them on first use."""
    add_low_precision_dtypes()
    return _by_name[name]


class finfo:
    """Machine limits of a floating dtype (``torch.finfo``): ``bits``, ``eps``, ``max``, ``min``, ``tiny``
    (= ``smallest_normal``) and ``resolution``, as Python floats; ``finfo()`` is the default dtype's.

        >>> corenn.finfo(corenn.float32).eps
        1.1920928955078125e-07
    """

    def __init__(self, type=None):
        type = get_default_dtype() if type is None else type
        if not isinstance(type, dtype) or not type.is_floating_point:
            raise TypeError(f"torch.finfo() requires a floating point input type. Use torch.iinfo to handle "
                            f"'torch.finfo'; got {type!r}")
        if type.name in LOW_PRECISION_NAMES:  # bfloat16 and the float8 types: ml_dtypes knows their limits
            import ml_dtypes
            limits = ml_dtypes.finfo(type.numpy)
        else:
            limits = np.finfo(type.numpy)
        self.dtype = type.name
        self.bits = _builtins.int(limits.bits)
        self.eps, self.max, self.min = _builtins.float(limits.eps), _builtins.float(limits.max), _builtins.float(limits.min)
        self.tiny = self.smallest_normal = _builtins.float(limits.smallest_normal)
        # PyTorch's: 10 ** -(the decimal digits eps resolves), a power of ten not rounded to the dtype.
        self.resolution = 10.0 ** -_builtins.int(np.floor(-np.log10(self.eps)))

    def __repr__(self):
        return (f"finfo(resolution={self.resolution:g}, min={self.min:g}, max={self.max:g}, eps={self.eps:g}, "
                f"smallest_normal={self.smallest_normal:g}, tiny={self.tiny:g}, dtype={self.dtype})")


class iinfo:
    """Limits of an integer dtype (``torch.iinfo``): ``bits``, ``max``, ``min`` as Python ints."""

    def __init__(self, type):
        if not isinstance(type, dtype) or type.is_floating_point or type.name == "bool":
            raise TypeError(f"torch.iinfo() requires an integer input type. Use torch.finfo to handle "
                            f"'torch.iinfo'; got {type!r}")
        limits = np.iinfo(type.numpy)
        self.dtype = type.name
        self.bits, self.max, self.min = _builtins.int(limits.bits), _builtins.int(limits.max), _builtins.int(limits.min)

    def __repr__(self):
        return f"iinfo(min={self.min:g}, max={self.max:g}, dtype={self.dtype})"
