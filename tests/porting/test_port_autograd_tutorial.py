"""Ports of the PyTorch tutorials "Automatic Differentiation with torch.autograd"
(``beginner/basics/autogradqs_tutorial``) and "A Gentle Introduction to torch.autograd"
(``beginner/blitz/autograd_tutorial``).

Each program is written once against ``lib`` and run with PyTorch and with corenn on the same
numbers: the one-layer logistic model (``torch.matmul(x, w)+b``,
``F.binary_cross_entropy_with_logits``, ``w.grad``/``b.grad``, ``z.grad_fn``, ``z.requires_grad``
under ``torch.no_grad()`` and after ``detach()``), the Jacobian-vector products
(``torch.eye(4, 5, requires_grad=True)``, ``out.backward(torch.ones_like(out), retain_graph=True)``
accumulating twice, ``inp.grad.zero_()``), ``Q.backward(gradient=external_grad)`` checked against
the derivatives by hand, and freezing a model's parameters while a new classifier head trains.
"""
from __future__ import annotations

import numpy as np
import pytest

import corenn
from _port import assert_same_run, assert_same_state, load_numpy_state, numpy_state, same_weights

pytestmark = pytest.mark.torch


def logistic(lib, w0, b0):
    F = lib.nn.functional
    x = lib.ones(5)  # input tensor
    y = lib.zeros(3)  # expected output
    w = lib.tensor(w0, requires_grad=True)
    b = lib.tensor(b0, requires_grad=True)
    z = lib.matmul(x, w) + b
    loss = F.binary_cross_entropy_with_logits(z, y)
    has_grad_fn = z.grad_fn is not None
    loss.backward()
    with lib.no_grad():
        z_no_grad = lib.matmul(x, w) + b
    z_det = z.detach()
    return loss, w.grad, b.grad, has_grad_fn, z.requires_grad, z_no_grad.requires_grad, z_det.requires_grad


def jacobian_products(lib):
    inp = lib.eye(4, 5, requires_grad=True)
    out = (inp + 1).pow(2).t()
    out.backward(lib.ones_like(out), retain_graph=True)
    first = inp.grad.clone()
    out.backward(lib.ones_like(out), retain_graph=True)
    second = inp.grad.clone()
    inp.grad.zero_()
    out.backward(lib.ones_like(out), retain_graph=True)
    return first, second, inp.grad


def external_gradient(lib):
    a = lib.tensor([2., 3.], requires_grad=True)
    b = lib.tensor([6., 4.], requires_grad=True)
    Q = 3 * a ** 3 - b ** 2
    external_grad = lib.tensor([1., 1.])
    Q.backward(gradient=external_grad)
    assert (9 * a ** 2 == a.grad).all().item() and (-2 * b == b.grad).all().item()
    return Q, a.grad, b.grad


def test_logistic_model_gradients(torch):
    rng = np.random.default_rng(0)
    w0, b0 = rng.standard_normal((5, 3)).astype(np.float32), rng.standard_normal(3).astype(np.float32)
    ours, theirs = logistic(corenn, w0, b0), logistic(torch, w0, b0)
    assert_same_run(ours[:3], theirs[:3])
    assert ours[3:] == theirs[3:] == (True, True, False, False)


def test_jacobian_products_accumulate(torch):
    ours, theirs = jacobian_products(corenn), jacobian_products(torch)
    assert_same_run(ours, theirs)
    np.testing.assert_array_equal(ours[1].numpy(), 2 * ours[0].numpy())


def test_external_gradient(torch):
    assert_same_run(external_gradient(corenn), external_gradient(torch))


def build(lib):
    nn = lib.nn
    return nn.Sequential(nn.Conv2d(3, 4, 3), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(4, 5))


def finetune_head(lib, model, head_state, images, labels):
    for param in model.parameters():  # freeze all the parameters in the network
        param.requires_grad = False
    model[4] = lib.nn.Linear(4, 3)  # the new classifier is unfrozen by default
    load_numpy_state(lib, model[4], head_state)  # the same new head in both frameworks
    optimizer = lib.optim.SGD(model.parameters(), lr=1e-1, momentum=0.9)
    losses = []
    for image, label in zip(images, labels):
        prediction = model(lib.from_numpy(image))
        loss = lib.nn.functional.cross_entropy(prediction, lib.from_numpy(label))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    return losses


def test_frozen_model_trains_only_its_new_head(torch):
    rng = np.random.default_rng(1)
    images = [rng.standard_normal((2, 3, 6, 6)).astype(np.float32) for _ in range(4)]
    labels = [rng.integers(0, 3, 2) for _ in range(4)]
    theirs, ours = same_weights(torch, build)
    start = numpy_state(theirs)
    head = numpy_state(torch.nn.Linear(4, 3))
    assert_same_run(finetune_head(corenn, ours, head, images, labels),
                    finetune_head(torch, theirs, head, images, labels))
    assert_same_state(ours, theirs)
    after = numpy_state(ours)
    np.testing.assert_array_equal(after["0.weight"], start["0.weight"])
    assert not np.array_equal(after["4.weight"], head["weight"])
