"""``corenn.accelerator``: PyTorch's device-agnostic accelerator API (``torch.accelerator``).

An *accelerator* is a device backend other than ``cpu`` that an installed plugin registers and
that sees at least one device (``cuda`` from corenn-cuda on a machine with an NVIDIA GPU). With
none, ``is_available()`` is False, ``current_accelerator()`` is None and ``device_count()`` is 0,
so the device selection of PyTorch's examples works unchanged::

    >>> import corenn
    >>> device = corenn.accelerator.current_accelerator() if corenn.accelerator.is_available() else "cpu"

Functions that need an accelerator (``set_device_index``, ``synchronize``, ...) raise the
RuntimeError PyTorch raises when there is none.
"""
from __future__ import annotations

import contextlib

from corenn import dispatch

__all__ = ["is_available", "current_accelerator", "device_count", "current_device_index", "current_device_idx",
           "set_device_index", "set_device_idx", "synchronize", "device_index", "empty_cache", "memory_stats",
           "memory_allocated", "max_memory_allocated"]

# Preference among several accelerators, as PyTorch has at most one per build (the rest follow by name).
_PREFERRED = ("cuda", "xpu", "mps", "mtia", "hpu")

# The index set with set_device_index, for backends that keep no current index of their own.
_chosen_index: dict[str, int] = {}


def _accelerator_backend():
    registered = [b for b in dispatch.backends if b.type != "cpu"]
    registered.sort(key=lambda b: (_PREFERRED.index(b.type) if b.type in _PREFERRED else len(_PREFERRED), b.type))
    for backend in registered:
        try:
            if backend.device_count() > 0:
                return backend
        except Exception:  # a backend that cannot count its devices offers none
            continue
    return None


def _require(function: str):
    backend = _accelerator_backend()
    if backend is None:
        raise RuntimeError(f"corenn.accelerator.{function}(): no available accelerator found (only the cpu "
                           f"device is registered; install a device plugin such as corenn-cuda on a machine "
                           f"with its hardware)")
    return backend


def is_available() -> bool:
    """Whether an accelerator is registered and sees at least one device (``torch.accelerator.is_available``)."""
    return _accelerator_backend() is not None


def current_accelerator(check_available: bool = False):
    """The accelerator's device type as a ``corenn.device`` (``device(type='cuda')``), or None.

    ``check_available`` is accepted for PyTorch's signature: corenn reports only available accelerators.
    """
    backend = _accelerator_backend()
    return None if backend is None else dispatch.device(backend.type)


def device_count() -> int:
    """How many devices the accelerator has (0 without one)."""
    backend = _accelerator_backend()
    return 0 if backend is None else backend.device_count()


def current_device_index() -> int:
    """The accelerator's current device index."""
    backend = _require("current_device_index")
    if backend.current_device is not None:
        return backend.current_device()
    return _chosen_index.get(backend.type, backend.default_index or 0)


current_device_idx = current_device_index  # PyTorch's older spelling


def _index_of(device, function: str) -> int:
    backend = _require(function)
    if device is None:
        return current_device_index()
    if isinstance(device, int):
        index = device
    else:
        resolved = dispatch.device(device)
        if resolved.type != backend.type:
            raise ValueError(f"corenn.accelerator.{function}(): device {resolved} is not of the accelerator's "
                             f"type {backend.type!r}")
        index = current_device_index() if resolved.index is None else resolved.index
    if not 0 <= index < backend.device_count():
        raise RuntimeError(f"corenn.accelerator.{function}(): device index {index} is out of range "
                           f"(the accelerator has {backend.device_count()} devices)")
    return index


def set_device_index(device) -> None:
    """Make ``device`` (an index, or a device of the accelerator's type) the current one."""
    backend = _require("set_device_index")
    index = _index_of(device, "set_device_index")
    setter = getattr(backend, "set_current_device", None)
    if setter is not None:
        setter(index)
    _chosen_index[backend.type] = index


set_device_idx = set_device_index


@contextlib.contextmanager
def device_index(device):
    """Context manager: ``device`` is the current index inside, the previous one after (None: no change)."""
    if device is None:
        yield
        return
    previous = current_device_index()
    set_device_index(device)
    try:
        yield
    finally:
        set_device_index(previous)


def synchronize(device=None) -> None:
    """Wait for all work queued on ``device`` (default: the current accelerator device)."""
    backend = _require("synchronize")
    backend.synchronize(_index_of(device, "synchronize"))


def empty_cache() -> None:
    """Release cached accelerator memory the backend holds (nothing to do without an accelerator)."""
    backend = _accelerator_backend()
    release = getattr(backend, "empty_cache", None)
    if release is not None:
        release()


def memory_stats(device=None) -> dict:
    """The accelerator backend's memory statistics for ``device``."""
    backend = _require("memory_stats")
    return dict(backend.memory_stats(_index_of(device, "memory_stats")))


def memory_allocated(device=None) -> int:
    return int(memory_stats(device).get("allocated_bytes.all.current", 0))


def max_memory_allocated(device=None) -> int:
    return int(memory_stats(device).get("allocated_bytes.all.peak", 0))
