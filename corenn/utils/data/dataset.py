"""Datasets: map-style (``__getitem__`` + ``__len__``) and iterable-style
(``__iter__``), plus the combinators PyTorch users reach for."""
from __future__ import annotations

import bisect
import itertools
import math
import warnings
from collections.abc import Sequence

from . import _core

__all__ = ["Dataset", "IterableDataset", "TensorDataset", "Subset", "ConcatDataset",
           "ChainDataset", "StackDataset", "random_split"]


class Dataset:
    """A map from keys (usually ``0..len-1``) to samples.

    Subclasses implement ``__getitem__`` and usually ``__len__``; they may also
    implement ``__getitems__(indices)`` to load a whole batch in one call::

        class Squares(Dataset):
            def __len__(self): return 10
            def __getitem__(self, i): return i * i
    """

    def __getitem__(self, index):
        raise NotImplementedError(f"{type(self).__name__} must implement __getitem__")

    def __add__(self, other: "Dataset") -> "ConcatDataset":
        return ConcatDataset([self, other])


class IterableDataset(Dataset):
    """A stream of samples: subclasses implement ``__iter__``.

    With ``num_workers > 0`` every worker iterates its own copy; use
    ``get_worker_info()`` inside ``__iter__`` to give each worker its shard::

        class Range(IterableDataset):
            def __init__(self, n): self.n = n
            def __iter__(self):
                info = get_worker_info()
                wid, nw = (0, 1) if info is None else (info.id, info.num_workers)
                return iter(range(wid, self.n, nw))
    """

    def __iter__(self):
        raise NotImplementedError(f"{type(self).__name__} must implement __iter__")

    def __add__(self, other: "Dataset") -> "ChainDataset":
        return ChainDataset([self, other])


def _len0(t) -> int:
    shape = t.shape
    if len(shape) == 0:
        raise ValueError("TensorDataset needs tensors with at least one dimension, got a 0-d tensor")
    return shape[0]


class TensorDataset(Dataset):
    """Samples are rows of equally long tensors: ``ds[i] == (a[i], b[i])``.

    Example::

        ds = TensorDataset(corenn.arange(4.), corenn.tensor([0, 1, 0, 1]))
        x, y = ds[2]
    """

    def __init__(self, *tensors) -> None:
        if not tensors:
            raise ValueError("TensorDataset needs at least one tensor")
        sizes = [_len0(t) for t in tensors]
        if any(s != sizes[0] for s in sizes):
            raise ValueError(f"Size mismatch between tensors: first dimensions are {sizes}")
        self.tensors = tensors

    def __getitem__(self, index):
        return tuple(t[index] for t in self.tensors)

    def __len__(self) -> int:
        return _len0(self.tensors[0])


class StackDataset(Dataset):
    """Zips datasets of equal length: samples are tuples (positional
    arguments) or dicts (keyword arguments).

    Example::

        ds = StackDataset(image=images, label=labels)
        ds[0]  # {'image': images[0], 'label': labels[0]}
    """

    def __init__(self, *args, **kwargs) -> None:
        if args and kwargs:
            raise ValueError("Supported either ``tuple``- (via ``args``) or ``dict``- (via ``kwargs``) "
                             "like input/output, but both types are given.")
        datasets = args or tuple(kwargs.values())
        if not datasets:
            raise ValueError("At least one dataset should be passed")
        lengths = [len(d) for d in datasets]
        if any(n != lengths[0] for n in lengths):
            raise ValueError(f"Size mismatch between datasets: lengths are {lengths}")
        self._length = lengths[0]
        self.datasets = args if args else kwargs

    def __getitem__(self, index):
        if isinstance(self.datasets, dict):
            return {k: d[index] for k, d in self.datasets.items()}
        return tuple(d[index] for d in self.datasets)

    def __getitems__(self, indices: list):
        items = self.datasets.items() if isinstance(self.datasets, dict) else enumerate(self.datasets)
        columns = {}
        for key, d in items:
            getitems = getattr(d, "__getitems__", None)
            col = getitems(indices) if getitems else [d[i] for i in indices]
            if len(col) != len(indices):
                raise ValueError(f"Nested dataset's output size mismatch. Expected {len(indices)}, got {len(col)}")
            columns[key] = col
        if isinstance(self.datasets, dict):
            return [{k: col[j] for k, col in columns.items()} for j in range(len(indices))]
        return [tuple(col[j] for col in columns.values()) for j in range(len(indices))]

    def __len__(self) -> int:
        return self._length


