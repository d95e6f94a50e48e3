"""lgamma, digamma, polygamma, mvlgamma, erfc, erfinv, i0, igamma, igammac against PyTorch 2.13 (float64 and
float32 values over wide ranges and at the edges, gradients, errors) and against mpmath's arbitrary precision
where PyTorch's own values are the less accurate ones."""
from __future__ import annotations

import math

import numpy as np
import pytest

import corenn
from corenn.autograd import gradcheck

from _breadth_oracle import compare_with_torch

pytestmark = pytest.mark.torch
RNG = np.random.default_rng(2026)
INF, NAN = math.inf, math.nan


def _values(name, x, lib, n=None):
    tensor = lib.tensor(x)
    return getattr(lib, name)(n, tensor) if n is not None else getattr(lib, name)(tensor)


def _wide(low, high, size=400):
    return np.concatenate([RNG.uniform(low, high, size), np.linspace(low, high, size)])


# name -> inputs, rtol, atol of the float64 comparison with PyTorch
FLOAT64_CASES = {
    "lgamma": (np.concatenate([_wide(-30, 30), _wide(0.4, 3.1), np.geomspace(1e-300, 1e300, 200)]), 1e-13, 1e-14),
    "digamma": (np.concatenate([_wide(-30, 30), _wide(0, 3), np.geomspace(1e-300, 1e300, 200)]), 1e-12, 1e-13),
    "erfc": (np.concatenate([_wide(-7, 27), _wide(-1, 3)]), 1e-14, 0),
    "erfinv": (np.concatenate([_wide(-1, 1), 1 - np.geomspace(1.2e-16, 0.5, 200), np.geomspace(1e-300, 0.1, 50)]),
               1e-14, 0),
    "i0": (np.concatenate([_wide(-50, 50), _wide(-700, 700)]), 1e-14, 0),
}


@pytest.mark.parametrize("name", sorted(FLOAT64_CASES))
def test_float64_values_match_torch(name, torch):
    x, rtol, atol = FLOAT64_CASES[name]
    x = x[np.round(x) != x] if name in ("lgamma", "digamma") else x  # the poles are tested at the edges
    np.testing.assert_allclose(_values(name, x, corenn).numpy(), _values(name, x, torch).numpy(), rtol=rtol,
                               atol=atol)


@pytest.mark.parametrize("name", sorted(FLOAT64_CASES))
def test_float32_values_match_torch(name, torch):
    with np.errstate(over="ignore"):  # float64 inputs beyond float32's range become +-inf
        x = FLOAT64_CASES[name][0].astype(np.float32)
    if name == "erfinv":
        x = x[np.abs(x) < 1]
    if name == "i0":
        x = x[np.abs(x) < 80]  # float32 I0 overflows beyond
    if name in ("lgamma", "digamma"):
        x = x[(np.round(x) != x) & (np.abs(x) < 1e30)]
    ours, theirs = _values(name, x, corenn), _values(name, x, torch)
    assert ours.dtype == corenn.float32
    atol = {"digamma": 2e-6, "lgamma": 2e-6}.get(name, 1e-30)
    np.testing.assert_allclose(ours.numpy(), theirs.numpy(), rtol=3e-6, atol=atol)


EDGES = np.array([0.0, -0.0, 1.0, 2.0, -1.0, -2.0, -2.5, 0.5, 1e-300, -1e-300, 1e300, -1e300, INF, -INF, NAN,
                  1 - 2 ** -53, -1 + 2 ** -53, 1.5, -1.5, 5e-324])


@pytest.mark.parametrize("name", ["lgamma", "digamma", "erfc", "erfinv", "i0"])
def test_edge_values_match_torch(name, torch):
    x = EDGES
    if name == "i0":
        x = x[np.abs(x) < 700]
    if name == "digamma":  # PyTorch's pi / tan(pi x) loses the pole at -1: -5.5e15 where -1 / 2^-53 = -9.0e15
        x = x[x != -1 + 2 ** -53]
    with np.errstate(all="ignore"):
        ours = _values(name, x, corenn).numpy()
    theirs = _values(name, x, torch).numpy()
    # lgamma(-2.5) = log(pi) - lgamma(3.5) cancels to 5% of its terms: both libraries lose a digit there
    np.testing.assert_allclose(ours, theirs, rtol=1e-13, atol=0)
    numbers = ~np.isnan(theirs)
    assert np.array_equal(np.signbit(ours[numbers]), np.signbit(theirs[numbers]))


