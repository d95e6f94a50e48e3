"""Ops dispatched by ``run1`` / ``run2`` while an op observer watches.

Those fast paths keep a single-output op and only call its kernel through the observers;
what the op returns -- values, dtypes, ``grad_fn``, gradients, errors -- must be what it
returns with no observer.
"""
from __future__ import annotations

import numpy as np
import pytest

import corenn


class Observer:
    def __init__(self):
        self.seen = []

    def op_start(self, op_name, device, arrays):
        self.seen.append(op_name)

    def op_end(self, op_name, device, out):
        pass


def program(x, y):
    a = x * 2.5            # tensor and number
    b = a + y              # two tensors
    c = b.relu()           # one tensor
    d = (c * y).sum()      # a 0-d result
    return a, b, c, d


def run_program(observe):
    x = corenn.tensor([[-1.0, 2.0], [3.0, -4.0]], requires_grad=True)
    y = corenn.tensor([[0.5, -1.5], [2.0, 1.0]])  # no gradient: its edge is None
    observer = Observer()
    if observe:
        with corenn.plugins.observe_ops(observer):
            outputs = program(x, y)
            outputs[-1].backward()
    else:
        outputs = program(x, y)
        outputs[-1].backward()
    return outputs, x.grad, observer.seen


def test_values_nodes_and_gradients_match_an_unobserved_run():
    plain, plain_grad, _ = run_program(observe=False)
    observed, observed_grad, seen = run_program(observe=True)
    assert seen == ["mul", "add", "relu", "mul", "sum"]
    for ours, reference in zip(observed, plain):
        np.testing.assert_array_equal(ours.detach().numpy(), reference.detach().numpy())
        assert ours.dtype == reference.dtype and ours.shape == reference.shape
        assert type(ours.grad_fn).__name__ == type(reference.grad_fn).__name__
        assert ours.requires_grad and isinstance(ours.detach().numpy(), np.ndarray)  # 0-d too: an array
    assert [edge is None for edge in observed[1].grad_fn.next_edges] == [False, True]  # y needs no gradient
    np.testing.assert_array_equal(observed_grad.numpy(), plain_grad.numpy())


def test_no_grad_and_inputs_without_gradient_record_nothing():
    x = corenn.ones(3, requires_grad=True)
    with corenn.plugins.observe_ops(Observer()):
        with corenn.no_grad():
            y = x * 2
        z = corenn.ones(3).relu()
    assert y.grad_fn is None and not y.requires_grad
    assert z.grad_fn is None and not z.requires_grad


def test_errors_read_as_without_an_observer():
    a, b = corenn.ones(2, 3), corenn.ones(4)
    with pytest.raises(RuntimeError) as plain:
        a + b
    with corenn.plugins.observe_ops(Observer()):
        with pytest.raises(RuntimeError) as observed:
            a + b
    assert str(observed.value) == str(plain.value)
