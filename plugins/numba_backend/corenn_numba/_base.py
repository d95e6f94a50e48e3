"""What every kernel family of corenn-numba shares: which arrays the compiled loops take, and lazy imports.

An override is a :class:`corenn.kernels.KernelOverride` of the core kernel it replaces:
its ``handles`` predicate says which inputs the compiled code takes (usually through
:func:`handles` below), and its ``forward``/``backward`` are the compiled path only --
for anything else the core kernel runs, forward and backward::

    class Softmax(KernelOverride, core_nn.Softmax):
        @staticmethod
        def handles(a, axis):
            return handles(a) and axis == a.ndim - 1

        @staticmethod
        def forward(ctx, a, axis):
            ...   # compiled

        @staticmethod
        def backward(ctx, grad):
            ...   # compiled
"""
from __future__ import annotations

import contextlib

import numpy as np

from corenn_numba import _malloc

FLOATS = (np.dtype(np.float32), np.dtype(np.float64))


def handles(*arrays, dtypes=FLOATS) -> bool:
    """True when every array is a numpy array of one of ``dtypes``, all of the same dtype (None is skipped)."""
    first = arrays[0]
    if not isinstance(first, np.ndarray) or first.dtype not in dtypes:
        return False
    return all(isinstance(a, np.ndarray) and a.dtype == first.dtype for a in arrays[1:] if a is not None)


class LazyModule:
    """A module imported on first attribute access.

    The compiled functions of a kernel family live in a ``_<family>_jit.py`` module that
    imports numba; kernel classes reach them through ``jit = LazyModule(...)``, so that
    ``import corenn`` (which loads this plugin) never imports numba: that happens when
    an overridden op first runs. That first run is also when glibc's malloc is tuned
    (:mod:`corenn_numba._malloc`): a process that imports corenn but never runs a
    compiled kernel keeps its allocator as it was.
    """

    def __init__(self, name: str):
        self._name = name
        self._module = None

    def __getattr__(self, attribute):
        module = self._module
        if module is None:
            import importlib
            _malloc.tune()
            with compiled_code_cache():
                module = self._module = importlib.import_module(self._name)
        return getattr(module, attribute)


@contextlib.contextmanager
def compiled_code_cache():
    """Inside the block, numba functions defined with ``cache=True`` keep their code under ``cache_dir()/numba``.

    numba picks a function's cache folder when the function is defined, from
    ``numba.config.CACHE_DIR``: setting it only while the plugin's ``_*_jit`` modules are
    imported puts their code in the plugin's cache folder (outside site-packages, kept
    across upgrades of other packages) and leaves the user's own numba functions where
    numba puts them. A ``NUMBA_CACHE_DIR`` set by the user wins.
    """
    import numba

    from corenn_numba.calibration import cache_dir
    previous = numba.config.CACHE_DIR
    if not previous:
        numba.config.CACHE_DIR = str(cache_dir() / "numba")
    try:
        yield
    finally:
        numba.config.CACHE_DIR = previous
