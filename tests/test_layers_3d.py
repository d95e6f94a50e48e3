"""3-d conv/pool layers and adaptive max pooling against PyTorch 2.13 on the same inputs and weights."""
from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as TF

import corenn
from corenn import nn
from corenn.autograd import gradcheck
from corenn.nn import functional as F


def _pair(array):
    return torch.tensor(array, requires_grad=True), corenn.tensor(array, requires_grad=True)


def _compare(torch_layer, layer, shape, dtype="float64", tolerance=1e-10):
    array = np.random.default_rng(0).standard_normal(shape).astype(dtype)
    t, c = _pair(array)
    for name, parameter in torch_layer.named_parameters():
        getattr(layer, name).data = corenn.tensor(parameter.detach().numpy().astype(dtype))
        parameter.data = parameter.data.to(getattr(torch, dtype))
    expected, got = torch_layer(t), layer(c)
    if isinstance(expected, tuple):
        np.testing.assert_array_equal(got[1].numpy(), expected[1].numpy())
        expected, got = expected[0], got[0]
    np.testing.assert_allclose(got.detach().numpy(), expected.detach().numpy(), rtol=tolerance, atol=tolerance)
    grad = np.random.default_rng(1).standard_normal(tuple(expected.shape)).astype(dtype)
    expected.backward(torch.tensor(grad))
    got.backward(corenn.tensor(grad))
    np.testing.assert_allclose(c.grad.numpy(), t.grad.numpy(), rtol=tolerance, atol=tolerance)
    for name, parameter in torch_layer.named_parameters():
        np.testing.assert_allclose(getattr(layer, name).grad.numpy(), parameter.grad.numpy(), rtol=tolerance,
                                   atol=tolerance)


LAYERS = [
    ("Conv3d", (2, 4, 3), dict(padding=1), (2, 2, 4, 5, 3)),
    ("Conv3d", (4, 2, 2), dict(stride=(1, 2, 1), groups=2, bias=False), (1, 4, 3, 4, 5)),
    ("ConvTranspose3d", (2, 3, 2), dict(stride=2, padding=1, output_padding=1), (2, 2, 3, 2, 3)),
    ("ConvTranspose3d", (4, 2, 3), dict(groups=2, dilation=(1, 2, 1)), (1, 4, 2, 3, 2)),
    ("MaxPool3d", (2,), {}, (2, 2, 4, 5, 6)),
    ("MaxPool3d", (3,), dict(stride=2, padding=1, ceil_mode=True, return_indices=True), (1, 2, 5, 4, 6)),
    ("AvgPool3d", (2,), dict(stride=1, padding=1, count_include_pad=False), (2, 2, 3, 4, 3)),
    ("AvgPool3d", ((2, 3, 2),), dict(ceil_mode=True, divisor_override=5), (1, 2, 5, 4, 6)),
    ("AdaptiveAvgPool3d", ((2, 3, None),), {}, (2, 2, 5, 7, 3)),
    ("AdaptiveMaxPool1d", (4,), dict(return_indices=True), (2, 3, 7)),
    ("AdaptiveMaxPool1d", (9,), {}, (3, 7)),
    ("AdaptiveMaxPool2d", ((3, 4),), dict(return_indices=True), (2, 2, 5, 7)),
    ("AdaptiveMaxPool2d", ((None, 2),), {}, (2, 5, 7)),
    ("AdaptiveMaxPool3d", ((2, 3, 2),), dict(return_indices=True), (1, 2, 4, 5, 3)),
]


@pytest.mark.parametrize("name, args, kwargs, shape", LAYERS, ids=lambda v: str(v))
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_layer_matches_pytorch(name, args, kwargs, shape, dtype):
    torch.manual_seed(0)
    torch_layer, layer = getattr(torch.nn, name)(*args, **kwargs), getattr(nn, name)(*args, **kwargs)
    assert repr(layer) == repr(torch_layer)
    _compare(torch_layer, layer, shape, dtype, 1e-5 if dtype == "float32" else 1e-10)


@pytest.mark.parametrize("fn, shape", [
    (lambda x, w: F.conv3d(x, w, stride=2, padding=1), [(1, 2, 3, 3, 3), (2, 2, 2, 2, 2)]),
    (lambda x, w: F.conv_transpose3d(x, w, stride=2), [(1, 2, 2, 2, 2), (2, 1, 2, 2, 2)]),
    (lambda x: F.max_pool3d(x, 2, stride=1), [(1, 1, 3, 3, 3)]),
    (lambda x: F.avg_pool3d(x, 2, padding=1), [(1, 1, 3, 2, 3)]),
    (lambda x: F.adaptive_avg_pool3d(x, (2, 1, 3)), [(1, 1, 3, 2, 4)]),
    (lambda x: F.adaptive_max_pool1d(x, 3), [(2, 1, 7)]),
    (lambda x: F.adaptive_max_pool2d(x, (2, 3)), [(1, 2, 5, 4)]),
    (lambda x: F.adaptive_max_pool3d(x, 2), [(1, 1, 3, 3, 3)]),
])
def test_gradcheck_float64(fn, shape):
    rng = np.random.default_rng(3)
    # distinct values: finite differences can't see through a tie in a max
    inputs = [corenn.tensor(rng.permutation(int(np.prod(s))).reshape(s) / 7.0 + rng.uniform(0, 1e-3, s),
                            requires_grad=True) for s in shape]
    assert gradcheck(fn, tuple(inputs))


def test_adaptive_max_pool_nan_wins_at_its_last_position_and_indices_match():
    array = np.array([[[1.0, np.nan, 3.0, np.nan, 0.5, 2.0, 2.0]]])
    expected = TF.adaptive_max_pool1d(torch.tensor(array), 3, return_indices=True)
    got = F.adaptive_max_pool1d(corenn.tensor(array), 3, return_indices=True)
    np.testing.assert_array_equal(got[0].numpy(), expected[0].numpy())
    np.testing.assert_array_equal(got[1].numpy(), expected[1].numpy())


@pytest.mark.parametrize("call", [
    lambda lib: lib.adaptive_max_pool2d(lib_zeros(lib, 1, 2, 3, 4), (2, 2, 2)),
    lambda lib: lib.adaptive_max_pool1d(lib_zeros(lib, 1, 2, 3, 4), 2),
    lambda lib: lib.max_pool3d(lib_zeros(lib, 1, 2), 2),
    lambda lib: lib.conv_transpose3d(lib_zeros(lib, 1, 2, 3, 4, 4), lib_zeros(lib, 2, 1, 2, 2)),
])
def test_errors_have_pytorch_types(call):
    with pytest.raises(Exception) as expected:
        call(TF)
    with pytest.raises(type(expected.value)):
        call(F)


def lib_zeros(lib, *shape):
    return torch.zeros(shape) if lib is TF else corenn.zeros(shape)
