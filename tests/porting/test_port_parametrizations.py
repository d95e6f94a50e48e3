"""Port of the PyTorch tutorial "Parametrizations Tutorial" (``intermediate/parametrizations``): constraints
written as small modules and attached with ``torch.nn.utils.parametrize``.

Written once against ``lib`` and run under PyTorch and corenn (``corenn.nn.utils.parametrize``, from the
corenn-parametrize plugin) from the same weights. It keeps the tutorial's ``Symmetric`` (``X.triu() +
X.triu(1).transpose(-1, -2)``, with ``right_inverse`` returning ``A.triu()``), ``Skew``, chained
``Skew`` + ``MatrixExponential`` (``torch.matrix_exp``) for an orthogonal weight, ``CayleyMap``
(``torch.linalg.solve(self.Id - X, self.Id + X)`` with an ``eye`` buffer), what it inspects
(``layer.parametrizations.weight.original``, ``parametrize.is_parametrized``, the class before
parametrization: PyTorch swaps a parametrized module's class for a ``ParametrizedLinear`` subclass,
corenn by design does not, so the program asks ``parametrize.type_before_parametrizations``), assignment through ``right_inverse`` (``layer.weight = X``),
``with parametrize.cached():``, and ``parametrize.remove_parametrizations(..., leave_parametrized=...)``;
then it trains a small network holding an orthogonal and a symmetric layer for a few SGD steps.
"""
from __future__ import annotations

import importlib

import numpy as np
import pytest

import corenn
from _port import assert_same_run, assert_same_state, numpy_state, same_weights

pytestmark = pytest.mark.torch


def constraints(lib):
    nn = lib.nn

    class Symmetric(nn.Module):
        def forward(self, X):
            return X.triu() + X.triu(1).transpose(-1, -2)

        def right_inverse(self, A):
            return A.triu()

    class Skew(nn.Module):
        def forward(self, X):
            A = X.triu(1)
            return A - A.transpose(-1, -2)

    class MatrixExponential(nn.Module):
        def forward(self, X):
            return lib.matrix_exp(X)

    class CayleyMap(nn.Module):
        def __init__(self, n):
            super().__init__()
            self.register_buffer("Id", lib.eye(n))

        def forward(self, X):
            # (I + X)(I - X)^{-1}
            return lib.linalg.solve(self.Id - X, self.Id + X)

    return Symmetric, Skew, MatrixExponential, CayleyMap


def build(lib, orthogonal="matrix_exp"):
    nn = lib.nn
    parametrize = importlib.import_module(f"{lib.__name__}.nn.utils.parametrize")
    Symmetric, Skew, MatrixExponential, CayleyMap = constraints(lib)

    class Model(nn.Module):
        def __init__(self):
            super().__init__()
            self.inp = nn.Linear(5, 6)
            self.orthogonal = nn.Linear(6, 6)
            self.symmetric = nn.Linear(6, 6)
            self.out = nn.Linear(6, 3)

        def forward(self, x):
            x = lib.tanh(self.inp(x))
            x = lib.tanh(self.orthogonal(x))
            x = lib.tanh(self.symmetric(x))
            return self.out(x)

    model = Model()
    parametrize.register_parametrization(model.orthogonal, "weight", Skew())
    orthogonal_map = MatrixExponential() if orthogonal == "matrix_exp" else CayleyMap(6)
    parametrize.register_parametrization(model.orthogonal, "weight", orthogonal_map)
    parametrize.register_parametrization(model.symmetric, "weight", Symmetric())
    return model


def inspect_and_train(lib, model, batches):
    parametrize = importlib.import_module(f"{lib.__name__}.nn.utils.parametrize")
    W = model.orthogonal.weight
    report = {
        "orthogonal": bool(lib.allclose(W.T @ W, lib.eye(6), atol=1e-5)),
        "symmetric": bool(lib.allclose(model.symmetric.weight, model.symmetric.weight.T)),
        "class": parametrize.type_before_parametrizations(model.symmetric).__name__,
        "parametrized": [parametrize.is_parametrized(model.symmetric), parametrize.is_parametrized(model.inp)],
        "keys": sorted(model.state_dict()),
    }
    optimizer = lib.optim.SGD(model.parameters(), lr=0.1, momentum=0.5)
    losses = []
    for x, y in batches:
        optimizer.zero_grad()
        with parametrize.cached():
            loss = lib.nn.functional.mse_loss(model(lib.from_numpy(x)), lib.from_numpy(y))
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    W = model.orthogonal.weight
    report["still_orthogonal"] = bool(lib.allclose(W.T @ W, lib.eye(6), atol=1e-5))
    return report, losses


def right_inverse_and_remove(lib, weight):
    nn = lib.nn
    parametrize = importlib.import_module(f"{lib.__name__}.nn.utils.parametrize")
    Symmetric = constraints(lib)[0]
    layer = nn.Linear(3, 3)
    parametrize.register_parametrization(layer, "weight", Symmetric())
    X = lib.from_numpy(weight)
    X = X + X.T  # a symmetric matrix
    layer.weight = X  # goes through right_inverse: original holds X.triu()
    original = layer.parametrizations.weight.original.detach().clone()
    parametrize.remove_parametrizations(layer, "weight", leave_parametrized=False)
    kept_original = layer.weight.detach().clone()
    return original, layer.weight.detach(), kept_original, type(layer).__name__


def _batches(seed=0):
    rng = np.random.default_rng(seed)
    return [(rng.standard_normal((8, 5)).astype(np.float32), rng.standard_normal((8, 3)).astype(np.float32))
            for _ in range(5)]


def _compare(torch, orthogonal):
    batches = _batches()
    theirs, ours = same_weights(torch, build, orthogonal=orthogonal)
    start = numpy_state(theirs)
    their_report, their_losses = inspect_and_train(torch, theirs, batches)
    our_report, our_losses = inspect_and_train(corenn, ours, batches)
    assert our_report == their_report
    assert our_report["orthogonal"] and our_report["still_orthogonal"] and our_report["symmetric"]
    assert our_report["class"] == "Linear" and our_report["parametrized"] == [True, False]
    assert type(theirs.symmetric).__name__ == "ParametrizedLinear"  # PyTorch swaps the class; corenn does not
    assert type(ours.symmetric) is corenn.nn.Linear
    assert "orthogonal.parametrizations.weight.original" in our_report["keys"]
    assert_same_run(our_losses, their_losses)
    assert_same_state(ours, theirs, moved_from=start)


def test_parametrized_orthogonal_and_symmetric_layers_train_the_same(torch):
    _compare(torch, "matrix_exp")


@pytest.mark.xfail(not hasattr(corenn, "linalg"), strict=True, raises=AttributeError,
                   reason="needs corenn.linalg.solve")
def test_cayley_map_parametrization_trains_the_same(torch):
    _compare(torch, "cayley")


def test_assignment_goes_through_right_inverse_and_remove_keeps_the_original(torch):
    weight = np.random.default_rng(1).standard_normal((3, 3)).astype(np.float32)
    ours, theirs = right_inverse_and_remove(corenn, weight), right_inverse_and_remove(torch, weight)
    assert_same_run(ours[:3], theirs[:3])
    assert ours[3] == theirs[3] == "Linear"
    np.testing.assert_array_equal(ours[0].numpy(), np.triu(weight + weight.T))
