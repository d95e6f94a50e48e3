"""Port of the PyTorch tutorial "Learning PyTorch with Examples" (``beginner/pytorch_with_examples``):
fitting ``sin(x)`` with a third-order polynomial four ways.

Each variant is written once against ``lib`` and run under PyTorch and corenn from the same start:
- tensors and autograd, updating ``a, b, c, d`` by hand under ``torch.no_grad()`` with ``a.grad = None``;
- a custom ``torch.autograd.Function`` (``LegendrePolynomial3``: ``ctx.save_for_backward``,
  ``ctx.saved_tensors``, called through ``.apply``);
- ``nn.Sequential(nn.Linear(3, 1), nn.Flatten(0, 1))`` on ``x.unsqueeze(-1).pow(p)`` with
  ``nn.MSELoss(reduction='sum')`` and ``optim.RMSprop``;
- a custom ``nn.Module`` holding four ``nn.Parameter(torch.randn(()))`` with its ``string()`` summary,
  trained by ``optim.SGD``.
The tutorial runs 2000 steps on 2000 points; these run a few steps on 200 points.
"""
from __future__ import annotations

import math

import numpy as np
import pytest

import corenn
from _port import assert_same_run, assert_same_state, numpy_state, same_weights

pytestmark = pytest.mark.torch


def _data(lib):
    x = lib.linspace(-math.pi, math.pi, 200)
    y = lib.sin(x)
    return x, y


def fit_with_autograd(lib, start, steps=6, learning_rate=1e-6):
    x, y = _data(lib)
    a, b, c, d = (lib.tensor(v, requires_grad=True) for v in start)
    losses = []
    for t in range(steps):
        y_pred = a + b * x + c * x ** 2 + d * x ** 3
        loss = (y_pred - y).pow(2).sum()
        losses.append(loss.item())
        loss.backward()
        with lib.no_grad():
            a -= learning_rate * a.grad
            b -= learning_rate * b.grad
            c -= learning_rate * c.grad
            d -= learning_rate * d.grad
            a.grad = None
            b.grad = None
            c.grad = None
            d.grad = None
    return losses, [a.item(), b.item(), c.item(), d.item()]


def legendre_polynomial3(lib):
    class LegendrePolynomial3(lib.autograd.Function):
        @staticmethod
        def forward(ctx, input):
            ctx.save_for_backward(input)
            return 0.5 * (5 * input ** 3 - 3 * input)

        @staticmethod
        def backward(ctx, grad_output):
            input, = ctx.saved_tensors
            return grad_output * 1.5 * (5 * input ** 2 - 1)

    return LegendrePolynomial3


def fit_with_custom_function(lib, steps=6, learning_rate=5e-6):
    x, y = _data(lib)
    a = lib.full((), 0.0, requires_grad=True)
    b = lib.full((), -1.0, requires_grad=True)
    c = lib.full((), 0.0, requires_grad=True)
    d = lib.full((), 0.3, requires_grad=True)
    P3 = legendre_polynomial3(lib).apply
    losses = []
    for t in range(steps):
        y_pred = a + b * P3(c + d * x)
        loss = (y_pred - y).pow(2).sum()
        losses.append(loss.item())
        loss.backward()
        with lib.no_grad():
            for p in (a, b, c, d):
                p -= learning_rate * p.grad
                p.grad = None
    return losses, [a.item(), b.item(), c.item(), d.item()]


def build_sequential(lib):
    return lib.nn.Sequential(lib.nn.Linear(3, 1), lib.nn.Flatten(0, 1))


def fit_sequential(lib, model, steps=6, learning_rate=1e-3):
    x, y = _data(lib)
    p = lib.tensor([1, 2, 3])
    xx = x.unsqueeze(-1).pow(p)
    loss_fn = lib.nn.MSELoss(reduction="sum")
    optimizer = lib.optim.RMSprop(model.parameters(), lr=learning_rate)
    losses = []
    for t in range(steps):
        y_pred = model(xx)
        loss = loss_fn(y_pred, y)
        losses.append(loss.item())
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    linear_layer = model[0]
    return losses, (f"Result: y = {linear_layer.bias.item():.4f} + {linear_layer.weight[:, 0].item():.4f} x + "
                    f"{linear_layer.weight[:, 1].item():.4f} x^2 + {linear_layer.weight[:, 2].item():.4f} x^3")


def build_polynomial3(lib):
    class Polynomial3(lib.nn.Module):
        def __init__(self):
            super().__init__()
            self.a = lib.nn.Parameter(lib.randn(()))
            self.b = lib.nn.Parameter(lib.randn(()))
            self.c = lib.nn.Parameter(lib.randn(()))
            self.d = lib.nn.Parameter(lib.randn(()))

        def forward(self, x):
            return self.a + self.b * x + self.c * x ** 2 + self.d * x ** 3

        def string(self):
            return f"y = {self.a.item()} + {self.b.item()} x + {self.c.item()} x^2 + {self.d.item()} x^3"

    return Polynomial3()


def fit_module(lib, model, steps=6):
    x, y = _data(lib)
    criterion = lib.nn.MSELoss(reduction="sum")
    optimizer = lib.optim.SGD(model.parameters(), lr=1e-6)
    losses = []
    for t in range(steps):
        y_pred = model(x)
        loss = criterion(y_pred, y)
        losses.append(loss.item())
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    return losses


def test_polynomial_with_tensors_and_autograd(torch):
    start = np.random.default_rng(0).standard_normal(4).astype(np.float32).tolist()
    their_losses, their_coefficients = fit_with_autograd(torch, start)
    our_losses, our_coefficients = fit_with_autograd(corenn, start)
    assert_same_run(our_losses, their_losses)
    assert_same_run(our_coefficients, their_coefficients)
    assert their_coefficients != start


def test_polynomial_with_a_custom_autograd_function(torch):
    their_losses, their_coefficients = fit_with_custom_function(torch)
    our_losses, our_coefficients = fit_with_custom_function(corenn)
    assert_same_run(our_losses, their_losses)
    assert_same_run(our_coefficients, their_coefficients)
    assert their_losses[-1] < their_losses[0]


def test_polynomial_with_nn_sequential_and_rmsprop(torch):
    theirs, ours = same_weights(torch, build_sequential)
    start = numpy_state(theirs)
    their_losses, their_result = fit_sequential(torch, theirs)
    our_losses, our_result = fit_sequential(corenn, ours)
    assert_same_run(our_losses, their_losses)
    assert_same_state(ours, theirs, moved_from=start)
    assert our_result == their_result


def test_polynomial_with_a_custom_module(torch):
    theirs, ours = same_weights(torch, build_polynomial3)
    start = numpy_state(theirs)
    assert sorted(start) == ["a", "b", "c", "d"]
    their_losses = fit_module(torch, theirs)
    our_losses = fit_module(corenn, ours)
    assert_same_run(our_losses, their_losses)
    assert_same_state(ours, theirs, moved_from=start)
    assert ours.string().startswith("y = ")
