"""Seed 004 section 1 (PyTorch basics) with ``corenn`` in place of ``torch``."""
from __future__ import annotations

import warnings

import numpy as np
import pytest

import corenn


def test_tensors_hold_scalars_arrays_matrices():
    a = corenn.tensor(3)
    assert str(a) == "tensor(3)"
    b = corenn.tensor([1, 2])
    assert str(b) == "tensor([1, 2])"
    c = corenn.zeros([2, 2])
    assert str(c) == "tensor([[0., 0.],\n        [0., 0.]])"
    d = corenn.rand([2, 2, 2])
    assert d.shape == (2, 2, 2) and d.dtype is corenn.float32
    assert bool(((d >= 0) & (d < 1)).all())


def test_matmul_add_and_numpy_conversion():
    x = corenn.randn([3, 5])
    y = corenn.randn([5, 4])
    z = x @ y
    assert z.shape == (3, 4)
    np.testing.assert_allclose(z.numpy(), x.numpy() @ y.numpy(), rtol=1e-5, atol=1e-6)
    # The seed then writes ``z = x + y`` for these same x and y; shapes [3, 5] and [5, 4] do not broadcast,
    # in PyTorch as here, so it raises naming both shapes.
    with pytest.raises(RuntimeError, match=r"\[3, 5\] and \[5, 4\]"):
        x + y
    w = corenn.randn([3, 5])
    np.testing.assert_allclose((x + w).numpy(), x.numpy() + w.numpy())
    print(z.numpy())


def test_tensor_from_numpy_normal():
    x = corenn.tensor(np.random.normal([3, 5]))  # as written: two draws with means 3 and 5
    assert x.shape == (2,) and x.dtype is corenn.float64


def test_autograd_of_composed_function():
    x = corenn.tensor(1.0, requires_grad=True)

    def u(x):
        return x * x

    def g(u):
        return -u

    dgdx = corenn.autograd.grad(g(u(x)), x)[0]
    assert str(dgdx) == "tensor(-2.)"


def test_curve_fitting_with_adam():
    """The seed's polynomial fit: Adam(lr=0.1) for 1000 steps finds w close to [5, 0, 3] (doc: [4.99, 0.0004, 3.45])."""
    from corenn import optim
    from corenn.nn import functional
    corenn.manual_seed(0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # corenn.tensor(tensor) warns, as torch.tensor does
        w = corenn.tensor(corenn.randn([3, 1]), requires_grad=True)
    opt = optim.Adam([w], 0.1)

    def model(x):
        f = corenn.stack([x * x, x, corenn.ones_like(x)], 1)
        yhat = corenn.squeeze(f @ w, 1)
        return yhat

    def compute_loss(y, yhat):
        loss = functional.mse_loss(yhat, y)
        return loss

    def generate_data():
        x = corenn.rand(100) * 20 - 10
        y = 5 * x * x + 3
        return x, y

    def train_step():
        x, y = generate_data()
        yhat = model(x)
        loss = compute_loss(y, yhat)
        opt.zero_grad()
        loss.backward()
        opt.step()

    for _ in range(1000):
        train_step()
    result = w.detach().numpy().reshape(-1)
    print(result)
    assert abs(result[0] - 5) < 0.1 and abs(result[1]) < 0.1 and abs(result[2] - 3) < 1.0
