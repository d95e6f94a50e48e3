"""corenn_numba.nn: softmax, log_softmax, the fused cross-entropy and relu agree with the core kernels.

Each check runs the same expression with the plugin enabled and disabled (the core's kernels)
and compares outputs and gradients; gradients are also checked against finite differences in
float64, and the layers against PyTorch when it is installed.
"""

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import corenn
import corenn.nn.functional as F
import corenn_numba
from corenn.kernels import fell_back
from corenn.dispatch import kernels
from corenn.testing.opcheck import Float, OpCase, check_op, run_conformance
from corenn_numba import nn as numba_nn

SETTINGS = settings(max_examples=15, deadline=None)
TOL = {np.float32: dict(rtol=1e-5, atol=1e-6), np.float64: dict(rtol=1e-10, atol=1e-12)}


def forward_backward(fn, arrays, grad_seed=0):
    """``fn(*tensors)`` and the gradients of every float input for a random upstream gradient."""
    tensors = [corenn.tensor(a, requires_grad=a.dtype.kind == "f") for a in arrays]
    out = fn(*tensors)
    upstream = np.random.default_rng(grad_seed).standard_normal(out.shape).astype(arrays[0].dtype)
    out.backward(corenn.tensor(upstream))
    return out.detach().numpy(), [t.grad.numpy() if t.grad is not None else None for t in tensors]


def assert_same_as_core(fn, arrays, dtype):
    got, got_grads = forward_backward(fn, arrays)
    with corenn_numba.disabled():
        expected, expected_grads = forward_backward(fn, arrays)
    assert got.dtype == expected.dtype
    np.testing.assert_allclose(got, expected, **TOL[dtype])
    for g, e in zip(got_grads, expected_grads):
        assert (g is None) == (e is None)
        if g is not None:
            np.testing.assert_allclose(g, e, **TOL[dtype])


def test_plugin_kernels_are_dispatched():
    assert issubclass(kernels.lookup("softmax", "cpu"), numba_nn.Softmax)  # the calibrated subclass of the override
    assert issubclass(kernels.lookup("log_softmax", "cpu"), numba_nn.LogSoftmax)  # the calibrated subclass of the override
    assert issubclass(kernels.lookup("cross_entropy", "cpu"), numba_nn.CrossEntropy)  # the calibrated subclass of the override
    with corenn_numba.disabled():
        assert kernels.lookup("cross_entropy", "cpu") is not numba_nn.CrossEntropy


# ---------------------------------------------------------------------------------------------------------
# softmax / log_softmax
# ---------------------------------------------------------------------------------------------------------

shapes = st.lists(st.integers(1, 7), min_size=1, max_size=3).map(tuple)


@SETTINGS
@given(shape=shapes, dtype=st.sampled_from([np.float32, np.float64]), log=st.booleans(),
       scale=st.sampled_from([1.0, 30.0]))
def test_softmax_matches_core(shape, dtype, log, scale):
    x = (np.random.default_rng(1).standard_normal(shape) * scale).astype(dtype)
    fn = corenn.log_softmax if log else corenn.softmax
    assert_same_as_core(lambda t: fn(t, -1), [x], dtype)


def test_softmax_large_logits_stay_finite():
    x = corenn.tensor([[1000.0, 0.0, -1000.0]], dtype=corenn.float32)
    assert np.allclose(corenn.softmax(x, -1).numpy(), [[1.0, 0.0, 0.0]])
    assert np.allclose(corenn.log_softmax(x, -1).numpy(), [[0.0, -1000.0, -2000.0]])


def test_softmax_nan_propagates_like_core():
    x = np.array([[0.0, np.nan, 1.0], [0.0, 1.0, 2.0]], dtype=np.float32)
    got = corenn.softmax(corenn.tensor(x), -1).numpy()
    with corenn_numba.disabled():
        expected = corenn.softmax(corenn.tensor(x), -1).numpy()
    np.testing.assert_array_equal(np.isnan(got), np.isnan(expected))
    np.testing.assert_allclose(got[1], expected[1], rtol=1e-6)


