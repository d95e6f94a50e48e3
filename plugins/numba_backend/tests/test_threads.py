"""corenn_numba._threads.split: every work item runs once, errors surface, small calls stay inline, forks work;
the helpers' spin-wait, and numpy's OpenBLAS held to one thread while they work (corenn_numba._blas)."""
import multiprocessing
import threading
import time

import numba
import numpy as np
import pytest

from corenn_numba import _blas, _threads


@pytest.fixture
def two_threads(monkeypatch):
    monkeypatch.setattr(_threads, "thread_count", lambda: 2)
    monkeypatch.setattr(_threads, "MIN_WORK", 0)


def test_every_item_runs_exactly_once_on_several_threads(two_threads):
    threads = set()

    def kernel(first, last, scale):
        threads.add(threading.get_ident())
        return [item * scale for item in range(first, last)]

    results = _threads.split(kernel, 37, 1.0, 10)
    assert len(results) == 2 * _threads.SLICES_PER_THREAD
    assert [value for part in results for value in part] == [item * 10 for item in range(37)]
    assert len(threads) <= 2


def test_fewer_items_than_slices(two_threads):
    results = _threads.split(lambda first, last: (first, last), 3, 1.0)
    assert results == [(0, 1), (1, 2), (2, 3)]


def test_small_work_runs_inline_on_the_calling_thread(monkeypatch):
    monkeypatch.setattr(_threads, "thread_count", lambda: 2)
    calls = []
    results = _threads.split(lambda first, last: calls.append((first, last, threading.get_ident())) or "done",
                             50, _threads.MIN_WORK - 1)
    assert results == ["done"]
    assert calls == [(0, 50, threading.get_ident())]


def test_an_error_in_one_slice_is_raised_after_the_others_finish(two_threads):
    finished = []

    def kernel(first, last):
        if first == 0:
            raise ValueError("slice 0 failed")
        finished.append(first)

    with pytest.raises(ValueError, match="slice 0 failed"):
        _threads.split(kernel, 8, 1.0)
    assert sorted(finished) == list(range(1, 8))


def test_thread_count_follows_numba():
    before = numba.get_num_threads()
    try:
        numba.set_num_threads(1)
        assert _threads.thread_count() == 1
    finally:
        numba.set_num_threads(before)


def _split_in_child(queue):
    _threads.MIN_WORK = 0
    _threads.thread_count = lambda: 2
    queue.put(_threads.split(lambda first, last: last - first, 10, 1.0))


@pytest.mark.skipif("fork" not in multiprocessing.get_all_start_methods(), reason="needs the fork start method")
def test_a_forked_child_gets_its_own_pool(two_threads):
    _threads.split(lambda first, last: None, 4, 1.0)  # the parent's pool exists before the fork
    context = multiprocessing.get_context("fork")
    queue = context.Queue()
    child = context.Process(target=_split_in_child, args=(queue,))
    child.start()
    child.join(timeout=60)
    if child.is_alive():
        child.kill()
    assert child.exitcode == 0, "the child hung or failed using the pool inherited from its parent"
    assert sum(queue.get(timeout=5)) == 10


def test_spin_wait_returns_the_new_value_or_gives_up_after_its_turns():
    from corenn_numba import _spin_jit
    counters = np.zeros(16, dtype=np.int64)
    assert _spin_jit.wait_while_equal(counters, 3, 0, 50) == 0  # unchanged: gives up
    counters[3] = 7
    assert _spin_jit.wait_while_equal(counters, 3, 0, 10 ** 9) == 7
    changer = threading.Timer(0.01, counters.__setitem__, (5, 2))
    changer.start()
    assert _spin_jit.wait_while_equal(counters, 5, 0, 10 ** 9) == 2  # another thread's write is seen
    changer.join()
    with pytest.raises(ValueError, match=r"wait_while_equal\(\): argument 'index'"):
        _spin_jit.wait_while_equal(counters, 16, 0, 1)
    with pytest.raises(TypeError, match=r"wait_while_equal\(\): argument 'counters' must be of dtype int64"):
        _spin_jit.wait_while_equal(counters.astype(np.int32), 0, 0, 1)


