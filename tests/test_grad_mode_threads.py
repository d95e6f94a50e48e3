"""Grad mode is per thread, as in PyTorch: no_grad in one thread leaves the others recording."""
from __future__ import annotations

import gc
import threading

import pytest

import corenn
from corenn.autograd import node


def run_in_thread(target):
    """Run ``target()`` in a new thread; return its result, re-raising what it raised."""
    result = {}

    def body():
        try:
            result["value"] = target()
        except BaseException as error:  # handed to the calling thread
            result["error"] = error

    thread = threading.Thread(target=body)
    thread.start()
    thread.join(timeout=30)
    assert not thread.is_alive()
    if "error" in result:
        raise result["error"]
    return result["value"]


def test_a_thread_in_no_grad_does_not_stop_another_thread_recording():
    x = corenn.ones(3, requires_grad=True)
    inside, release = threading.Event(), threading.Event()
    seen = {}

    def sits_in_no_grad():
        with corenn.no_grad():
            seen["worker before"] = (x * 2).requires_grad
            inside.set()
            assert release.wait(timeout=30)
            seen["worker after"] = (x * 2).requires_grad, corenn.is_grad_enabled()

    worker = threading.Thread(target=sits_in_no_grad)
    worker.start()
    try:
        assert inside.wait(timeout=30)
        # The worker is inside no_grad() right now; this thread still records.
        assert corenn.is_grad_enabled()
        y = x * 2
        assert y.requires_grad and y.grad_fn is not None
        y.sum().backward()
        assert x.grad.tolist() == [2.0, 2.0, 2.0]
        assert x.sum().requires_grad and corenn.tanh(x).requires_grad and (x + x).requires_grad
    finally:
        release.set()
        worker.join(timeout=30)
    assert seen == {"worker before": False, "worker after": (False, False)}


def test_no_grad_in_the_main_thread_does_not_reach_a_worker():
    x = corenn.ones(2, requires_grad=True)
    with corenn.no_grad():
        assert not (x * 2).requires_grad
        # A new thread starts with grad enabled, as in PyTorch, whatever the spawning thread is in.
        assert run_in_thread(lambda: (corenn.is_grad_enabled(), (x * 2).requires_grad)) == (True, True)
        assert not (x * 2).requires_grad
    assert (x * 2).requires_grad


def test_a_new_thread_starts_outside_inference_mode_and_set_grad_enabled():
    x = corenn.ones(2, requires_grad=True)
    with corenn.inference_mode():
        assert corenn.is_inference_mode_enabled()
        assert run_in_thread(lambda: (corenn.is_inference_mode_enabled(), corenn.is_grad_enabled(),
                                      (x * 2).requires_grad)) == (False, True, True)
    previous = corenn.is_grad_enabled()
    corenn.set_grad_enabled(False)  # as a call: takes effect at once, in this thread only
    try:
        assert run_in_thread(corenn.is_grad_enabled)
        assert not (x * 2).requires_grad
    finally:
        corenn.set_grad_enabled(previous)


def test_decorators_switch_the_calling_thread_only():
    x = corenn.ones(2, requires_grad=True)

    @corenn.no_grad()
    def evaluate():
        return (x * 2).requires_grad, corenn.is_grad_enabled()

    @corenn.inference_mode()
    def predict():
        return (x * 2).requires_grad, corenn.is_inference_mode_enabled()

    @corenn.set_grad_enabled(False)
    def frozen():
        return (x * 2).requires_grad

    @corenn.enable_grad()
    def trains():
        return (x * 2).requires_grad

    def worker():
        with corenn.no_grad():
            return evaluate(), predict(), frozen(), trains(), (x * 2).requires_grad

    assert run_in_thread(worker) == ((False, False), (False, True), False, True, False)
    assert evaluate() == (False, False) and predict() == (False, True) and frozen() is False
    assert corenn.is_grad_enabled() and not corenn.is_inference_mode_enabled() and (x * 2).requires_grad


def test_generator_decorated_with_no_grad_interleaves_with_another_thread():
    x = corenn.ones(2, requires_grad=True)

    @corenn.no_grad()
    def gen():
        for _ in range(2):
            yield (x * 2).requires_grad

    items = gen()
    assert next(items) is False
    # Between two items the generator's no_grad is not in force, here or in another thread.
    assert (x * 2).requires_grad and run_in_thread(lambda: (x * 2).requires_grad)
    assert next(items) is False


@pytest.mark.parametrize("switch", [corenn.no_grad, corenn.inference_mode, lambda: corenn.set_grad_enabled(False)])
def test_many_threads_switching_concurrently_keep_their_own_mode(switch):
    x = corenn.ones(2, requires_grad=True)
    barrier = threading.Barrier(4)
    errors = []

    def worker(off: bool):
        try:
            for _ in range(200):
                barrier.wait(timeout=30)
                if off:
                    with switch():
                        assert not (x * 2).requires_grad
                else:
                    assert (x * 2).requires_grad and corenn.is_grad_enabled()
        except BaseException as error:
            errors.append(error)
            barrier.abort()

    threads = [threading.Thread(target=worker, args=(i % 2 == 0,)) for i in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert not errors, errors[0]
    assert corenn.is_grad_enabled() and (x * 2).requires_grad


def test_a_thread_that_ends_inside_no_grad_is_forgotten():
    # The ops' shortcut (no thread has grad mode off) comes back after such a thread ends.
    def leaves_grad_off():
        corenn.set_grad_enabled(False)
        assert not node._grad_on_in_all_threads

    run_in_thread(leaves_grad_off)
    gc.collect()
    with corenn.no_grad():  # the next switch recomputes the shortcut
        pass
    assert node._grad_on_in_all_threads and not node._threads_off
    assert (corenn.ones(1, requires_grad=True) * 2).requires_grad


def test_the_old_module_global_names_read_the_calling_threads_mode():
    with corenn.no_grad():
        assert node.GRAD_ENABLED is False
        assert run_in_thread(lambda: node.GRAD_ENABLED) is True
    with corenn.inference_mode():
        assert node.INFERENCE_MODE is True
    assert node.GRAD_ENABLED is True and node.INFERENCE_MODE is False
