"""``corenn.cpu``: PyTorch's cpu device module (``torch.cpu``): ``is_available()`` and the ``amp`` spellings."""
from __future__ import annotations

__all__ = ["is_available", "device_count", "current_device", "synchronize", "amp"]


def is_available() -> bool:
    """Always True: the cpu device is always there."""
    return True


def device_count() -> int:
    return 1


def current_device() -> str:
    return "cpu"


def synchronize(device=None) -> None:
    """Nothing to wait for: cpu ops finish before they return."""


def __getattr__(name):
    if name == "amp":
        import importlib
        return importlib.import_module("corenn.cpu.amp")
    raise AttributeError(f"module 'corenn.cpu' has no attribute {name!r}")
