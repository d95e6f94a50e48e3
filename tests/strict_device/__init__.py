"""The ``strict`` device: a test-only backend that proves corenn's device plumbing without a GPU.

In the spirit of PyTorch's PrivateUse1 test extension, and shaped like a real
third-party backend (corenn-cuda on cupy): arrays are :class:`StrictArray`
objects wrapping numpy arrays -- not ndarray subclasses -- and ``xp`` wraps
numpy's functions. Like cupy, the device has several indices (``strict:0``,
``strict:1``), a current index (``device_guard``), refuses host arrays as
operands, and refuses *silent* host conversion: ``np.asarray(a)``,
``float(a)``, ``int(a)``, ``bool(a)``, ``a.tolist()`` and iteration raise.
``a.item()`` is the one explicit scalar read (a device sync in cupy);
``to_host`` is the only way to a numpy array.

Use it with the fixture ``strict_device`` (see ``tests/conftest.py``) or::

    with corenn.testing.register_plugin(strict_device.StrictPlugin()):
        x = corenn.ones(3, device="strict:1")
"""
from __future__ import annotations

import contextlib
import functools
import threading
import types

import numpy as np

import corenn
from corenn.dispatch import Backend

DEVICE_COUNT = 2
_state = threading.local()  # the current index, per thread (as CUDA's current device)


def current_index() -> int:
    return getattr(_state, "index", 0)


@contextlib.contextmanager
def device_guard(index):
    previous = current_index()
    _state.index = previous if index is None else index
    try:
        yield
    finally:
        _state.index = previous


class HostConversionError(TypeError):
    """corenn touched a strict array as if it were on the host."""


class _Device:
    """``array.device`` as cupy has it: ``.id`` is the index."""

    __slots__ = ("id",)

    def __init__(self, index):
        self.id = index


def _refuse(what):
    def method(self, *args, **kwargs):
        raise HostConversionError(f"{what} of a strict array would silently copy it to the host; "
                                  "use the backend's to_host")
    return method


class StrictArray:
    """A numpy array on the strict device ``index``; every operation stays on the device."""

    __slots__ = ("_a", "_index")
    __array_ufunc__ = None  # numpy must not swallow us: ``np_array + strict`` raises

    def __init__(self, array: np.ndarray, index: int):
        self._a = array
        self._index = index

    # What corenn may read freely: metadata and the explicit scalar read.
    shape = property(lambda self: self._a.shape)
    dtype = property(lambda self: self._a.dtype)
    ndim = property(lambda self: self._a.ndim)
    size = property(lambda self: self._a.size)
    itemsize = property(lambda self: self._a.itemsize)
    nbytes = property(lambda self: self._a.nbytes)
    strides = property(lambda self: self._a.strides)
    flags = property(lambda self: self._a.flags)
    device = property(lambda self: _Device(self._index))

    def item(self, *args):
        return self._a.item(*args)

    __array__ = _refuse("np.asarray()")
    __float__ = _refuse("float()")
    __int__ = _refuse("int()")
    __index__ = _refuse("operator.index()")
    __complex__ = _refuse("complex()")
    __bool__ = _refuse("bool()")
    __iter__ = _refuse("iteration")
    tolist = _refuse("tolist()")

    def __len__(self):
        return len(self._a)

    def __repr__(self):
        return f"StrictArray(shape={self._a.shape}, dtype={self._a.dtype}, index={self._index})"

    def __getattr__(self, name):  # methods: a.astype, a.reshape, a.sum, a.copy, ...
        attribute = getattr(self._a, name)
        if not callable(attribute):
            raise AttributeError(f"strict arrays expose no attribute {name!r} (corenn must not rely on it)")
        return functools.partial(_call, attribute, index=self._index)

    def __getitem__(self, key):
        return _call(self._a.__getitem__, key, index=self._index)

    def __setitem__(self, key, value):
        self._a[_unwrap(key, self._index)] = _unwrap(value, self._index)

    @property
    def T(self):
        return StrictArray(self._a.T, self._index)


def _operator(name):
    def method(self, *args):
        return _call(getattr(self._a, name), *args, index=self._index)
    method.__name__ = name
    return method


for _name in ("add radd sub rsub mul rmul truediv rtruediv floordiv rfloordiv mod rmod pow rpow matmul rmatmul "
              "and rand or ror xor rxor lshift rlshift rshift rrshift eq ne lt le gt ge neg pos abs invert "
              "iadd isub imul itruediv ifloordiv imod ipow iand ior ixor").split():
    setattr(StrictArray, f"__{_name}__", _operator(f"__{_name}__"))