@pytest.mark.parametrize("n", [1, 2, 3, 4, 7])
def test_polygamma_matches_torch(n, torch):
    x = np.concatenate([_wide(-12, 12, 200), np.geomspace(1e-5, 1e5, 100)])
    x = x[np.round(x) != x]
    ours, theirs = _values("polygamma", x, corenn, n).numpy(), _values("polygamma", x, torch, n).numpy()
    # PyTorch's trigamma (n = 1) keeps only a few asymptotic terms: good to 1e-9; the others to float64
    np.testing.assert_allclose(ours, theirs, rtol=1e-8 if n == 1 else 1e-12)
    x32 = x.astype(np.float32)
    x32 = x32[np.round(x32) != x32]
    ours32 = _values("polygamma", x32, corenn, n)
    assert ours32.dtype == corenn.float32
    np.testing.assert_allclose(ours32.numpy(), _values("polygamma", x32, torch, n).numpy(), rtol=2e-4)


@pytest.mark.parametrize("n", [1, 2, 3])
def test_polygamma_poles_match_torch(n, torch):
    x = np.array([0.0, -0.0, -3.0, 1.0, 0.25, NAN])
    if n == 1:  # PyTorch's trigamma gives 6.6e32, not inf, at the negative integers (sin(pi x) is not 0 there)
        x = x[x != -3.0]
    with np.errstate(all="ignore"):
        ours = _values("polygamma", x, corenn, n).numpy()
    np.testing.assert_allclose(ours, _values("polygamma", x, torch, n).numpy(), rtol=1e-8 if n == 1 else 1e-14)
    assert corenn.polygamma(n, corenn.tensor([-3.0])).item() == (INF if n % 2 else -INF)


def test_polygamma_at_infinities_and_huge_arguments(torch):
    x = np.array([INF, -INF, 1e300, 1e20])
    for n in (1, 2, 3):
        ours = corenn.polygamma(n, corenn.tensor(x)).numpy()
        assert ours[0] == 0 and np.isnan(ours[1])  # PyTorch: 0 at +inf for n = 1 but NaN for n >= 2
        expected = torch.polygamma(n, torch.tensor(x[2:4])).numpy()
        np.testing.assert_allclose(ours[2:4], expected, rtol=1e-14)
    huge = corenn.tensor([1e300], dtype=corenn.float64)
    assert corenn.polygamma(1, huge).item() == pytest.approx(1e-300, rel=1e-14, abs=0)


def test_polygamma_zero_is_digamma_and_method_order(torch):
    x = RNG.uniform(0.1, 5, 20)
    np.testing.assert_array_equal(corenn.polygamma(0, corenn.tensor(x)).numpy(), corenn.digamma(corenn.tensor(x)).numpy())
    np.testing.assert_allclose(corenn.tensor(x).polygamma(2).numpy(), torch.tensor(x).polygamma(2).numpy(), rtol=1e-12)
    ours, theirs = corenn.tensor(x), torch.tensor(x)
    assert ours.polygamma_(3) is ours
    theirs.polygamma_(3)
    np.testing.assert_allclose(ours.numpy(), theirs.numpy(), rtol=1e-12)


