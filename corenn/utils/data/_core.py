"""The few things data loading needs from the tensor core, in one place.

Everything else in ``corenn.utils.data`` works on plain numpy arrays, so this
file is the whole contract with ``corenn``: building tensors from arrays and
lists, reading a tensor's array, and drawing random numbers from a
``corenn.Generator``.  ``corenn`` is imported lazily because ``corenn``
itself imports this package while it initialises.
"""
from __future__ import annotations

import numpy as np

_MAX_SEED = 2**63  # seeds are non-negative int64, as in PyTorch


def _corenn():
    import corenn
    return corenn


def tensor_type():
    """``corenn.Tensor``, or None while the core is not importable."""
    try:
        return _corenn().Tensor
    except (ImportError, AttributeError):
        return None


def is_tensor(obj) -> bool:
    cls = tensor_type()
    return cls is not None and isinstance(obj, cls)


def array_of(t) -> np.ndarray:
    """The numpy array behind a cpu tensor (shared, not copied)."""
    return t._data if isinstance(getattr(t, "_data", None), np.ndarray) else np.asarray(t.numpy())


def from_numpy(a: np.ndarray):
    """A tensor sharing ``a``'s memory."""
    return _corenn().from_numpy(a)


def as_tensor(data):
    return _corenn().as_tensor(data)


def tensor(data, dtype=None):
    c = _corenn()
    return c.tensor(data) if dtype is None else c.tensor(data, dtype=getattr(c, dtype))


def stack(tensors):
    """Stack same-shaped tensors along a new first dimension.

    Done on the raw arrays with one ``np.stack`` (one allocation, one copy):
    this is the hot path of every batch.
    """
    first = tensors[0]
    for t in tensors:
        if t.shape != first.shape:
            raise RuntimeError(
                f"stack expects each tensor to be equal size, but got {tuple(first.shape)} at entry 0 "
                f"and {tuple(t.shape)} at entry {tensors.index(t)}")
    return from_numpy(np.stack([array_of(t) for t in tensors]))


# --- random numbers -----------------------------------------------------------

def numpy_rng(generator) -> np.random.Generator:
    """The numpy Generator inside a ``corenn.Generator`` (or the default one)."""
    if generator is None:
        generator = _corenn().default_generator
    return generator._rng


def draw_seed(generator=None) -> int:
    """A fresh non-negative int64 seed drawn from ``generator`` (PyTorch's
    ``torch.empty((), dtype=torch.int64).random_(generator=g).item()``)."""
    return int(numpy_rng(generator).integers(0, _MAX_SEED, dtype=np.int64))


def new_generator(seed: int):
    return _corenn().Generator().manual_seed(seed)


def randperm(n: int, generator=None) -> list:
    return numpy_rng(generator).permutation(n).tolist()


def randint(high: int, size: int, generator=None) -> list:
    return numpy_rng(generator).integers(0, high, size=size, dtype=np.int64).tolist()


def manual_seed(seed: int) -> None:
    """Seed corenn's default generator, when the core is there."""
    try:
        _corenn().manual_seed(seed)
    except (ImportError, AttributeError):
        pass