def test_softmax_other_axis_and_float16_fall_back():
    x = corenn.randn(3, 4, requires_grad=True)
    y = corenn.softmax(x, 0)
    assert fell_back(y.grad_fn)  # not the last axis: the core kernel ran
    assert_same_as_core(lambda t: corenn.softmax(t, 0), [x.detach().numpy()], np.float32)
    half = corenn.randn(2, 5).to(corenn.float16)
    out = corenn.softmax(half, -1)
    assert out.dtype is corenn.float16
    with corenn_numba.disabled():
        np.testing.assert_array_equal(out.numpy(), corenn.softmax(half, -1).numpy())


def test_softmax_gradcheck_float64():
    x = corenn.randn(3, 5, dtype=corenn.float64, requires_grad=True)
    assert corenn.autograd.gradcheck(lambda t: corenn.softmax(t, -1), (x,))
    assert corenn.autograd.gradcheck(lambda t: corenn.log_softmax(t, -1), (x,))


def test_softmax_conformance_kit():
    pytest.importorskip("torch")  # the kit compares with PyTorch when the test imported it
    results = run_conformance("cpu", ops=["softmax", "log_softmax", "logsumexp"])
    assert results and all(not outcome.startswith("FAIL") for _, outcome in results)


# ---------------------------------------------------------------------------------------------------------
# cross_entropy
# ---------------------------------------------------------------------------------------------------------

@SETTINGS
@given(n=st.integers(1, 9), classes=st.integers(1, 12), spatial=st.sampled_from([(), (3,), (2, 3)]),
       dtype=st.sampled_from([np.float32, np.float64]), smoothing=st.sampled_from([0.0, 0.1, 1.0]),
       use_weight=st.booleans(), ignore=st.booleans(), reduction=st.sampled_from(["mean", "sum", "none"]))
def test_cross_entropy_matches_core(n, classes, spatial, dtype, smoothing, use_weight, ignore, reduction):
    rng = np.random.default_rng(n * 100 + classes)
    logits = (rng.standard_normal((n, classes) + spatial) * 3).astype(dtype)
    target = rng.integers(0, classes, (n,) + spatial)
    ignore_index = int(target.reshape(-1)[0]) if ignore else -100
    weight = corenn.tensor(rng.uniform(0.5, 2.0, classes).astype(dtype)) if use_weight else None
    if ignore and reduction == "mean" and (target == ignore_index).all():
        target.reshape(-1)[0] = (ignore_index + 1) % classes if classes > 1 else ignore_index
    fn = lambda x: F.cross_entropy(x, corenn.tensor(target), weight=weight, ignore_index=ignore_index,  # noqa
                                   label_smoothing=smoothing, reduction=reduction)
    assert_same_as_core(fn, [logits], dtype)


def test_cross_entropy_uses_fused_kernel_and_int32_targets():
    logits = corenn.randn(4, 6, requires_grad=True)
    target = corenn.tensor([0, 5, 2, 2], dtype=corenn.int32)
    loss = F.cross_entropy(logits, target)
    assert isinstance(loss.grad_fn, numba_nn.CrossEntropy) and not fell_back(loss.grad_fn)
    assert_same_as_core(lambda x: F.cross_entropy(x, target), [logits.detach().numpy()], np.float32)


def test_cross_entropy_gradcheck_float64():
    logits = corenn.randn(5, 4, dtype=corenn.float64, requires_grad=True)
    target = corenn.tensor([0, 3, 1, 1, 2])
    weight = corenn.tensor([0.5, 1.0, 2.0, 1.5], dtype=corenn.float64)
    for kw in ({}, {"label_smoothing": 0.2}, {"weight": weight, "ignore_index": 1, "label_smoothing": 0.3},
               {"reduction": "none", "weight": weight}):
        assert corenn.autograd.gradcheck(lambda x: F.cross_entropy(x, target, **kw), (logits,))


