"""``corenn.cuda``: PyTorch's CUDA device API. The ``cuda`` device itself comes from a plugin (corenn-cuda).

Without that plugin (or without a GPU) ``is_available()`` is False and ``device_count()`` is 0,
so the usual ``device = "cuda" if corenn.cuda.is_available() else "cpu"`` works everywhere.
"""
from __future__ import annotations

from corenn import dispatch

__all__ = ["is_available", "device_count", "current_device", "synchronize", "manual_seed", "manual_seed_all",
           "memory_stats", "memory_allocated", "max_memory_allocated"]


def _backend():
    return dispatch.backends._backends.get("cuda")


def is_available() -> bool:
    """True when a ``cuda`` backend is registered and sees at least one device."""
    backend = _backend()
    return backend is not None and backend.device_count() > 0


def device_count() -> int:
    backend = _backend()
    return 0 if backend is None else backend.device_count()


def _require():
    backend = _backend()
    if backend is None:
        dispatch.get_backend("cuda")  # raises the error naming the available devices and the plugin
    return backend


def current_device() -> int:
    """The index ``"cuda"`` means now (the backend's ``current_device()``)."""
    return _require().current_index()


def synchronize(device=None) -> None:
    """Wait for all work queued on ``device`` (default: the current device)."""
    _require().synchronize(_index(device))


def _index(device) -> int:
    if device is None:
        return current_device()
    if isinstance(device, int):
        device = dispatch.device("cuda", device)
    return dispatch.resolve_device(device).index  # "cuda" is cuda:current; the index is range-checked


def manual_seed(seed: int) -> None:
    """Seed the default generator of every CUDA device (a no-op without CUDA, as in PyTorch)."""
    if not is_available():
        return
    from corenn.tensor import random as _random
    for index in range(device_count()):
        _random._default_for(dispatch.device("cuda", index)).manual_seed(seed)


manual_seed_all = manual_seed


def memory_stats(device=None) -> dict:
    return dict(_require().memory_stats(_index(device)))


def memory_allocated(device=None) -> int:
    return int(memory_stats(device).get("allocated_bytes.all.current", 0))


def max_memory_allocated(device=None) -> int:
    return int(memory_stats(device).get("allocated_bytes.all.peak", 0))


def __getattr__(name):
    # corenn.cuda.amp (PyTorch's older autocast / GradScaler spellings), loaded on first use.
    if name == "amp":
        import importlib
        return importlib.import_module("corenn.cuda.amp")
    raise AttributeError(f"module 'corenn.cuda' has no attribute {name!r}")
