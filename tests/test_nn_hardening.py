"""Hostile and unusual inputs to the dense, convolution, normalisation and loss ops (issue 13).

Each test runs with the core's kernels and, where corenn-numba overrides the op, with the
plugin's (the ``kernels`` fixture), against PyTorch 2.13 on the same inputs:

- ``linear``: a bias of the wrong length raises PyTorch's RuntimeError (corenn-numba read
  past its end); biases that broadcast ((1,), (), 2-d) and ``in_features=0`` work,
  forward and backward;
- ``conv``/``conv_transpose`` with an empty batch;
- ``layer_norm``/``group_norm`` with ``eps=0`` and a constant group give nan (corenn-numba
  raised ZeroDivisionError); ``batch_norm`` refuses ``eps <= 0`` in training, as PyTorch;
- float32 overflow: the norms' statistics do not overflow, and sums of products that
  overflow give the same inf/nan with and without the plugin (PyTorch's where the result
  does not depend on the order of the additions);
- ``cross_entropy`` with -inf logits (masked classes), also on (N, C, d) logits, which
  corenn-numba now runs compiled;
- no array reaches ``backward`` outside ``save_for_backward`` in these ops.
"""
from __future__ import annotations

import warnings

import numpy as np
import pytest

import corenn
import corenn.nn.functional as F
from corenn.dispatch import kernels as registry
from corenn.kernels import fell_back, recompute_overflow

try:
    import corenn_numba
except ImportError:  # the plugin is a separate distribution: its half of each test is skipped without it
    corenn_numba = None

inf = float("inf")



