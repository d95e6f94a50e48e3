"""Samplers decide the order in which a map-style dataset is read.

Index logic mirrors PyTorch's exactly (same chunking, same defaults, same
errors); the random numbers come from corenn's own generator, so a seeded
random order is reproducible within corenn but not bit-identical to
PyTorch's.
"""
from __future__ import annotations

import itertools

import numpy as np

from . import _core

__all__ = ["Sampler", "SequentialSampler", "RandomSampler", "SubsetRandomSampler",
           "WeightedRandomSampler", "BatchSampler"]


class Sampler:
    """Base class: an iterable over dataset indices (or lists of them).

    Example::

        class EvensFirst(Sampler):
            def __init__(self, n): self.n = n
            def __iter__(self): return iter([*range(0, self.n, 2), *range(1, self.n, 2)])
            def __len__(self): return self.n
    """

    def __init__(self, data_source=None) -> None:
        pass

    def __iter__(self):
        raise NotImplementedError(f"{type(self).__name__} must implement __iter__")


class SequentialSampler(Sampler):
    """``0, 1, ..., len(data_source) - 1``.

    Example::

        list(SequentialSampler(range(3)))  # [0, 1, 2]
    """

    def __init__(self, data_source) -> None:
        self.data_source = data_source

    def __iter__(self):
        return iter(range(len(self.data_source)))

    def __len__(self) -> int:
        return len(self.data_source)


def _check_bool(name, value, exc=TypeError):
    if not isinstance(value, bool):
        raise exc(f"{name} should be a boolean value, but got {name}={value!r}")


def _check_positive_int(name, value):
    if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
        raise ValueError(f"{name} should be a positive integer value, but got {name}={value!r}")


class RandomSampler(Sampler):
    """A random permutation each epoch, or ``num_samples`` draws with
    replacement. Without ``generator``, each epoch draws a fresh seed from
    corenn's default generator (so ``corenn.manual_seed`` makes it repeatable).

    Example::

        g = corenn.Generator().manual_seed(0)
        list(RandomSampler(range(5), generator=g))  # a permutation of 0..4
    """

    def __init__(self, data_source, replacement: bool = False, num_samples: int | None = None,
                 generator=None) -> None:
        self.data_source = data_source
        self.replacement = replacement
        self._num_samples = num_samples
        self.generator = generator
        _check_bool("replacement", replacement)
        _check_positive_int("num_samples", self.num_samples)

    @property
    def num_samples(self) -> int:
        return len(self.data_source) if self._num_samples is None else self._num_samples

    def __iter__(self):
        n = len(self.data_source)
        generator = self.generator
        if generator is None:
            generator = _core.new_generator(_core.draw_seed())
        if self.replacement:
            # Chunks of 32, as PyTorch: the epoch's indices are drawn lazily.
            for _ in range(self.num_samples // 32):
                yield from _core.randint(n, 32, generator)
            yield from _core.randint(n, self.num_samples % 32, generator)
        else:
            for _ in range(self.num_samples // n):
                yield from _core.randperm(n, generator)
            yield from _core.randperm(n, generator)[:self.num_samples % n]

    def __len__(self) -> int:
        return self.num_samples


class SubsetRandomSampler(Sampler):
    """The given indices in random order, without replacement.

    Example::

        list(SubsetRandomSampler([10, 20, 30]))  # e.g. [30, 10, 20]
    """

    def __init__(self, indices, generator=None) -> None:
        self.indices = indices
        self.generator = generator

    def __iter__(self):
        for i in _core.randperm(len(self.indices), self.generator):
            yield self.indices[i]

    def __len__(self) -> int:
        return len(self.indices)


class WeightedRandomSampler(Sampler):
    """``num_samples`` indices drawn with probability proportional to ``weights``.

    Example::

        list(WeightedRandomSampler([0.1, 0.9, 0.4, 0.7, 3.0, 0.6], 5, replacement=True))
    """

    def __init__(self, weights, num_samples: int, replacement: bool = True, generator=None) -> None:
        _check_positive_int("num_samples", num_samples)
        _check_bool("replacement", replacement, ValueError)
        w = np.asarray(weights.tolist() if hasattr(weights, "tolist") else weights, dtype=np.float64)
        if w.ndim != 1:
            raise ValueError(f"weights should be a 1d sequence but given weights have shape {tuple(w.shape)}")
        self.weights = _core.tensor(w, dtype="float64") if _core.tensor_type() else w
        self._w = w
        self.num_samples = num_samples
        self.replacement = replacement
        self.generator = generator

    def __iter__(self):
        w = self._w
        if not np.all(np.isfinite(w)) or np.any(w < 0):
            raise RuntimeError("WeightedRandomSampler: weights must be finite and non-negative")
        total = w.sum()
        if total <= 0:
            raise RuntimeError("WeightedRandomSampler: weights sum to zero, there is nothing to draw")
        if not self.replacement and self.num_samples > np.count_nonzero(w):
            raise RuntimeError(f"WeightedRandomSampler: cannot draw {self.num_samples} samples without "
                               f"replacement from {np.count_nonzero(w)} non-zero weights")
        rng = _core.numpy_rng(self.generator)
        yield from rng.choice(len(w), size=self.num_samples, replace=self.replacement, p=w / total).tolist()

    def __len__(self) -> int:
        return self.num_samples


class BatchSampler(Sampler):
    """Groups the indices of ``sampler`` into lists of ``batch_size``.

    Example::

        list(BatchSampler(SequentialSampler(range(10)), batch_size=3, drop_last=False))
        # [[0, 1, 2], [3, 4, 5], [6, 7, 8], [9]]
    """

    def __init__(self, sampler, batch_size: int, drop_last: bool) -> None:
        _check_positive_int("batch_size", batch_size)
        _check_bool("drop_last", drop_last, ValueError)
        self.sampler = sampler
        self.batch_size = batch_size
        self.drop_last = drop_last

    def __iter__(self):
        it = iter(self.sampler)
        if self.drop_last:
            # zip stops at the first short group, which is exactly drop_last.
            for batch in zip(*[it] * self.batch_size):
                yield [*batch]
        else:
            batch = [*itertools.islice(it, self.batch_size)]
            while batch:
                yield batch
                batch = [*itertools.islice(it, self.batch_size)]

    def __len__(self) -> int:
        if self.drop_last:
            return len(self.sampler) // self.batch_size
        return (len(self.sampler) + self.batch_size - 1) // self.batch_size


class _InfiniteConstantSampler(Sampler):
    """What an IterableDataset is "sampled" with: ``None`` forever."""

    def __iter__(self):
        while True:
            yield None
