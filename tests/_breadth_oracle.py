"""Shared by the breadth tests: run a corenn function and its PyTorch twin on the same float64 inputs and
compare the values and the gradient of every floating input (non-float inputs are passed unchanged)."""
from __future__ import annotations

import numpy as np

import corenn


def compare_with_torch(ours_fn, theirs_fn, arrays, torch, rtol=1e-10, atol=1e-12, seed=0, frozen=()):
    """``frozen``: indices of float inputs that get no gradient (PyTorch refuses one for some targets)."""
    rng = np.random.default_rng(seed)
    ours_in, theirs_in = [], []
    for index, array in enumerate(arrays):
        if isinstance(array, np.ndarray):
            grad = array.dtype.kind == "f" and index not in frozen
            ours_in.append(corenn.tensor(array.copy(), requires_grad=grad))
            theirs_in.append(torch.tensor(array.copy(), requires_grad=grad))
        else:
            ours_in.append(array)
            theirs_in.append(array)
    out, tout = ours_fn(*ours_in), theirs_fn(*theirs_in)
    assert tuple(out.shape) == tuple(tout.shape), (out.shape, tout.shape)
    np.testing.assert_allclose(out.detach().numpy(), tout.detach().numpy(), rtol=rtol, atol=atol)
    if not tout.requires_grad:
        return out
    weights = rng.standard_normal(tuple(tout.shape))
    (out * corenn.tensor(weights)).sum().backward()
    (tout * torch.tensor(weights)).sum().backward()
    for ours, theirs in zip(ours_in, theirs_in):
        if isinstance(theirs, torch.Tensor) and theirs.requires_grad:
            if theirs.grad is None:
                assert ours.grad is None or not ours.grad.numpy().any()
            else:
                np.testing.assert_allclose(ours.grad.numpy(), theirs.grad.numpy(), rtol=rtol, atol=atol)
    return out
