"""The few things data loading needs from the tensor core, in one place.

Everything else in ``corenn.utils.data`` works on plain numpy arrays, so this
file is the whole contract with ``corenn``: building tensors from arrays and
lists, reading a tensor's array, and drawing random numbers from a
``corenn.Generator``.  ``corenn`` is imported lazily because ``corenn``
itself imports this package while it initialises.
"""
from __future__ import annotations

import numpy as np

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
# Through corenn's public functions, so ``corenn.manual_seed`` governs every
# draw made without an explicit generator.

def draw_seed(generator=None) -> int:
    """A fresh non-negative int64 seed drawn from ``generator`` (PyTorch's
    ``torch.empty((), dtype=torch.int64).random_(generator=g).item()``)."""
    c = _corenn()
    return int(c.empty((), dtype=c.int64).random_(generator=generator).item())


def new_generator(seed: int):
    return _corenn().Generator().manual_seed(seed)


def randperm(n: int, generator=None) -> list:
    return _corenn().randperm(n, generator=generator).tolist()


def randint(high: int, size: int, generator=None) -> list:
    return _corenn().randint(0, high, (size,), generator=generator).tolist()


def numpy_rng(generator) -> np.random.Generator:
    """The numpy Generator inside a ``corenn.Generator``; without one, a
    numpy Generator seeded from corenn's default generator."""
    if generator is not None:
        return generator._rng
    return np.random.default_rng(draw_seed())


def manual_seed(seed: int) -> None:
    """Seed corenn's default generator, when the core is there."""
    try:
        _corenn().manual_seed(seed)
    except (ImportError, AttributeError):
        pass
