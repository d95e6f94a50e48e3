"""Shared by the breadth tests of linalg, reductions and indexing: like ``_breadth_oracle.compare_with_torch``
for functions that return several tensors (a named tuple, a list); integer outputs compare exactly, floating
ones carry a random weighting into one backward pass, and gradcheck runs on the float64 inputs."""
from __future__ import annotations

import numpy as np

import corenn
from corenn.autograd import gradcheck


def _outputs(result):
    return list(result) if isinstance(result, (tuple, list)) else [result]


def match_torch(ours_fn, theirs_fn, arrays, torch, rtol=1e-9, atol=1e-11, seed=0, check_grad=True,
                grad_outputs=None):
    """Run both on the same inputs (numpy arrays become tensors; floating ones require grad) and compare.

    ``grad_outputs``: indices of the outputs whose gradients are compared (all floating ones by default).
    Returns corenn's outputs.
    """
    rng = np.random.default_rng(seed)
    ours_in, theirs_in = [], []
    for array in arrays:
        if isinstance(array, np.ndarray):
            grad = check_grad and array.dtype.kind == "f"
            ours_in.append(corenn.tensor(array.copy(), requires_grad=grad))
            theirs_in.append(torch.tensor(array.copy(), requires_grad=grad))
        else:
            ours_in.append(array)
            theirs_in.append(array)
    ours, theirs = _outputs(ours_fn(*ours_in)), _outputs(theirs_fn(*theirs_in))
    assert len(ours) == len(theirs)
    for mine, reference in zip(ours, theirs):
        assert tuple(mine.shape) == tuple(reference.shape), (mine.shape, reference.shape)
        assert str(mine.dtype).split(".")[-1] == str(reference.dtype).split(".")[-1], (mine.dtype, reference.dtype)
        np.testing.assert_allclose(mine.detach().numpy(), reference.detach().numpy(), rtol=rtol, atol=atol)
    if not check_grad:
        return ours
    chosen = range(len(ours)) if grad_outputs is None else grad_outputs
    total_ours, total_theirs = 0, 0
    for i in chosen:
        if theirs[i].requires_grad:
            weights = rng.standard_normal(tuple(theirs[i].shape))
            total_ours = total_ours + (ours[i] * corenn.tensor(weights)).sum()
            total_theirs = total_theirs + (theirs[i] * torch.tensor(weights)).sum()
    if isinstance(total_theirs, int):
        return ours
    total_ours.backward()
    total_theirs.backward()
    for mine, reference in zip(ours_in, theirs_in):
        if isinstance(reference, torch.Tensor) and reference.requires_grad:
            if reference.grad is None:
                assert mine.grad is None or not mine.grad.numpy().any()
            else:
                assert mine.grad is not None
                np.testing.assert_allclose(mine.grad.numpy(), reference.grad.numpy(), rtol=rtol * 100, atol=atol * 100)
    return ours


def check_gradients(fn, arrays, outputs=None):
    """gradcheck ``fn`` on float64 copies of ``arrays`` (floating ones differentiable), on the chosen outputs."""
    inputs = [corenn.tensor(a.copy(), requires_grad=a.dtype.kind == "f") if isinstance(a, np.ndarray) else a
              for a in arrays]

    def selected(*tensors):
        result = _outputs(fn(*tensors))
        picked = result if outputs is None else [result[i] for i in outputs]
        return tuple(r for r in picked if r.dtype.is_floating_point)

    assert gradcheck(selected, inputs)