@pytest.fixture(autouse=True)
def _quiet():
    """numpy's overflow and invalid-value warnings are expected here."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        yield


def _run(torch, lib, fn, arrays, grad=True):
    """``fn(lib, *tensors)`` and the gradients of the float inputs (upstream ones), as numpy arrays."""
    tensors = [torch.from_numpy(np.array(a)) if lib is torch else corenn.tensor(np.array(a)) for a in arrays]
    for t in tensors:
        if grad and t.dtype in (torch.float32, torch.float64, corenn.float32, corenn.float64):
            t.requires_grad_(True)
    out = fn(lib, *tensors)
    if grad:
        out.backward(lib.ones_like(out))
    grads = [None if t.grad is None else t.grad.numpy() for t in tensors]
    return out.detach().numpy(), grads


def assert_like_torch(torch, fn, arrays, grad=True, **tol):
    out, grads = _run(torch, corenn, fn, arrays, grad)
    expected, expected_grads = _run(torch, torch, fn, arrays, grad)
    assert out.shape == expected.shape and out.dtype == expected.dtype
    np.testing.assert_allclose(out, expected, **(tol or dict(rtol=1e-5, atol=1e-5)))
    for g, e in zip(grads, expected_grads):
        assert (g is None) == (e is None)
        if g is not None:
            assert g.shape == e.shape
            np.testing.assert_allclose(g, e, **(tol or dict(rtol=1e-5, atol=1e-5)))


def functional(lib):
    return F if lib is corenn else lib.nn.functional


# ---------------------------------------------------------------------------------------------------------
# linear
# ---------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("length", [199, 0, 10, 201])
def test_linear_bias_of_the_wrong_length_raises_like_pytorch(kernels, torch, length):
    x, weight, bias = np.ones((64, 300), np.float32), np.zeros((200, 300), np.float32), np.ones(length, np.float32)
    with pytest.raises(RuntimeError):
        torch.nn.functional.linear(torch.from_numpy(x), torch.from_numpy(weight), torch.from_numpy(bias))
    with pytest.raises(RuntimeError, match=r"linear\(\): expected bias of size \[200\].*bias of size \[%d\]" % length):
        F.linear(corenn.tensor(x), corenn.tensor(weight), corenn.tensor(bias))


def test_linear_bias_of_one_element_broadcasts_over_every_row(kernels):
    # The plugin read bias[0..199] from a 1-element array: row 0 was garbage (or SIGSEGV).
    out = F.linear(corenn.ones(64, 300), corenn.zeros(200, 300), corenn.ones(1))
    np.testing.assert_array_equal(out.numpy(), np.ones((64, 200), np.float32))


@pytest.mark.parametrize("x_shape, bias_shape", [
    ((64, 300), (1,)), ((64, 300), ()), ((64, 300), (1, 200)), ((64, 300), (64, 200)), ((64, 300), (64, 1)),
    ((300,), (1, 200)), ((300,), (1,)), ((2, 32, 300), (32, 200)), ((2, 32, 300), (200,)), ((8, 300), (200,)),
])
def test_linear_with_a_bias_that_broadcasts_like_pytorch(kernels, torch, x_shape, bias_shape):
    rng = np.random.default_rng(0)
    arrays = [rng.standard_normal(x_shape).astype(np.float32), rng.standard_normal((200, 300)).astype(np.float32),
              rng.standard_normal(bias_shape).astype(np.float32)]
    assert_like_torch(torch, lambda lib, x, w, b: functional(lib).linear(x, w, b), arrays, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("bias_shape", [(1, 1, 200), (3, 200), (2, 64, 200)])
def test_linear_bias_that_would_enlarge_the_output_raises(kernels, torch, bias_shape):
    x, weight, bias = torch.ones(64, 300), torch.ones(200, 300), torch.ones(bias_shape)
    with pytest.raises(RuntimeError):
        torch.nn.functional.linear(x, weight, bias)
    with pytest.raises(RuntimeError, match="linear"):
        F.linear(corenn.ones(64, 300), corenn.ones(200, 300), corenn.ones(*bias_shape))


def test_linear_argument_errors_name_linear(kernels):
    with pytest.raises(RuntimeError, match=r"linear\(\): expected bias of dtype corenn.float32"):
        F.linear(corenn.ones(4, 3), corenn.ones(2, 3), corenn.ones(2, dtype=corenn.float64))
    with pytest.raises(TypeError, match="bias"):
        F.linear(corenn.ones(4, 3), corenn.ones(2, 3), [1.0, 2.0])
    with pytest.raises(RuntimeError, match=r"linear\(\): both arguments to linear need to be at least 1D"):
        F.linear(corenn.tensor(1.0), corenn.ones(3, 1))
    with pytest.raises(RuntimeError, match=r"linear\(\): weight must be a matrix"):
        F.linear(corenn.ones(4, 3), corenn.ones(2, 2, 3))


@pytest.mark.parametrize("x_shape, w_shape, bias", [((64, 0), (200, 0), True), ((64, 3), (0, 3), False),
                                                     ((16, 300), (300,), False), ((300,), (300,), False)])
def test_linear_empty_and_vector_shapes_like_pytorch(kernels, torch, x_shape, w_shape, bias):
    rng = np.random.default_rng(1)
    arrays = [rng.standard_normal(x_shape).astype(np.float32), rng.standard_normal(w_shape).astype(np.float32)]
    if bias:
        arrays.append(rng.standard_normal(w_shape[:1]).astype(np.float32))
    assert_like_torch(torch, lambda lib, *t: functional(lib).linear(*t), arrays, rtol=1e-4, atol=1e-4)


# ---------------------------------------------------------------------------------------------------------
# convolution with an empty batch
# ---------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("fn, x_shape, w_shape, kw", [
    ("conv2d", (0, 3, 5, 5), (4, 3, 3, 3), {}),
    ("conv2d", (0, 4, 5, 5), (4, 2, 3, 3), dict(groups=2, stride=2, padding=1)),
    ("conv1d", (0, 3, 5), (4, 3, 3), {}),
    ("conv3d", (0, 3, 4, 4, 4), (2, 3, 3, 3, 3), {}),
    ("conv_transpose2d", (0, 3, 5, 5), (3, 4, 3, 3), {}),
    ("conv_transpose2d", (0, 4, 5, 5), (4, 2, 3, 3), dict(groups=2, stride=2, output_padding=1)),
    ("conv_transpose1d", (0, 3, 5), (3, 4, 3), {}),
])
def test_convolution_with_an_empty_batch_like_pytorch(kernels, torch, fn, x_shape, w_shape, kw):
    rng = np.random.default_rng(2)
    channels = w_shape[0] if fn.startswith("conv_transpose") else w_shape[0]
    out_channels = w_shape[1] * kw.get("groups", 1) if fn.startswith("conv_transpose") else channels
    arrays = [np.zeros(x_shape, np.float32), rng.standard_normal(w_shape).astype(np.float32),
              rng.standard_normal(out_channels).astype(np.float32)]
    assert_like_torch(torch, lambda lib, x, w, b: getattr(functional(lib), fn)(x, w, b, **kw), arrays)


def test_conv_weight_without_output_channels_raises_like_pytorch(kernels, torch):
    with pytest.raises(RuntimeError, match="expected weight to be at least 1 at dimension 0"):
        torch.nn.functional.conv2d(torch.ones(2, 3, 5, 5), torch.ones(0, 3, 3, 3))
    with pytest.raises(RuntimeError, match=r"conv2d.*expected weight to be at least 1 at dimension 0"):
        F.conv2d(corenn.ones(2, 3, 5, 5), corenn.ones(0, 3, 3, 3))


# ---------------------------------------------------------------------------------------------------------
# normalisation: eps=0, float32 overflow
# ---------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("fn", [lambda lib, x: functional(lib).layer_norm(x, (4,), eps=0),
                                lambda lib, x: functional(lib).group_norm(x, 3, eps=0),
                                lambda lib, x: functional(lib).layer_norm(x, (3, 4), eps=0.0)],
                         ids=["layer_norm", "group_norm", "layer_norm_2d"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_norms_with_eps_zero_and_a_constant_group_give_nan(kernels, torch, fn, dtype):
    # corenn-numba raised ZeroDivisionError here.
    x = np.ones((2, 3, 4), dtype)
    x[1] = np.arange(12).reshape(3, 4)
    out, _ = _run(torch, corenn, fn, [x], grad=False)
    expected, _ = _run(torch, torch, fn, [x], grad=False)
    np.testing.assert_array_equal(np.isnan(out), np.isnan(expected))
    assert np.isnan(out[0]).all()
    np.testing.assert_allclose(out[1], expected[1], rtol=1e-5, atol=1e-5)


def test_batch_norm_refuses_eps_zero_in_training_like_pytorch(kernels, torch):
    with pytest.raises(ValueError, match="eps must be positive during training"):
        torch.nn.functional.batch_norm(torch.ones(2, 4, 3), None, None, training=True, eps=0)
    with pytest.raises(ValueError, match="batch_norm eps must be positive during training, but got 0"):
        F.batch_norm(corenn.ones(2, 4, 3), None, None, training=True, eps=0)
    out = F.batch_norm(corenn.ones(2, 4, 3), corenn.zeros(4), corenn.ones(4), training=False, eps=0)
    np.testing.assert_array_equal(out.numpy(), np.ones((2, 4, 3), np.float32))


@pytest.mark.parametrize("norm", ["layer_norm", "group_norm", "batch_norm"])
def test_norms_of_values_whose_squares_overflow_float32(kernels, norm):
    # Around 1e20 the float32 variance overflows: the core scaled every value by 1/sqrt(inf) = 0 while
    # corenn-numba (float64 statistics) gave the right values; both now give them.
    rng = np.random.default_rng(3)
    x = (rng.standard_normal((4, 6, 5)) * 1e20).astype(np.float32)
    call = {"layer_norm": lambda t: F.layer_norm(t, (5,)), "group_norm": lambda t: F.group_norm(t, 3),
            "batch_norm": lambda t: F.batch_norm(t, None, None, training=True)}[norm]
    wide = x.astype(np.float64)
    axes = {"layer_norm": (2,), "batch_norm": (0, 2)}.get(norm)
    if norm == "group_norm":
        grouped = wide.reshape(4, 3, -1)
        expected = ((grouped - grouped.mean(2, keepdims=True)) / grouped.std(2, keepdims=True)).reshape(x.shape)
    else:
        expected = (wide - wide.mean(axes, keepdims=True)) / wide.std(axes, keepdims=True)
    t = corenn.tensor(x, requires_grad=True)
    out = call(t)
    np.testing.assert_allclose(out.detach().numpy(), expected, rtol=1e-4, atol=1e-4)
    out.backward(corenn.tensor(rng.standard_normal(x.shape).astype(np.float32)))
    assert np.isfinite(t.grad.numpy()).all()


# ---------------------------------------------------------------------------------------------------------
# sums of products that overflow float32
# ---------------------------------------------------------------------------------------------------------

def test_conv2d_overflow_to_minus_inf_like_pytorch(kernels, torch):
    # Every product 1e30 * -1e10 overflows: -inf in PyTorch, with corenn-numba and now in the core too.
    x, w = np.full((2, 3, 6, 6), 1e30, np.float32), np.full((4, 3, 3, 3), -1e10, np.float32)
    out = F.conv2d(corenn.tensor(x), corenn.tensor(w)).numpy()
    expected = torch.nn.functional.conv2d(torch.from_numpy(x), torch.from_numpy(w)).numpy()
    np.testing.assert_array_equal(out, expected)
    assert (out == -inf).all()


def _overflowing_case(fn, rng):
    """Operands whose products overflow float32 with either sign: the order of additions decides."""
    x = rng.choice(np.array([1e30, -1e30, 0, 1], np.float32), size=(2, 3, 6, 6))
    w = rng.choice(np.array([1e10, -1e10, 0, 1], np.float32), size=(4, 3, 3, 3))
    if fn == "linear":
        return np.repeat(x.reshape(6, 36), 4, axis=0), rng.choice(np.array([1e10, -1e10, 1], np.float32),
                                                                    size=(16, 36))
    return x, (w.transpose(1, 0, 2, 3).copy() if fn == "conv_transpose2d" else w)


@pytest.mark.parametrize("fn", ["conv2d", "conv_transpose2d", "linear"])
def test_overflowing_sums_give_the_same_result_with_and_without_the_plugin(kernels, fn):
    # numpy's BLAS (the core) gave nan where corenn-numba's fused multiply-adds gave -inf: the outputs that
    # overflow are now computed again in float64 by both, so they agree with the exact sum, rounded.
    rng = np.random.default_rng(4)
    x, w = _overflowing_case(fn, rng)
    kw = {"stride": 2, "padding": 1} if fn != "linear" else {}
    out = getattr(F, fn)(corenn.tensor(x), corenn.tensor(w), **kw).numpy()
    exact = getattr(F, fn)(corenn.tensor(x.astype(np.float64)), corenn.tensor(w.astype(np.float64)), **kw).numpy()
    exact = exact.astype(np.float32)
    assert not np.isfinite(out).all()
    nonfinite = ~np.isfinite(out)
    np.testing.assert_array_equal(out[nonfinite], exact[nonfinite])


def test_recompute_overflow_keeps_finite_results_and_float64():
    a = np.array([[1.0, np.inf, np.nan]], np.float32)
    assert recompute_overflow(np, a[:, :1], lambda: 1 / 0) is not None  # finite: recompute is not called
    np.testing.assert_array_equal(recompute_overflow(np, a, lambda: np.array([[2.0, -1e300, 3.0]])),
                                  [[1.0, -inf, 3.0]])
    wide = a.astype(np.float64)
    assert recompute_overflow(np, wide, lambda: 1 / 0) is wide


# ---------------------------------------------------------------------------------------------------------
# cross_entropy with masked (-inf) logits
# ---------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("shape", [(2, 3), (2, 3, 4), (2, 3, 2, 2)])
@pytest.mark.parametrize("kw", [{}, {"label_smoothing": 0.1}, {"weight": True}, {"ignore_index": 2},
                                {"reduction": "none"}, {"reduction": "sum"}])
def test_cross_entropy_with_minus_inf_logits_like_pytorch(kernels, torch, shape, kw):
    # 0 * log(0) from a masked class: the core gave nan where PyTorch gives the loss of the other classes.
    rng = np.random.default_rng(5)
    logits = rng.standard_normal(shape).astype(np.float32)
    logits[:, 1] = -inf
    target = np.zeros((shape[0],) + shape[2:], np.int64)
    target[-1] = 2
    kw = dict(kw)
    weight = rng.uniform(0.5, 2, shape[1]).astype(np.float32) if kw.pop("weight", False) else None

    def fn(lib, x):
        w = None if weight is None else (corenn.tensor(weight) if lib is corenn else torch.from_numpy(weight))
        t = corenn.tensor(target) if lib is corenn else torch.from_numpy(target)
        return functional(lib).cross_entropy(x, t, weight=w, **kw)

    assert_like_torch(torch, fn, [logits])


def test_cross_entropy_example_of_the_issue(kernels, torch):
    got = F.cross_entropy(corenn.tensor([[0.0, -inf, 1.0]]), corenn.tensor([0])).item()
    expected = torch.nn.functional.cross_entropy(torch.tensor([[0.0, -inf, 1.0]]), torch.tensor([0])).item()
    assert got == pytest.approx(expected, rel=1e-6) and np.isfinite(got)


def test_cross_entropy_spatial_logits_run_the_plugin(kernels):
    logits = corenn.randn(2, 3, 4, 4, requires_grad=True)
    loss = F.cross_entropy(logits, corenn.zeros(2, 4, 4, dtype=corenn.int64))
    assert fell_back(loss.grad_fn) is False or kernels == "core"
    assert (registry.lookup("cross_entropy", "cpu").__module__.startswith("corenn_numba")) == (kernels == "numba")


# ---------------------------------------------------------------------------------------------------------
# arrays reach backward only through save_for_backward
# ---------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("call", [
    lambda x: F.cross_entropy(x, corenn.tensor([0, 2, 1, 0])),
    lambda x: F.cross_entropy(x, corenn.tensor([0, 2, 1, 0]), weight=corenn.ones(3), reduction="sum"),
    lambda x: F.nll_loss(F.log_softmax(x, 1), corenn.tensor([0, 2, 1, 0])),
    lambda x: F.linear(x, corenn.ones(5, 3), corenn.ones(1)),
    lambda x: F.layer_norm(x, (3,)),
    lambda x: F.conv1d(x.reshape(1, 4, 3), corenn.ones(2, 4, 2), corenn.ones(2)),
], ids=["cross_entropy", "cross_entropy_weighted", "nll_loss", "linear", "layer_norm", "conv1d"])
def test_no_array_is_kept_on_the_node_outside_save_for_backward(kernels, call):
    out = call(corenn.randn(4, 3, requires_grad=True))
    node = out.grad_fn
    parked = {name: type(value).__name__ for name, value in vars(node).items()
              if name != "saved" and isinstance(value, np.ndarray | np.generic)}
    assert not parked, f"{type(node).__name__} keeps {parked} outside save_for_backward"
