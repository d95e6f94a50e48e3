"""F.grid_sample (bilinear, nearest, bicubic; zeros, border, reflection; align_corners; 4-D and 5-D),
F.affine_grid and the torch-level grid_sampler / grid_sampler_2d / grid_sampler_3d / affine_grid_generator against
PyTorch 2.13 (float64 values and gradients for input and grid), gradcheck, float32, warnings, errors."""
from __future__ import annotations

import warnings

import numpy as np
import pytest

import corenn
import corenn.nn.functional as F
from corenn.autograd import gradcheck

from _breadth_oracle import compare_with_torch

torch = pytest.importorskip("torch")
TF = torch.nn.functional
pytestmark = pytest.mark.torch
RNG = np.random.default_rng(31)

SAMPLES = [(dims, mode, padding, align) for dims in (2, 3) for mode in ("bilinear", "nearest", "bicubic")
           for padding in ("zeros", "border", "reflection") for align in (False, True)
           if not (mode == "bicubic" and dims == 3)]


@pytest.mark.parametrize("dims,mode,padding,align", SAMPLES)
def test_grid_sample_matches_torch(dims, mode, padding, align):
    image = RNG.standard_normal((2, 3) + (4, 5, 3)[:dims])
    grid = RNG.uniform(-1.5, 1.5, (2,) + (3, 2, 4)[:dims] + (dims,))  # points outside [-1, 1] too
    compare_with_torch(lambda x, g: F.grid_sample(x, g, mode, padding, align),
                       lambda x, g: TF.grid_sample(x, g, mode, padding, align), [image, grid], torch)


@pytest.mark.parametrize("mode,padding,align", [("bilinear", "zeros", False), ("bilinear", "reflection", True),
                                                ("bilinear", "border", False), ("bicubic", "zeros", True),
                                                ("bicubic", "reflection", False)])
def test_grid_sample_gradcheck(mode, padding, align):
    image = corenn.tensor(RNG.standard_normal((1, 2, 3, 4)), requires_grad=True)
    # points away from the integer source coordinates and the borders, where the weights have kinks
    grid = corenn.tensor(RNG.uniform(-0.8, 0.8, (1, 2, 3, 2)), requires_grad=True)
    assert gradcheck(lambda x, g: F.grid_sample(x, g, mode, padding, align), (image, grid))
    volume = corenn.tensor(RNG.standard_normal((1, 1, 2, 3, 3)), requires_grad=True)
    grid3 = corenn.tensor(RNG.uniform(-0.8, 0.8, (1, 2, 1, 2, 3)), requires_grad=True)
    if mode == "bilinear":
        assert gradcheck(lambda x, g: F.grid_sample(x, g, mode, padding, align), (volume, grid3))


def test_grid_sample_float32_and_identity():
    image = RNG.standard_normal((1, 2, 5, 4)).astype(np.float32)
    grid = RNG.uniform(-1, 1, (1, 3, 3, 2)).astype(np.float32)
    ours = F.grid_sample(corenn.tensor(image), corenn.tensor(grid), align_corners=False)
    assert ours.dtype == corenn.float32
    np.testing.assert_allclose(ours.numpy(), TF.grid_sample(torch.tensor(image), torch.tensor(grid),
                                                            align_corners=False).numpy(), rtol=1e-5, atol=1e-6)
    identity = F.affine_grid(corenn.tensor([[[1.0, 0, 0], [0, 1, 0]]]), [1, 2, 5, 4], align_corners=False)
    np.testing.assert_allclose(F.grid_sample(corenn.tensor(image), identity, align_corners=False).numpy(), image,
                               atol=1e-6)


@pytest.mark.parametrize("size", [[2, 3, 4, 5], [2, 1, 3, 1, 4], [1, 1, 1, 3]])
@pytest.mark.parametrize("align", [False, True])
def test_affine_grid_matches_torch(size, align):
    dims = len(size) - 2
    theta = RNG.standard_normal((size[0], dims, dims + 1))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # unit-size grids with align_corners=True warn in both
        compare_with_torch(lambda t: F.affine_grid(t, size, align), lambda t: TF.affine_grid(t, size, align),
                           [theta], torch)
        compare_with_torch(lambda t: corenn.affine_grid_generator(t, size, align),
                           lambda t: torch.affine_grid_generator(t, size, align), [theta], torch)
    assert gradcheck(lambda t: F.affine_grid(t, size, False), (corenn.tensor(theta, requires_grad=True),))


