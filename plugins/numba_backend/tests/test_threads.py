"""corenn_numba._threads.split: every work item runs once, errors surface, small calls stay inline, forks work."""
import multiprocessing
import threading

import numba
import pytest

from corenn_numba import _threads


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
