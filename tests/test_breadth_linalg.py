"""Linear algebra added for issue 22 (det, inverse, svd, cholesky, lu, matrix_exp, products, distances) against
PyTorch 2.13: values and gradients on float64 inputs, gradcheck, and PyTorch's errors."""
from __future__ import annotations

import warnings

import numpy as np
import pytest

import corenn

from _breadth_outputs import check_gradients, match_torch

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.torch
RNG = np.random.default_rng(22)


def _normal(*shape):
    return RNG.standard_normal(shape)


def _spd(*shape):
    a = RNG.standard_normal(shape)
    return a @ np.swapaxes(a, -1, -2) + shape[-1] * np.eye(shape[-1])


def _sym(a):
    """Cholesky reads one triangle: finite differences must perturb the symmetric matrix as a whole."""
    return (a + a.transpose(-2, -1)) / 2


SQUARE_CASES = [
    ("det", lambda lib, a: lib.det(a), [_normal(3, 3)]),
    ("det-batch", lambda lib, a: lib.det(a), [_normal(2, 4, 4)]),
    ("det-method", lambda lib, a: a.det(), [_normal(2, 2)]),
    ("slogdet", lambda lib, a: tuple(lib.slogdet(a)), [_normal(2, 3, 3)]),
    ("slogdet-method", lambda lib, a: tuple(a.slogdet()), [_normal(3, 3)]),
    ("logdet", lambda lib, a: lib.logdet(a), [_spd(3, 3)]),
    ("inverse", lambda lib, a: lib.inverse(a), [_normal(3, 3)]),
    ("inverse-method", lambda lib, a: a.inverse(), [_normal(2, 3, 3)]),
    ("pinverse-tall", lambda lib, a: lib.pinverse(a), [_normal(4, 3)]),
    ("pinverse-wide", lambda lib, a: a.pinverse(), [_normal(2, 2, 4)]),
    ("cholesky", lambda lib, a: lib.cholesky(_sym(a)), [_spd(3, 3)]),
    ("cholesky-upper", lambda lib, a: _sym(a).cholesky(upper=True), [_spd(2, 3, 3)]),
    ("cholesky_inverse", lambda lib, a: lib.cholesky_inverse(a), [np.linalg.cholesky(_spd(3, 3))]),
    ("cholesky_inverse-upper", lambda lib, a: a.cholesky_inverse(True), [np.linalg.cholesky(_spd(3, 3)).T.copy()]),
    ("cholesky_solve", lambda lib, b, l: lib.cholesky_solve(b, l), [_normal(3, 2), np.linalg.cholesky(_spd(3, 3))]),
    ("cholesky_solve-upper", lambda lib, b, u: b.cholesky_solve(u, upper=True),
     [_normal(2, 3, 2), np.linalg.cholesky(_spd(3, 3)).T.copy()]),
    ("triangular_solve", lambda lib, b, a: tuple(lib.triangular_solve(b, a)),
     [_normal(3, 2), _normal(3, 3) + 3 * np.eye(3)]),
    ("triangular_solve-lower-t", lambda lib, b, a: tuple(b.triangular_solve(a, upper=False, transpose=True)),
     [_normal(2, 3, 2), _normal(3, 3) + 3 * np.eye(3)]),
    ("triangular_solve-unit", lambda lib, b, a: tuple(lib.triangular_solve(b, a, unitriangular=True)),
     [_normal(3, 1), _normal(2, 3, 3)]),
    ("matrix_exp", lambda lib, a: lib.matrix_exp(a), [_normal(3, 3)]),
    ("matrix_exp-large", lambda lib, a: a.matrix_exp(), [4 * _normal(2, 4, 4)]),
    ("matrix_power-3", lambda lib, a: lib.matrix_power(a, 3), [_normal(3, 3)]),
    ("matrix_power-0", lambda lib, a: a.matrix_power(0), [_normal(2, 3, 3)]),
    ("matrix_power--2", lambda lib, a: a.matrix_power(-2), [_normal(3, 3) + 3 * np.eye(3)]),
    ("matrix_power-1", lambda lib, a: a.matrix_power(1), [_normal(3, 3)]),
    ("lu_unpack", lambda lib, a: tuple(lib.lu_unpack(*lib.lu(a))), [_normal(4, 4)]),
    ("lu_unpack-tall", lambda lib, a: tuple(lib.lu_unpack(*lib.lu(a))), [_normal(2, 5, 3)]),
    ("lu_unpack-wide", lambda lib, a: tuple(lib.lu_unpack(*lib.lu(a))), [_normal(3, 5)]),
]


