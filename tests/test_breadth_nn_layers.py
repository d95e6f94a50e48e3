"""MaxUnpool1d/2d/3d, the *_with_indices pooling functions, LPPool3d (and the inf norms of lp_pool) against
PyTorch 2.13 (float64 values and gradients), gradcheck, errors."""
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
RNG = np.random.default_rng(22)

UNPOOLS = [(1, (2, 3, 8), dict(kernel_size=2)), (1, (3, 7), dict(kernel_size=3, stride=2, padding=1)),
           (2, (2, 2, 6, 4), dict(kernel_size=2)), (2, (1, 3, 7, 5), dict(kernel_size=3, stride=2, padding=1)),
           (2, (2, 5, 4), dict(kernel_size=(2, 1), stride=(2, 1))), (3, (1, 2, 4, 4, 6), dict(kernel_size=2)),
           (3, (2, 5, 4, 4), dict(kernel_size=(3, 2, 2), stride=(2, 2, 1), padding=(1, 0, 1)))]


@pytest.mark.parametrize("n,shape,options", UNPOOLS)
def test_max_unpool_matches_torch(n, shape, options):
    x = torch.tensor(RNG.standard_normal(shape))
    pooled, indices = getattr(TF, f"max_pool{n}d")(x, return_indices=True, **options)
    ours_layer, theirs_layer = getattr(nn, f"MaxUnpool{n}d")(**options), getattr(torch.nn, f"MaxUnpool{n}d")(**options)
    assert repr(ours_layer) == repr(theirs_layer)
    ours_indices = corenn.tensor(indices.numpy())
    compare_with_torch(lambda p: ours_layer(p, ours_indices), lambda p: theirs_layer(p, indices),
                       [pooled.numpy()], torch)
    planes = indices.reshape(-1, indices.shape[-n - 1:].numel()) if indices.ndim == n + 2 else indices.reshape(1, -1)
    if all(len(set(row.tolist())) == len(row) for row in planes):
        # repeated indices (overlapping windows) keep one value: PyTorch's backward (a gather) is then not
        # the derivative, and finite differences see that
        assert gradcheck(lambda p: getattr(F, f"max_unpool{n}d")(p, ours_indices, **options),
                         (corenn.tensor(pooled.numpy(), requires_grad=True),))


def test_max_unpool_output_size_and_duplicates():
    x = torch.tensor(RNG.standard_normal((1, 1, 5, 5)))
    pooled, indices = TF.max_pool2d(x, 2, return_indices=True)
    theirs = TF.max_unpool2d(pooled, indices, 2, output_size=(5, 5))
    ours = F.max_unpool2d(corenn.tensor(pooled.numpy()), corenn.tensor(indices.numpy()), 2, output_size=[1, 1, 5, 5])
    np.testing.assert_array_equal(ours.numpy(), theirs.numpy())
    # overlapping windows give repeated indices; the gradient reaches every input that read the position
    pooled, indices = TF.max_pool1d(torch.tensor([[[0., 5., 1., 0.]]]), 2, stride=1, return_indices=True)
    compare_with_torch(lambda p: F.max_unpool1d(p, corenn.tensor(indices.numpy()), 2, stride=1),
                       lambda p: TF.max_unpool1d(p, indices, 2, stride=1), [pooled.numpy()], torch)


def test_max_unpool_errors():
    values = corenn.randn(1, 1, 2, 2)
    with pytest.raises(RuntimeError, match="Found an invalid max index: 99 \\(output volumes are of size 4x4\\)"):
        F.max_unpool2d(values, corenn.full((1, 1, 2, 2), 99), 2)
    with pytest.raises(RuntimeError, match="Found an invalid max index: -1 \\(output volumes are of size 4x1\\)"):
        F.max_unpool1d(corenn.randn(1, 1, 2), corenn.full((1, 1, 2), -1), 2)
    with pytest.raises(RuntimeError, match="elements in indices should be type int64 but got: Int"):
        F.max_unpool2d(values, corenn.zeros(1, 1, 2, 2, dtype=corenn.int32), 2)
    with pytest.raises(RuntimeError, match="Expected shape of indices to be same as that of the input tensor"):
        F.max_unpool2d(values, corenn.zeros(1, 1, 2, 3, dtype=corenn.int64), 2)
    with pytest.raises(RuntimeError, match="Input to max_unpooling2d should be a 3d or 4d Tensor"):
        F.max_unpool2d(corenn.randn(2, 2), corenn.zeros(2, 2, dtype=corenn.int64), 2)
    with pytest.raises(ValueError, match="invalid output_size"):
        F.max_unpool2d(values, corenn.zeros(1, 1, 2, 2, dtype=corenn.int64), 2, output_size=(9, 9))
    with pytest.raises(ValueError, match="output_size should be a sequence containing 2 or 4 elements"):
        F.max_unpool2d(values, corenn.zeros(1, 1, 2, 2, dtype=corenn.int64), 2, output_size=(4, 4, 4))


@pytest.mark.parametrize("n", [1, 2, 3])
def test_with_indices_functions_match_torch(n):
    shape = (2, 3) + (7, 6, 5)[:n]
    x = RNG.standard_normal(shape)
    for name, args in ((f"max_pool{n}d_with_indices", (3, 2, 1)), (f"adaptive_max_pool{n}d_with_indices", (3,))):
        ours = getattr(F, name)(corenn.tensor(x), *args)
        theirs = getattr(TF, name)(torch.tensor(x), *args)
        assert isinstance(ours, tuple) and len(ours) == 2
        np.testing.assert_array_equal(ours[0].numpy(), theirs[0].numpy())
        np.testing.assert_array_equal(ours[1].numpy(), theirs[1].numpy())
        assert ours[1].dtype == corenn.int64
        compare_with_torch(lambda t: getattr(F, name)(t, *args)[0], lambda t: getattr(TF, name)(t, *args)[0],
                           [x], torch)
    top = corenn.max_pool1d_with_indices(corenn.tensor(x.reshape(-1, x.shape[-1])), 2)
    np.testing.assert_array_equal(top[1].numpy(),
                                  torch.max_pool1d_with_indices(torch.tensor(x.reshape(-1, x.shape[-1])), 2)[1])


@pytest.mark.parametrize("norm_type", [1.0, 2.0, 3.0, float("inf"), -float("inf")])
@pytest.mark.parametrize("options", [dict(kernel_size=2), dict(kernel_size=(2, 3, 1), stride=(1, 2, 2)),
                                     dict(kernel_size=2, stride=2, ceil_mode=True)])
def test_lp_pool3d_matches_torch(norm_type, options):
    x = RNG.uniform(0.2, 2.0, (2, 2, 5, 5, 4))
    ours, theirs = nn.LPPool3d(norm_type, **options), torch.nn.LPPool3d(norm_type, **options)
    assert repr(ours) == repr(theirs)
    compare_with_torch(ours, theirs, [x], torch, rtol=1e-9)
    if np.isfinite(norm_type):
        assert gradcheck(lambda t: F.lp_pool3d(t, norm_type, **options), (corenn.tensor(x, requires_grad=True),))


@pytest.mark.parametrize("n", [1, 2])
def test_lp_pool_inf_norms_match_torch(n):
    x = RNG.standard_normal((2, 3) + (6, 5)[:n])
    for norm_type in (float("inf"), -float("inf")):
        compare_with_torch(lambda t: getattr(F, f"lp_pool{n}d")(t, norm_type, 2),
                           lambda t: getattr(TF, f"lp_pool{n}d")(t, norm_type, 2), [x], torch)
