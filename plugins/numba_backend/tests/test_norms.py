"""corenn_numba.norms: batch/layer/group norm agree with the core kernels and with PyTorch.

Each check runs the same expression with the plugin enabled and disabled (the core's kernels)
and compares outputs, running statistics and gradients.
"""

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import corenn
import corenn.nn.functional as F
import corenn_numba
from corenn.kernels import fell_back
from corenn.dispatch import kernels
from corenn_numba import norms as numba_norms

SETTINGS = settings(max_examples=15, deadline=None)
# float32 inputs drawn with an offset of 100 lose about 1e-5 of the gradient to cancellation in either
# kernel: hypothesis found a 3-element batch where both sit within 2e-5 of the float64 answer but 2.6e-5
# from each other (the plugin's the closer one).
TOL = {np.float32: dict(rtol=5e-5, atol=5e-5), np.float64: dict(rtol=1e-9, atol=1e-10)}


def run_and_grads(fn, arrays, dtype):
    tensors = [None if a is None else corenn.tensor(a, requires_grad=True) for a in arrays]
    out = fn(*tensors)
    upstream = np.random.default_rng(0).standard_normal(out.shape).astype(dtype)
    out.backward(corenn.tensor(upstream))
    return out.detach().numpy(), [None if t is None or t.grad is None else t.grad.numpy() for t in tensors]


def assert_same_as_core(fn, arrays, dtype):
    got, got_grads = run_and_grads(fn, arrays, dtype)
    with corenn_numba.disabled():
        expected, expected_grads = run_and_grads(fn, arrays, dtype)
    assert got.dtype == expected.dtype
    np.testing.assert_allclose(got, expected, **TOL[dtype])
    for g, e in zip(got_grads, expected_grads):
        assert (g is None) == (e is None)
        if g is not None:
            # input gradients are differences of O(1) terms: compare on the gradient's own scale
            np.testing.assert_allclose(g, e, rtol=TOL[dtype]["rtol"], atol=TOL[dtype]["atol"] * max(1, np.abs(e).max()))


def test_plugin_kernels_are_dispatched():
    for op, cls in numba_norms.OVERRIDES:
        assert issubclass(kernels.lookup(op, "cpu"), cls)  # the calibrated subclass of the override


dtypes = st.sampled_from([np.float32, np.float64])


@SETTINGS
@given(n=st.integers(1, 4), channels=st.integers(1, 5), spatial=st.sampled_from([(3,), (2, 3), (1, 1)]),
       dtype=dtypes, training=st.booleans(), affine=st.booleans(), offset=st.sampled_from([0.0, 100.0]))
def test_batch_norm_matches_core(n, channels, spatial, dtype, training, affine, offset):
    if training and n * int(np.prod(spatial)) <= 1:
        n = 2
    rng = np.random.default_rng(n * 31 + channels)
    x = (rng.standard_normal((n, channels) + spatial) + offset).astype(dtype)
    weight = rng.uniform(0.5, 2.0, channels).astype(dtype) if affine else None
    bias = rng.standard_normal(channels).astype(dtype) if affine else None
    stats = {}

    def fn(t, w, b):
        rm = corenn.tensor(rng_stats[0].copy())
        rv = corenn.tensor(rng_stats[1].copy())
        out = F.batch_norm(t, rm, rv, w, b, training=training, momentum=0.3, eps=1e-3)
        stats.setdefault("runs", []).append((rm.numpy().copy(), rv.numpy().copy()))
        return out

    rng_stats = (rng.standard_normal(channels).astype(dtype), rng.uniform(0.5, 2, channels).astype(dtype))
    assert_same_as_core(fn, [x, weight, bias], dtype)
    (mean_a, var_a), (mean_b, var_b) = stats["runs"]
    np.testing.assert_allclose(mean_a, mean_b, **TOL[dtype])
    np.testing.assert_allclose(var_a, var_b, **TOL[dtype])


