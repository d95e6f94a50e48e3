"""Devices, backends and the kernel registry: where an op finds the code that runs it.

A *backend* owns a device type (``cpu``, ``cuda``, ...): its array module ``xp``
(numpy, cupy), transfers, RNG, synchronisation and memory statistics. A *kernel*
is an op's forward and backward for one device type (or ``"*"``: any backend
whose ``xp`` speaks the numpy API). Both registries are filled through the
plugin hooks in :mod:`corenn.hookspecs`; the core's own ``cpu`` backend and
kernels arrive the same way a third-party plugin's do.

Kernel lookup is one dict access per op: registrations are resolved into
``resolved[device_type][op_name]`` whenever the registry changes. A plugin's kernel is
checked on its first call for each device type (output shapes and dtypes against the
core kernel's, see :mod:`corenn._kernel_check`); until then its table entry is the check.
"""
from __future__ import annotations

import contextlib
import re
import sys
from typing import Any, Callable

import attrs

from corenn._kernel_check import FirstCallCheck, check_every_call
from corenn.import_paths import install_hint

__all__ = ["device", "Backend", "KernelRegistration", "backends", "kernels", "get_backend",
           "available_devices", "known_device_providers", "resolve_device", "device_guard", "ARRAY_PROTOCOL", "XP_NAMES",
           "RNG_METHODS"]


# Device types that first-party plugins provide, so an unknown device can say what to install:
# "distribution (how to get it; what it needs)", the hint true for this checkout (install_hint).
known_device_providers = {
    "cuda": f"corenn-cuda ({install_hint('plugins/cuda_backend')}; needs an NVIDIA GPU and cupy)",
}

_DEVICE_RE = re.compile(r"^([a-zA-Z_][a-zA-Z0-9_]*)(?::(\d+))?$")


class device:
    """Where a tensor lives: ``corenn.device('cpu')``, ``corenn.device('cuda:1')``, ``device('cuda', 0)``.

    Devices compare by type and index; ``str(d)`` is ``'cuda:1'``, ``repr(d)`` is
    ``device(type='cuda', index=1)`` as in PyTorch. Only device types with a
    registered backend can be created.
    """

    __slots__ = ("type", "index", "_xp")
    _cache: dict = {}

    def __new__(cls, type_or_spec, index: int | None = None):
        if isinstance(type_or_spec, device):
            if index is not None and index != type_or_spec.index:
                raise ValueError(f"device {type_or_spec} already has an index; cannot also pass index={index}")
            return type_or_spec
        key = (type_or_spec, index)
        try:
            cached = cls._cache.get(key)
        except TypeError:  # unhashable: not a device spec, said just below
            cached = None
        if cached is not None:
            return cached
        if not isinstance(type_or_spec, str):
            raise TypeError(f"device() expects a string such as 'cpu' or 'cuda:0', got {type(type_or_spec).__name__}")
        match = _DEVICE_RE.match(type_or_spec.strip())
        if match is None:
            raise RuntimeError(f"Invalid device string: {type_or_spec!r} (expected 'type' or 'type:index', "
                               f"e.g. 'cpu' or 'cuda:0')")
        device_type, parsed_index = match.group(1), match.group(2)
        if parsed_index is not None:
            if index is not None:
                raise ValueError(f"device string {type_or_spec!r} already has an index; cannot also pass index={index}")
            index = int(parsed_index)
        if index is not None and index < 0:
            raise RuntimeError(f"Device index must not be negative, got {index}")
        canonical = cls._cache.get((device_type, index))
        if canonical is not None:  # 'cuda:0' and ('cuda', 0) are one object: ops compare devices by identity
            cls._cache[key] = canonical
            return canonical
        backend = get_backend(device_type)  # raises a helpful error for unknown device types
        self = object.__new__(cls)
        object.__setattr__(self, "type", device_type)
        object.__setattr__(self, "index", index)
        # The array module of this device, read by every op (ctx.xp): kept on the device.
        xp = backend.xp if index is None or backend.xp_for_index is None else backend.xp_for_index(index)
        object.__setattr__(self, "_xp", xp)
        cls._cache[key] = cls._cache[(device_type, index)] = self
        return self

    def __setattr__(self, name, value):
        raise AttributeError("corenn.device is immutable")

    def __eq__(self, other):
        if isinstance(other, str):
            try:
                other = device(other)
            except (RuntimeError, ValueError, TypeError):
                return False
        return isinstance(other, device) and self.type == other.type and self.index == other.index

    def __hash__(self):
        return hash((self.type, self.index))

    def __str__(self):
        return self.type if self.index is None else f"{self.type}:{self.index}"

    def __repr__(self):
        if self.index is None:
            return f"device(type='{self.type}')"
        return f"device(type='{self.type}', index={self.index})"

    def __reduce__(self):
        return (device, (self.type, self.index))


