"""Printed forms, checked against PyTorch's repr of the same values (``torch.`` read as ``corenn.``)."""
from __future__ import annotations

import numpy as np
import pytest

import corenn

# Each expression is evaluated with ``lib`` bound to corenn and to torch.
EXPRESSIONS = [
    "lib.tensor(3)", "lib.tensor([1, 2])", "lib.zeros([2, 2])", "lib.tensor([1.5, -2.25, 3.0])",
    "lib.tensor([1., 2., 3.])", "lib.tensor([1e-5, 1.0])", "lib.tensor([1e10, 1.0])", "lib.tensor([123456789.0])",
    "lib.tensor([0.1, 100000.0])", "lib.tensor([True, False])", "lib.tensor(2.5)", "lib.tensor(True)",
    "lib.tensor(1e20)", "lib.tensor([])", "lib.zeros(0, 3)", "lib.tensor([[]])", "lib.zeros(2, 0, dtype=lib.int64)",
    "lib.tensor([], dtype=lib.float64)", "lib.tensor([], dtype=lib.int32)",
    "lib.arange(2000.)", "lib.arange(2000).reshape(40, 50)", "lib.arange(1001.)", "lib.ones(3, 1000)",
    "lib.arange(3000).reshape(3, 1000)", "lib.arange(100.) / 7", "lib.linspace(0, 1, 50)",
    "lib.arange(40.).reshape(2, 20) * 1.5", "lib.arange(20.) * 1.5 + 0.25", "lib.arange(30.) * 1e6",
    "lib.arange(10.) * 1e8", "lib.arange(10.) * 1e-5", "lib.arange(16.).reshape(2, 2, 2, 2)",
    "lib.arange(30.).reshape(2, 3, 5) * 1000.5", "lib.arange(25.).reshape(5, 5) / 3 - 2",
    "lib.tensor([1.5, 2.0], requires_grad=True)", "lib.tensor([1, 2], dtype=lib.int32)",
    "lib.tensor([1.5, 2.0], dtype=lib.float64)", "lib.tensor([1.5, 2.0], dtype=lib.float16)",
    "lib.tensor([1.0, 2.0], dtype=lib.float16) * 1000", "lib.tensor([1, 2], dtype=lib.uint8)",
    "lib.zeros(3, dtype=lib.int8)", "lib.tensor([float('nan'), float('inf'), -float('inf'), 1.5])",
    "lib.tensor([float('nan'), 1.0])", "lib.tensor([-0.0, 0.0])", "lib.tensor([[1.5, 2.0], [3.0, 4.0]])",
    "lib.ones(2, 3, 4)", "lib.tensor([[1e-8, 1.0], [2.0, 3.0]])", "lib.tensor([0.0001, 0.001])",
    "lib.tensor([1.0, 2.0], dtype=lib.float64, requires_grad=True)", "lib.arange(12).reshape(3, 4) - 5",
    "lib.tensor([100000, -3])", "lib.tensor([12345.678, 1.0])", "lib.tensor([[0.1234567, 123.45], [1e-3, 1.0]])",
    "lib.tensor([[1, -2], [300, 4]])", "lib.tensor([-1.5e-10, 1.0e10])", "lib.tensor([[True, False], [False, True]])",
    "lib.tensor([12345678.5])", "lib.tensor([0.5] * 25, requires_grad=True) * 2",
    "lib.tensor([1e-5, 2.], requires_grad=True) * 1000",
]

