"""InstanceNorm1d/2d/3d (affine, running statistics, unbatched input), F.instance_norm, RMSNorm and
LocalResponseNorm against PyTorch 2.13 on copied weights (float64 values and gradients), gradcheck."""
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
RNG = np.random.default_rng(3)


def _copy_state(ours, theirs):
    for name, value in theirs.state_dict().items():
        mine = ours.state_dict()[name]
        with corenn.no_grad():
            mine.copy_(corenn.tensor(value.numpy().copy()))


@pytest.mark.parametrize("layer,shape", [("InstanceNorm1d", (3, 4, 5)), ("InstanceNorm1d", (4, 5)),
                                         ("InstanceNorm2d", (2, 4, 3, 5)), ("InstanceNorm2d", (4, 3, 3)),
                                         ("InstanceNorm3d", (2, 4, 2, 3, 2))])
@pytest.mark.parametrize("affine,track", [(False, False), (True, False), (True, True), (False, True)])
def test_instance_norm_layer_matches_torch(layer, shape, affine, track):
    ours = getattr(nn, layer)(4, affine=affine, track_running_stats=track, momentum=0.3).double()
    theirs = getattr(torch.nn, layer)(4, affine=affine, track_running_stats=track, momentum=0.3).double()
    assert repr(ours) == repr(theirs)
    assert list(ours.state_dict()) == list(theirs.state_dict())
    if affine:
        with torch.no_grad():
            theirs.weight.copy_(torch.tensor(RNG.uniform(0.5, 1.5, 4)))
            theirs.bias.copy_(torch.tensor(RNG.standard_normal(4)))
        _copy_state(ours, theirs)
    for step in range(2):
        compare_with_torch(ours, theirs, [RNG.standard_normal(shape) * 2 + 1], torch, seed=step)
        if affine:
            np.testing.assert_allclose(ours.weight.grad.numpy(), theirs.weight.grad.numpy(), rtol=1e-10)
            np.testing.assert_allclose(ours.bias.grad.numpy(), theirs.bias.grad.numpy(), rtol=1e-10)
            ours.zero_grad(), theirs.zero_grad()
    for name, value in theirs.state_dict().items():
        np.testing.assert_allclose(ours.state_dict()[name].numpy(), value.numpy(), rtol=1e-12, err_msg=name)
    ours.eval(), theirs.eval()       # eval uses the running statistics only when they are tracked
    compare_with_torch(ours, theirs, [RNG.standard_normal(shape)], torch)


def test_functional_instance_norm_with_running_stats_and_eval():
    x = RNG.standard_normal((3, 2, 6))
    mean, var = RNG.standard_normal(2), RNG.uniform(0.5, 2, 2)
    weight, bias = RNG.standard_normal(2), RNG.standard_normal(2)
    ours_stats = [corenn.tensor(mean.copy()), corenn.tensor(var.copy())]
    theirs_stats = [torch.tensor(mean.copy()), torch.tensor(var.copy())]
    compare_with_torch(lambda x, w, b: F.instance_norm(x, *ours_stats, w, b, momentum=0.2),
                       lambda x, w, b: TF.instance_norm(x, *theirs_stats, w, b, momentum=0.2), [x, weight, bias],
                       torch)
    for mine, theirs in zip(ours_stats, theirs_stats):
        np.testing.assert_allclose(mine.numpy(), theirs.numpy(), rtol=1e-12)
    compare_with_torch(lambda x: F.instance_norm(x, *ours_stats, use_input_stats=False),
                       lambda x: TF.instance_norm(x, *theirs_stats, use_input_stats=False), [x], torch)