@pytest.mark.parametrize("name,fn,arrays", SQUARE_CASES, ids=[c[0] for c in SQUARE_CASES])
def test_matches_torch(name, fn, arrays):
    wide = name.startswith("lu_unpack-") and name != "lu_unpack"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        match_torch(lambda *t: fn(corenn, *t), lambda *t: fn(torch, *t), arrays, torch, check_grad=not wide)
    if not wide:
        check_gradients(lambda *t: fn(corenn, *t), arrays)


def test_lu_matches_torch():
    a = _normal(2, 4, 4)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ours = match_torch(lambda t: tuple(corenn.lu(t, get_infos=True)),
                           lambda t: tuple(torch.lu(t, get_infos=True)), [a], torch)
    assert ours[1].dtype is corenn.int32
    check_gradients(lambda t: corenn.lu(t)[0], [a])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        match_torch(lambda t: tuple(t.lu()), lambda t: tuple(t.lu()), [_normal(3, 5)], torch, check_grad=False)


def test_singular_lu_reports_infos_or_raises():
    a = np.array([[1.0, 2.0], [2.0, 4.0]])
    factors, pivots, infos = corenn.lu(corenn.tensor(a), get_infos=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        expected = torch.lu(torch.tensor(a), get_infos=True)
    assert infos.item() == expected[2].item() == 2
    with pytest.raises(RuntimeError, match="lu_factor"):
        corenn.lu(corenn.tensor(a))


@pytest.mark.parametrize("shape,some", [((4, 3), True), ((3, 5), True), ((2, 4, 4), True), ((4, 3), False),
                                        ((3, 5), False)])
def test_svd_matches_torch(shape, some):
    a = _normal(*shape)
    u, s, v = corenn.svd(corenn.tensor(a), some=some)
    tu, ts, tv = torch.svd(torch.tensor(a), some=some)
    assert u.shape == tuple(tu.shape) and v.shape == tuple(tv.shape)
    np.testing.assert_allclose(s.numpy(), ts.numpy(), atol=1e-12)
    k = min(shape[-2:])
    rebuilt = u.numpy()[..., :k] * s.numpy()[..., None, :] @ np.swapaxes(v.numpy()[..., :k], -1, -2)
    np.testing.assert_allclose(rebuilt, a, atol=1e-12)

    # Singular vectors are defined up to sign: compare gauge-invariant functions of them.
    def invariant(lib, t):
        u, s, v = lib.svd(t, some=some)
        u, v = u[..., :k], v[..., :k]
        return (u * s.unsqueeze(-2)) @ v.transpose(-2, -1) + (u @ u.transpose(-2, -1)).sin() + s.exp().sum() \
            if shape[-2] == shape[-1] else (u @ u.transpose(-2, -1)).cos().sum() + (v @ v.transpose(-2, -1)).sum() \
            + s.square().sum()
    match_torch(lambda t: invariant(corenn, t), lambda t: invariant(torch, t), [a], torch, rtol=1e-8, atol=1e-10)
    check_gradients(lambda t: invariant(corenn, t), [a])


def test_svd_without_uv():
    a = _normal(4, 3)
    u, s, v = corenn.svd(corenn.tensor(a, requires_grad=True), compute_uv=False)
    tu, ts, tv = torch.svd(torch.tensor(a), compute_uv=False)
    assert u.shape == tuple(tu.shape) and v.shape == tuple(tv.shape) and not u.numpy().any()
    match_torch(lambda t: t.svd(compute_uv=False)[1], lambda t: t.svd(compute_uv=False)[1], [a], torch)


def test_det_of_singular_matrix_has_the_cofactor_gradient():
    # PyTorch 2.13 returns det * inv(A)^T = 0 here; the derivative is the cofactor matrix (rank n - 1).
    a = np.array([[1.0, 2.0, 3.0], [2.0, 4.0, 6.0], [0.5, 1.0, -1.0]])
    x = corenn.tensor(a, requires_grad=True)
    corenn.det(x).backward()
    cofactors = np.array([[(-1) ** (i + j) * np.linalg.det(np.delete(np.delete(a, i, 0), j, 1)) for j in range(3)]
                          for i in range(3)])
    np.testing.assert_allclose(x.grad.numpy(), cofactors, atol=1e-12)
    check_gradients(corenn.det, [a])


PRODUCTS = [
    ("kron", lambda lib, a, b: lib.kron(a, b), [_normal(2, 3), _normal(3, 2)]),
    ("kron-ndim", lambda lib, a, b: a.kron(b), [_normal(3), _normal(2, 2, 2)]),
    ("cross", lambda lib, a, b: lib.cross(a, b, dim=1), [_normal(4, 3), _normal(4, 3)]),
    ("cross-broadcast", lambda lib, a, b: a.cross(b, dim=0), [_normal(3, 1, 2), _normal(3, 4, 2)]),
    ("cross-negative-dim", lambda lib, a, b: lib.cross(a, b, -1), [_normal(2, 3), _normal(2, 3)]),
    ("tensordot", lambda lib, a, b: lib.tensordot(a, b), [_normal(2, 3, 4), _normal(3, 4, 5)]),
    ("tensordot-lists", lambda lib, a, b: lib.tensordot(a, b, dims=([1, 0], [0, 2])),
     [_normal(3, 4, 2), _normal(4, 5, 3)]),
    ("tensordot-0", lambda lib, a, b: lib.tensordot(a, b, 0), [_normal(2), _normal(3)]),
    ("vdot", lambda lib, a, b: lib.vdot(a, b), [_normal(5), _normal(5)]),
    ("dist", lambda lib, a, b: lib.dist(a, b), [_normal(3, 4), _normal(4)]),
    ("dist-p1", lambda lib, a, b: a.dist(b, 1), [_normal(3, 4), _normal(3, 4)]),
    ("dist-pinf", lambda lib, a, b: a.dist(b, float("inf")), [_normal(3, 4), _normal(3, 4)]),
    ("dist-p3", lambda lib, a, b: a.dist(b, 3), [_normal(3, 4), _normal(3, 4)]),
    ("cdist", lambda lib, a, b: lib.cdist(a, b), [_normal(4, 3), _normal(5, 3)]),
    ("cdist-batch", lambda lib, a, b: lib.cdist(a, b, p=1.0), [_normal(2, 4, 3), _normal(2, 5, 3)]),
    ("cdist-p3", lambda lib, a, b: lib.cdist(a, b, p=3), [_normal(4, 3), _normal(1, 5, 3)]),
    ("cdist-inf", lambda lib, a, b: lib.cdist(a, b, p=float("inf")), [_normal(4, 3), _normal(5, 3)]),
    ("cdist-mm", lambda lib, a, b: lib.cdist(a, b, compute_mode="use_mm_for_euclid_dist"),
     [_normal(4, 3), _normal(5, 3)]),
    ("pdist", lambda lib, a: lib.pdist(a), [_normal(5, 3)]),
    ("pdist-p1", lambda lib, a: lib.pdist(a, 1), [_normal(4, 3)]),
    ("addmv", lambda lib, x, m, v: lib.addmv(x, m, v, beta=0.5, alpha=2), [_normal(3), _normal(3, 4), _normal(4)]),
    ("addmv-method", lambda lib, x, m, v: x.addmv(m, v), [_normal(1), _normal(3, 4), _normal(4)]),
    ("addr", lambda lib, x, a, b: lib.addr(x, a, b, alpha=-1.5), [_normal(3, 4), _normal(3), _normal(4)]),
    ("addr-method", lambda lib, x, a, b: x.addr(a, b, beta=2), [_normal(4), _normal(3), _normal(4)]),
    ("addbmm", lambda lib, x, a, b: lib.addbmm(x, a, b, beta=0.5, alpha=3), [_normal(3, 2), _normal(4, 3, 5),
                                                                              _normal(4, 5, 2)]),
    ("addbmm-method", lambda lib, x, a, b: x.addbmm(a, b), [_normal(2), _normal(4, 3, 5), _normal(4, 5, 2)]),
]


@pytest.mark.parametrize("name,fn,arrays", PRODUCTS, ids=[c[0] for c in PRODUCTS])
def test_products_match_torch(name, fn, arrays):
    match_torch(lambda *t: fn(corenn, *t), lambda *t: fn(torch, *t), arrays, torch)
    check_gradients(lambda *t: fn(corenn, *t), arrays)


def test_cross_without_dim_takes_the_first_size_three():
    a, b = _normal(3, 3), _normal(3, 3)
    with pytest.warns(UserWarning):
        ours = corenn.cross(corenn.tensor(a), corenn.tensor(b))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        np.testing.assert_allclose(ours.numpy(), torch.cross(torch.tensor(a), torch.tensor(b)).numpy())


def test_cdist_zero_distance_gradient_is_zero_as_torch():
    a = _normal(3, 2)
    match_torch(lambda x: corenn.cdist(x, x.detach()), lambda x: torch.cdist(x, x.detach()), [a], torch)


@pytest.mark.parametrize("name", ["addmm_", "baddbmm_", "addmv_", "addr_", "addbmm_"])
def test_inplace_products(name):
    shapes = {"addmm_": [(3, 4), (3, 2), (2, 4)], "baddbmm_": [(2, 3, 4), (2, 3, 5), (2, 5, 4)],
              "addmv_": [(3,), (3, 4), (4,)], "addr_": [(3, 4), (3,), (4,)], "addbmm_": [(3, 4), (2, 3, 5), (2, 5, 4)]}
    arrays = [_normal(*s) for s in shapes[name]]

    def run(lib, x, a, b):
        y = x * 1
        result = getattr(y, name)(a, b, beta=0.5, alpha=2)
        assert result is y
        return y
    match_torch(lambda *t: run(corenn, *t), lambda *t: run(torch, *t), arrays, torch)


def test_errors_match_torch_types():
    with pytest.raises(RuntimeError, match="square"):
        corenn.det(corenn.zeros(2, 3))
    with pytest.raises(RuntimeError, match="floating point"):
        corenn.inverse(corenn.zeros(2, 2, dtype=corenn.int64))
    with pytest.raises(RuntimeError, match="singular"):
        corenn.inverse(corenn.zeros(2, 2))
    with pytest.raises(RuntimeError, match="leading minor of order 1"):
        corenn.cholesky(-corenn.eye(2))
    with pytest.raises(RuntimeError, match="length 3"):
        corenn.cross(corenn.zeros(2, 4), corenn.zeros(2, 4), dim=1)
    with pytest.raises(RuntimeError, match="non-negative"):
        corenn.cdist(corenn.zeros(2, 3), corenn.zeros(2, 3), p=-1)
    with pytest.raises(RuntimeError, match="same number of columns"):
        corenn.cdist(corenn.zeros(2, 3), corenn.zeros(2, 4))
    with pytest.raises(RuntimeError):
        torch.cdist(torch.zeros(2, 3), torch.zeros(2, 4))
    with pytest.raises(RuntimeError, match="contracted dimensions"):
        corenn.tensordot(corenn.zeros(2, 3), corenn.zeros(2, 3), 1)
    with pytest.raises(NotImplementedError, match="pivot"):
        corenn.lu(corenn.zeros(2, 2), pivot=False)


MORE = [
    ("frobenius_norm", lambda lib, x: lib.frobenius_norm(x, (0, 1)), [_normal(3, 4)]),
    ("frobenius_norm-keepdim", lambda lib, x: lib.frobenius_norm(x, [1], True), [_normal(3, 4)]),
    ("nuclear_norm", lambda lib, x: lib.nuclear_norm(x), [_normal(3, 4)]),
    ("nuclear_norm-keepdim", lambda lib, x: lib.nuclear_norm(x, keepdim=True), [_normal(4, 3)]),
    ("nuclear_norm-dim", lambda lib, x: lib.nuclear_norm(x, (0, 2)), [_normal(3, 2, 4)]),
    ("orgqr", lambda lib, a, tau: lib.orgqr(a, tau), None),
    ("orgqr-method", lambda lib, a, tau: a.orgqr(tau), None),
    ("ormqr", lambda lib, a, tau, c: lib.ormqr(a, tau, c), "left"),
    ("ormqr-right-t", lambda lib, a, tau, c: a.ormqr(tau, c.transpose(-2, -1), left=False, transpose=True), "left"),
]


@pytest.mark.parametrize("name,fn,arrays", MORE, ids=[c[0] for c in MORE])
def test_more_match_torch(name, fn, arrays):
    if arrays is None or arrays == "left":
        a, tau = (t.numpy() for t in torch.geqrf(torch.tensor(_normal(2, 4, 3))))
        arrays = [a, tau] if arrays is None else [a, tau, _normal(2, 4, 2)]
    match_torch(lambda *t: fn(corenn, *t), lambda *t: fn(torch, *t), arrays, torch)
    check_gradients(lambda *t: fn(corenn, *t), arrays)


def test_geqrf_matches_torch():
    a = _normal(2, 4, 3)
    match_torch(lambda t: tuple(corenn.geqrf(t)), lambda t: tuple(torch.geqrf(t)), [a], torch, check_grad=False)
    match_torch(lambda t: tuple(t.geqrf()), lambda t: tuple(t.geqrf()), [_normal(3, 5)], torch, check_grad=False)


def test_addmv_function_in_place():
    x = corenn.tensor(_normal(3))
    assert corenn.addmv_(x, corenn.ones(3, 2, dtype=corenn.float64), corenn.ones(2, dtype=corenn.float64)) is x


def _low_rank(rank, *shape):
    return RNG.standard_normal(shape[:-1] + (rank,)) @ RNG.standard_normal(shape[:-2] + (rank, shape[-1]))


@pytest.mark.parametrize("shape,q", [((8, 6), 4), ((5, 9), 3), ((2, 7, 5), 5)])
def test_svd_lowrank_is_exact_for_low_rank_matrices_as_torch(shape, q):
    a = _low_rank(q - 1 if q > 3 else q, *shape)
    corenn.manual_seed(0)
    u, s, v = corenn.svd_lowrank(corenn.tensor(a), q=q)
    tu, ts, tv = torch.svd_lowrank(torch.tensor(a), q=q)
    assert u.shape == tuple(tu.shape) and s.shape == tuple(ts.shape) and v.shape == tuple(tv.shape)
    np.testing.assert_allclose(s.numpy(), ts.numpy(), atol=1e-9)
    rebuilt = (u.numpy() * s.numpy()[..., None, :]) @ np.swapaxes(v.numpy(), -1, -2)
    np.testing.assert_allclose(rebuilt, a, atol=1e-9)

    # The singular values' gradient is u_i v_i^T whatever the random directions were.
    def top(lib, t):
        return lib.svd_lowrank(t, q=q)[1][..., :2].sum()
    corenn.manual_seed(1)
    match_torch(lambda t: top(corenn, t), lambda t: top(torch, t), [a], torch, rtol=1e-7, atol=1e-9)


def test_pca_lowrank_matches_torch():
    a = _low_rank(2, 10, 4) + 3.0  # the column means are removed before the rank-2 part is found
    corenn.manual_seed(0)
    u, s, v = corenn.pca_lowrank(corenn.tensor(a), q=3)
    tu, ts, tv = torch.pca_lowrank(torch.tensor(a), q=3)
    np.testing.assert_allclose(s.numpy(), ts.numpy(), atol=1e-9)
    np.testing.assert_allclose(np.abs(v.numpy()[:, :2].T @ tv.numpy()[:, :2]), np.eye(2), atol=1e-9)
    _, s_default, _ = corenn.pca_lowrank(corenn.tensor(a), center=False)
    assert s_default.shape == (4,)
    with pytest.raises(ValueError, match="q"):
        corenn.pca_lowrank(corenn.tensor(a), q=7)
    with pytest.raises(ValueError):
        torch.pca_lowrank(torch.tensor(a), q=7)


def test_svd_lowrank_gradient_by_gradcheck():
    a = _low_rank(2, 5, 4)

    def fn(t):
        corenn.manual_seed(3)  # the same random directions at every evaluation
        u, s, v = corenn.svd_lowrank(t, q=2, niter=1)
        return (u * s.unsqueeze(-2)) @ v.transpose(-2, -1)
    check_gradients(fn, [a])


@pytest.mark.parametrize("options", [{"k": 2}, {"k": 3, "largest": False}, {"k": 1, "tol": 1e-9, "method": "basic"}])
def test_lobpcg_matches_torch(options):
    a = _spd(12, 12)
    torch.manual_seed(0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ours = match_torch(lambda t: corenn.lobpcg(t, **options)[0], lambda t: torch.lobpcg(t, **options)[0], [a],
                           torch, rtol=1e-8, atol=1e-7)
    values, vectors = corenn.lobpcg(corenn.tensor(a), **options)
    _, theirs = torch.lobpcg(torch.tensor(a), **options)
    np.testing.assert_allclose(np.abs((vectors.numpy() * theirs.numpy()).sum(0)), 1.0, atol=1e-7)  # up to sign
    assert ours[0].shape == values.shape
    check_gradients(lambda t: corenn.lobpcg(t, **options)[0], [a])


def test_lobpcg_generalized_and_errors():
    a, b = _spd(9, 9), _spd(9, 9)
    values, vectors = corenn.lobpcg(corenn.tensor(a), 2, corenn.tensor(b))
    theirs, _ = torch.lobpcg(torch.tensor(a), 2, torch.tensor(b))
    np.testing.assert_allclose(values.numpy(), theirs.numpy(), rtol=1e-8)
    np.testing.assert_allclose(vectors.numpy().T @ b @ vectors.numpy(), np.eye(2), atol=1e-10)  # B-orthonormal
    check_gradients(lambda t, u: corenn.lobpcg(t, 2, u)[0], [a, b])
    for lib in (corenn, torch):
        with pytest.raises(ValueError):
            lib.lobpcg(lib.tensor(a), 4)  # fewer than 3 x 4 rows
    with pytest.raises(NotImplementedError, match="tracker"):
        corenn.lobpcg(corenn.tensor(a), 1, tracker=lambda worker: None)
