"""Running a compiled kernel's work items on several threads, without numba's parallel loops.

A kernel that pays for more than one core is written as a serial ``nogil`` loop over a
range of work items, ``kernel(first, last, *args)``; ``split`` cuts the range into slices
that the calling thread and a small pool of helper threads take in turn (a shared ticket,
so a thread slowed by another process takes fewer slices).

Why not ``numba.prange``: its OpenMP team's idle threads spin, and so do OpenBLAS's after
each matmul. A training step alternates the two (a compiled conv, then numpy's matmul
for a linear layer), and on the 2-core development machine each runtime's spinning
threads starved the other's workers: the CNN step's conv layers, forward and backward,
measured 2-10x slower than either alone.

The helpers here wait in two stages. For ``SPIN_SECONDS`` after a task they watch a counter
without the GIL (``corenn_numba._spin_jit``: an atomic read, ``pause`` and ``sched_yield``
each turn, so any other thread that wants the core gets it), because the next kernel of a
training step usually comes within that time and a thread woken from sleep starts late (tens
of microseconds on virtual machines). Then they sleep on a condition. Once a convolution has
used them, numpy's OpenBLAS runs on one thread until they sleep (``corenn_numba._blas``: its
spinning worker would otherwise hold the helpers' core). The calling thread waits for the
helpers' last slices the same way; a helper reports its share done from compiled code, after it
has given up the GIL (``_spin_jit.finish_and_wait``), so that the caller never waits for the
GIL on its way out: on the demo CNN's second conv that wait had taken 30 of 380 microseconds. One
``split`` at a time uses the pool; a call from another Python thread meanwhile runs its slices on
its own thread.
"""
from __future__ import annotations

import itertools
import os
import threading
import time

import numpy as np

from corenn_numba import _blas
from corenn_numba._base import LazyModule

_spin = LazyModule("corenn_numba._spin_jit")  # numba, loaded when the first pool starts (kernels have run by then)

#: Below this much work (in multiply-adds or element operations) a call runs on the calling
#: thread alone: waking the pool costs some tens of microseconds.
MIN_WORK = 1 << 22
#: Slices per thread: enough that an unequal share evens out, few enough that each slice is long.
SLICES_PER_THREAD = 4

#: How long an idle helper watches for the next task before it sleeps (``CORENN_NUMBA_SPIN``, seconds; 0: sleep
#: at once); the caller watches as long for the helpers' last slices.
SPIN_SECONDS = float(os.environ.get("CORENN_NUMBA_SPIN", "0.002"))

_pool: "_Pool | None" = None
_pool_key = None
_pool_lock = threading.Lock()

# Where the pool's counters live in its int64 array, each on its own cache line: published tasks, helpers still
# at the current one, and whether the caller sleeps waiting for them (see _spin_jit.finish_and_wait).
_PUBLISHED, _RUNNING, _ASLEEP = 0, 8, 16


def thread_count() -> int:
    """Threads to use: numba's setting (``NUMBA_NUM_THREADS``, ``numba.set_num_threads``)."""
    import numba
    return numba.get_num_threads()