#: What corenn reads or calls on a device array (``tensor._data``), besides passing it to ``xp``
#: functions: numpy's meaning for each. Host conversion (``__array__``, ``float()``, ``int()``,
#: ``bool()``, ``tolist``, iteration) is *not* in it: a backend may refuse those, and corenn moves
#: data to the host only through ``Backend.to_host`` and reads one value with ``item()``.
ARRAY_PROTOCOL = (
    "shape", "dtype", "ndim", "size", "strides", "T",
    "astype", "reshape", "copy", "view", "transpose", "swapaxes", "squeeze", "item",
    "sum", "prod", "mean", "max", "min", "argmax", "argmin", "any", "all",
    "__getitem__", "__setitem__", "__len__",
    "__add__", "__radd__", "__sub__", "__rsub__", "__mul__", "__rmul__", "__truediv__", "__rtruediv__",
    "__pow__", "__matmul__", "__neg__", "__invert__", "__and__", "__or__",
    "__eq__", "__ne__", "__lt__", "__le__", "__gt__", "__ge__",
    "__iadd__", "__isub__", "__imul__", "__itruediv__",
)

#: What corenn uses of a backend's ``xp`` (``ctx.xp`` in kernels), each with numpy's meaning, taking and
#: returning the backend's arrays: the core kernels and front ends call nothing else on it. A dotted
#: name is an attribute path (``xp.add.at``, ``xp.linalg.qr``). Checked two ways by
#: tests/test_device_protocol.py: every ``xp.<name>`` written in corenn's source, and every name the
#: conformance kit and a training step ask the test-only ``strict`` device for, must be listed here.
XP_NAMES = (
    # constants and dtypes
    "inf", "int8", "uint8", "int32", "int64", "float32", "float64", "finfo", "iinfo", "ndarray", "errstate",
    # creation
    "arange", "asarray", "ascontiguousarray", "empty", "eye", "full", "indices", "linspace", "ones",
    "ones_like", "zeros", "zeros_like",
    # shape and indexing
    "broadcast_to", "concatenate", "copyto", "diagonal", "expand_dims", "flip", "moveaxis", "nonzero", "pad",
    "put_along_axis", "roll", "split", "stack", "swapaxes", "take", "take_along_axis", "tile", "tril", "triu",
    "unravel_index", "where", "lib.stride_tricks.as_strided", "broadcast_shapes", "repeat", "tri", "triu_indices",
    # reductions, scans and sorting
    "argsort", "cumprod", "cumsum", "sum", "unique", "argmax", "bincount", "diff", "isin", "searchsorted",
    # linear algebra
    "einsum", "matmul", "outer", "tensordot", "linalg", "linalg.qr", "linalg.cholesky", "linalg.det", "linalg.inv",
    "linalg.pinv", "linalg.slogdet", "linalg.solve", "linalg.svd", "linalg.eigh",
    # elementwise (ufuncs, with out= and casting=; add.at and multiply.at for scatter-adds)
    "abs", "add", "add.at", "bitwise_and", "bitwise_or", "bitwise_xor", "ceil", "clip", "cos", "divide",
    "equal", "exp", "exp2", "expm1", "floor", "floor_divide", "fmod", "greater", "greater_equal", "invert",
    "isclose", "isfinite", "isinf", "isnan", "left_shift", "less", "less_equal", "log", "log10", "log1p",
    "log2", "logaddexp", "logical_and", "logical_not", "logical_or", "logical_xor", "maximum", "minimum",
    "multiply", "multiply.at", "nan_to_num", "negative", "not_equal", "remainder", "right_shift", "round",
    "sign", "signbit", "sin", "sqrt", "subtract", "tan", "tanh", "trunc",
    # running and scattered reductions (logcumsumexp, scatter_reduce), the Bessel function of windows
    "logaddexp.accumulate", "maximum.accumulate", "maximum.at", "minimum.at", "i0", "sort",
    # more pointwise math (inverse trigonometric and hyperbolic, atan2, hypot, copysign, fmax, frexp, ...)
    "arcsin", "arccos", "arctan", "arctan2", "arcsinh", "arccosh", "arctanh", "sinh", "cosh", "copysign", "fmax",
    "fmin", "frexp", "hypot", "logaddexp2", "nextafter", "gcd", "lcm",
)