def test_cross_entropy_all_targets_ignored():
    logits = corenn.randn(3, 4, requires_grad=True)
    target = corenn.tensor([-100, -100, -100])
    loss = F.cross_entropy(logits, target)
    assert np.isnan(loss.item())
    assert F.cross_entropy(logits, target, reduction="sum").item() == 0.0
    F.cross_entropy(logits, target, reduction="sum").backward()
    assert np.all(logits.grad.numpy() == 0)


def test_cross_entropy_bad_target_raises_index_error():
    logits = corenn.randn(2, 3)
    with pytest.raises(IndexError, match="Target 3 is out of bounds"):
        F.cross_entropy(logits, corenn.tensor([0, 3]))
    with pytest.raises(IndexError, match="Target -1 is out of bounds"):
        F.cross_entropy(logits, corenn.tensor([-1, 0]))


def test_cross_entropy_probability_targets_fall_back():
    logits = corenn.randn(3, 4, requires_grad=True)
    probs = corenn.softmax(corenn.randn(3, 4), -1)
    loss = F.cross_entropy(logits, probs, label_smoothing=0.1)
    assert fell_back(loss.grad_fn)
    assert_same_as_core(lambda x: F.cross_entropy(x, probs, label_smoothing=0.1), [logits.detach().numpy()],
                        np.float32)


@pytest.mark.parametrize("kw", [{}, {"label_smoothing": 0.2}, {"weight": True, "ignore_index": 1},
                                {"weight": True, "label_smoothing": 0.1, "reduction": "sum"}, {"reduction": "none"}])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_cross_entropy_spatial_logits_run_compiled(kw, dtype):
    # (N, C, d1, d2) logits: the planes loops, with the class axis strided (no transpose).
    rng = np.random.default_rng(5)
    logits = rng.standard_normal((3, 4, 5, 2)).astype(dtype)
    target = corenn.tensor(rng.integers(0, 4, (3, 5, 2)))
    kw = dict(kw)
    weight = corenn.tensor(rng.uniform(0.5, 2, 4).astype(dtype)) if kw.pop("weight", False) else None
    loss = F.cross_entropy(corenn.tensor(logits, requires_grad=True), target, weight=weight, **kw)
    assert not fell_back(loss.grad_fn)
    assert_same_as_core(lambda x: F.cross_entropy(x, target, weight=weight, **kw), [logits], dtype)


def test_cross_entropy_float16_falls_back():
    logits = corenn.randn(3, 4).to(corenn.float16)
    target = corenn.tensor([0, 1, 3])
    got = F.cross_entropy(logits, target)
    with corenn_numba.disabled():
        expected = F.cross_entropy(logits, target)
    assert got.dtype is corenn.float16
    np.testing.assert_array_equal(got.numpy(), expected.numpy())


def test_cross_entropy_opcheck_case():
    target = np.array([0, 2, 1, 2, 0])

    def fn(lib, x):
        t = lib.tensor(target) if lib is corenn else lib.from_numpy(target)
        return (F if lib is corenn else lib.nn.functional).cross_entropy(x, t, label_smoothing=0.1)

    case = OpCase("cross_entropy", fn, [Float((5, 3))])
    assert check_op(case, "cpu") in ("torch+core", "core")  # the override is also compared with the core's


# ---------------------------------------------------------------------------------------------------------
# PyTorch oracle
# ---------------------------------------------------------------------------------------------------------

@pytest.mark.torch
@pytest.mark.parametrize("kw", [{}, {"label_smoothing": 0.15}, {"ignore_index": 2, "reduction": "sum"},
                                {"weight": True, "label_smoothing": 0.05}, {"reduction": "none"}])
