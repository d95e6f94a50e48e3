"""``corenn.backends.openmp``: whether corenn was built with OpenMP. It was not: ``is_available()`` is False.

(numpy's BLAS may run on several threads of its own; corenn's kernels do not use OpenMP.)
"""
from __future__ import annotations

__all__ = ["is_available"]


def is_available() -> bool:
    """False: corenn has no OpenMP-parallel kernels."""
    return False
