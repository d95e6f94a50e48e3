"""Running a compiled kernel's work items on several threads, without numba's parallel loops.

A kernel that pays for more than one core is written as a serial ``nogil`` loop over a
range of work items, ``kernel(first, last, *args)``; ``split`` cuts the range into slices
that the calling thread and a small pool of Python threads take in turn (a shared ticket,
so a thread slowed by another process takes fewer slices).

Why not ``numba.prange``: its OpenMP team's idle threads spin, and so do OpenBLAS's after
each matmul. A training step alternates the two (a compiled conv, then numpy's matmul
for a linear layer), and on the 2-core development machine each runtime's spinning
threads starved the other's workers: the CNN step's conv layers, forward and backward,
measured 2-10x slower than either alone. The pool here waits on a queue, asleep, and is
independent of numba's threading layer, so it is also safe to call from several Python
threads at once.
"""
from __future__ import annotations

import itertools
import os
import threading
from concurrent.futures import ThreadPoolExecutor

import numpy as np

#: Below this much work (in multiply-adds or element operations) a call runs on the calling
#: thread alone: waking the pool costs some tens of microseconds.
MIN_WORK = 1 << 22
#: Slices per thread: enough that an unequal share evens out, few enough that each slice is long.
SLICES_PER_THREAD = 4

_pool: ThreadPoolExecutor | None = None
_pool_key = None
_pool_lock = threading.Lock()


def thread_count() -> int:
    """Threads to use: numba's setting (``NUMBA_NUM_THREADS``, ``numba.set_num_threads``)."""
    import numba
    return numba.get_num_threads()


def _helpers(count: int) -> ThreadPoolExecutor:
    """The pool of helper threads, made again after a fork (its threads do not exist in the child)."""
    global _pool, _pool_key
    key = (os.getpid(), count)
    with _pool_lock:
        if _pool_key != key:
            if _pool is not None and _pool_key[0] == os.getpid():
                _pool.shutdown(wait=False)
            _pool = ThreadPoolExecutor(max_workers=count, thread_name_prefix="corenn-numba")
            _pool_key = key
        return _pool


def split(kernel, items: int, work: float, *args) -> list:
    """``kernel(first, last, *args)`` over ``range(items)``, in slices on up to ``thread_count()`` threads.

    ``work`` is the call's rough cost; under ``MIN_WORK`` everything runs on the calling thread.
    Returns what each slice returned (a kernel that reduces returns its partial result). An
    exception in any slice is raised here, after the other slices have finished.
    """
    threads = min(thread_count(), items)
    if threads <= 1 or work < MIN_WORK:
        return [kernel(0, items, *args)]
    slices = min(items, threads * SLICES_PER_THREAD)
    bounds = [items * k // slices for k in range(slices + 1)]
    results = [None] * slices
    tickets = itertools.count()  # next() on it is atomic under the GIL: each slice is taken once

    def drain():
        for k in iter(tickets.__next__, None):
            if k >= slices:
                return
            results[k] = kernel(bounds[k], bounds[k + 1], *args)

    pool = _helpers(threads - 1)
    helpers = [pool.submit(drain) for _ in range(threads - 1)]
    try:
        drain()
    finally:
        for helper in helpers:
            helper.result()
    return results


def split_sum(kernel, items: int, work: float, *args):
    """``split`` for a kernel that returns a partial sum (an array) per slice: their total."""
    partials = split(kernel, items, work, *args)
    return partials[0] if len(partials) == 1 else np.sum(partials, axis=0)
