"""Reductions and statistics added for issue 22 (median, mode, kthvalue, quantile, cummax, logcumsumexp,
histograms, searching, diff, cov, trapezoid, renorm) against PyTorch 2.13: values, index outputs and gradients
on float64 inputs, gradcheck, and PyTorch's errors."""
from __future__ import annotations

import numpy as np
import pytest

import corenn

from _breadth_outputs import check_gradients, match_torch

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.torch
RNG = np.random.default_rng(23)


def _distinct(*shape):
    """Distinct values (no ties: the index PyTorch reports among equal values is unspecified)."""
    size = int(np.prod(shape))
    return (RNG.permutation(size) + RNG.uniform(0.1, 0.9, size)).reshape(shape) - size / 2


def _normal(*shape):
    return RNG.standard_normal(shape)


def _with_nan(*shape):
    a = _distinct(*shape)
    a.reshape(-1)[RNG.choice(a.size, a.size // 3, replace=False)] = np.nan
    return a


def _tuple(result):
    return tuple(result) if isinstance(result, tuple) else result


CASES = [
    ("median", lambda lib, x: lib.median(x), [_distinct(3, 4)]),
    ("median-even", lambda lib, x: x.median(), [_distinct(6)]),
    ("median-dim", lambda lib, x: _tuple(lib.median(x, 1)), [_distinct(3, 4)]),
    ("median-keepdim", lambda lib, x: _tuple(x.median(0, keepdim=True)), [_distinct(3, 5, 2)]),
    ("median-nan", lambda lib, x: _tuple(lib.median(x, 1)), [np.array([[1.0, np.nan, 3.0], [2.0, 0.0, 1.0]])]),
    ("median-0d", lambda lib, x: _tuple(lib.median(x, 0)), [np.array(2.5)]),
    ("nanmedian", lambda lib, x: lib.nanmedian(x), [_with_nan(3, 4)]),
    ("nanmedian-dim", lambda lib, x: _tuple(x.nanmedian(-1)), [np.array([[1.0, np.nan, 3.0, 2.0],
                                                                         [np.nan, 1.0, 4.0, np.nan],
                                                                         [5.0, 4.0, 3.0, 0.0]])]),
    ("kthvalue", lambda lib, x: _tuple(lib.kthvalue(x, 2)), [_distinct(3, 4)]),
    ("kthvalue-dim", lambda lib, x: _tuple(x.kthvalue(3, 0, True)), [_distinct(4, 2)]),
    ("mode", lambda lib, x: _tuple(lib.mode(x)), [RNG.integers(0, 3, (4, 6)).astype(float)]),
    ("mode-dim", lambda lib, x: _tuple(x.mode(0, keepdim=True)), [RNG.integers(0, 3, (5, 3)).astype(float)]),
    ("msort", lambda lib, x: lib.msort(x), [_distinct(4, 3)]),
    ("msort-method", lambda lib, x: x.msort(), [_distinct(4)]),
    ("cummax", lambda lib, x: _tuple(lib.cummax(x, 1)), [_distinct(3, 5)]),
    ("cummax-ties", lambda lib, x: _tuple(x.cummax(0)), [np.array([1.0, 3.0, 3.0, 2.0, 3.0, 5.0])]),
    ("cummin", lambda lib, x: _tuple(lib.cummin(x, 0)), [_distinct(4, 3)]),
    ("cummin-nan", lambda lib, x: _tuple(x.cummin(0)), [np.array([1.0, np.nan, 0.0, np.nan, -1.0])]),
    ("logcumsumexp", lambda lib, x: lib.logcumsumexp(x, 1), [_normal(3, 4)]),
    ("logcumsumexp-wide", lambda lib, x: x.logcumsumexp(0), [np.array([-800.0, 1.0, 700.0, -3.0])]),
    ("quantile", lambda lib, x: lib.quantile(x, 0.3), [_normal(3, 4)]),
    ("quantile-dim", lambda lib, x, q: lib.quantile(x, q, dim=1, keepdim=True), [_normal(3, 5),
                                                                               np.array([0.05, 0.3, 0.6, 0.95])]),
    ("quantile-all-keepdim", lambda lib, x, q: x.quantile(q, keepdim=True), [_normal(2, 3), np.array([0.5, 0.9])]),
    ("quantile-nan", lambda lib, x: lib.quantile(x, 0.5, 1), [np.array([[1.0, np.nan, 3.0], [2.0, 0.0, 1.0]])]),
    ("nanquantile", lambda lib, x: lib.nanquantile(x, 0.4, 1), [_with_nan(3, 5)]),
    ("nanquantile-q", lambda lib, x, q: x.nanquantile(q, 0), [_with_nan(6, 2), np.array([0.1, 0.7])]),
    ("nanmean", lambda lib, x: lib.nanmean(x), [_with_nan(3, 4)]),
    ("nanmean-dim", lambda lib, x: x.nanmean(1, keepdim=True), [_with_nan(3, 4)]),
    ("diff", lambda lib, x: lib.diff(x), [_normal(3, 4)]),
    ("diff-n2-dim0", lambda lib, x: x.diff(2, 0), [_normal(5, 3)]),
    ("diff-prepend-append", lambda lib, x, p, a: lib.diff(x, 1, 1, p, a), [_normal(2, 3), _normal(2, 1),
                                                                          _normal(2, 2)]),
    ("diff-n-too-large", lambda lib, x: lib.diff(x, 5), [_normal(3)]),
    ("cov", lambda lib, x: lib.cov(x), [_normal(3, 5)]),
    ("cov-1d", lambda lib, x: x.cov(correction=0), [_normal(5)]),
    ("cov-weights", lambda lib, x, a: lib.cov(x, fweights=lib.tensor([1, 2, 1, 3]), aweights=a),
     [_normal(2, 4), RNG.uniform(0.5, 2, 4)]),
    ("corrcoef", lambda lib, x: lib.corrcoef(x), [_normal(3, 6)]),
    ("corrcoef-method", lambda lib, x: x.corrcoef(), [_normal(2, 4)]),
    ("trapezoid", lambda lib, y: lib.trapezoid(y), [_normal(3, 4)]),
    ("trapezoid-x", lambda lib, y, x: lib.trapezoid(y, x, dim=0), [_normal(4, 3), np.sort(_normal(4))]),
    ("trapezoid-xnd", lambda lib, y, x: lib.trapezoid(y, x), [_normal(2, 4), _normal(2, 4)]),
    ("trapezoid-dx", lambda lib, y: lib.trapezoid(y, dx=0.5), [_normal(3, 4)]),
    ("trapz", lambda lib, y, x: lib.trapz(y, x), [_normal(3, 4), np.sort(_normal(4))]),
    ("trapz-dx", lambda lib, y: lib.trapz(y, dx=2.0, dim=0), [_normal(3, 4)]),
    ("cumulative_trapezoid", lambda lib, y: lib.cumulative_trapezoid(y), [_normal(3, 4)]),
    ("cumulative_trapezoid-x", lambda lib, y, x: lib.cumulative_trapezoid(y, x, dim=0), [_normal(4, 2),
                                                                                          np.sort(_normal(4))]),
    ("renorm", lambda lib, x: lib.renorm(x, 2, 0, 1.0), [_normal(3, 4)]),
    ("renorm-p1", lambda lib, x: x.renorm(1, 1, 2.5), [_normal(3, 4, 2)]),
    ("sum_to_size", lambda lib, x: x.sum_to_size(3, 1), [_normal(2, 3, 4)]),
    ("sum_to_size-tuple", lambda lib, x: x.sum_to_size((1, 4)), [_normal(3, 4)]),
]


@pytest.mark.parametrize("name,fn,arrays", CASES, ids=[c[0] for c in CASES])
def test_matches_torch(name, fn, arrays):
    match_torch(lambda *t: fn(corenn, *t), lambda *t: fn(torch, *t), arrays, torch)
    # ties (mode, cummax-ties) and nan make finite differences meaningless
    if "mode" not in name and "ties" not in name and not any(np.isnan(a).any() for a in arrays):
        check_gradients(lambda *t: fn(corenn, *t), arrays)


@pytest.mark.parametrize("interpolation", ["linear", "lower", "higher", "midpoint", "nearest"])
def test_quantile_interpolations(interpolation):
    x = _normal(4, 7)
    q = np.array([0.0, 0.1, 0.5, 0.75, 1.0])
    match_torch(lambda t, r: corenn.quantile(t, r, 1, interpolation=interpolation),
                lambda t, r: torch.quantile(t, r, 1, interpolation=interpolation), [x, q], torch)
    match_torch(lambda t: corenn.nanquantile(t, 0.5, 0, interpolation=interpolation),
                lambda t: torch.nanquantile(t, 0.5, 0, interpolation=interpolation), [_with_nan(7, 3)], torch)


def _values(result):
    return [r.numpy() for r in (result if isinstance(result, tuple) else (result,))]


SEARCH_CASES = [
    ("histc", lambda lib, x: lib.histc(x, bins=5), [_normal(20)]),
    ("histc-range", lambda lib, x: x.histc(4, min=-1, max=1), [_normal(3, 7)]),
    ("histc-constant", lambda lib, x: lib.histc(x, 3), [np.ones(3)]),
    ("histogram", lambda lib, x: tuple(lib.histogram(x, 5)), [_normal(20)]),
    ("histogram-range-density", lambda lib, x: tuple(x.histogram(4, range=(-1.0, 1.0), density=True)),
     [_normal(30)]),
    ("histogram-edges-weight", lambda lib, x, e, w: tuple(lib.histogram(x, e, weight=w)),
     [_normal(10), np.array([-1.0, 0.0, 0.5, 2.0]), RNG.uniform(0, 2, 10)]),
    ("bincount", lambda lib, x: lib.bincount(x), [RNG.integers(0, 5, 12)]),
    ("bincount-minlength", lambda lib, x: x.bincount(minlength=9), [RNG.integers(0, 5, 12)]),
    ("bincount-weights", lambda lib, x, w: lib.bincount(x, w), [RNG.integers(0, 5, 12), _normal(12)]),
    ("bincount-int-weights", lambda lib, x, w: lib.bincount(x, w), [RNG.integers(0, 5, 6), RNG.integers(0, 5, 6)]),
    ("bincount-float32-weights", lambda lib, x, w: lib.bincount(x, w.float()), [RNG.integers(0, 5, 6), _normal(6)]),
    ("searchsorted", lambda lib, s, v: lib.searchsorted(s, v), [np.array([1.0, 3.0, 5.0, 7.0]),
                                                                np.array([[0.0, 3.0], [5.0, 9.0]])]),
    ("searchsorted-right", lambda lib, s, v: lib.searchsorted(s, v, right=True), [np.array([1.0, 3.0, 5.0]),
                                                                                  np.array([3.0, 5.0, 0.0])]),
    ("searchsorted-side", lambda lib, s, v: lib.searchsorted(s, v, side="right", out_int32=True),
     [np.array([[1.0, 3.0, 5.0], [2.0, 2.0, 4.0]]), np.array([[3.0], [2.0]])]),
    ("searchsorted-sorter", lambda lib, s, v, o: lib.searchsorted(s, v, sorter=o),
     [np.array([5.0, 1.0, 3.0]), np.array([2.0, 5.0]), np.array([1, 2, 0])]),
    ("searchsorted-scalar", lambda lib, s: lib.searchsorted(s, 4), [np.array([1, 3, 5])]),
    ("bucketize", lambda lib, v, b: lib.bucketize(v, b), [np.array([[1.0, 6.0], [3.0, 9.0]]),
                                                          np.array([1.0, 3.0, 5.0, 7.0])]),
    ("bucketize-right", lambda lib, v, b: lib.bucketize(v, b, right=True, out_int32=True),
     [np.array([1.0, 6.0, 3.0]), np.array([1.0, 3.0, 5.0])]),
    ("unique_consecutive", lambda lib, x: lib.unique_consecutive(x), [np.array([1, 1, 2, 2, 3, 1, 1, 2])]),
    ("unique_consecutive-all", lambda lib, x: tuple(x.unique_consecutive(return_inverse=True, return_counts=True)),
     [np.array([[1, 1], [2, 1]])]),
    ("unique_consecutive-dim", lambda lib, x: tuple(lib.unique_consecutive(x, True, True, dim=0)),
     [np.array([[1, 2], [1, 2], [3, 4], [1, 2]])]),
    ("unique_consecutive-dim1", lambda lib, x: tuple(lib.unique_consecutive(x, return_counts=True, dim=1)),
     [np.array([[1, 1, 2], [3, 3, 4]])]),
]


@pytest.mark.parametrize("name,fn,arrays", SEARCH_CASES, ids=[c[0] for c in SEARCH_CASES])
def test_counting_and_searching_match_torch(name, fn, arrays):
    match_torch(lambda *t: fn(corenn, *t), lambda *t: fn(torch, *t), arrays, torch, check_grad=False)


def test_nanmedian_of_only_nan_is_nan():
    values, indices = corenn.nanmedian(corenn.tensor([[np.nan, np.nan], [1.0, np.nan]]), 1)
    np.testing.assert_array_equal(values.numpy(), [np.nan, 1.0])
    assert indices[1].item() == 0


def test_median_gradient_goes_to_the_chosen_element():
    match_torch(lambda t: corenn.median(t), lambda t: torch.median(t), [np.array([1.0, 3.0, 2.0, 0.5])], torch)


def test_logcumsumexp_conformance_kernel():
    check_gradients(lambda t: corenn.logcumsumexp(t, -1), [_normal(2, 5)])


def test_errors_match_torch():
    x = corenn.tensor([[1.0, 2.0], [3.0, 4.0]])
    with pytest.raises(RuntimeError, match="out of range"):
        corenn.kthvalue(x, 3, 1)
    with pytest.raises(IndexError, match="non-zero size"):
        corenn.median(corenn.zeros(2, 0), 1)
    with pytest.raises(RuntimeError, match=r"range \[0, 1\]"):
        corenn.quantile(x, 1.5)
    with pytest.raises(RuntimeError, match="interpolation"):
        corenn.quantile(x, 0.5, interpolation="cubic")
    with pytest.raises(RuntimeError, match="float or double"):
        corenn.quantile(corenn.tensor([1, 2]), 0.5)
    with pytest.raises(RuntimeError, match="non-negative"):
        corenn.bincount(corenn.tensor([1, -1]))
    with pytest.raises(RuntimeError, match="opposites"):
        corenn.searchsorted(corenn.tensor([1.0, 2.0]), corenn.tensor([1.0]), right=True, side="left")
    with pytest.raises(RuntimeError, match="bins must be > 0"):
        corenn.histc(x, 0)
    with pytest.raises(RuntimeError, match="one-dimensional"):
        corenn.diff(corenn.tensor(1.0))
    with pytest.raises(RuntimeError, match="expandable"):
        x.sum_to_size(3)
    with pytest.raises(RuntimeError, match="floating point"):
        corenn.nanmean(corenn.tensor([1, 2]))
    for call in (lambda lib: lib.kthvalue(lib.tensor([[1.0, 2.0]]), 3, 1),
                 lambda lib: lib.quantile(lib.tensor([1.0]), 1.5),
                 lambda lib: lib.bincount(lib.tensor([1, -1])),
                 lambda lib: lib.tensor([[1.0, 2.0]]).sum_to_size(3)):
        with pytest.raises(RuntimeError):
            call(torch)


def test_isin_matches_torch():
    cases = [(lambda lib: lib.isin(lib.tensor([1, 2, 3, 2]), lib.tensor([2, 5]))),
             (lambda lib: lib.isin(lib.tensor([[1.0, 2.0]]), 2.0, invert=True)),
             (lambda lib: lib.isin(2, lib.tensor([1, 2]))),
             (lambda lib: lib.isin(lib.tensor([1, 2, 3]), lib.tensor([3, 1]), assume_unique=True))]
    for case in cases:
        match_torch(lambda: case(corenn), lambda: case(torch), [], torch, check_grad=False)


def test_nonzero_static_matches_torch():
    for size, fill in ((4, -1), (1, -1), (3, 7), (0, -1)):
        match_torch(lambda t: corenn.nonzero_static(t, size=size, fill_value=fill),
                    lambda t: torch.nonzero_static(t, size=size, fill_value=fill),
                    [np.array([[0, 1], [1, 1]])], torch, check_grad=False)
    assert corenn.tensor([0, 3]).nonzero_static(size=2).tolist() == [[1], [-1]]


@pytest.mark.parametrize("kwargs", [{"bins": 3}, {"bins": [2, 4]}, {"bins": [2, 3], "density": True},
                                    {"bins": 2, "range": [-1.0, 1.0, -2.0, 2.0]}])
def test_histogramdd_matches_torch(kwargs):
    points = _normal(20, 2)
    match_torch(lambda t: (corenn.histogramdd(t, **kwargs).hist,) + corenn.histogramdd(t, **kwargs).bin_edges,
                lambda t: (torch.histogramdd(t, **kwargs).hist,) + torch.histogramdd(t, **kwargs).bin_edges,
                [points], torch, check_grad=False)


def test_histogramdd_edges_and_weights():
    points, weight = _normal(10, 2), RNG.uniform(0, 1, 10)
    edges = [np.array([-2.0, 0.0, 2.0]), np.array([-1.0, 0.0, 0.5, 3.0])]
    ours = corenn.histogramdd(corenn.tensor(points), [corenn.tensor(e) for e in edges], weight=corenn.tensor(weight))
    theirs = torch.histogramdd(torch.tensor(points), [torch.tensor(e) for e in edges], weight=torch.tensor(weight))
    np.testing.assert_allclose(ours.hist.numpy(), theirs.hist.numpy(), rtol=1e-12)


GRADIENT_CASES = [
    ({}, (5,)),
    ({"spacing": 2.0}, (3, 4)),
    ({"spacing": [0.5, 2.0], "edge_order": 2}, (3, 4)),
    ({"dim": 1}, (3, 4)),
    ({"dim": [0], "edge_order": 2}, (4, 2)),
    ("coordinates", (3, 4)),
    ("coordinates-2", (3, 4)),
]


@pytest.mark.parametrize("kwargs,shape", GRADIENT_CASES, ids=[str(c[0]) for c in GRADIENT_CASES])
def test_gradient_matches_torch(kwargs, shape):
    x = _normal(*shape)
    if isinstance(kwargs, str):
        coords = [np.array([0.0, 1.0, 1.5]), np.array([0.0, 1.0, 3.0, 4.0])]
        order = 2 if kwargs.endswith("2") else 1

        def run(lib, t):
            return lib.gradient(t, spacing=[lib.tensor(c) for c in coords], edge_order=order)
    else:
        def run(lib, t):
            return lib.gradient(t, **kwargs)
    match_torch(lambda t: run(corenn, t), lambda t: run(torch, t), [x], torch)
    check_gradients(lambda t: run(corenn, t), [x])


def test_gradient_errors():
    for lib in (corenn, torch):
        with pytest.raises(RuntimeError, match="edge_order"):
            lib.gradient(lib.zeros(2), edge_order=2)


INTEGER_CALLS = {
    "median": lambda lib, x, y: lib.median(y, 1)[0], "median-all": lambda lib, x, y: lib.median(y),
    "mode": lambda lib, x, y: lib.mode(y, 1)[0], "kthvalue": lambda lib, x, y: lib.kthvalue(y, 2, 1)[0],
    "cummax": lambda lib, x, y: lib.cummax(y, 1)[0], "cummin": lambda lib, x, y: lib.cummin(y, 0)[1],
    "msort": lambda lib, x, y: lib.msort(y), "diff": lambda lib, x, y: lib.diff(y),
    "diff-bool": lambda lib, x, y: lib.diff(y > 0), "kron": lambda lib, x, y: lib.kron(x, y),
    "kron-bool": lambda lib, x, y: lib.kron(x > 0, y > 0), "cross": lambda lib, x, y: lib.cross(x, x.flip(0), dim=0),
    "tensordot": lambda lib, x, y: lib.tensordot(x, x), "take": lambda lib, x, y: lib.take(y, lib.tensor([1, 5])),
    "repeat_interleave": lambda lib, x, y: lib.repeat_interleave(y, 2, 0),
    "block_diag": lambda lib, x, y: lib.block_diag(x, y), "diag_embed": lambda lib, x, y: lib.diag_embed(y),
    "scatter_reduce-prod": lambda lib, x, y: y.scatter_reduce(0, lib.tensor([[0, 1, 0, 1, 0]]), y[:1], "prod"),
    "scatter_reduce-mean": lambda lib, x, y: y.scatter_reduce(0, lib.tensor([[0, 1, 0, 1, 0]]), y[:1], "mean",
                                                              include_self=False),
    "cov": lambda lib, x, y: lib.cov(y), "corrcoef": lambda lib, x, y: lib.corrcoef(y),
    "trapezoid": lambda lib, x, y: lib.trapezoid(y),
    "cumulative_trapezoid": lambda lib, x, y: lib.cumulative_trapezoid(y),
    "vander": lambda lib, x, y: lib.vander(y[0]), "logcumsumexp": lambda lib, x, y: lib.logcumsumexp(y, 1),
    "cdist": lambda lib, x, y: lib.cdist(y, y), "unique_consecutive": lambda lib, x, y: lib.unique_consecutive(y),
    "gradient": lambda lib, x, y: lib.gradient(y)[0], "nanmedian": lambda lib, x, y: lib.nanmedian(y),
    "quantile": lambda lib, x, y: lib.quantile(y, 0.5), "renorm": lambda lib, x, y: lib.renorm(y, 2, 0, 1),
    "det": lambda lib, x, y: lib.det(x), "matrix_power": lambda lib, x, y: lib.matrix_power(x, 2),
    "addmv": lambda lib, x, y: lib.addmv(x[0], x, x[1]), "addr": lambda lib, x, y: lib.addr(x, x[0], x[1]),
    "sum_to_size": lambda lib, x, y: y.sum_to_size(1, 5), "histc": lambda lib, x, y: lib.histc(y),
}


@pytest.mark.parametrize("name", sorted(INTEGER_CALLS))
def test_integer_inputs_behave_as_torch(name):
    """Integer inputs: the same result dtype and values as PyTorch, or the same exception type."""
    x, y = RNG.integers(-5, 5, (3, 3)), RNG.integers(-5, 5, (4, 5))
    outcomes = []
    for lib in (corenn, torch):
        try:
            outcomes.append(INTEGER_CALLS[name](lib, lib.tensor(x), lib.tensor(y)))
        except Exception as error:  # noqa: BLE001 - the type is what is compared
            outcomes.append(error)
    ours, theirs = outcomes
    if isinstance(theirs, Exception):
        assert isinstance(ours, type(theirs)), (ours, theirs)
        return
    assert not isinstance(ours, Exception), ours
    assert str(ours.dtype).split(".")[-1] == str(theirs.dtype).split(".")[-1]
    np.testing.assert_allclose(ours.numpy().astype(float), theirs.numpy().astype(float), rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("name", ["kthvalue", "median", "nanmedian", "mode", "cummax", "cummin"])
def test_indices_among_ties_are_torchs(name):
    """Which of several equal values an index points at: PyTorch's choice (its quickselect for kthvalue)."""
    rng = np.random.default_rng(11)
    for trial in range(60):
        n = int(rng.integers(1, 10))
        a = rng.integers(0, 3, (3, n)).astype(float)
        if name != "mode" and trial % 2:
            a[rng.random(a.shape) < 0.25] = np.nan
            if name == "nanmedian":
                a[np.isnan(a).all(axis=1), 0] = 1.0  # an all-nan row's index is std::nth_element's whim
        k = int(rng.integers(1, n + 1))

        def call(lib, t):
            return lib.kthvalue(t, k, 1) if name == "kthvalue" else getattr(lib, name)(t, 1)
        ours, theirs = call(corenn, corenn.tensor(a)), call(torch, torch.tensor(a))
        np.testing.assert_array_equal(ours.indices.numpy(), theirs.indices.numpy(), err_msg=str(a))
        np.testing.assert_array_equal(ours.values.numpy(), theirs.values.numpy())


@pytest.mark.parametrize("values", [[1.0, 2.0, 2.0, 3.0], [2.0, 2.0, 2.0], [5.0, 1.0, 1.0, 1.0, 5.0],
                                    [1.0, np.nan, 2.0], [np.nan, 1.0, np.nan, 3.0, 1.0]])
@pytest.mark.parametrize("name", ["median", "nanmedian"])
def test_median_of_all_shares_the_gradient_among_ties(name, values):
    match_torch(lambda t: getattr(corenn, name)(t), lambda t: getattr(torch, name)(t), [np.array(values)], torch)