#: What ``Backend.random_generator(seed)`` must return: an object with these methods, each
#: returning arrays of the backend (``xp.ndarray``) placed on the current device index, with
#: numpy.random.Generator's signatures; and its state as ``rng.bit_generator.state`` (or
#: ``rng.state``), a JSON-serialisable value that can be read and assigned (``get_rng_state``).
RNG_METHODS = ("random", "standard_normal", "standard_exponential", "integers", "permutation", "poisson")


def _no_guard(index):
    return contextlib.nullcontext()


@attrs.define(eq=False)
class Backend:
    """A device type's implementation, registered through ``corenn_register_backends``.

    The protocol (``docs/writing-plugins.md``, "Writing a device backend", lists it in full):

    - ``xp``: the array module kernels receive as ``ctx.xp``. ``xp.ndarray`` must be the
      device's array class (``device_of_array`` tests ``isinstance`` with it); the creation,
      math and reduction functions the core's kernels call must take and return device
      arrays. Device arrays must offer the array protocol the doc lists (``shape``,
      ``dtype``, ``ndim``, ``size``, ``astype``, ``reshape``, indexing, operator dunders, ...);
      they need not be numpy arrays and may refuse implicit host conversion
      (``__array__``, ``float()``, ``bool()``): corenn moves data to the host only through
      ``to_host``, and reads single values with ``array.item()``.
    - ``to_device(array, index)``: a copy of a host (numpy) array, or of an array of this
      backend on another index, on device ``index``. ``to_host(array)``: a numpy copy.
    - ``device_count()``: how many indices exist. ``default_index`` is ``None`` for a
      device without indices (``cpu``), else the index of ``x`` when ``current_device``
      is not given; ``current_device()`` returns the index ``x`` means (``x:current``).
      Tensors always report a concrete index: ``tensor(..., device="x").device`` is ``x:0``.
    - ``xp_for_index(index)``: for a device with several indices, the array module whose
      functions create arrays on ``index`` (``xp.zeros``, ``xp.arange``, ...); kernels of a
      tensor on ``x:1`` get it as ``ctx.xp``, so the core never switches a current device on
      the op path. Results computed from device arrays must land on their inputs' index.
      It is called once per ``corenn.device(...)`` built, for any index (even one out
      of range: ``corenn.device("x:5")`` may be built, tensors can't go there), so it must
      not fail. ``None`` (the default): ``xp`` serves every index.
    - ``device_guard(index)``: a context manager making ``index`` current around random
      draws (the RNG object draws onto the current index); the default does nothing.
    - ``random_generator(seed)``: an RNG object with the methods in ``RNG_METHODS``
      (numpy.random.Generator's signatures) drawing onto the current index, and a
      read/write JSON-serialisable ``bit_generator.state`` (or ``state``). ``None`` (the
      default): numpy draws on the host and ``to_device`` moves each result
      (``corenn.tensor.random.HostDrawnGenerator``), correct everywhere but one transfer per draw.
    - ``numpy_compatible``: ``True`` if ``xp`` speaks the numpy API well enough for the
      core's ``"*"`` kernels. A backend with ``False`` gets only kernels registered for its
      own device type, and must register every op it supports.
    - ``array_device_index(array)``: the index an array lives on; by default
      ``array.device.id`` (cupy's spelling), else ``default_index``.
    """

    type: str
    xp: Any
    to_device: Callable[[Any, Any], Any]
    to_host: Callable[[Any], Any]
    device_count: Callable[[], int] = lambda: 1
    synchronize: Callable[[Any], None] = lambda index=None: None
    memory_stats: Callable[[Any], dict] = lambda index=None: {}
    random_generator: Callable[[int], Any] | None = None
    default_index: int | None = None
    xp_for_index: Callable[[int], Any] | None = None
    device_guard: Callable[[Any], Any] = _no_guard
    current_device: Callable[[], int] | None = None
    numpy_compatible: bool = True
    description: str = ""
    source: str = "core"

    def array_device_index(self, array) -> int | None:
        """The device index an array lives on (cupy arrays know theirs)."""
        dev = getattr(array, "device", None)
        return getattr(dev, "id", self.default_index)

    def current_index(self) -> int | None:
        """The index a device named without one means (``None`` for devices without indices)."""
        if self.default_index is None:
            return None
        return self.default_index if self.current_device is None else self.current_device()


