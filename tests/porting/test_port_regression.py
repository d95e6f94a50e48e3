"""Port of pytorch/examples ``regression/main.py``: fit a random degree-4 polynomial with one ``nn.Linear``
on polynomial features, by hand-written SGD on ``F.smooth_l1_loss``.

Written once against ``lib`` and run under PyTorch and corenn from the same weights and the same
target polynomial. It keeps the example's ``make_features`` (``x.unsqueeze(1)`` and
``torch.cat([x ** i for i in range(1, POLY_DEGREE+1)], 1)``), ``f(x) = x.mm(W_target) + b_target.item()``,
``poly_desc`` over ``W.view(-1)``, the loop of ``fc.zero_grad()``, ``output.item()``,
``output.backward()`` and ``param.add_(-0.1 * param.grad)`` (under ``torch.no_grad()`` as the
example's current version has it), stopping when the loss drops below 1e-3. The random batches
come from numpy instead of ``torch.randn``.
"""
from __future__ import annotations

import numpy as np
import pytest

import corenn
from _port import assert_same_run, assert_same_state, numpy_state, same_weights

pytestmark = pytest.mark.torch

POLY_DEGREE = 4


def make_features(lib, x):
    """Builds features i.e. a matrix with columns [x, x^2, x^3, x^4]."""
    x = x.unsqueeze(1)
    return lib.cat([x ** i for i in range(1, POLY_DEGREE + 1)], 1)


def poly_desc(W, b):
    """Creates a string description of a polynomial."""
    result = "y = "
    for i, w in enumerate(W):
        result += "{:+.2f} x^{} ".format(w, i + 1)
    result += "{:+.2f}".format(b[0])
    return result


def build(lib):
    return lib.nn.Linear(POLY_DEGREE, 1)


def fit(lib, fc, W_target, b_target, xs, max_steps=8):
    F = lib.nn.functional
    W_target, b_target = lib.from_numpy(W_target), lib.from_numpy(b_target)

    def f(x):
        """Approximated function."""
        return x.mm(W_target) + b_target.item()

    def get_batch(random):
        """Builds a batch i.e. (x, f(x)) pair."""
        x = make_features(lib, lib.from_numpy(random))
        y = f(x)
        return x, y

    losses = []
    for batch_idx in range(max_steps):
        batch_x, batch_y = get_batch(xs[batch_idx])
        fc.zero_grad()
        output = F.smooth_l1_loss(fc(batch_x), batch_y)
        loss = output.item()
        output.backward()
        with lib.no_grad():
            for param in fc.parameters():
                param.add_(-0.1 * param.grad)
        losses.append(loss)
        if loss < 1e-3:
            break
    description = poly_desc(fc.weight.view(-1).tolist(), fc.bias.tolist())
    return losses, description


def test_regression_fits_the_same_in_both_frameworks(torch):
    rng = np.random.default_rng(0)
    W_target = (rng.standard_normal((POLY_DEGREE, 1)) * 5).astype(np.float32)
    b_target = (rng.standard_normal(1) * 5).astype(np.float32)
    xs = [rng.standard_normal(32).astype(np.float32) for _ in range(8)]
    theirs, ours = same_weights(torch, build)
    start = numpy_state(theirs)
    their_losses, their_description = fit(torch, theirs, W_target, b_target, xs)
    our_losses, our_description = fit(corenn, ours, W_target, b_target, xs)
    assert len(our_losses) == 8
    assert_same_run(our_losses, their_losses)
    assert_same_state(ours, theirs, moved_from=start)
    assert our_description == their_description and our_description.startswith("y = ")
