"""``corenn.backends.mkldnn``: PyTorch's oneDNN flags. corenn does not use oneDNN: ``is_available()`` is False.

``enabled`` and ``deterministic`` exist and keep their values for ported programs; no kernel reads them.
"""
from __future__ import annotations

from corenn.backends import _flags

__all__ = ["is_available", "flags", "enabled", "deterministic"]


def is_available() -> bool:
    """False: corenn's cpu kernels run on numpy, not on oneDNN (MKL-DNN)."""
    return False


def flags(enabled=None, deterministic=None):
    """Context manager setting the flags given (None: unchanged), restoring them after."""
    import sys
    return _flags.set_temporarily(sys.modules[__name__], enabled=enabled, deterministic=deterministic)


_flags.install(__name__, {"enabled": True, "deterministic": False})