def test_instance_norm_errors():
    with pytest.raises(ValueError, match="expected 3D or 4D input"):
        nn.InstanceNorm2d(3)(corenn.zeros(3, 4))
    with pytest.raises(ValueError, match="Expected more than 1 spatial element when training"):
        F.instance_norm(corenn.zeros(2, 3, 1))
    with pytest.raises(ValueError, match="to match num_features"):
        nn.InstanceNorm1d(3, affine=True)(corenn.zeros(2, 4, 5))
    with pytest.warns(UserWarning, match="does not match num_features"):
        nn.InstanceNorm1d(3)(corenn.randn(2, 4, 5))
    with pytest.raises(RuntimeError, match="running_mean and running_var to be defined"):
        F.instance_norm(corenn.zeros(2, 3, 4), use_input_stats=False)
    with pytest.raises(TypeError, match=r"instance_norm\(\): argument 'input' must be Tensor"):
        F.instance_norm(None)


@pytest.mark.parametrize("shape,normalized,eps", [((3, 4), (4,), None), ((2, 3, 4), (3, 4), 1e-3)])
def test_rms_norm_matches_torch(shape, normalized, eps):
    weight = RNG.uniform(0.5, 1.5, normalized)
    compare_with_torch(lambda x, w: F.rms_norm(x, normalized, w, eps), lambda x, w: TF.rms_norm(x, normalized, w, eps),
                       [RNG.standard_normal(shape), weight], torch)
    ours, theirs = nn.RMSNorm(normalized, eps=eps).double(), torch.nn.RMSNorm(normalized, eps=eps).double()
    assert repr(ours) == repr(theirs)
    compare_with_torch(ours, theirs, [RNG.standard_normal(shape)], torch)
    np.testing.assert_allclose(ours.weight.grad.numpy(), theirs.weight.grad.numpy(), rtol=1e-10)
    with pytest.raises(RuntimeError, match="rms_norm: Given normalized_shape"):
        F.rms_norm(corenn.zeros(2, 5), (4,))


@pytest.mark.parametrize("shape,size", [((2, 5, 3), 3), ((2, 6, 3, 2), 2), ((1, 4, 2, 2, 3), 5)])
def test_local_response_norm_matches_torch(shape, size):
    ours, theirs = nn.LocalResponseNorm(size, alpha=0.3, beta=0.6, k=2.0), torch.nn.LocalResponseNorm(
        size, alpha=0.3, beta=0.6, k=2.0)
    assert repr(ours) == repr(theirs)
    compare_with_torch(ours, theirs, [RNG.standard_normal(shape)], torch)
    with pytest.raises(ValueError, match="Expected 3D or higher dimensionality input"):
        F.local_response_norm(corenn.zeros(2, 3), 2)


def test_gradcheck_float64():
    def t(*shape):
        return corenn.tensor(RNG.standard_normal(shape), requires_grad=True)

    assert gradcheck(lambda x, w, b: F.instance_norm(x, weight=w, bias=b), (t(2, 3, 4), t(3), t(3)))
    assert gradcheck(lambda x, w: F.rms_norm(x, (4,), w, 1e-5), (t(3, 4), t(4)))
    assert gradcheck(lambda x: F.local_response_norm(x, 3, alpha=0.5, k=1.5), (t(2, 4, 3),))


def test_batch_norm_3d_matches_torch():
    ours, theirs = nn.BatchNorm3d(3, momentum=0.2).double(), torch.nn.BatchNorm3d(3, momentum=0.2).double()
    assert repr(ours) == repr(theirs)
    for step in range(2):
        compare_with_torch(ours, theirs, [RNG.standard_normal((2, 3, 2, 3, 2))], torch, seed=step)
    np.testing.assert_allclose(ours.weight.grad.numpy(), theirs.weight.grad.numpy(), rtol=1e-10)
    for name, value in theirs.state_dict().items():
        np.testing.assert_allclose(ours.state_dict()[name].numpy(), value.numpy(), rtol=1e-12, err_msg=name)
    ours.eval(), theirs.eval()
    compare_with_torch(ours, theirs, [RNG.standard_normal((2, 3, 2, 3, 2))], torch)
    with pytest.raises(ValueError, match="expected 5D input"):
        ours(corenn.zeros(2, 3, 4))
