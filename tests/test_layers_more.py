"""PReLU, PixelShuffle/PixelUnshuffle and Dropout1d/2d/3d against PyTorch 2.13 (copied weights, float64
gradients) and float64 gradcheck; channel dropout's statistics (its random draws differ from PyTorch's)."""
from __future__ import annotations

import numpy as np
import pytest

import corenn
import corenn.nn.functional as F
from corenn import nn
from corenn.autograd import gradcheck

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.torch
RNG = np.random.default_rng(0)


def _compare(ours_fn, theirs_fn, array):
    x, tx = corenn.tensor(array.copy(), requires_grad=True), torch.tensor(array.copy(), requires_grad=True)
    out, tout = ours_fn(x), theirs_fn(tx)
    np.testing.assert_allclose(out.detach().numpy(), tout.detach().numpy(), rtol=1e-12, atol=1e-14)
    w = RNG.standard_normal(tuple(tout.shape))
    (out * corenn.tensor(w)).sum().backward()
    (tout * torch.tensor(w)).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), tx.grad.numpy(), rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("num_parameters,shape", [(1, (4, 3)), (3, (2, 3, 5)), (3, (2, 3, 4, 4)), (1, (5,))])
def test_prelu_matches_torch(num_parameters, shape):
    ours, theirs = nn.PReLU(num_parameters, init=0.1).double(), torch.nn.PReLU(num_parameters, init=0.1).double()
    assert repr(ours) == repr(theirs)
    weight = RNG.uniform(-0.5, 0.5, num_parameters)
    ours.weight.data = corenn.tensor(weight.copy())
    with torch.no_grad():
        theirs.weight.copy_(torch.tensor(weight))
    _compare(ours, theirs, RNG.standard_normal(shape))
    np.testing.assert_allclose(ours.weight.grad.numpy(), theirs.weight.grad.numpy(), rtol=1e-12)
    assert list(ours.state_dict()) == list(theirs.state_dict())
    with pytest.raises(RuntimeError, match="Mismatch of parameter numbers and input channel size"):
        nn.PReLU(3)(corenn.zeros(2, 4))
    with pytest.raises(RuntimeError, match="Mismatch of parameter numbers and input channel size"):
        nn.PReLU(3)(corenn.zeros(3))


@pytest.mark.parametrize("shape,factor", [((1, 8, 3, 3), 2), ((2, 3, 18, 2, 4), 3), ((9, 2, 2), 3)])
def test_pixel_shuffle_and_unshuffle_match_torch(shape, factor):
    _compare(lambda x: F.pixel_shuffle(x, factor), lambda x: torch.nn.functional.pixel_shuffle(x, factor),
             RNG.standard_normal(shape))
    *batch, c, h, w = shape
    unshuffled = tuple(batch) + (c // factor ** 2, h * factor, w * factor)
    _compare(nn.PixelUnshuffle(factor), torch.nn.PixelUnshuffle(factor), RNG.standard_normal(unshuffled))
    assert repr(nn.PixelShuffle(factor)) == repr(torch.nn.PixelShuffle(factor))
    with pytest.raises(RuntimeError, match="divisible by the square of upscale_factor"):
        F.pixel_shuffle(corenn.zeros(1, 3, 2, 2), 2)
    with pytest.raises(RuntimeError, match="divisible by downscale_factor"):
        F.pixel_unshuffle(corenn.zeros(1, 1, 3, 2), 2)


@pytest.mark.parametrize("layer,shape", [(nn.Dropout1d, (40, 30, 6)), (nn.Dropout2d, (40, 30, 3, 2)),
                                         (nn.Dropout3d, (40, 30, 2, 2, 2)), (nn.Dropout3d, (30, 2, 2, 2))])
def test_channel_dropout_zeroes_whole_channels(layer, shape):
    corenn.manual_seed(0)
    module = layer(0.3)
    x = corenn.ones(*shape, requires_grad=True)
    out = module(x)
    values = out.detach().numpy()
    channels = values.reshape(values.shape[0], values.shape[1], -1) if len(shape) > 4 or layer is not nn.Dropout3d \
        else values.reshape(1, values.shape[0], -1)
    per_channel = channels.reshape(-1, channels.shape[-1])
    assert np.all((per_channel == 0).all(1) | np.isclose(per_channel, 1 / 0.7).all(1))
    dropped = (per_channel == 0).all(1).mean()
    assert 0.15 < dropped < 0.45
    out.sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), values)     # d(x * mask)/dx = mask
    module.eval()
    assert module(x) is x
    assert repr(module) == repr(getattr(torch.nn, layer.__name__)(0.3))


def test_channel_dropout_errors_and_3d_warning():
    with pytest.raises(RuntimeError, match="dropout1d: Expected 2D or 3D input"):
        F.dropout1d(corenn.zeros(2, 3, 4, 5))
    with pytest.raises(ValueError, match="between 0 and 1"):
        F.dropout3d(corenn.zeros(2, 3, 4, 5), p=2)
    with pytest.warns(UserWarning, match="Received a 3D input to dropout2d"):
        F.dropout2d(corenn.zeros(2, 3, 4))
    assert float(F.dropout2d(corenn.ones(2, 3, 4, 4), p=1.0).abs().sum()) == 0


def test_gradcheck_float64():
    x = corenn.randn(2, 3, 2, 2, dtype=corenn.float64, requires_grad=True)
    w = corenn.tensor([0.1, -0.2, 0.3], dtype=corenn.float64, requires_grad=True)
    assert gradcheck(lambda x, w: F.prelu(x, w), (x, w))
    y = corenn.randn(1, 8, 2, 3, dtype=corenn.float64, requires_grad=True)
    assert gradcheck(lambda y: F.pixel_unshuffle(F.pixel_shuffle(y, 2) * 2.0, 2), (y,))