def test_a_helper_reports_its_share_done_then_watches_for_the_next_task():
    from corenn_numba import _spin_jit
    running, asleep, published = 8, 16, 0
    counters = np.zeros(24, dtype=np.int64)
    counters[running] = 2
    # Caller awake: one off the count, then the wait for a new task (none comes: gives up, the old value).
    assert _spin_jit.finish_and_wait(counters, running, asleep, published, 0, 50) == 0
    assert counters[running] == 1
    counters[published] = 4
    assert _spin_jit.finish_and_wait(counters, running, asleep, published, 3, 10 ** 9) == 4
    assert counters[running] == 0
    # Caller asleep: -1 at once (the helper must wake it), the count taken down all the same.
    counters[running] = 1
    assert _spin_jit.announce_sleep(counters, asleep, running) == 1 and counters[asleep] == 1
    assert _spin_jit.finish_and_wait(counters, running, asleep, published, 4, 10 ** 9) == -1
    assert counters[running] == 0 and _spin_jit.announce_sleep(counters, asleep, running) == 0
    with pytest.raises(ValueError, match=r"finish_and_wait\(\): argument 'asleep'"):
        _spin_jit.finish_and_wait(counters, running, 24, published, 0, 1)


def test_a_caller_that_slept_waiting_for_a_slow_helper_is_woken(two_threads, monkeypatch):
    # Slices far longer than the caller's spin: it sleeps on the condition and the helper wakes it.
    for name in ("_pool", "_pool_key"):  # a pool made under the shorter spin below, the test's alone
        monkeypatch.setattr(_threads, name, None)
    monkeypatch.setattr(_threads, "SPIN_SECONDS", 1e-5)
    threads, totals = set(), []

    def kernel(first, last):
        threads.add(threading.current_thread().name)
        time.sleep(0.02)
        return last - first

    def calls():
        for _ in range(3):
            totals.append(sum(_threads.split(kernel, 8, 1e9)))

    caller = threading.Thread(target=calls, daemon=True)
    caller.start()
    caller.join(timeout=30)
    assert not caller.is_alive(), "a lost wake-up: the caller still sleeps after its helper finished"
    assert totals == [8, 8, 8] and len(threads) == 2


def test_calls_from_two_threads_at_once_each_get_every_item(two_threads):
    outcomes = []

    def kernel(first, last):
        time.sleep(0.001)
        return list(range(first, last))

    def call():
        outcomes.append([item for part in _threads.split(kernel, 40, 1.0) for item in part])

    callers = [threading.Thread(target=call) for _ in range(3)]
    for caller in callers:
        caller.start()
    for caller in callers:
        caller.join(timeout=60)
    assert outcomes == [list(range(40))] * 3


def _openblas_threads():
    libraries = _blas._find()
    return [get() for get, _ in libraries]


def _until_released():
    deadline = time.monotonic() + 10
    while _blas.held() and time.monotonic() < deadline:  # the helpers spin a moment, then sleep
        time.sleep(0.01)
    return not _blas.held()


@pytest.mark.skipif(not _blas.wanted() or not _openblas_threads(), reason="needs Linux and numpy on OpenBLAS")
def test_openblas_runs_on_one_thread_while_the_helpers_work_and_gets_its_threads_back(two_threads):
    assert _until_released()  # an earlier test's kernels may have left the helpers spinning
    before = _openblas_threads()
    seen, untouched = [], []
    _threads.split(lambda first, last: untouched.append(_openblas_threads()), 8, 1.0)  # the dense layer's calls
    assert untouched and all(counts == before for counts in untouched) and not _blas.held()
    _threads.split(lambda first, last: seen.append(_openblas_threads()), 8, 1.0, hold_blas=True)  # conv's
    assert all(counts == [1] * len(before) for counts in seen)
    assert _until_released()
    assert _openblas_threads() == before


def test_openblas_is_left_alone_with_corenn_numba_blas_keep(two_threads, monkeypatch):
    assert _until_released()
    monkeypatch.setenv(_blas.ENV, "keep")
    before = _openblas_threads()
    seen = []
    _threads.split(lambda first, last: seen.append(_openblas_threads()), 8, 1.0, hold_blas=True)
    assert seen and all(counts == before for counts in seen)
    assert not _blas.held()