def test_torch_level_grid_samplers_match_torch():
    image, grid = RNG.standard_normal((2, 3, 4, 5)), RNG.uniform(-1.2, 1.2, (2, 3, 2, 2))
    for mode in (0, 1, 2):
        for padding in (0, 1, 2):
            compare_with_torch(lambda x, g: corenn.grid_sampler(x, g, mode, padding, True),
                               lambda x, g: torch.grid_sampler(x, g, mode, padding, True), [image, grid], torch)
    compare_with_torch(lambda x, g: corenn.grid_sampler_2d(x, g, 0, 2, False),
                       lambda x, g: torch.grid_sampler_2d(x, g, 0, 2, False), [image, grid], torch)
    volume, grid3 = RNG.standard_normal((1, 2, 3, 3, 2)), RNG.uniform(-1, 1, (1, 2, 1, 2, 3))
    compare_with_torch(lambda x, g: corenn.grid_sampler_3d(x, g, 1, 1, False),
                       lambda x, g: torch.grid_sampler_3d(x, g, 1, 1, False), [volume, grid3], torch)


def test_align_corners_default_warns_as_torch():
    with pytest.warns(UserWarning, match="Default grid_sample and affine_grid behavior has changed"):
        F.grid_sample(corenn.ones(1, 1, 2, 2), corenn.zeros(1, 1, 1, 2))
    with pytest.warns(UserWarning, match="Default grid_sample and affine_grid behavior has changed"):
        F.affine_grid(corenn.zeros(1, 2, 3), [1, 1, 2, 2])


def test_errors():
    image = corenn.ones(1, 1, 3, 3)
    with pytest.raises(ValueError, match="expected mode to be 'bilinear', 'nearest' or 'bicubic', but got: 'area'"):
        F.grid_sample(image, corenn.zeros(1, 2, 2, 2), mode="area", align_corners=False)
    with pytest.raises(ValueError, match="expected padding_mode to be 'zeros', 'border', or 'reflection'"):
        F.grid_sample(image, corenn.zeros(1, 2, 2, 2), padding_mode="wrap", align_corners=False)
    with pytest.raises(RuntimeError, match="expected grid to have size 2 in last dimension"):
        F.grid_sample(image, corenn.zeros(1, 2, 2, 3), align_corners=False)
    with pytest.raises(RuntimeError, match="expected grid and input to have same batch size"):
        F.grid_sample(image, corenn.zeros(2, 2, 2, 2), align_corners=False)
    with pytest.raises(RuntimeError, match="expected 4D or 5D input and grid with same number of dimensions"):
        F.grid_sample(image, corenn.zeros(1, 2, 2, 2, 3), align_corners=False)
    with pytest.raises(RuntimeError, match="bicubic interpolation only supports 4D input"):
        F.grid_sample(corenn.ones(1, 1, 2, 2, 2), corenn.zeros(1, 1, 1, 1, 3), mode="bicubic", align_corners=False)
    with pytest.raises(ValueError, match="Expected a batch of 2D affine matrices of shape Nx2x3 for size"):
        F.affine_grid(corenn.zeros(1, 3, 4), [1, 1, 2, 2], align_corners=False)
    with pytest.raises(ValueError, match="Expected theta to have floating point type"):
        F.affine_grid(corenn.zeros(1, 2, 3, dtype=corenn.int64), [1, 1, 2, 2], align_corners=False)
    with pytest.raises(NotImplementedError, match="affine_grid only supports 4D and 5D sizes"):
        F.affine_grid(corenn.zeros(1, 2, 3), [1, 1, 2], align_corners=False)
    with pytest.raises(ValueError, match="Expected non-zero, positive output size"):
        F.affine_grid(corenn.zeros(1, 2, 3), [1, 1, 0, 2], align_corners=False)


@pytest.mark.parametrize("dims,mode", [(2, "bilinear"), (2, "nearest"), (2, "bicubic"), (3, "bilinear"),
                                       (3, "nearest")])
@pytest.mark.parametrize("padding", ["zeros", "border", "reflection"])
@pytest.mark.parametrize("align", [False, True])
def test_grid_sample_non_finite_points_match_torch(dims, mode, padding, align):
    # PyTorch's 2-d and 3-d CPU kernels send a NaN coordinate to different places; corenn follows each
    image = np.arange(4.0 ** dims).reshape((1, 1) + (4,) * dims)
    grid = RNG.uniform(-1, 1, (1, 2, 3, dims) if dims == 2 else (1, 1, 2, 3, dims))
    flat = grid.reshape(-1)
    flat[[0, 2, 4]] = [np.nan, np.inf, -np.inf]
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no numpy warning either
        ours = F.grid_sample(corenn.tensor(image), corenn.tensor(grid), mode, padding, align).numpy()
    theirs = TF.grid_sample(torch.tensor(image), torch.tensor(grid), mode, padding, align).numpy()
    np.testing.assert_allclose(ours, theirs, rtol=1e-12, equal_nan=True)