def test_batch_norm_running_stats_update_in_place():
    bn = corenn.nn.BatchNorm2d(3, momentum=0.5)
    x = corenn.randn(4, 3, 5, 5) * 2 + 1
    bn(x)
    batch_mean = x.numpy().mean(axis=(0, 2, 3))
    batch_var = x.numpy().var(axis=(0, 2, 3), ddof=1)
    np.testing.assert_allclose(bn.running_mean.numpy(), 0.5 * batch_mean, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(bn.running_var.numpy(), 0.5 + 0.5 * batch_var, rtol=1e-5)
    assert int(bn.num_batches_tracked.item()) == 1


def test_batch_norm_without_running_stats_and_plain_2d_input():
    x = np.random.default_rng(1).standard_normal((6, 4, 3)).astype(np.float32)
    assert_same_as_core(lambda t: F.batch_norm(t, None, None, training=True), [x], np.float32)
    flat = np.random.default_rng(1).standard_normal((6, 4)).astype(np.float32)
    out = F.batch_norm(corenn.tensor(flat, requires_grad=True), None, None, training=True)
    assert fell_back(out.grad_fn)  # (N, C): the core's column reductions are as fast
    assert_same_as_core(lambda t: F.batch_norm(t, None, None, training=True), [flat], np.float32)


@SETTINGS
@given(lead=st.sampled_from([(1,), (3,), (2, 3)]), normalized=st.sampled_from([(1,), (5,), (3, 4)]), dtype=dtypes,
       affine=st.booleans(), offset=st.sampled_from([0.0, 50.0]))
def test_layer_norm_matches_core(lead, normalized, dtype, affine, offset):
    rng = np.random.default_rng(len(lead) * 7 + sum(normalized))
    x = (rng.standard_normal(lead + normalized) + offset).astype(dtype)
    weight = rng.uniform(0.5, 2, normalized).astype(dtype) if affine else None
    bias = rng.standard_normal(normalized).astype(dtype) if affine else None
    assert_same_as_core(lambda t, w, b: F.layer_norm(t, normalized, w, b, eps=1e-4), [x, weight, bias], dtype)


@SETTINGS
@given(n=st.integers(1, 3), groups=st.sampled_from([1, 2, 3]), per_group=st.integers(1, 3),
       spatial=st.sampled_from([(), (4,), (2, 3)]), dtype=dtypes, affine=st.booleans())
def test_group_norm_matches_core(n, groups, per_group, spatial, dtype, affine):
    channels = groups * per_group
    if per_group * int(np.prod(spatial)) == 1:
        spatial = (2,)
    rng = np.random.default_rng(n + 5 * channels)
    x = rng.standard_normal((n, channels) + spatial).astype(dtype)
    weight = rng.uniform(0.5, 2, channels).astype(dtype) if affine else None
    bias = rng.standard_normal(channels).astype(dtype) if affine else None
    assert_same_as_core(lambda t, w, b: F.group_norm(t, groups, w, b, eps=1e-4), [x, weight, bias], dtype)


def test_norms_gradcheck_float64():
    x = corenn.randn(3, 4, 2, dtype=corenn.float64, requires_grad=True)
    w = corenn.rand(4, dtype=corenn.float64, requires_grad=True)
    b = corenn.randn(4, dtype=corenn.float64, requires_grad=True)
    rm, rv = corenn.zeros(4, dtype=corenn.float64), corenn.ones(4, dtype=corenn.float64)
    assert corenn.autograd.gradcheck(lambda t, w, b: F.batch_norm(t, None, None, w, b, training=True), (x, w, b))
    assert corenn.autograd.gradcheck(lambda t, w, b: F.batch_norm(t, rm, rv, w, b, training=False), (x, w, b))
    assert corenn.autograd.gradcheck(lambda t, w, b: F.group_norm(t, 2, w, b), (x, w, b))
    lw = corenn.rand(4, 2, dtype=corenn.float64, requires_grad=True)
    lb = corenn.randn(4, 2, dtype=corenn.float64, requires_grad=True)
    assert corenn.autograd.gradcheck(lambda t, w, b: F.layer_norm(t, (4, 2), w, b), (x, lw, lb))


def test_only_requested_gradients_are_returned():
    x = corenn.randn(2, 3, 4)
    w = corenn.rand(3, requires_grad=True)
    out = F.group_norm(x, 3, w, corenn.zeros(3))
    out.sum().backward()
    assert w.grad is not None and x.grad is None


def test_float16_and_noncontiguous_fall_back():
    half = corenn.randn(2, 4, 3).to(corenn.float16)
    out = F.layer_norm(half, (3,))
    assert out.dtype is corenn.float16
    with corenn_numba.disabled():
        np.testing.assert_array_equal(out.numpy(), F.layer_norm(half, (3,)).numpy())
    strided = corenn.randn(4, 6, 5, requires_grad=True).transpose(1, 2)  # (4, 5, 6), not contiguous
    assert not strided._data.flags.c_contiguous
    got = F.group_norm(strided, 5)
    assert fell_back(got.grad_fn)
    with corenn_numba.disabled():
        np.testing.assert_allclose(got.detach().numpy(), F.group_norm(strided, 5).detach().numpy(), rtol=1e-5,
                                   atol=1e-6)


def test_errors_unchanged():
    with pytest.raises(RuntimeError, match="divisible by num_groups"):
        F.group_norm(corenn.randn(2, 5, 3), 2)
    with pytest.raises(ValueError, match="Expected more than 1 value per channel"):
        F.batch_norm(corenn.randn(1, 3), None, None, training=True)


# ---------------------------------------------------------------------------------------------------------
# PyTorch oracle: the layers with the plugin active
# ---------------------------------------------------------------------------------------------------------

@pytest.mark.torch
@pytest.mark.parametrize("make", ["batch2d", "batch1d", "layer", "group"])
def test_norm_layers_against_torch(make):
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(11)
    if make == "batch2d":
        ours, theirs, shape = corenn.nn.BatchNorm2d(6), torch.nn.BatchNorm2d(6), (4, 6, 5, 5)
    elif make == "batch1d":
        ours, theirs, shape = corenn.nn.BatchNorm1d(6), torch.nn.BatchNorm1d(6), (8, 6, 7)
    elif make == "layer":
        ours, theirs, shape = corenn.nn.LayerNorm((5, 7)), torch.nn.LayerNorm((5, 7)), (3, 4, 5, 7)
    else:
        ours, theirs, shape = corenn.nn.GroupNorm(3, 6), torch.nn.GroupNorm(3, 6), (4, 6, 5, 3)
    weight = rng.uniform(0.5, 2, tuple(ours.weight.shape)).astype(np.float32)
    bias = rng.standard_normal(tuple(ours.bias.shape)).astype(np.float32)
    ours.weight.data = corenn.tensor(weight)
    ours.bias.data = corenn.tensor(bias)
    with torch.no_grad():
        theirs.weight.copy_(torch.tensor(weight))
        theirs.bias.copy_(torch.tensor(bias))
    for training in (True, True, False):
        ours.train(training)
        theirs.train(training)
        x = (rng.standard_normal(shape) * 3 + 1).astype(np.float32)
        upstream = rng.standard_normal(shape).astype(np.float32)
        a, ta = corenn.tensor(x, requires_grad=True), torch.tensor(x, requires_grad=True)
        out, tout = ours(a), theirs(ta)
        np.testing.assert_allclose(out.detach().numpy(), tout.detach().numpy(), rtol=1e-4, atol=1e-5)
        out.backward(corenn.tensor(upstream))
        tout.backward(torch.tensor(upstream))
        np.testing.assert_allclose(a.grad.numpy(), ta.grad.numpy(), rtol=1e-4, atol=1e-4)
        np.testing.assert_allclose(ours.weight.grad.numpy(), theirs.weight.grad.numpy(), rtol=1e-4, atol=1e-4)
        np.testing.assert_allclose(ours.bias.grad.numpy(), theirs.bias.grad.numpy(), rtol=1e-4, atol=1e-4)
        ours.zero_grad()
        theirs.zero_grad()
        if make.startswith("batch"):
            np.testing.assert_allclose(ours.running_mean.numpy(), theirs.running_mean.numpy(), rtol=1e-5, atol=1e-6)
            np.testing.assert_allclose(ours.running_var.numpy(), theirs.running_var.numpy(), rtol=1e-5, atol=1e-6)