def test_more_accurate_than_torch_where_mpmath_says_so():
    mpmath = pytest.importorskip("mpmath")
    x = np.concatenate([RNG.uniform(0.5, 30, 200), RNG.uniform(-30, 0, 100)])
    x = x[np.round(x) != x]
    checks = {
        "lgamma": (lambda v: mpmath.loggamma(v).real, 1e-12, 1e-15),
        "digamma": (mpmath.digamma, 1e-12, 1e-14),
        "trigamma": (lambda v: mpmath.polygamma(1, v), 1e-13, 0),
        "polygamma4": (lambda v: mpmath.polygamma(4, v), 1e-13, 0),
    }
    for name, (reference, rtol, atol) in checks.items():
        if name == "trigamma":
            ours = corenn.polygamma(1, corenn.tensor(x)).numpy()
        elif name == "polygamma4":
            ours = corenn.polygamma(4, corenn.tensor(x)).numpy()
        else:
            ours = getattr(corenn, name)(corenn.tensor(x)).numpy()
        expected = np.array([float(reference(mpmath.mpf(v))) for v in x])
        np.testing.assert_allclose(ours, expected, rtol=rtol, atol=atol, err_msg=name)
    y = np.concatenate([RNG.uniform(-1, 1, 100), 1 - np.geomspace(1.2e-16, 0.1, 50)])
    expected = np.array([float(mpmath.erfinv(v)) for v in y])
    np.testing.assert_allclose(corenn.erfinv(corenn.tensor(y)).numpy(), expected, rtol=1e-14)
    z = np.concatenate([RNG.uniform(-6, 27, 200)])
    expected = np.array([float(mpmath.erfc(v)) for v in z])
    np.testing.assert_allclose(corenn.erfc(corenn.tensor(z)).numpy(), expected, rtol=1e-14)
    assert corenn.lgamma(corenn.tensor([1.0, 2.0])).tolist() == [0.0, 0.0]


@pytest.mark.parametrize("name,low,high", [("lgamma", 0.1, 8), ("lgamma", -3.9, -3.1), ("digamma", 0.2, 8),
                                           ("digamma", -2.9, -2.1), ("erfc", -3, 5), ("erfinv", -0.99, 0.99),
                                           ("i0", -8, 8)])
def test_gradients_match_torch(name, low, high, torch):
    x = RNG.uniform(low, high, (3, 5))
    # digamma's derivative is trigamma, which PyTorch computes to about 1e-9
    compare_with_torch(getattr(corenn, name), getattr(torch, name), [x], torch,
                       rtol=1e-8 if name == "digamma" else 1e-10, atol=1e-12)
    assert gradcheck(getattr(corenn, name), (corenn.tensor(x[0], requires_grad=True),))


@pytest.mark.parametrize("n", [0, 1, 3])
def test_polygamma_gradient_matches_torch(n, torch):
    x = RNG.uniform(0.3, 6, (4, 3))
    compare_with_torch(lambda t: corenn.polygamma(n, t), lambda t: torch.polygamma(n, t), [x], torch,
                       rtol=1e-8, atol=1e-12)
    assert gradcheck(lambda t: corenn.polygamma(n, t), (corenn.tensor(x[0], requires_grad=True),))


@pytest.mark.parametrize("p", [1, 2, 5])
def test_mvlgamma_matches_torch(p, torch):
    x = RNG.uniform((p - 1) / 2 + 0.05, 12, (3, 4))
    out = compare_with_torch(lambda t: corenn.mvlgamma(t, p), lambda t: torch.mvlgamma(t, p), [x], torch,
                             rtol=1e-12, atol=1e-12)
    assert out.grad_fn.name() == "MvlgammaBackward0"
    assert gradcheck(lambda t: corenn.mvlgamma(t, p=p), (corenn.tensor(x[0], requires_grad=True),))
    ours, theirs = corenn.tensor(x), torch.tensor(x)
    assert ours.mvlgamma_(p) is ours
    np.testing.assert_allclose(ours.numpy(), theirs.mvlgamma_(p).numpy(), rtol=1e-12)
    ints = corenn.mvlgamma(corenn.tensor([3, 4]), p)
    assert ints.dtype == corenn.float32
    np.testing.assert_allclose(ints.numpy(), torch.mvlgamma(torch.tensor([3, 4]), p).numpy(), rtol=1e-6)


def test_mvlgamma_errors_match_torch(torch):
    for lib in (corenn, torch):
        with pytest.raises(RuntimeError, match="p has to be greater than or equal to 1"):
            lib.mvlgamma(lib.tensor([3.0]), 0)
        with pytest.raises(TypeError, match=r"argument 'p' \(position 2\) must be int, not float"):
            lib.mvlgamma(lib.tensor([3.0]), 1.5)
    x = np.array([1.0, 0.5, 3.0, 1.25])  # at or below (p - 1) / 2: no error any more, lgamma's poles
    np.testing.assert_allclose(corenn.mvlgamma(corenn.tensor(x), 3).numpy(), torch.mvlgamma(torch.tensor(x), 3).numpy(),
                               rtol=1e-13)


