"""nn.utils: gradient clipping and flat parameter vectors (vs PyTorch), skip_init skipping the work."""
import math

import numpy as np
import pytest

import corenn
from corenn import nn


def grads_pair(torch, norm_scale=1.0):
    rng = np.random.default_rng(0)
    arrays = [rng.standard_normal(s).astype(np.float32) * norm_scale for s in [(3, 4), (5,), (2, 2, 2)]]
    t_params, c_params = [], []
    for a in arrays:
        tp = torch.nn.Parameter(torch.zeros(a.shape))
        tp.grad = torch.tensor(a)
        cp = nn.Parameter(corenn.zeros(*a.shape))
        cp.grad = corenn.tensor(a)
        t_params.append(tp)
        c_params.append(cp)
    t_params[1].grad = None  # a parameter without gradient is skipped
    c_params[1].grad = None
    return t_params, c_params


@pytest.mark.torch
@pytest.mark.parametrize("norm_type", [2.0, 1.0, 0.5, 3, math.inf])
@pytest.mark.parametrize("max_norm", [0.1, 1000.0])
def test_clip_grad_norm_matches_torch(torch, norm_type, max_norm):
    t_params, c_params = grads_pair(torch)
    t_total = torch.nn.utils.clip_grad_norm_(t_params, max_norm, norm_type=norm_type)
    c_total = nn.utils.clip_grad_norm_(c_params, max_norm, norm_type=norm_type)
    assert isinstance(c_total, corenn.Tensor) and c_total.dim() == 0
    assert c_total.item() == pytest.approx(t_total.item(), rel=1e-5)
    for tp, cp in zip(t_params, c_params):
        if tp.grad is None:
            assert cp.grad is None
        else:
            np.testing.assert_allclose(cp.grad.numpy(), tp.grad.numpy(), rtol=1e-5, atol=1e-7)


def test_clip_grad_norm_single_tensor_and_empty():
    p = nn.Parameter(corenn.ones(4))
    p.grad = corenn.full((4,), 3.0)
    assert nn.utils.clip_grad_norm_(p, 1.0).item() == pytest.approx(6.0)
    assert float(p.grad.norm()) == pytest.approx(1.0, rel=1e-5)
    assert nn.utils.clip_grad_norm_([nn.Parameter(corenn.ones(1))], 1.0).item() == 0.0


def test_clip_grad_norm_nonfinite():
    p = nn.Parameter(corenn.ones(2))
    p.grad = corenn.tensor([float("nan"), 1.0])
    with pytest.raises(RuntimeError, match="is non-finite, so it cannot be clipped"):
        nn.utils.clip_grad_norm_([p], 1.0, error_if_nonfinite=True)
    total = nn.utils.clip_grad_norm_([p], 1.0)
    assert math.isnan(total.item())


def test_clip_grad_norm_deprecated_alias_warns():
    p = nn.Parameter(corenn.ones(1))
    p.grad = corenn.ones(1)
    with pytest.warns(FutureWarning, match="deprecated"):
        nn.utils.clip_grad_norm([p], 1.0)


@pytest.mark.torch
def test_clip_grad_value_matches_torch(torch):
    t_params, c_params = grads_pair(torch, norm_scale=3.0)
    torch.nn.utils.clip_grad_value_(t_params, 1.5)
    assert nn.utils.clip_grad_value_(c_params, 1.5) is None
    for tp, cp in zip(t_params, c_params):
        if tp.grad is not None:
            np.testing.assert_array_equal(cp.grad.numpy(), tp.grad.numpy())


@pytest.mark.torch
def test_parameters_to_vector_round_trip_matches_torch(torch):
    torch.manual_seed(0)
    t_net = torch.nn.Sequential(torch.nn.Linear(3, 2), torch.nn.Linear(2, 1))
    c_net = nn.Sequential(nn.Linear(3, 2), nn.Linear(2, 1))
    for (_, tp), (_, cp) in zip(t_net.named_parameters(), c_net.named_parameters()):
        cp.data = corenn.tensor(tp.detach().numpy())
    t_vec = torch.nn.utils.parameters_to_vector(t_net.parameters())
    c_vec = nn.utils.parameters_to_vector(c_net.parameters())
    np.testing.assert_array_equal(c_vec.detach().numpy(), t_vec.detach().numpy())
    assert c_vec.requires_grad  # the flat vector is part of the graph, as in PyTorch
    new = corenn.arange(float(c_vec.numel()))
    weight = c_net[0].weight
    nn.utils.vector_to_parameters(new, c_net.parameters())
    assert c_net[0].weight is weight
    assert c_net[0].weight.tolist() == [[0.0, 1.0, 2.0], [3.0, 4.0, 5.0]]
    assert c_net[1].bias.tolist() == [10.0]
    new.add_(100.0)  # parameters are views of the vector, as in PyTorch
    assert c_net[1].bias.tolist() == [110.0]


def test_vector_to_parameters_errors():
    params = [nn.Parameter(corenn.zeros(2, 2))]
    with pytest.raises(TypeError, match="expected corenn.Tensor, but got: list"):
        nn.utils.vector_to_parameters([1.0], params)
    with pytest.raises(RuntimeError, match="the vector has 3 elements but the parameters hold 4"):
        nn.utils.vector_to_parameters(corenn.zeros(3), params)
    with pytest.raises(RuntimeError, match="expected a 1-D vector"):
        nn.utils.vector_to_parameters(corenn.zeros(2, 2), params)


class CountingFills:
    """Counts the random fills that initialisation performs (the work skip_init must skip)."""

    def __init__(self, monkeypatch):
        self.calls = 0
        for name in ("uniform_", "normal_"):
            original = getattr(corenn.Tensor, name)

            def counted(tensor, *args, _original=original, **kwargs):
                self.calls += 1
                return _original(tensor, *args, **kwargs)

            monkeypatch.setattr(corenn.Tensor, name, counted)


def test_skip_init_skips_the_initialisation_work(monkeypatch):
    counter = CountingFills(monkeypatch)
    nn.Linear(64, 32)
    assert counter.calls == 2  # weight and bias fills when constructed normally
    counter.calls = 0
    m = nn.utils.skip_init(nn.Linear, 64, 32)
    assert counter.calls == 0
    assert isinstance(m.weight, nn.Parameter) and m.weight.shape == (32, 64) and m.weight.requires_grad
    nn.init.orthogonal_(m.weight)  # after construction, init runs again
    w = m.weight.detach().numpy()
    np.testing.assert_allclose(w @ w.T, np.eye(32), atol=1e-5)


def test_skip_init_passes_arguments_and_device():
    m = nn.utils.skip_init(nn.Linear, 5, 3, bias=False, dtype=corenn.float64, device="cpu")
    assert m.bias is None and m.weight.dtype is corenn.float64 and m.weight.device.type == "cpu"


def test_skip_init_custom_module_and_errors():
    class Custom(nn.Module):
        def __init__(self, n, device=None):
            super().__init__()
            self.w = nn.Parameter(corenn.zeros(n, device=device))
            nn.init.ones_(self.w)

    assert nn.utils.skip_init(Custom, 3).w.tolist() == [0.0, 0.0, 0.0]  # ones_ skipped
    assert Custom(3).w.tolist() == [1.0, 1.0, 1.0]  # and only inside skip_init

    class NoDevice(nn.Module):
        def __init__(self, n):
            super().__init__()

    with pytest.raises(RuntimeError, match="Module must support a 'device' arg to skip initialization"):
        nn.utils.skip_init(NoDevice, 3)
    with pytest.raises(RuntimeError, match="Expected a Module"):
        nn.utils.skip_init(dict)
