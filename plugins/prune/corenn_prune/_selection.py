"""Which k entries ``torch.topk`` selects on CPU, ties included, so masks equal PyTorch's bit for bit.

PyTorch's CPU top-k fills a queue of ``(value, index)`` pairs in index order and runs
``std::partial_sort`` (when ``k * 64 <= n``) or ``std::nth_element`` (otherwise) with a
comparator that looks at the values only; among equal values, which ones land in the first
``k`` places is decided by that algorithm's swaps, not by index order. Pruning meets such
ties whenever weights are exactly equal -- most often the zeros a previous pruning round
left behind. Without ties the k smallest (largest) values are one set whatever the
algorithm, and numpy finds it directly; with ties at the k-th value the selection below
replays libstdc++'s algorithms (introselect: median-of-three Hoare partitions, heap
select past the depth limit, insertion sort for the last three or fewer; partial_sort:
heap select), compiled with numba where it is installed.
"""
from __future__ import annotations

import types

import numpy as np

__all__ = ["topk_indices"]


def _adjust_heap(v, ix, first, hole, length, value, value_index):
    top = hole
    second = hole
    while second < (length - 1) // 2:
        second = 2 * (second + 1)
        if v[first + second] < v[first + second - 1]:
            second -= 1
        v[first + hole] = v[first + second]
        ix[first + hole] = ix[first + second]
        hole = second
    if (length & 1) == 0 and second == (length - 2) // 2:
        second = 2 * (second + 1)
        v[first + hole] = v[first + second - 1]
        ix[first + hole] = ix[first + second - 1]
        hole = second - 1
    parent = (hole - 1) // 2
    while hole > top and v[first + parent] < value:
        v[first + hole] = v[first + parent]
        ix[first + hole] = ix[first + parent]
        hole = parent
        parent = (hole - 1) // 2
    v[first + hole] = value
    ix[first + hole] = value_index


def _heap_select(v, ix, first, middle, last):
    length = middle - first
    if length >= 2:
        parent = (length - 2) // 2
        while True:
            _adjust_heap(v, ix, first, parent, length, v[first + parent], ix[first + parent])
            if parent == 0:
                break
            parent -= 1
    for i in range(middle, last):
        if v[i] < v[first]:
            value, value_index = v[i], ix[i]
            v[i] = v[first]
            ix[i] = ix[first]
            _adjust_heap(v, ix, first, 0, length, value, value_index)


def _swap(v, ix, a, b):
    v[a], v[b] = v[b], v[a]
    ix[a], ix[b] = ix[b], ix[a]


def _move_median_to_first(v, ix, result, a, b, c):
    if v[a] < v[b]:
        if v[b] < v[c]:
            _swap(v, ix, result, b)
        elif v[a] < v[c]:
            _swap(v, ix, result, c)
        else:
            _swap(v, ix, result, a)
    elif v[a] < v[c]:
        _swap(v, ix, result, a)
    elif v[b] < v[c]:
        _swap(v, ix, result, c)
    else:
        _swap(v, ix, result, b)


def _unguarded_partition(v, ix, first, last, pivot):
    while True:
        while v[first] < v[pivot]:
            first += 1
        last -= 1
        while v[pivot] < v[last]:
            last -= 1
        if not first < last:
            return first
        _swap(v, ix, first, last)
        first += 1


def _insertion_sort(v, ix, first, last):
    for i in range(first + 1, last):
        value, value_index = v[i], ix[i]
        if value < v[first]:   # goes first: shift [first, i) one place right
            j = i
            while j > first:
                v[j] = v[j - 1]
                ix[j] = ix[j - 1]
                j -= 1
        else:                  # unguarded linear insert: v[first] stops the scan
            j = i
            while value < v[j - 1]:
                v[j] = v[j - 1]
                ix[j] = ix[j - 1]
                j -= 1
        v[j] = value
        ix[j] = value_index


def _select_smallest(v, ix, k):
    """Reorder ``v``/``ix`` as libstdc++ does for PyTorch's top-k with ``value < value``; the first k are chosen."""
    n = len(v)
    if k * 64 <= n:
        _heap_select(v, ix, 0, k, n)   # std::partial_sort; its sort_heap only reorders the chosen k
        return
    first, nth, last = 0, k - 1, n
    if nth == last:
        return
    depth = 0
    size = last - first
    while size > 1:                     # std::__lg(size) * 2
        size >>= 1
        depth += 1
    depth *= 2
    while last - first > 3:
        if depth == 0:
            _heap_select(v, ix, first, nth + 1, last)
            _swap(v, ix, first, nth)
            return
        depth -= 1
        mid = first + (last - first) // 2
        _move_median_to_first(v, ix, first, first + 1, mid, last - 1)
        cut = _unguarded_partition(v, ix, first + 1, last, first)
        if cut <= nth:
            first = cut
        else:
            last = cut
    _insertion_sort(v, ix, first, last)


_HELPERS = (_adjust_heap, _heap_select, _swap, _move_median_to_first, _unguarded_partition, _insertion_sort,
            _select_smallest)
_compiled = None


def _compiled_select():
    """``_select_smallest`` compiled with numba (each helper rebound to its compiled twin), or None without numba."""
    global _compiled
    if _compiled is None:
        try:
            import numba
        except ImportError:
            _compiled = False
        else:
            namespace: dict = {}
            for helper in _HELPERS:   # callees first: each compiled function finds the others in `namespace`
                function = types.FunctionType(helper.__code__, namespace, helper.__name__)
                namespace[helper.__name__] = numba.njit(cache=False, nogil=True)(function)
            _compiled = namespace["_select_smallest"]
    return _compiled or None


# Below this size the Python replay is quick; above it numba (if installed) is worth its compile time.
_COMPILE_ABOVE = 20_000


def topk_indices(values: np.ndarray, k: int, largest: bool) -> np.ndarray:
    """The indices ``torch.topk(values, k, largest=largest)`` returns on CPU, as a set (ascending order).

    ``values`` is 1-D. Equal values are chosen as PyTorch chooses them.

    Example::

        >>> topk_indices(np.zeros(10), 3, largest=False)
        array([6, 7, 8])
    """
    values = np.asarray(values, dtype=np.float64).ravel()
    n = values.size
    if k <= 0:
        return np.zeros(0, dtype=np.int64)
    if k >= n:
        return np.arange(n, dtype=np.int64)
    keys = -values if largest else values   # largest=True compares with `>`: the same as `<` on negated values
    # PyTorch orders NaN after every number for largest=False and before for largest=True: +inf in `keys`.
    keys = np.where(np.isnan(keys), np.inf, keys)
    kth = np.partition(keys, k - 1)[k - 1]
    below = keys < kth
    tied = keys == kth
    if int(below.sum()) + int(tied.sum()) == k:
        return np.flatnonzero(below | tied)   # no choice among equal values: the set is fixed
    queue_values = keys.copy()
    queue_indices = np.arange(n, dtype=np.int64)
    compiled = _compiled_select() if n > _COMPILE_ABOVE else None
    if compiled is not None:
        compiled(queue_values, queue_indices, k)
    else:
        _select_smallest(queue_values, queue_indices, k)
    return np.sort(queue_indices[:k])