class ConcatDataset(Dataset):
    """Map-style datasets one after the other.

    Example::

        ds = ConcatDataset([range(3), range(10, 12)])
        [ds[i] for i in range(len(ds))]  # [0, 1, 2, 10, 11]
    """

    @staticmethod
    def cumsum(sequence):
        return list(itertools.accumulate(len(e) for e in sequence))

    def __init__(self, datasets) -> None:
        self.datasets = list(datasets)
        if not self.datasets:
            raise ValueError("datasets should not be an empty iterable")
        for d in self.datasets:
            if isinstance(d, IterableDataset):
                raise TypeError("ConcatDataset does not support IterableDataset; use ChainDataset")
        self.cumulative_sizes = self.cumsum(self.datasets)

    def __len__(self) -> int:
        return self.cumulative_sizes[-1]

    def __getitem__(self, idx):
        if idx < 0:
            if -idx > len(self):
                raise IndexError(f"index {idx} is out of range for a ConcatDataset of length {len(self)}")
            idx = len(self) + idx
        which = bisect.bisect_right(self.cumulative_sizes, idx)
        if which == len(self.datasets):
            raise IndexError(f"index {idx} is out of range for a ConcatDataset of length {len(self)}")
        start = self.cumulative_sizes[which - 1] if which > 0 else 0
        return self.datasets[which][idx - start]


class ChainDataset(IterableDataset):
    """Iterable datasets one after the other (lazily, unlike ConcatDataset).

    Example::

        list(ChainDataset([stream_a, stream_b]))
    """

    def __init__(self, datasets) -> None:
        super().__init__()
        self.datasets = datasets

    def __iter__(self):
        for d in self.datasets:
            if not isinstance(d, IterableDataset):
                raise TypeError(f"ChainDataset only supports IterableDataset, got {type(d).__name__}")
            yield from d

    def __len__(self) -> int:
        return sum(len(d) for d in self.datasets)


class Subset(Dataset):
    """The samples of ``dataset`` at ``indices``, in that order.

    Example::

        evens = Subset(range(10), [0, 2, 4])
        evens[1]  # 2
    """

    def __init__(self, dataset, indices: Sequence[int]) -> None:
        self.dataset = dataset
        self.indices = indices

    def __getitem__(self, idx):
        if isinstance(idx, list):
            return self.dataset[[self.indices[i] for i in idx]]
        return self.dataset[self.indices[idx]]

    def __getitems__(self, indices: list):
        getitems = getattr(self.dataset, "__getitems__", None)
        if getitems:
            return getitems([self.indices[i] for i in indices])
        return [self.dataset[self.indices[i]] for i in indices]

    def __len__(self) -> int:
        return len(self.indices)


def random_split(dataset, lengths, generator=None) -> list[Subset]:
    """Split ``dataset`` into non-overlapping random subsets.

    ``lengths`` are sizes summing to ``len(dataset)``, or fractions summing
    to 1 (the remainder after flooring goes one by one to the first subsets,
    as in PyTorch). ``generator`` defaults to ``corenn.default_generator``.

    Example::

        train, val = random_split(ds, [0.8, 0.2], generator=corenn.Generator().manual_seed(0))
    """
    lengths = list(lengths)
    n = len(dataset)
    if math.isclose(sum(lengths), 1) and sum(lengths) <= 1:
        for i, frac in enumerate(lengths):
            if frac < 0 or frac > 1:
                raise ValueError(f"Fraction at index {i} is not between 0 and 1: {frac}")
        counts = [int(math.floor(n * frac)) for frac in lengths]
        for i in range(n - sum(counts)):
            counts[i % len(counts)] += 1
        for i, c in enumerate(counts):
            if c == 0:
                warnings.warn(f"Length of split at index {i} is 0. This might result in an empty dataset.",
                              stacklevel=2)
        lengths = counts
    for i, length in enumerate(lengths):
        if not isinstance(length, int) or length < 0:
            raise ValueError(f"random_split lengths must be non-negative ints or fractions summing to 1; "
                             f"got {length!r} at index {i}")
    if sum(lengths) != n:
        raise ValueError(f"Sum of input lengths ({sum(lengths)}) does not equal the length of the input dataset ({n})!")
    perm = _core.randperm(n, generator)
    return [Subset(dataset, perm[end - length:end])
            for end, length in zip(itertools.accumulate(lengths), lengths)]
