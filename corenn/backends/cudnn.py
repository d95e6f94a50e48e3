"""``corenn.backends.cudnn``: PyTorch's cuDNN flags, real attributes that tell the truth.

corenn's core has no cuDNN: ``is_available()`` is False and ``version()`` is None. The flags
exist, type-check and keep their values, so ``corenn.backends.cudnn.benchmark = True`` in a
ported program works; no core kernel reads them (the cpu kernels are deterministic and have
no algorithm search). A device plugin that calls cuDNN reads them here
(``docs/program-surface.md`` lists which kernels honour which flag).

    >>> import corenn
    >>> corenn.backends.cudnn.benchmark = True
    >>> corenn.backends.cudnn.is_available()
    False
"""
from __future__ import annotations

from corenn.backends import _flags

__all__ = ["is_available", "version", "flags", "enabled", "benchmark", "deterministic", "allow_tf32",
           "benchmark_limit"]


def is_available() -> bool:
    """False: neither the core nor corenn-cuda (cupy kernels) calls cuDNN."""
    return False


def version():
    """cuDNN's version: None, as PyTorch answers when cuDNN is not available."""
    return None


def is_acceptable(tensor) -> bool:
    """Whether cuDNN would accept ``tensor`` (a cuda float tensor, and cuDNN available)."""
    return is_available() and tensor.is_cuda and tensor.dtype.is_floating_point


benchmark_limit = 10


def flags(enabled=None, benchmark=None, benchmark_limit=None, deterministic=None, allow_tf32=None):
    """Context manager setting the flags given (None: unchanged), restoring them after."""
    import sys
    module = sys.modules[__name__]
    return _flags.set_temporarily(module, enabled=enabled, benchmark=benchmark, deterministic=deterministic,
                                  allow_tf32=allow_tf32)


_flags.install(__name__, {"enabled": True, "benchmark": False, "deterministic": False, "allow_tf32": True})