@pytest.mark.parametrize("spatial", [(), (3, 2)])
def test_cross_entropy_against_torch(kw, spatial):
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(7)
    logits = rng.standard_normal((6, 5) + spatial).astype(np.float32)
    target = rng.integers(0, 5, (6,) + spatial)
    kw = dict(kw)
    weight = rng.uniform(0.5, 2, 5).astype(np.float32) if kw.pop("weight", False) else None
    x = corenn.tensor(logits, requires_grad=True)
    loss = F.cross_entropy(x, corenn.tensor(target), weight=None if weight is None else corenn.tensor(weight), **kw)
    tx = torch.tensor(logits, requires_grad=True)
    tloss = torch.nn.functional.cross_entropy(tx, torch.tensor(target),
                                              weight=None if weight is None else torch.tensor(weight), **kw)
    np.testing.assert_allclose(loss.detach().numpy(), tloss.detach().numpy(), rtol=1e-5, atol=1e-6)
    upstream = rng.standard_normal(tuple(loss.shape)).astype(np.float32)
    loss.backward(corenn.tensor(upstream))
    tloss.backward(torch.tensor(upstream))
    np.testing.assert_allclose(x.grad.numpy(), tx.grad.numpy(), rtol=1e-5, atol=1e-6)


@pytest.mark.torch
def test_softmax_layers_against_torch():
    torch = pytest.importorskip("torch")
    x = np.random.default_rng(3).standard_normal((4, 7, 9)).astype(np.float32)
    for ours, theirs in ((corenn.nn.Softmax(dim=-1), torch.nn.Softmax(dim=-1)),
                         (corenn.nn.LogSoftmax(dim=2), torch.nn.LogSoftmax(dim=2))):
        a = corenn.tensor(x, requires_grad=True)
        ta = torch.tensor(x, requires_grad=True)
        out, tout = ours(a), theirs(ta)
        np.testing.assert_allclose(out.detach().numpy(), tout.detach().numpy(), rtol=1e-5, atol=1e-6)
        (out * out).sum().backward()
        (tout * tout).sum().backward()
        np.testing.assert_allclose(a.grad.numpy(), ta.grad.numpy(), rtol=1e-5, atol=1e-5)


# ---------------------------------------------------------------------------------------------------------
# relu
# ---------------------------------------------------------------------------------------------------------

@pytest.mark.filterwarnings("ignore:invalid value encountered in multiply")  # the core's inf * 0
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_relu_gives_the_core_values_and_gradients_bit_for_bit(dtype):
    # nan stays nan, -inf and -0.0 become 0.0; a nan or inf gradient where relu is off gives nan (grad * 0),
    # as the core's ``grad * (out > 0)`` does. A transposed input is taken too (copied contiguous).
    special = np.array([np.nan, -np.inf, np.inf, -0.0, 0.0, -1.5, 2.5, 1e-30], dtype=dtype)
    x = np.concatenate([special, np.random.default_rng(0).standard_normal(1000).astype(dtype)])
    grad = np.random.default_rng(1).standard_normal(x.size).astype(dtype)
    grad[:4] = [np.nan, np.inf, 1.0, np.nan]
    for array in (x, x.reshape(-1, 8).T):
        results = []
        for enabled in (True, False):
            with corenn_numba.calibration.choosing("kernel") if enabled else corenn_numba.disabled():
                t = corenn.tensor(array, requires_grad=True)
                out = F.relu(t)
                out.backward(corenn.tensor(grad.reshape(array.shape)))
                results.append((out.detach().numpy(), t.grad.numpy()))
        (out, grad_in), (expected, expected_grad) = results
        np.testing.assert_array_equal(out, expected)
        assert not np.signbit(out).any()
        np.testing.assert_array_equal(grad_in, expected_grad)
    assert issubclass(kernels.lookup("relu", "cpu"), numba_nn.Relu)


def test_relu_kernel_refuses_mismatched_arrays_by_name():
    from corenn_numba import _nn_jit
    with pytest.raises(ValueError, match=r"relu\(\): argument 'out' must have shape \(4,\)"):
        _nn_jit.relu(np.zeros(4, np.float32), np.zeros(3, np.float32))
    with pytest.raises(TypeError, match=r"relu_backward\(\): argument 'grad' must be of dtype float32"):
        _nn_jit.relu_backward(np.zeros(4, np.float32), np.zeros(4), np.zeros(4, np.float32))