class _Pool:
    """``count`` helper threads that run whatever task the calling thread publishes, together with it."""

    def __init__(self, count: int):
        self._wait = _spin.wait_while_equal
        self.counters = np.zeros(24, dtype=np.int64)
        self.spins = _spins_for(self._wait, self.counters, SPIN_SECONDS)
        self.task = None
        self.errors: list = []
        self.busy = threading.Lock()            # one split at a time
        self.published = threading.Condition()  # helpers asleep wait here for a task
        self.finished = threading.Condition()   # the caller asleep waits here for the helpers
        self.threads = [threading.Thread(target=self._serve, name=f"corenn-numba_{k}", daemon=True)
                        for k in range(count)]
        for thread in self.threads:
            thread.start()

    def _serve(self) -> None:
        counters, seen = self.counters, 0
        finish_and_wait = _spin.finish_and_wait
        published = self._wait(counters, _PUBLISHED, seen, self.spins)
        while True:
            if published == seen:
                with self.published:
                    if counters[_PUBLISHED] == seen:
                        _blas.give_back()  # the helpers are going to sleep: OpenBLAS may have its threads
                    while counters[_PUBLISHED] == seen:
                        self.published.wait()
                    published = int(counters[_PUBLISHED])
            seen = published
            try:
                self.task()
            except BaseException as error:  # raised by the caller, once every slice is done
                self.errors.append(error)
            # Done: off the count without the GIL, then watch for the next task.
            published = finish_and_wait(counters, _RUNNING, _ASLEEP, _PUBLISHED, seen, self.spins)
            if published < 0:  # the caller sleeps: wake it
                with self.finished:
                    self.finished.notify()
                published = self._wait(counters, _PUBLISHED, seen, self.spins)

    def run(self, drain, hold_blas: bool) -> None:
        """``drain()`` on the calling thread and on every helper; returns when all have returned."""
        counters = self.counters
        self.task, self.errors = drain, []
        with self.published:
            if hold_blas:
                _blas.take()  # see corenn_numba._blas: a spinning OpenBLAS worker would hold the helpers' core
            counters[_RUNNING] = len(self.threads)
            counters[_PUBLISHED] += 1
            self.published.notify_all()
        try:
            drain()
        finally:
            running = int(counters[_RUNNING])
            while running:  # watch the helpers finish, then sleep if they take long
                now = self._wait(counters, _RUNNING, running, self.spins)
                if now == running:
                    with self.finished:
                        while _spin.announce_sleep(counters, _ASLEEP, _RUNNING):
                            self.finished.wait()
                        counters[_ASLEEP] = 0
                    break
                running = now
        if self.errors:
            raise self.errors[0]


def _spins_for(wait, counters, seconds: float) -> int:
    """How many turns of ``wait``'s loop take about ``seconds`` on this machine (each reads and yields once)."""
    trial = 2000
    wait(counters, 15, 0, 1)  # compiled (or loaded from the cache) first
    start = time.perf_counter()
    wait(counters, 15, 0, trial)
    per_turn = max((time.perf_counter() - start) / trial, 1e-8)
    return max(1, int(seconds / per_turn))


def _helpers(count: int) -> "_Pool":
    """The pool of helper threads, made again after a fork (its threads do not exist in the child)."""
    global _pool, _pool_key
    key = (os.getpid(), count)
    with _pool_lock:
        if _pool_key != key:
            _pool = _Pool(count)  # a pool of another size stays behind, asleep (its threads are daemons)
            _pool_key = key
        return _pool


def split(kernel, items: int, work: float, *args, hold_blas: bool = False) -> list:
    """``kernel(first, last, *args)`` over ``range(items)``, in slices on up to ``thread_count()`` threads.

    With ``hold_blas``, numpy's OpenBLAS runs on one thread from then on, until the helpers go to
    sleep (``corenn_numba._blas``): for kernels that share a training step with small BLAS products
    (convolutions), not for the dense layer's products, which take the place of larger ones.

    ``work`` is the call's rough cost; under ``MIN_WORK`` everything runs on the calling thread.
    Returns what each slice returned (a kernel that reduces returns its partial result). An
    exception in any slice is raised here, after the other slices have finished.
    """
    threads = min(thread_count(), items)
    if threads <= 1 or work < MIN_WORK:
        return [kernel(0, items, *args)]
    if hasattr(kernel, "check"):  # an entry point (_checks.entry): its arguments checked once, for the whole range
        kernel.check(0, items, *args)
        kernel = kernel.compiled  # the slices' ranges lie inside it; a thread holds the GIL less per slice
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
    if not pool.busy.acquire(blocking=False):  # another thread's call has the pool
        for k in range(slices):
            results[k] = kernel(bounds[k], bounds[k + 1], *args)
        return results
    try:
        pool.run(drain, hold_blas)
    finally:
        pool.busy.release()
    return results


def split_sum(kernel, items: int, work: float, *args, hold_blas: bool = False):
    """``split`` for a kernel that returns a partial sum (an array) per slice: their total."""
    partials = split(kernel, items, work, *args, hold_blas=hold_blas)
    return partials[0] if len(partials) == 1 else np.sum(partials, axis=0)
