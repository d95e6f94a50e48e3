"""corenn.linalg (torch.linalg's functions) and corenn.finfo / corenn.iinfo, against PyTorch 2.13."""
from __future__ import annotations

import math

import numpy as np
import pytest

import corenn
from _breadth_oracle import compare_with_torch

RNG = np.random.default_rng(11)


def _spd(n, batch=()):
    a = RNG.standard_normal(batch + (n, n))
    return a @ np.swapaxes(a, -1, -2) + n * np.eye(n)


@pytest.mark.parametrize("b_shape", [(4,), (4, 3), (2, 4, 3), (2, 4)])
def test_solve_matches_torch_with_gradients(torch, b_shape):
    a = RNG.standard_normal((2, 4, 4)) + 4 * np.eye(4) if len(b_shape) > 2 or b_shape == (2, 4) else \
        RNG.standard_normal((4, 4)) + 4 * np.eye(4)
    b = RNG.standard_normal(b_shape)
    compare_with_torch(corenn.linalg.solve, torch.linalg.solve, [a, b], torch)
    assert corenn.autograd.gradcheck(corenn.linalg.solve, (corenn.tensor(a, requires_grad=True),
                                                           corenn.tensor(b, requires_grad=True)))


def test_solve_left_false_broadcast_batches_and_errors(torch):
    a, b = RNG.standard_normal((3, 3)) + 3 * np.eye(3), RNG.standard_normal((2, 5, 3))
    compare_with_torch(lambda x, y: corenn.linalg.solve(x, y, left=False),
                       lambda x, y: torch.linalg.solve(x, y, left=False), [a, b], torch)
    with pytest.raises(RuntimeError, match="singular"):
        corenn.linalg.solve(corenn.zeros(2, 2), corenn.ones(2))
    with pytest.raises(RuntimeError, match="Incompatible shapes"):
        corenn.linalg.solve(corenn.eye(3), corenn.ones(2, 2))
    assert issubclass(corenn.linalg.LinAlgError, RuntimeError)


@pytest.mark.parametrize("ord_, dim", [(2, None), (1, 0), (math.inf, 1), (0.5, None), (-math.inf, (0, 1)), (3, -1)])
def test_vector_norm_matches_torch(torch, ord_, dim):
    x = RNG.standard_normal((3, 4))
    compare_with_torch(lambda t: corenn.linalg.vector_norm(t, ord_, dim),
                       lambda t: torch.linalg.vector_norm(t, ord_, dim), [x], torch)


@pytest.mark.parametrize("ord_", ["fro", "nuc", 1, -1, 2, -2, math.inf, -math.inf])
@pytest.mark.parametrize("keepdim", [False, True])
def test_matrix_norm_and_norm_match_torch(torch, ord_, keepdim):
    a = RNG.standard_normal((2, 3, 4))
    compare_with_torch(lambda t: corenn.linalg.matrix_norm(t, ord_, keepdim=keepdim),
                       lambda t: torch.linalg.matrix_norm(t, ord_, keepdim=keepdim), [a], torch, rtol=1e-9)
    compare_with_torch(lambda t: corenn.linalg.norm(t[0], ord_), lambda t: torch.linalg.norm(t[0], ord_), [a], torch,
                       rtol=1e-9)
    compare_with_torch(lambda t: corenn.linalg.norm(t), lambda t: torch.linalg.norm(t), [a], torch)


