"""What every kernel family of corenn-numba shares: when an override applies, and how it falls back.

An override subclasses the core kernel it replaces. Its ``forward`` first asks
``handles(...)``; when the inputs are not numpy arrays of a dtype the compiled code
supports, it sets ``ctx.fallback = True`` and runs the core forward, and its
``backward`` then runs the core backward on what that forward saved::

    class Softmax(core_nn.Softmax):
        @staticmethod
        def forward(ctx, a, axis):
            if not handles(a):
                ctx.fallback = True
                return core_nn.Softmax.forward(ctx, a, axis)
            ...

        @staticmethod
        def backward(ctx, grad):
            if ctx.fallback:
                return core_nn.Softmax.backward(ctx, grad)
            ...
"""
from __future__ import annotations

import numpy as np

FLOATS = (np.dtype(np.float32), np.dtype(np.float64))


def handles(*arrays, dtypes=FLOATS) -> bool:
    """True when every array is a numpy array of one of ``dtypes``, all of the same dtype."""
    first = arrays[0]
    if not isinstance(first, np.ndarray) or first.dtype not in dtypes:
        return False
    return all(isinstance(a, np.ndarray) and a.dtype == first.dtype for a in arrays[1:] if a is not None)


class LazyModule:
    """A module imported on first attribute access.

    The compiled functions of a kernel family live in a ``_<family>_jit.py`` module that
    imports numba; kernel classes reach them through ``jit = LazyModule(...)``, so that
    ``import corenn`` (which loads this plugin) never imports numba: that happens when
    an overridden op first runs.
    """

    def __init__(self, name: str):
        self._name = name
        self._module = None

    def __getattr__(self, attribute):
        module = self._module
        if module is None:
            import importlib
            module = self._module = importlib.import_module(self._name)
        return getattr(module, attribute)