# grad_fn names of common ops (x requires grad).
GRAD_FNS = [
    "x * 2", "x + 2", "x - 1", "x / 2", "x ** 2", "-x", "x.sum()", "x.mean()", "x.exp()", "x[0]", "x.reshape(2, 1)",
    "x.relu()", "x.sigmoid()", "x.tanh()", "x.max()", "x.unsqueeze(0)", "x.view(2, 1)", "lib.cat([x, x])",
    "lib.stack([x, x])", "x.abs()", "x.clamp(0, 1)", "x.sqrt()", "x.log()", "x.mul(lib.tensor([1., 2.]))",
    "lib.where(lib.tensor([True, False]), x, 0.)", "x.pow(lib.tensor([1., 2.]))", "x.cumsum(0)", "x.prod()",
    "x.std()", "x.var()", "x.norm()", "x.to(lib.float64)", "x.clone()", "x[[0, 0]]", "x.softmax(-1)",
    "x.log_softmax(-1)", "m.t()", "m.transpose(0, 1)", "m.permute(1, 0)", "m.expand(3, 2)", "m.sum(0)",
    "m.max(1)[0]", "m.flatten()", "m.squeeze()", "m @ lib.tensor([[1.], [2.]])",
]


def _evaluate(expression, lib):
    x = lib.tensor([1., 2.], requires_grad=True)
    m = lib.tensor([[1., 2.]], requires_grad=True)
    return eval(expression, {"lib": lib, "x": x, "m": m})


def _torch_repr(value):
    return repr(value).replace("torch.", "corenn.")


@pytest.mark.torch
@pytest.mark.parametrize("expression", EXPRESSIONS)
def test_repr_matches_torch(expression, torch):
    assert repr(_evaluate(expression, corenn)) == _torch_repr(_evaluate(expression, torch))


@pytest.mark.torch
@pytest.mark.parametrize("expression", GRAD_FNS)
def test_grad_fn_repr_matches_torch(expression, torch):
    ours, theirs = _evaluate(expression, corenn), _evaluate(expression, torch)
    assert repr(ours) == _torch_repr(theirs)
    assert ours.grad_fn.name() == theirs.grad_fn.name()


@pytest.mark.torch
def test_random_values_print_like_torch(torch):
    values = np.random.default_rng(0).standard_normal((3, 40)).astype(np.float32)
    assert repr(corenn.from_numpy(values)) == _torch_repr(torch.from_numpy(values))


@pytest.mark.torch
@pytest.mark.parametrize("options", [dict(sci_mode=True), dict(sci_mode=False), dict(precision=2),
                                     dict(threshold=5, edgeitems=2), dict(linewidth=40)])
@pytest.mark.parametrize("expression", ["lib.tensor([1.5, 2.25, 3.125, 100.0, 7.0, 8.0, 9.0, 10.0])",
                                        "lib.arange(12.).reshape(3, 4) / 7", "lib.tensor([1e-5, 1.0, 2.5])",
                                        "lib.tensor([1e10, 1.0])"])
def test_print_options_match_torch(options, expression, torch):
    try:
        corenn.set_printoptions(**options)
        torch.set_printoptions(**options)
        assert repr(_evaluate(expression, corenn)) == _torch_repr(_evaluate(expression, torch))
    finally:
        corenn.set_printoptions(profile="default")
        torch.set_printoptions(profile="default")


def test_seed_examples_print_as_documented():
    """Seed 004 section 1's printed values."""
    assert repr(corenn.tensor(3)) == "tensor(3)"
    assert repr(corenn.tensor([1, 2])) == "tensor([1, 2])"
    assert repr(corenn.zeros([2, 2])) == "tensor([[0., 0.],\n        [0., 0.]])"
    x = corenn.tensor(1.0, requires_grad=True)
    assert str(corenn.autograd.grad(-(x * x), x)[0]) == "tensor(-2.)"


def test_summarised_print_shows_edges_only():
    text = repr(corenn.arange(5000))
    assert text == "tensor([   0,    1,    2,  ..., 4997, 4998, 4999])"


def test_str_equals_repr_and_format_of_0d():
    t = corenn.tensor(2.5)
    assert str(t) == repr(t)
    assert f"{t:.2f}" == "2.50"
    assert repr(corenn.Size([2, 3])) == "corenn.Size([2, 3])"