INCOMPLETE = [((0.01, 5), 1e-13), ((0.1, 50), 1e-8), ((1, 500), 1e-8), ((100, 3000), 1e-8)]


@pytest.mark.parametrize("name", ["igamma", "igammac"])
@pytest.mark.parametrize("a_range,rtol", INCOMPLETE, ids=[str(r) for r, _ in INCOMPLETE])
def test_incomplete_gamma_matches_torch(name, a_range, rtol, torch):
    # PyTorch switches to asymptotic expansions for large a, good to about 2e-9; corenn sums the series or
    # continued fraction to float64 precision (checked against mpmath below)
    a = RNG.uniform(*a_range, 300)
    x = a * RNG.uniform(0.1, 2.5, 300)
    ours = getattr(corenn, name)(corenn.tensor(a), corenn.tensor(x)).numpy()
    theirs = getattr(torch, name)(torch.tensor(a), torch.tensor(x)).numpy()
    np.testing.assert_allclose(ours, theirs, rtol=rtol, atol=1e-300)
    ours32 = getattr(corenn, name)(corenn.tensor(a, dtype=corenn.float32), corenn.tensor(x, dtype=corenn.float32))
    theirs32 = getattr(torch, name)(torch.tensor(a, dtype=torch.float32), torch.tensor(x, dtype=torch.float32))
    assert ours32.dtype == corenn.float32
    np.testing.assert_allclose(ours32.numpy(), theirs32.numpy(), rtol=2e-4, atol=1e-7)


def test_incomplete_gamma_against_mpmath():
    mpmath = pytest.importorskip("mpmath")
    a = np.concatenate([RNG.uniform(0.01, 5, 60), RNG.uniform(5, 800, 60)])
    x = a * RNG.uniform(0.1, 2.5, 120)
    lower = corenn.igamma(corenn.tensor(a), corenn.tensor(x)).numpy()
    upper = corenn.igammac(corenn.tensor(a), corenn.tensor(x)).numpy()
    expected_lower = [float(mpmath.gammainc(ai, 0, xi, regularized=True)) for ai, xi in zip(a, x)]
    expected_upper = [float(mpmath.gammainc(ai, xi, mpmath.inf, regularized=True)) for ai, xi in zip(a, x)]
    np.testing.assert_allclose(lower, expected_lower, rtol=1e-11, atol=1e-300)
    np.testing.assert_allclose(upper, expected_upper, rtol=1e-11, atol=1e-300)


@pytest.mark.parametrize("name", ["igamma", "igammac"])
def test_incomplete_gamma_edges_match_torch(name, torch):
    values = [0.0, 1.0, 2.5, INF, -1.0, NAN]
    a, x = (np.array(v, dtype=np.float64) for v in zip(*[(p, q) for p in values for q in values]))
    with np.errstate(all="ignore"):
        ours = getattr(corenn, name)(corenn.tensor(a), corenn.tensor(x)).numpy()
    np.testing.assert_allclose(ours, getattr(torch, name)(torch.tensor(a), torch.tensor(x)).numpy(), rtol=1e-14)


@pytest.mark.parametrize("name", ["igamma", "igammac"])
def test_incomplete_gamma_gradient_matches_torch(name, torch):
    a = RNG.uniform(0.5, 6, (3, 4))
    x = RNG.uniform(0.1, 8, (4,))
    out = compare_with_torch(getattr(corenn, name), getattr(torch, name), [a, x], torch, rtol=1e-10, frozen=(0,))
    assert out.grad_fn.name() == name.capitalize() + "Backward0"
    assert gradcheck(lambda t: getattr(corenn, name)(corenn.tensor(a[0]), t),
                     (corenn.tensor(x, requires_grad=True),))
    leaf = corenn.tensor(a, requires_grad=True)
    with pytest.raises(NotImplementedError, match=f"the derivative for '{name}: input' is not implemented"):
        getattr(corenn, name)(leaf, corenn.tensor(x)).sum().backward()


