"""Tensor.register_post_accumulate_grad_hook: once per backward, after the leaf's whole gradient is in ``.grad``.

DistributedDataParallel starts all-reducing a bucket from this hook, so "once" and "after the
last part" are what these tests pin down, against PyTorch where it is installed.
"""
from __future__ import annotations

import gc

import numpy as np
import pytest

import corenn
from corenn.autograd import node


def _record(tensor, calls):
    return tensor.register_post_accumulate_grad_hook(lambda t: calls.append(t.grad.tolist()))


def test_a_leaf_used_several_times_gets_one_call_with_its_whole_gradient():
    w = corenn.tensor([1.0, 2.0], requires_grad=True)
    calls = []
    _record(w, calls)
    (w * w + w.sum() * 3).sum().backward()   # three edges into w
    assert calls == [[8.0, 10.0]]
    assert w.grad.tolist() == [8.0, 10.0]


def test_the_hook_sees_the_accumulated_grad_and_runs_every_backward():
    w = corenn.tensor([1.0], requires_grad=True)
    calls = []
    _record(w, calls)
    (w * 2).sum().backward()
    (w * 3).sum().backward()
    assert calls == [[2.0], [5.0]]


def test_matches_pytorch_call_order_and_values():
    torch = pytest.importorskip("torch")
    a_values, b_values = np.array([1.0, -2.0]), np.array([0.5, 3.0])

    def run(lib):
        a = lib.tensor(a_values, requires_grad=True)
        b = lib.tensor(b_values, requires_grad=True)
        seen = []
        a.register_post_accumulate_grad_hook(lambda t: seen.append(("a", t.grad.tolist())))
        b.register_post_accumulate_grad_hook(lambda t: seen.append(("b", t.grad.tolist())))
        ((a * b).exp().sum() + (b * b).sum()).backward()
        return seen

    assert run(corenn) == run(torch)


def test_a_leaf_that_gets_no_gradient_gets_no_call_and_autograd_grad_runs_none():
    used = corenn.tensor([1.0], requires_grad=True)
    unused = corenn.tensor([1.0], requires_grad=True)
    calls = []
    _record(used, calls)
    _record(unused, calls)
    (used * 2).sum().backward()
    assert calls == [[2.0]]
    corenn.autograd.grad((used * 2).sum(), [used])
    assert calls == [[2.0]]


def test_a_part_that_is_none_still_counts_so_the_hook_runs():
    class FirstOnly(corenn.autograd.Function):
        @staticmethod
        def forward(ctx, x, y):
            return x + y

        @staticmethod
        def backward(ctx, grad):
            return grad, None

    w = corenn.tensor([1.0], requires_grad=True)
    calls = []
    _record(w, calls)
    (FirstOnly.apply(w * 2, w) + w).sum().backward()
    assert calls == [[3.0]]


def test_removing_the_hook_stops_calls_and_the_counting_pass():
    w = corenn.tensor([1.0], requires_grad=True)
    calls = []
    handle = _record(w, calls)
    assert id(w) in node.post_accumulate_hooked
    handle.remove()
    (w * 2).sum().backward()
    assert calls == [] and id(w) not in node.post_accumulate_hooked


def test_the_hook_does_not_keep_its_tensor_alive():
    w = corenn.tensor([1.0], requires_grad=True)
    _record(w, [])
    key = id(w)
    del w
    gc.collect()
    assert key not in node.post_accumulate_hooked


def test_errors_name_what_is_wrong():
    with pytest.raises(RuntimeError, match="doesn't require gradient"):
        corenn.ones(1).register_post_accumulate_grad_hook(lambda t: None)
    w = corenn.ones(1, requires_grad=True)
    with pytest.raises(RuntimeError, match="non-leaf"):
        (w * 2).register_post_accumulate_grad_hook(lambda t: None)
    w.register_post_accumulate_grad_hook(lambda t: t)
    with pytest.raises(RuntimeError, match="must return None"):
        (w * 2).sum().backward()
