"""Threshold, GLU, Hardshrink, Softshrink, RReLU, Softmin, Softmax2d and the in-place functional variants
against PyTorch 2.13 (float64 values and gradients), gradcheck, and PyTorch's errors."""
from __future__ import annotations

import numpy as np
import pytest

import corenn
import corenn.nn.functional as F
from corenn import nn
from corenn.autograd import gradcheck

from _breadth_oracle import compare_with_torch

torch = pytest.importorskip("torch")
TF = torch.nn.functional
pytestmark = pytest.mark.torch
RNG = np.random.default_rng(11)

LAYERS = [("Threshold", (0.1, -2.0)), ("GLU", ()), ("GLU", (1,)), ("Hardshrink", ()), ("Hardshrink", (0.9,)),
          ("Softshrink", ()), ("Softshrink", (0.3,)), ("RReLU", (0.1, 0.4)), ("Softmin", (1,)), ("Softmax2d", ())]


@pytest.mark.parametrize("layer,args", LAYERS, ids=[f"{name}{args}" for name, args in LAYERS])
@pytest.mark.parametrize("shape", [(3, 4, 2, 6), (4, 2, 6)])
def test_layer_matches_torch(layer, args, shape):
    ours, theirs = getattr(nn, layer)(*args), getattr(torch.nn, layer)(*args)
    assert repr(ours) == repr(theirs)
    if layer == "RReLU":            # random slopes in training; compare the deterministic eval form
        ours.eval(), theirs.eval()
    compare_with_torch(ours, theirs, [RNG.standard_normal(shape)], torch)


@pytest.mark.parametrize("name,args", [("threshold", (0.2, 5.0)), ("elu", (0.7,)), ("selu", ()), ("celu", (1.3,)),
                                       ("leaky_relu", (0.2,)), ("hardtanh", (-0.5, 0.6)), ("rrelu", (0.1, 0.2))])
def test_inplace_variants_match_torch(name, args):
    x = RNG.standard_normal((3, 5))
    ours, theirs = corenn.tensor(x.copy()), torch.tensor(x.copy())
    result = getattr(F, name + "_")(ours, *args)
    getattr(TF, name + "_")(theirs, *args)
    assert result is ours
    np.testing.assert_allclose(ours.numpy(), theirs.numpy(), rtol=1e-12)


def test_rrelu_training_draws_slopes_in_range():
    corenn.manual_seed(0)
    x = corenn.full((2000,), -1.0, dtype=corenn.float64, requires_grad=True)
    out = F.rrelu(x, 0.1, 0.3, training=True)
    slopes = -out.detach().numpy()
    assert slopes.min() >= 0.1 and slopes.max() <= 0.3 and abs(slopes.mean() - 0.2) < 0.01
    out.sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), slopes)          # the gradient is the slope drawn
    positive = corenn.ones(5)
    assert F.rrelu(positive, training=True).tolist() == [1.0] * 5


def test_softmin_warns_without_dim_as_torch():
    with pytest.warns(UserWarning, match="Implicit dimension choice for softmax"):
        nn.Softmin()(corenn.zeros(2, 3))


def test_gradcheck_float64():
    def t(*shape):
        return corenn.tensor(RNG.standard_normal(shape), requires_grad=True)

    assert gradcheck(lambda x: F.glu(x, 0), (t(4, 3),))
    assert gradcheck(lambda x: F.softshrink(x, 0.05) + F.hardshrink(x, 0.05), (t(4, 3),))
    assert gradcheck(lambda x: F.threshold(x, 0.05, 3.0), (t(4, 3),))
    assert gradcheck(lambda x: F.softmin(x, 1), (t(4, 3),))
    assert gradcheck(lambda x: F.rrelu(x, 0.1, 0.3), (t(4, 3),))


def test_errors_match_torch():
    with pytest.raises(RuntimeError, match="glu: Halving dimension must be even"):
        F.glu(corenn.zeros(3, 5))
    with pytest.raises(RuntimeError, match="glu does not support scalars"):
        F.glu(corenn.tensor(1.0))
    with pytest.raises(RuntimeError, match="softshrink: lambda must be greater or equal to 0"):
        F.softshrink(corenn.zeros(3), -1.0)
    with pytest.raises(ValueError, match="Softmax2d: expected input to be 3D or 4D"):
        nn.Softmax2d()(corenn.zeros(3, 4))
    with pytest.raises(TypeError, match=r"threshold\(\): argument 'input' must be Tensor"):
        F.threshold(None, 0.0, 0.0)
    for ours, theirs in [(lambda: F.glu(corenn.zeros(3, 5)), lambda: TF.glu(torch.zeros(3, 5))),
                         (lambda: nn.Softmax2d()(corenn.zeros(3, 4)), lambda: torch.nn.Softmax2d()(torch.zeros(3, 4))),
                         (lambda: F.softshrink(corenn.zeros(3), -1.0), lambda: TF.softshrink(torch.zeros(3), -1.0))]:
        with pytest.raises(Exception) as mine:
            ours()
        with pytest.raises(Exception) as reference:
            theirs()
        assert isinstance(mine.value, type(reference.value)), (mine.value, reference.value)


def test_gumbel_softmax_samples_and_straight_through_gradient():
    corenn.manual_seed(0)
    logits = corenn.tensor([[1.0, 0.0, -1.0]], dtype=corenn.float64).repeat(20000, 1).requires_grad_()
    soft = F.gumbel_softmax(logits, tau=0.5)
    np.testing.assert_allclose(soft.detach().numpy().sum(-1), 1.0)
    hard = F.gumbel_softmax(logits, hard=True)
    frequencies = hard.detach().numpy().mean(0)
    expected = np.exp([1.0, 0.0, -1.0]) / np.exp([1.0, 0.0, -1.0]).sum()    # Gumbel-max samples the softmax
    np.testing.assert_allclose(frequencies, expected, atol=0.015)
    (hard * corenn.tensor([1.0, 2.0, 3.0], dtype=corenn.float64)).sum().backward()
    assert logits.grad is not None and np.isfinite(logits.grad.numpy()).all() and logits.grad.abs().sum() > 0