@attrs.define(frozen=True)
class KernelRegistration:
    """One kernel for ``op`` on ``device_type`` (``"*"`` = every numpy-API backend).

    ``kernel`` is an :class:`corenn.autograd.node.Op` subclass: its ``forward``
    and ``backward`` side by side. The highest ``priority`` wins; the core's kernels
    have priority 0, so a plugin overrides one by registering with priority > 0.
    """

    op: str
    device_type: str
    kernel: Any
    priority: int = 0
    source: str = "core"


class BackendRegistry:
    def __init__(self):
        self._backends: dict[str, Backend] = {}

    def register(self, backend: Backend) -> None:
        existing = self._backends.get(backend.type)
        if existing is not None and existing is not backend:
            raise ValueError(f"device type {backend.type!r} is already provided by {existing.source}; "
                             f"{backend.source} cannot register it again")
        self._backends[backend.type] = backend
        kernels._resolved.pop(backend.type, None)  # its numpy_compatible flag decides its table

    def unregister(self, device_type: str) -> None:
        self._backends.pop(device_type, None)
        # Forget only this type's devices: other devices (cpu) must stay the same objects, ops compare by identity.
        for key in [key for key, cached in device._cache.items() if cached.type == device_type]:
            del device._cache[key]
        kernels._resolved.pop(device_type, None)

    def get(self, device_type: str) -> Backend:
        backend = self._backends.get(device_type)
        if backend is not None:
            return backend
        from corenn import plugins

        if plugins.ensure_loaded() or plugins.finish_pending():  # plugins that may bring this device
            backend = self._backends.get(device_type)
            if backend is not None:
                return backend
        available = ", ".join(sorted(self._backends)) or "none"
        message = f"unknown device type {device_type!r}; available devices: {available}."
        provider = known_device_providers.get(device_type)
        if provider:
            failed = plugins.status_of_device_provider(device_type)
            message += f" The {device_type!r} device is provided by the plugin {provider}" + (
                f"; {failed}" if failed else ", which is not installed") + "."
        else:
            # A third-party device: its plugin may be installed but broken; name those, they are the likely cause.
            inactive = [f"{r.name} ({r.status}: {r.reason})" for r in plugins.list_plugins()
                        if r.status in ("failed", "unavailable")]
            if inactive:
                message += f" Plugins installed but not loaded: {'; '.join(inactive)}."
        from corenn._argcheck import named  # the op or factory that was given the device, if any
        raise RuntimeError(named(message))

    def __iter__(self):
        return iter(list(self._backends.values()))

    def __contains__(self, device_type):
        return device_type in self._backends