def test_decompositions_match_torch(torch):
    a = RNG.standard_normal((3, 5, 3))
    spd = _spd(4, (2,))
    compare_with_torch(lambda t: corenn.linalg.svdvals(t), lambda t: torch.linalg.svdvals(t), [a], torch)
    compare_with_torch(lambda t: corenn.linalg.eigvalsh(t), lambda t: torch.linalg.eigvalsh(t), [spd], torch)
    compare_with_torch(lambda t: corenn.linalg.eigvalsh(t, "U"), lambda t: torch.linalg.eigvalsh(t, "U"),
                       [np.triu(spd) + 0.3 * np.tril(spd, -1)], torch)
    compare_with_torch(lambda t: corenn.linalg.cholesky(t), lambda t: torch.linalg.cholesky(t), [spd], torch)
    compare_with_torch(lambda t: corenn.linalg.inv(t), lambda t: torch.linalg.inv(t), [spd], torch)
    compare_with_torch(lambda t: corenn.linalg.det(t), lambda t: torch.linalg.det(t), [spd], torch)
    compare_with_torch(lambda t: corenn.linalg.slogdet(t).logabsdet, lambda t: torch.linalg.slogdet(t).logabsdet,
                       [spd], torch)
    compare_with_torch(lambda t: corenn.linalg.pinv(t), lambda t: torch.linalg.pinv(t), [a], torch, rtol=1e-8)
    compare_with_torch(lambda t: corenn.linalg.matrix_exp(t), lambda t: torch.linalg.matrix_exp(t), [spd / 10],
                       torch, rtol=1e-9)
    # Factors are unique up to signs: compare what they rebuild, and their gradients through that.
    x = corenn.tensor(a)
    u, s, vh = corenn.linalg.svd(x, full_matrices=False)
    np.testing.assert_allclose((u * s.unsqueeze(-2) @ vh).numpy(), a, atol=1e-12)
    q, r = corenn.linalg.qr(x)
    np.testing.assert_allclose((q @ r).numpy(), a, atol=1e-12)
    np.testing.assert_allclose(np.abs(r.numpy()), np.abs(torch.linalg.qr(torch.tensor(a)).R.numpy()), atol=1e-12)
    values, vectors = corenn.linalg.eigh(corenn.tensor(spd))
    np.testing.assert_allclose((vectors @ values.diag_embed() @ vectors.mT).numpy(), spd, atol=1e-10)
    assert corenn.linalg.matrix_rank(corenn.tensor(a)).tolist() == torch.linalg.matrix_rank(torch.tensor(a)).tolist()
    low_rank = a[0] @ RNG.standard_normal((3, 1)) @ RNG.standard_normal((1, 4))
    assert corenn.linalg.matrix_rank(corenn.tensor(low_rank)).item() == 1


def test_products_and_small_helpers_match_torch(torch):
    a, b, c = RNG.standard_normal((2, 3)), RNG.standard_normal((3, 4)), RNG.standard_normal((4,))
    compare_with_torch(lambda x, y, z: corenn.linalg.multi_dot([x, y, z]),
                       lambda x, y, z: torch.linalg.multi_dot([x, y, z]), [a, b, c], torch)
    v, w = RNG.standard_normal((5, 3)), RNG.standard_normal((5, 3))
    compare_with_torch(corenn.linalg.cross, torch.linalg.cross, [v, w], torch)
    compare_with_torch(corenn.linalg.vecdot, torch.linalg.vecdot, [v, w], torch)
    with pytest.raises(NotImplementedError, match="atol"):
        corenn.linalg.pinv(corenn.eye(2), atol=0.1)


def test_finfo_and_iinfo_match_torch(torch):
    for name in ("float32", "float64", "float16", "bfloat16"):
        ours, theirs = corenn.finfo(getattr(corenn, name)), torch.finfo(getattr(torch, name))
        for field in ("bits", "eps", "max", "min", "tiny", "smallest_normal", "resolution"):
            assert getattr(ours, field) == getattr(theirs, field), (name, field)
        assert repr(ours) == repr(theirs)
    assert corenn.finfo().eps == torch.finfo().eps
    for name in ("uint8", "int8", "int16", "int32", "int64"):
        ours, theirs = corenn.iinfo(getattr(corenn, name)), torch.iinfo(getattr(torch, name))
        assert (ours.bits, ours.min, ours.max, repr(ours)) == (theirs.bits, theirs.min, theirs.max, repr(theirs))
    with pytest.raises(TypeError, match="floating point"):
        corenn.finfo(corenn.int32)
    with pytest.raises(TypeError, match="integer"):
        corenn.iinfo(corenn.float32)
