"""Gradients of the parametrizations and of their linear algebra against float64 central finite differences."""
from __future__ import annotations

import pytest

import corenn
import corenn.nn.utils.parametrize as P
from corenn import nn
from corenn.autograd import gradcheck
from corenn.nn.utils import parametrizations
from corenn_parametrize import linalg

F64 = corenn.float64


def random(*shape, scale=1.0):
    return (scale * corenn.randn(*shape, dtype=F64)).requires_grad_()


@pytest.mark.parametrize("scale", [0.1, 1.0, 4.0], ids=["small", "unit", "squared"])
def test_matrix_exp(scale):
    corenn.manual_seed(0)
    assert gradcheck(linalg.matrix_exp, (random(4, 4, scale=scale),))
    assert gradcheck(linalg.matrix_exp, (random(2, 3, 3, scale=scale),))


def test_solve_both_arguments():
    corenn.manual_seed(1)
    A = (corenn.randn(2, 4, 4, dtype=F64) + 4 * corenn.eye(4, dtype=F64)).requires_grad_()
    assert gradcheck(linalg.solve, (A, random(2, 4, 3)))
    assert gradcheck(linalg.solve, (A, random(4, 2)))           # B broadcast over A's batch


def test_householder_product_both_arguments():
    corenn.manual_seed(2)
    tau = (corenn.rand(3, dtype=F64) + 0.5).requires_grad_()
    assert gradcheck(linalg.householder_product, (random(5, 3), tau))


def orthogonal_parametrization(shape, orthogonal_map, use_trivialization):
    module = nn.Module()
    module.weight = nn.Parameter(corenn.randn(*shape, dtype=F64))
    parametrizations.orthogonal(module, orthogonal_map=orthogonal_map, use_trivialization=use_trivialization)
    return module.parametrizations.weight[0]


@pytest.mark.parametrize("shape", [(4, 4), (5, 3), (3, 5), (2, 4, 3)], ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("orthogonal_map", ["matrix_exp", "cayley", "householder"])
def test_orthogonal(shape, orthogonal_map):
    corenn.manual_seed(3)
    parametrization = orthogonal_parametrization(shape, orthogonal_map, use_trivialization=True)
    X = corenn.randn(*shape, dtype=F64) * 0.5
    # householder reads signs from the diagonal through an int cast (no gradient there); 1.5 keeps the
    # cast at 1 under the finite-difference steps, where exactly 1 would truncate to 0 one step below.
    n, k = shape[-2], shape[-1]
    eye = corenn.eye(n, k, dtype=F64)
    X = (X * (1 - eye) + 1.5 * eye).requires_grad_()
    assert gradcheck(parametrization, (X,))


def test_spectral_norm_in_eval_mode():
    corenn.manual_seed(4)
    layer = parametrizations.spectral_norm(nn.Linear(5, 4, dtype=F64)).eval()
    assert gradcheck(layer.parametrizations.weight[0], (random(4, 5),))
    conv = parametrizations.spectral_norm(nn.Conv2d(2, 3, 2, dtype=F64)).eval()
    assert gradcheck(conv.parametrizations.weight[0], (random(3, 2, 2, 2),))


@pytest.mark.parametrize("dim", [0, 1, None])
def test_weight_norm(dim):
    corenn.manual_seed(5)
    layer = parametrizations.weight_norm(nn.Linear(5, 4, dtype=F64), dim=dim)
    g = layer.parametrizations.weight.original0.detach().clone().requires_grad_()
    v = random(4, 5)
    assert gradcheck(layer.parametrizations.weight[0], (g, v))


def test_through_the_module_from_the_original():
    """The whole path: forward reads module.weight; the gradient lands on parametrizations.weight.original."""
    corenn.manual_seed(6)
    layer = parametrizations.orthogonal(nn.Linear(3, 3, dtype=F64))
    P.register_parametrization(layer, "bias", nn.Tanh())
    x = corenn.randn(2, 3, dtype=F64)
    original = layer.parametrizations.weight.original
    with corenn.no_grad():
        original.add_(0.3 * corenn.randn(3, 3, dtype=F64))

    def loss():
        return float(layer(x).square().sum())

    layer(x).square().sum().backward()
    values = original.detach().numpy()          # the parameter's own array: perturbed in place below
    step = 1e-6
    for index in [(0, 0), (1, 0), (2, 1), (0, 2)]:
        saved = values[index]
        values[index] = saved + step
        above = loss()
        values[index] = saved - step
        below = loss()
        values[index] = saved
        assert abs((above - below) / (2 * step) - float(original.grad[index])) < 1e-6, index