class KernelRegistry:
    """Kernels keyed by (op name, device type), highest priority first."""

    def __init__(self):
        self._registrations: dict[str, list[KernelRegistration]] = {}
        self._resolved: dict[str, dict[str, Any]] = {}
        self._disabled_sources: set[str] = set()  # kept in place, skipped at dispatch
        # The first-call check (corenn._kernel_check): (op, device type, kernel) whose outputs matched
        # the core kernel's, (source, op, device type) whose did not (skipped at dispatch), and the
        # checks standing in the tables, reused when a table is rebuilt.
        self._checked: set[tuple[str, str, type]] = set()
        self._rejected: set[tuple[str, str, str]] = set()
        self._checks: dict[tuple[str, str, type, bool], Any] = {}

    def register(self, registration: KernelRegistration) -> None:
        entries = self._registrations.setdefault(registration.op, [])
        entries.append(registration)
        # Stable sort: among equal priorities the first registered wins.
        entries.sort(key=lambda r: -r.priority)
        self.invalidate()

    def unregister_source(self, source: str) -> None:
        for op, entries in self._registrations.items():
            entries[:] = [r for r in entries if r.source != source]
        self._disabled_sources.discard(source)
        self._rejected = {key for key in self._rejected if key[0] != source}
        self._checks = {key: check for key, check in self._checks.items() if check.registration.source != source}
        self.invalidate()

    def reject(self, source: str, op: str, device_type: str) -> None:
        """Skip ``source``'s kernel for ``op`` on ``device_type`` at dispatch (its output failed the first-call check).

        Until ``source`` is unregistered; the next registration for the op runs instead.
        """
        self._rejected.add((source, op, device_type))
        self.invalidate()

    def invalidate(self) -> None:
        """Forget the resolved tables: the next lookup of each device type rebuilds its table."""
        self._resolved.clear()

    def set_source_enabled(self, source: str, enabled: bool) -> None:
        """Skip ``source``'s registrations at dispatch (``enabled=False``), or use them again.

        They keep their place among equal priorities, so turning a plugin off and on
        (``corenn.plugins.disable`` / ``enable``) gives back the kernels that ran before.
        """
        if enabled:
            self._disabled_sources.discard(source)
        else:
            self._disabled_sources.add(source)
        self.invalidate()

    def registrations(self, op: str | None = None) -> list[KernelRegistration]:
        if op is not None:
            return list(self._registrations.get(op, ()))
        return [r for entries in self._registrations.values() for r in entries]

    def table(self, device_type: str) -> dict[str, Any]:
        """``op -> kernel`` for one device type (cached; rebuilt after any registration)."""
        table = self._resolved.get(device_type)
        if table is None:
            if finish_pending_plugins is not None:
                finish_pending_plugins()  # may register kernels; while any plugin waits, nothing is cached
            table = {}
            backend = backends._backends.get(device_type)
            # A backend whose arrays don't speak numpy declines the "*" kernels: only its own run.
            shared = "*" if backend is None or backend.numpy_compatible else device_type
            disabled, rejected = self._disabled_sources, self._rejected
            # Plugin kernels are checked against the core's where the core's kernels can run.
            core = getattr(sys.modules.get("corenn.ops._kernel"), "CORE_KERNELS", None) \
                if backend is not None and backend.numpy_compatible else None
            every_call = core is not None and check_every_call()
            for op, entries in self._registrations.items():
                for r in entries:
                    if (r.device_type == device_type or r.device_type == shared) and r.source not in disabled \
                            and (r.source, op, device_type) not in rejected:
                        table[op] = r.kernel if core is None else self._first_call_check(r, core, device_type,
                                                                                         every_call)
                        break
            if finish_pending_plugins is None:
                self._resolved[device_type] = table
        return table

    def _first_call_check(self, registration: KernelRegistration, core: dict, device_type: str, every_call: bool):
        """What the table holds for ``registration``: its kernel, or a check of its first call (of every call)."""
        kernel, reference = registration.kernel, core.get(registration.op)
        if reference is None or kernel is reference or (
                not every_call and (registration.op, device_type, kernel) in self._checked):
            return kernel
        key = (registration.op, device_type, kernel, every_call)
        check = self._checks.get(key)
        if check is None or check.registration != registration:
            check = self._checks[key] = FirstCallCheck(registration, reference, device_type, self, every_call)
        return check

    def resolve(self, op: str, device_type: str):
        """What the dispatcher runs for ``op`` on ``device_type``: the kernel, or the check of its first call."""
        try:
            return self.table(device_type)[op]
        except KeyError:
            raise NotImplementedError(f"no kernel for op {op!r} on device type {device_type!r}") from None

    def lookup(self, op: str, device_type: str):
        """The kernel class that runs ``op`` on ``device_type`` (``NotImplementedError`` if none)."""
        kernel = self.resolve(op, device_type)
        return kernel.kernel if isinstance(kernel, FirstCallCheck) else kernel

    def source_of(self, op: str, device_type: str) -> str:
        """The source (plugin name, or ``"core"``) of the kernel that runs ``op`` on ``device_type``."""
        try:
            kernel = self.lookup(op, device_type)
        except NotImplementedError:
            return "none"
        for r in self._registrations.get(op, ()):
            if r.kernel is kernel and r.source not in self._disabled_sources:
                return r.source
        return "none"