@pytest.mark.parametrize("name", ["igamma", "igammac"])
def test_incomplete_gamma_errors_and_methods(name, torch):
    for lib in (corenn, torch):
        with pytest.raises(NotImplementedError, match=f"\"{name}_cpu\" not implemented for 'Long'"):
            getattr(lib, name)(lib.tensor([1]), lib.tensor([2]))
        with pytest.raises(TypeError, match="argument 'other' \\(position 2\\) must be Tensor, not float"):
            getattr(lib, name)(lib.tensor([1.0]), 2.0)
    a, x = RNG.uniform(0.5, 3, 5), RNG.uniform(0.5, 3, 5)
    ours, theirs = corenn.tensor(a), torch.tensor(a)
    assert getattr(ours, name + "_")(corenn.tensor(x)) is ours
    getattr(theirs, name + "_")(torch.tensor(x))
    np.testing.assert_allclose(ours.numpy(), theirs.numpy(), rtol=1e-12)
    mixed = getattr(corenn, name)(corenn.tensor([2]), corenn.tensor([1.5]))
    assert mixed.dtype == corenn.float32


@pytest.mark.parametrize("name", ["lgamma", "digamma", "erfc", "erfinv", "i0"])
def test_methods_inplace_and_integer_inputs_match_torch(name, torch):
    x = RNG.uniform(0.1, 0.9, (2, 3))
    ours, theirs = corenn.tensor(x), torch.tensor(x)
    np.testing.assert_allclose(getattr(ours, name)().numpy(), getattr(theirs, name)().numpy(), rtol=1e-13)
    assert getattr(ours, name + "_")() is ours
    getattr(theirs, name + "_")()
    np.testing.assert_allclose(ours.numpy(), theirs.numpy(), rtol=1e-13)
    if hasattr(torch, name + "_"):
        ours = corenn.tensor(x)
        assert getattr(corenn, name + "_")(ours) is ours
    ints = [0, 1, 3] if name != "erfinv" else [0, 1, -1]
    ours, theirs = getattr(corenn, name)(corenn.tensor(ints)), getattr(torch, name)(torch.tensor(ints))
    assert ours.dtype == corenn.float32
    np.testing.assert_allclose(ours.numpy(), theirs.numpy(), rtol=1e-6)
    with pytest.raises(RuntimeError, match="result type Float can't be cast to the desired output type Long"):
        getattr(corenn.tensor([1, 2]), name + "_")()
    with pytest.raises(TypeError):
        getattr(corenn, name)([0.5])


def test_polygamma_errors_match_torch(torch):
    for lib in (corenn, torch):
        with pytest.raises(RuntimeError, match=r"polygamma\(n, x\) does not support negative n."):
            lib.polygamma(-1, lib.tensor([1.0]))
        with pytest.raises(TypeError, match=r"polygamma\(\): argument 'n' \(position 1\) must be int, not float"):
            lib.polygamma(1.5, lib.tensor([1.0]))


def test_grad_fn_names_match_torch(torch):
    x = np.array([0.3, 0.6])
    for name in ["lgamma", "digamma", "erfc", "erfinv", "i0"]:
        ours = getattr(corenn, name)(corenn.tensor(x, requires_grad=True))
        theirs = getattr(torch, name)(torch.tensor(x, requires_grad=True))
        assert ours.grad_fn.name() == theirs.grad_fn.name()
    assert corenn.polygamma(2, corenn.tensor(x, requires_grad=True)).grad_fn.name() == "PolygammaBackward0"


@pytest.mark.parametrize("value", [0.3, 1.7, 4.0, -2.5])
def test_zero_dimensional_inputs_match_torch(value, torch):
    for name in ["lgamma", "digamma", "erfc", "i0"]:
        ours, theirs = getattr(corenn, name)(corenn.tensor(value)), getattr(torch, name)(torch.tensor(value))
        assert ours.shape == () and ours.item() == pytest.approx(theirs.item(), rel=1e-6, abs=1e-6)
    probability = corenn.tensor(value / 5)
    assert corenn.erfinv(probability).item() == pytest.approx(torch.erfinv(torch.tensor(value / 5)).item(),
                                                                rel=1e-6)
    assert corenn.polygamma(2, corenn.tensor(value)).shape == ()