def _unwrap(value, index):
    """Strict arrays -> numpy; host arrays are refused, as cupy refuses them."""
    if isinstance(value, StrictArray):
        if index is not None and value._index != index:
            raise ValueError(f"array on strict:{value._index} used with arrays on strict:{index}")
        return value._a
    if isinstance(value, np.ndarray):
        raise TypeError(f"a host numpy array {value.shape} was passed to the strict device; move it with to_device")
    if isinstance(value, (tuple, list)):
        return type(value)(_unwrap(v, index) for v in value)
    return value


def _wrap(value, index):
    if isinstance(value, np.ndarray):
        return StrictArray(value, index)
    if isinstance(value, np.generic):  # reductions give 0-d device arrays, as cupy's do
        return StrictArray(np.asarray(value), index)
    if isinstance(value, tuple):
        return tuple(_wrap(v, index) for v in value)
    if isinstance(value, list):
        return [_wrap(v, index) for v in value]
    return value


def _index_of(args, kwargs):
    for value in (*args, *kwargs.values()):
        if isinstance(value, StrictArray):
            return value._index
        if isinstance(value, (tuple, list)):
            for v in value:
                if isinstance(v, StrictArray):
                    return v._index
    return None


def _call(function, *args, index=None, **kwargs):
    if index is None:
        index = _index_of(args, kwargs)
    out = kwargs.get("out")
    result = function(*_unwrap(args, index), **{k: _unwrap(v, index) for k, v in kwargs.items()})
    if out is not None and (result is out._a if isinstance(out, StrictArray) else False):
        return out
    return _wrap(result, current_index() if index is None else index)


class _Namespace:
    """A module-like view of ``numpy`` whose functions take and return strict arrays.

    Bound to an ``index`` (``xp_for_index``), functions without array inputs create
    their arrays there and array inputs must live there; unbound, they follow the
    inputs or the current index.
    """

    ndarray = StrictArray

    def __init__(self, module, name, index=None, path=""):
        self._module = module
        self._index = index
        self._path = path  # "linalg." for xp.linalg: names are recorded in XP_USED from the root
        self.__name__ = name

    def __call__(self, *args, **kwargs):
        return _call(self._module, *args, index=self._index, **kwargs)

    def __getattr__(self, name):
        attribute = getattr(self._module, name)
        XP_USED.add(self._path + name)
        if isinstance(attribute, (types.ModuleType, np.ufunc)):  # xp.linalg.qr, xp.add(a, b) and xp.add.at(...)
            wrapped = _Namespace(attribute, f"{self.__name__}.{name}", self._index, f"{self._path}{name}.")
        elif callable(attribute) and not isinstance(attribute, type):
            wrapped = functools.wraps(attribute)(functools.partial(_call, attribute, index=self._index))
        else:
            wrapped = attribute  # dtypes, constants (xp.float32, xp.inf, xp.newaxis)
        setattr(self, name, wrapped)
        return wrapped


#: Every ``xp`` name corenn has asked this device for (``"add"``, ``"add.at"``, ``"linalg.qr"``): the
#: test of ``corenn.dispatch.XP_NAMES`` compares it with the documented list.
XP_USED: set = set()

xp = _Namespace(np, "strict_xp")


@functools.lru_cache(maxsize=None)
def xp_for_index(index):  # called for any index a device is named with, even out of range
    return _Namespace(np, f"strict_xp[{index}]", index)



def to_device(array, index=None):
    index = current_index() if index is None else index
    if isinstance(array, StrictArray):  # device to device
        return StrictArray(array._a.copy(), index)
    if not isinstance(array, np.ndarray):
        raise TypeError(f"to_device expects a numpy array or a strict array, got {type(array).__name__}")
    return StrictArray(np.array(array, copy=True), index)


def to_host(array):
    if not isinstance(array, StrictArray):
        raise TypeError(f"to_host expects a strict array, got {type(array).__name__}")
    return np.array(array._a, copy=True)


class StrictGenerator:
    """The RNG object of the protocol: numpy's PCG64 whose draws land on the current strict index."""

    def __init__(self, seed):
        self.bit_generator = np.random.Generator(np.random.PCG64(seed)).bit_generator
        self._rng = np.random.Generator(self.bit_generator)

    def __getattr__(self, name):  # random, standard_normal, integers, permutation, ...
        return functools.partial(_call, getattr(self._rng, name))


BACKEND = Backend(
    type="strict",
    xp=xp,
    to_device=to_device,
    to_host=to_host,
    device_count=lambda: DEVICE_COUNT,
    xp_for_index=xp_for_index,
    device_guard=device_guard,
    current_device=current_index,
    random_generator=StrictGenerator,
    default_index=0,
    numpy_compatible=True,
    description="test-only device: wrapped numpy arrays that refuse silent host conversion",
)


class StrictPlugin:
    @corenn.hookimpl
    def corenn_register_backends(self):
        return [BACKEND]
