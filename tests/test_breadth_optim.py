"""optim.Adafactor against torch.optim.Adafactor 2.13: trajectories over several steps (matrices, vectors,
3-d tensors, weight decay, maximize, eps1, d, lr schedules), state, state_dict round trip, errors."""
from __future__ import annotations

import numpy as np
import pytest

import corenn

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.torch
RNG = np.random.default_rng(1)

OPTIONS = [dict(), dict(lr=0.05, weight_decay=0.1), dict(beta2_decay=-0.5, eps=(1e-20, 1e-2), d=2.0),
           dict(maximize=True), dict(lr=0.3, eps=(None, 0.0))]


def _run(lib, arrays, grads, options, steps=4):
    params = [lib.nn.Parameter(lib.tensor(a)) for a in arrays]
    optimizer = lib.optim.Adafactor(params, **options)
    for step in range(steps):
        for p, g in zip(params, grads):
            p.grad = lib.tensor(g * (step + 1) - 0.3 * step)
        optimizer.step()
    return params, optimizer


@pytest.mark.parametrize("options", OPTIONS)
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_adafactor_matches_torch(options, dtype):
    shapes = [(4, 3), (5,), (2, 3, 4), ()]
    arrays = [RNG.standard_normal(s).astype(dtype) for s in shapes]
    grads = [RNG.standard_normal(s).astype(dtype) for s in shapes]
    ours, ours_opt = _run(corenn, arrays, grads, options)
    theirs, theirs_opt = _run(torch, arrays, grads, options)
    tolerance = dict(rtol=1e-10, atol=1e-12) if dtype == np.float64 else dict(rtol=2e-5, atol=1e-6)
    for p, q in zip(ours, theirs):
        np.testing.assert_allclose(p.detach().numpy(), q.detach().numpy(), **tolerance)
    for p, q in zip(ours, theirs):
        ours_state, theirs_state = ours_opt.state[p], theirs_opt.state[q]
        assert sorted(ours_state) == sorted(theirs_state)
        for key, value in theirs_state.items():
            np.testing.assert_allclose(ours_state[key].numpy(), value.numpy(), **tolerance)
            assert ours_state[key].dtype.itemsize == value.dtype.itemsize


def test_adafactor_state_dict_round_trip_and_repr():
    params, optimizer = _run(corenn, [RNG.standard_normal((3, 2))], [RNG.standard_normal((3, 2))], {})
    fresh = corenn.optim.Adafactor(params)
    fresh.load_state_dict(optimizer.state_dict())
    assert float(fresh.state[params[0]]["step"]) == 4.0
    theirs = torch.optim.Adafactor([torch.nn.Parameter(torch.zeros(2))])
    ours = corenn.optim.Adafactor([corenn.nn.Parameter(corenn.zeros(2))])
    assert ours.defaults == theirs.defaults


def test_adafactor_errors():
    p = [corenn.nn.Parameter(corenn.zeros(2))]
    with pytest.raises(ValueError, match="Learning rate should be >= 0 but is: -1"):
        corenn.optim.Adafactor(p, lr=-1)
    with pytest.raises(ValueError, match="beta2_decay should be <= 0 but is: 0.5"):
        corenn.optim.Adafactor(p, beta2_decay=0.5)
    with pytest.raises(ValueError, match="epsilon1 should be >= 0 but is: -1"):
        corenn.optim.Adafactor(p, eps=(-1, 1e-3))
    with pytest.raises(ValueError, match="Clipping threshold d should be >= 1 but is: 0.5"):
        corenn.optim.Adafactor(p, d=0.5)
    with pytest.raises(ValueError, match="weight_decay should be >= 0 but is: -0.1"):
        corenn.optim.Adafactor(p, weight_decay=-0.1)


MUON = [dict(lr=0.02), dict(lr=0.05, nesterov=False, weight_decay=0.0, adjust_lr_fn="match_rms_adamw"),
        dict(momentum=0.5, ns_steps=3, ns_coefficients=(2.0, -1.5, 0.5), eps=1e-3)]


@pytest.mark.parametrize("options", MUON)
@pytest.mark.parametrize("shape", [(6, 4), (3, 5), (8, 8)])
def test_muon_matches_torch(options, shape):
    start = RNG.standard_normal(shape).astype(np.float32)
    grads = [RNG.standard_normal(shape).astype(np.float32) for _ in range(3)]
    ours, theirs = corenn.nn.Parameter(corenn.tensor(start)), torch.nn.Parameter(torch.tensor(start))
    ours_opt, theirs_opt = corenn.optim.Muon([ours], **options), torch.optim.Muon([theirs], **options)
    for g in grads:
        ours.grad, theirs.grad = corenn.tensor(g), torch.tensor(g)
        ours_opt.step(), theirs_opt.step()
    # the Newton-Schulz steps run in bfloat16 as PyTorch's: only float32 summation order may differ
    np.testing.assert_allclose(ours.detach().numpy(), theirs.detach().numpy(), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(ours_opt.state[ours]["momentum_buffer"].numpy(),
                               theirs_opt.state[theirs]["momentum_buffer"].numpy(), rtol=1e-6, atol=1e-7)
    assert ours_opt.defaults == theirs_opt.defaults


def test_muon_orthogonalization_is_pytorchs_bfloat16_iteration():
    from corenn.optim.muon import _zeropower_via_newtonschulz
    from torch.optim._muon import _zeropower_via_newtonschulz as reference
    for shape in [(6, 4), (3, 5), (32, 20)]:
        g = RNG.standard_normal(shape).astype(np.float32)
        ours = _zeropower_via_newtonschulz(np, g, (3.4445, -4.775, 2.0315), 5, 1e-7)
        theirs = reference(torch.tensor(g), (3.4445, -4.775, 2.0315), 5, 1e-7).float().numpy()
        assert (ours != theirs).mean() < 0.02  # bfloat16 values: a different float32 sum may round one way
        np.testing.assert_allclose(ours, theirs, atol=2e-2)


def test_muon_errors():
    with pytest.raises(ValueError, match="Muon only supports 2D parameters whereas we found a parameter with size"):
        corenn.optim.Muon([corenn.nn.Parameter(corenn.zeros(3))])
    p = [corenn.nn.Parameter(corenn.zeros(2, 2))]
    with pytest.raises(ValueError, match="Adjust learning rate function bad is not supported"):
        corenn.optim.Muon(p, adjust_lr_fn="bad")
    with pytest.raises(ValueError, match="momentum should be >= 0 but is: -1"):
        corenn.optim.Muon(p, momentum=-1)
    with pytest.raises(ValueError, match="weight decay should be >= 0 but is: -1"):
        corenn.optim.Muon(p, weight_decay=-1)