backends = BackendRegistry()
kernels = KernelRegistry()

# Set by corenn.plugins while a plugin waits for its own module to finish importing (its
# ``finish_pending``); None otherwise, so a table lookup pays one test.
finish_pending_plugins: Callable[[], bool] | None = None


def get_backend(device_type: str) -> Backend:
    return backends.get(device_type)


def resolve_device(spec) -> device:
    """The device a new tensor goes on: ``x`` means ``x:current``; an index is checked against ``device_count()``.

    Devices without indices (``cpu``) resolve to the bare type (``cpu:0`` is ``cpu``).
    ``corenn.device("cuda:5")`` can be built on a one-GPU machine, as in PyTorch; putting a
    tensor there raises here.

    Example::

        >>> resolve_device("cpu")
        device(type='cpu')
    """
    dev = device(spec)
    backend = get_backend(dev.type)
    current = backend.current_index()
    if current is None:
        return dev if dev.index is None else device(dev.type)
    if dev.index is None:
        return device(dev.type, current)
    count = backend.device_count()
    if dev.index >= count:
        raise RuntimeError(f"device index {dev.index} out of range: {dev.type} has {count} "
                           f"device{'s' if count != 1 else ''} (valid indices 0..{count - 1})" if count else
                           f"device index {dev.index} out of range: {dev.type} has no devices")
    return dev


_NO_GUARD = contextlib.nullcontext()


def device_guard(dev: device):
    """``with device_guard(d):`` makes ``d``'s index current (around random draws), as ``Backend.device_guard``."""
    if dev.index is None:
        return _NO_GUARD
    return get_backend(dev.type).device_guard(dev.index)


def available_devices() -> list[str]:
    """Device strings usable on this machine, e.g. ``['cpu', 'cuda:0']``."""
    found = []
    for backend in backends:
        count = backend.device_count()
        if backend.default_index is None:
            found.append(backend.type)
        else:
            found.extend(f"{backend.type}:{i}" for i in range(count))
    return found


# Op observation (the profiler's entry point). The hot path tests one module global;
# observers are called only while at least one is active.
observers: list = []
