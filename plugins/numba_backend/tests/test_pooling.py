"""corenn_numba.pooling: max/avg/adaptive pooling agree with the core kernels and with PyTorch.

Drawn geometries (kernel, stride, padding, dilation, ceil_mode, count_include_pad,
divisor_override) run through the public functions with the plugin enabled and disabled;
the conformance kit gradchecks each op in float64; the layers are compared with PyTorch,
indices included, when it is installed. max_pool's fast path (2x2 and 3x3 windows, stride 2)
has its own cases: shapes that take each of its branches against the core, and data full of
NaN, +-inf, -0.0 and ties against an element-by-element reference and PyTorch. So do average
pooling's separable loops (stride-2 windows, any windows, global pooling, adaptive windows):
shapes for each branch and border against the core, special values and signed zeros against
PyTorch.
"""

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import corenn
import corenn.nn.functional as F
import corenn_numba
from corenn.kernels import fell_back, pool_output_size
from corenn.dispatch import kernels
from corenn.testing.opcheck import Float, OpCase, check_op
from corenn_numba import pooling as numba_pool

SETTINGS = settings(max_examples=30, deadline=None)
TOL = {np.float32: dict(rtol=1e-5, atol=1e-6), np.float64: dict(rtol=1e-12, atol=1e-12)}


def forward_backward(fn, x):
    t = corenn.tensor(x, requires_grad=x.dtype.kind == "f")
    result = fn(t)
    outputs = result if isinstance(result, tuple) else (result,)
    out = outputs[0]
    if out.requires_grad:
        upstream = np.random.default_rng(1).standard_normal(out.shape).astype(x.dtype)
        out.backward(corenn.tensor(upstream))
    return [o.detach().numpy() for o in outputs], None if t.grad is None else t.grad.numpy()


def assert_same_as_core(fn, x):
    got, got_grad = forward_backward(fn, x)
    with corenn_numba.disabled():
        expected, expected_grad = forward_backward(fn, x)
    tol = TOL.get(x.dtype.type, {})
    for g, e in zip(got, expected):
        assert g.dtype == e.dtype and g.shape == e.shape
        if g.dtype.kind == "f":
            np.testing.assert_allclose(g, e, **tol)
        else:
            # A dilated window can miss the input: the plugin marks it -1, the core's index there is an
            # artifact of its arithmetic (PyTorch gives yet another out-of-plane position).
            missed = g == -1
            assert np.isneginf(got[0][missed]).all()
            np.testing.assert_array_equal(g[~missed], e[~missed])
    assert (got_grad is None) == (expected_grad is None)
    if got_grad is not None:
        np.testing.assert_allclose(got_grad, expected_grad, **tol)


def test_plugin_kernels_are_dispatched():
    for op, kernel in numba_pool.OVERRIDES:
        assert issubclass(kernels.lookup(op, "cpu"), kernel)  # the calibrated subclass of the override
    with corenn_numba.disabled():
        assert kernels.lookup("max_pool", "cpu") is not numba_pool.MaxPool


@st.composite
def pool_cases(draw, dims, dilated=True):
    kernel = tuple(draw(st.integers(1, 4)) for _ in range(dims))
    stride = tuple(draw(st.integers(1, 3)) for _ in range(dims))
    dilation = tuple(draw(st.integers(1, 2)) if dilated else 1 for _ in range(dims))
    padding = tuple(draw(st.integers(0, (d * (k - 1) + 1) // 2)) for k, d in zip(kernel, dilation))
    size = tuple(draw(st.integers(max(1, d * (k - 1) + 1 - 2 * p), 9)) for k, d, p in zip(kernel, dilation, padding))
    shape = (draw(st.integers(1, 2)), draw(st.integers(1, 3))) + size
    dtype = draw(st.sampled_from([np.float32, np.float64]))
    ceil_mode = draw(st.booleans())
    # distinct values: with ties the gradient of max depends on which maximum wins
    x = np.random.default_rng(draw(st.integers(0, 2 ** 16))).permutation(int(np.prod(shape))).reshape(shape)
    return x.astype(dtype) / 7, kernel, stride, padding, dilation, ceil_mode


@SETTINGS
@given(pool_cases(2), st.booleans())
def test_max_pool2d_same_as_core(case, return_indices):
    x, kernel, stride, padding, dilation, ceil_mode = case
    assert_same_as_core(lambda t: F.max_pool2d(t, kernel, stride, padding, dilation, ceil_mode, return_indices), x)


@SETTINGS
@given(pool_cases(1), st.booleans())
def test_max_pool1d_same_as_core(case, return_indices):
    x, kernel, stride, padding, dilation, ceil_mode = case
    assert_same_as_core(lambda t: F.max_pool1d(t, kernel, stride, padding, dilation, ceil_mode, return_indices), x)


@SETTINGS
@given(pool_cases(2, dilated=False), st.booleans(), st.sampled_from([None, 3, 1]))  # an int, as PyTorch takes it
def test_avg_pool2d_same_as_core(case, count_include_pad, divisor_override):
    x, kernel, stride, padding, _, ceil_mode = case
    assert_same_as_core(lambda t: F.avg_pool2d(t, kernel, stride, padding, ceil_mode, count_include_pad,
                                               divisor_override), x)


@SETTINGS
@given(pool_cases(1, dilated=False), st.booleans())
def test_avg_pool1d_same_as_core(case, count_include_pad):
    x, kernel, stride, padding, _, ceil_mode = case
    assert_same_as_core(lambda t: F.avg_pool1d(t, kernel, stride, padding, ceil_mode, count_include_pad), x)


@SETTINGS
@given(st.integers(1, 9), st.integers(1, 9), st.integers(1, 9), st.integers(1, 9),
       st.sampled_from([np.float32, np.float64]))
def test_adaptive_avg_pool2d_same_as_core(h, w, out_h, out_w, dtype):
    x = np.random.default_rng(h * 10 + w).standard_normal((2, 3, h, w)).astype(dtype)
    assert_same_as_core(lambda t: F.adaptive_avg_pool2d(t, (out_h, out_w)), x)


@pytest.mark.parametrize("out_size", [1, 3, 5, 11])
def test_adaptive_avg_pool1d_same_as_core(out_size):
    x = np.random.default_rng(0).standard_normal((2, 3, 7))
    assert_same_as_core(lambda t: F.adaptive_avg_pool1d(t, out_size), x)


def test_ties_take_the_first_maximum_and_nan_wins():
    x = np.array([[[[1.0, 1.0, 2.0, 2.0], [1.0, 0.0, 2.0, np.nan]]]])
    out, indices = F.max_pool2d(corenn.tensor(x), 2, return_indices=True)
    assert indices.tolist() == [[[[0, 7]]]]
    assert out.numpy()[0, 0, 0, 0] == 1.0 and np.isnan(out.numpy()[0, 0, 0, 1])


def test_all_minus_infinity_window_points_inside_the_input():
    x = np.full((1, 1, 3, 3), -np.inf)
    t = corenn.tensor(x, requires_grad=True)
    out, indices = F.max_pool2d(t, 2, stride=1, padding=1, return_indices=True)
    assert (indices.numpy() >= 0).all() and (indices.numpy() < 9).all()
    out.sum().backward()
    assert t.grad.numpy().sum() == out.numel()


def test_dilated_window_that_misses_the_input_gives_minus_infinity_and_no_gradient():
    t = corenn.tensor(np.zeros((1, 1, 1, 1)), requires_grad=True)
    out, indices = F.max_pool2d(t, (1, 2), stride=1, padding=(0, 1), dilation=(1, 2), return_indices=True)
    # PyTorch's (and the core's) index: the window's first column at or past 0, outside the input.
    assert out.tolist() == [[[[-np.inf]]]] and indices.tolist() == [[[[1]]]]
    out.sum().backward()
    assert t.grad.tolist() == [[[[0.0]]]]


@pytest.mark.torch
def test_indices_of_windows_that_miss_the_input_like_pytorch():
    torch = pytest.importorskip("torch")
    x = np.arange(12.0).reshape(1, 1, 3, 4)
    for args in [((2, 2), 1, 1, 3), ((1, 2), 1, (0, 1), (1, 2)), (2, 2, 1, 2)]:
        _, got = F.max_pool2d(corenn.tensor(x), *args, return_indices=True)
        _, expected = torch.nn.functional.max_pool2d(torch.from_numpy(x), *args, return_indices=True)
        assert got.tolist() == expected.tolist(), args


def test_non_contiguous_and_unbatched_inputs():
    x = np.random.default_rng(0).standard_normal((6, 7, 3)).transpose(2, 0, 1)  # (3, 6, 7) not contiguous
    assert_same_as_core(lambda t: F.max_pool2d(t, 3, 2, 1), x)
    assert_same_as_core(lambda t: F.avg_pool2d(t, 3, 2, 1, count_include_pad=False), x)
    assert_same_as_core(lambda t: F.adaptive_avg_pool2d(t, (4, 2)), x)


def test_returned_indices_do_not_alias_the_saved_ones():
    t = corenn.tensor(np.arange(16.0).reshape(1, 1, 4, 4), requires_grad=True)
    out, indices = F.max_pool2d(t, 2, return_indices=True)
    indices.numpy()[...] = 0  # a caller scribbling on the indices must not move the gradient
    out.sum().backward()
    assert t.grad.numpy()[0, 0].tolist() == [[0, 0, 0, 0], [0, 1, 0, 1], [0, 0, 0, 0], [0, 1, 0, 1]]


# ---------------------------------------------------------------------------------------------------------
# max_pool's fast path: 2x2 and 3x3 windows with stride 2 that lie inside the input
# ---------------------------------------------------------------------------------------------------------
# Shapes that take each branch: whole batch as one stack (2*OH == H, every window inside), plane by plane
# (odd H), border windows through the general loop (padding, ceil_mode overhang), rows wider than a block.

FAST_CASES = [
    ((4, 3, 28, 28), 2, 0, False),   # the demo CNN's pools: one stack over all planes
    ((3, 5, 14, 14), 2, 0, False),
    ((2, 3, 60, 64), 2, 0, False),   # several blocks of window rows, some crossing a plane boundary
    ((2, 3, 9, 11), 2, 0, False),    # odd sizes: plane by plane, the last row/column in no window
    ((2, 3, 9, 11), 2, 0, True),     # ceil mode: the overhanging last row/column through the general loop
    ((2, 3, 10, 7), 2, 1, False),    # padding: border windows general, the rest fast, in one call
    ((2, 3, 10, 7), 2, 1, True),
    ((2, 3, 13, 12), 3, 0, False),
    ((2, 3, 13, 12), 3, 1, False),
    ((2, 3, 12, 13), 3, 1, True),
    ((1, 2, 7, 3), 3, 1, False),     # one interior window per row
    ((1, 2, 2, 2), 2, 1, False),     # padding with no window inside: general loop only
    ((1, 2, 5, 2200), 2, 0, False),  # a row wider than the scratch block
    ((1, 2, 7, 2201), 3, 1, True),
]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("shape, k, padding, ceil_mode", FAST_CASES)
def test_fast_max_pool_same_as_core(shape, k, padding, ceil_mode, dtype):
    x = np.random.default_rng(sum(shape)).permutation(int(np.prod(shape))).reshape(shape).astype(dtype) / 7
    for return_indices in (False, True):
        assert_same_as_core(lambda t: F.max_pool2d(t, k, 2, padding, 1, ceil_mode, return_indices), x)


@pytest.mark.parametrize("shape, k, padding, ceil_mode", FAST_CASES[:8])
def test_fast_max_pool_ties_same_as_core(shape, k, padding, ceil_mode):
    # Two values: most windows hold a tie for the maximum, and the first one must win (index and gradient).
    x = np.random.default_rng(0).choice(np.array([0.0, 1.0]), size=shape)
    assert_same_as_core(lambda t: F.max_pool2d(t, k, 2, padding, 1, ceil_mode, True), x)


def reference_max_pool(x, k, stride, padding, ceil_mode):
    """PyTorch's CPU loop, element by element: strictly greater wins, and so does every NaN."""
    n, c, height, width = x.shape
    out_h, out_w = (pool_output_size(s, k, stride, padding, 1, ceil_mode) for s in (height, width))
    out = np.empty((n, c, out_h, out_w), dtype=x.dtype)
    indices = np.empty(out.shape, dtype=np.int64)
    for b, ch, y, q in np.ndindex(out.shape):
        best, best_index = None, -1
        for ih in range(y * stride - padding, y * stride - padding + k):
            for iw in range(q * stride - padding, q * stride - padding + k):
                if 0 <= ih < height and 0 <= iw < width:
                    value = x[b, ch, ih, iw]
                    if best is None or value > best or np.isnan(value):
                        best, best_index = value, ih * width + iw
        out[b, ch, y, q], indices[b, ch, y, q] = best, best_index
    return out, indices


@SETTINGS
@given(st.sampled_from([2, 3]), st.integers(0, 1), st.booleans(), st.integers(3, 12), st.integers(3, 12),
       st.sampled_from([np.float32, np.float64]), st.integers(0, 2 ** 16))
def test_fast_max_pool_nan_ties_and_infinities(k, padding, ceil_mode, height, width, dtype, seed):
    # NaN, +-inf and ties in and out of the fast path against the element-by-element rule. The core
    # is no oracle here: its indices do not follow NaN, and np.maximum may give 0.0 for a first -0.0.
    rng = np.random.default_rng(seed)
    x = rng.choice(np.array([np.nan, np.inf, -np.inf, -0.0, 0.0, 1.0]), size=(2, 3, height, width)).astype(dtype)
    t = corenn.tensor(x, requires_grad=True)
    out, indices = F.max_pool2d(t, k, 2, padding, 1, ceil_mode, True)
    expected, expected_indices = reference_max_pool(x, k, 2, padding, ceil_mode)
    np.testing.assert_array_equal(out.detach().numpy(), expected)
    np.testing.assert_array_equal(np.signbit(out.detach().numpy()), np.signbit(expected))
    np.testing.assert_array_equal(indices.numpy(), expected_indices)
    upstream = rng.standard_normal(expected.shape).astype(dtype)
    out.backward(corenn.tensor(upstream))
    expected_grad = np.zeros(x.shape, dtype=dtype).reshape(2, 3, -1)
    for b, ch, y, q in np.ndindex(expected.shape):
        expected_grad[b, ch, expected_indices[b, ch, y, q]] += upstream[b, ch, y, q]
    np.testing.assert_allclose(t.grad.numpy(), expected_grad.reshape(x.shape), **TOL[dtype])


@pytest.mark.torch
@pytest.mark.parametrize("k, padding", [(2, 0), (2, 1), (3, 1)])
def test_fast_max_pool_nan_matches_pytorch(k, padding):
    torch = pytest.importorskip("torch")
    x = np.random.default_rng(0).standard_normal((2, 3, 12, 10)).astype(np.float32)
    x[np.random.default_rng(1).random(x.shape) < 0.2] = np.nan  # windows with several NaNs: the last one wins
    out, indices = F.max_pool2d(corenn.tensor(x), k, 2, padding, return_indices=True)
    expected, expected_indices = torch.nn.functional.max_pool2d(torch.from_numpy(x), k, 2, padding,
                                                                return_indices=True)
    np.testing.assert_array_equal(out.numpy(), expected.numpy())
    np.testing.assert_array_equal(indices.numpy(), expected_indices.numpy())


# ---------------------------------------------------------------------------------------------------------
# Average pooling: row sums, then window sums (the stride-2 loops for 2- and 3-wide windows, border ones
# included; a loop per window otherwise), global pooling, adaptive windows
# ---------------------------------------------------------------------------------------------------------
# Shapes that take each branch: rows of window means with no unused slot (written in place into the output)
# or one (padding, odd widths), windows clipped by padding and ceil mode, rows and columns in no window
# (their gradient must be written as 0), several blocks of planes, a row wider than a block.

AVG_CASES = [
    # shape, kernel, stride, padding, ceil_mode
    ((4, 3, 28, 28), 2, 2, 0, False),   # no unused slot: the means are the output rows
    ((2, 3, 9, 11), 2, 2, 0, False),    # odd sizes: the last row and column in no window
    ((2, 3, 9, 11), 2, 2, 0, True),     # ceil mode: the last windows overhang
    ((2, 3, 10, 7), 2, 2, 1, False),
    ((2, 3, 10, 7), 2, 2, 1, True),
    ((2, 3, 32, 32), 3, 2, 1, False),   # bench_numba_conv's avgpool
    ((2, 3, 13, 12), 3, 2, 0, False),   # the last column in no window
    ((2, 3, 13, 13), 3, 2, 0, False),   # the last window ending on the last column
    ((2, 3, 12, 13), 3, 2, 1, True),
    ((1, 2, 7, 3), 3, 2, 1, False),     # one window per row inside the input
    ((1, 2, 2, 2), 2, 2, 1, False),     # every window partly in the padding
    ((1, 2, 5, 2200), 3, 2, 1, True),   # a row wider than a block
    ((3, 50, 8, 8), 2, 2, 0, False),    # 150 planes: full blocks of planes and a partial last one
    ((3, 50, 9, 9), 3, 2, 1, True),
    ((2, 3, 11, 9), (3, 2), (1, 2), (1, 1), False),  # stride 2 across only: any window rows
    ((2, 3, 11, 9), (4, 3), (3, 2), (2, 1), True),
    ((2, 3, 11, 9), (2, 4), (2, 3), (1, 2), True),   # no stride-2 loop: a loop per window
    ((2, 3, 11, 9), (3, 1), (2, 1), (1, 0), False),
]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("count_include_pad, divisor_override", [(True, None), (False, None), (False, 5)])
@pytest.mark.parametrize("shape, kernel, stride, padding, ceil_mode", AVG_CASES)
def test_avg_pool_loops_same_as_core(shape, kernel, stride, padding, ceil_mode, count_include_pad,
                                     divisor_override, dtype):
    x = np.random.default_rng(sum(shape)).standard_normal(shape).astype(dtype)
    assert_same_as_core(lambda t: F.avg_pool2d(t, kernel, stride, padding, ceil_mode, count_include_pad,
                                               divisor_override), x)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("count_include_pad", [True, False])
@pytest.mark.parametrize("length, kernel, padding, ceil_mode", [(28, 2, 0, False), (27, 2, 1, True), (32, 3, 1, False),
                                                               (33, 3, 0, True), (3000, 3, 1, False)])
def test_avg_pool1d_stride_2_same_as_core(length, kernel, padding, ceil_mode, count_include_pad, dtype):
    x = np.random.default_rng(length).standard_normal((2, 5, length)).astype(dtype)
    assert_same_as_core(lambda t: F.avg_pool1d(t, kernel, 2, padding, ceil_mode, count_include_pad), x)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("shape", [(4, 8, 7, 7), (2, 3, 1, 1), (2, 3, 1, 40), (2, 3, 33, 1), (2, 2, 64, 64)])
def test_global_pooling_same_as_core(shape, dtype):
    x = np.random.default_rng(sum(shape)).standard_normal(shape).astype(dtype)
    height, width = shape[2:]
    assert_same_as_core(lambda t: F.adaptive_avg_pool2d(t, 1), x)
    assert_same_as_core(lambda t: F.avg_pool2d(t, (height, width)), x)
    assert_same_as_core(lambda t: F.avg_pool2d(t, (height, width), divisor_override=3), x)
    assert_same_as_core(lambda t: F.adaptive_avg_pool1d(t, 1), x[:, :, 0, :])


@pytest.mark.parametrize("count_include_pad", [True, False])
def test_padded_window_over_the_whole_plane_same_as_core(count_include_pad):
    # One window of 4x4 with a row and column of padding on each side clips to the 3x3 plane: global
    # pooling, divided by 16 or 9.
    x = np.random.default_rng(0).standard_normal((2, 3, 3, 3))
    assert_same_as_core(lambda t: F.avg_pool2d(t, 4, 4, 1, count_include_pad=count_include_pad), x)


ADAPTIVE_CASES = [
    ((2, 3, 32, 32), (7, 7)),    # bench_numba_conv's adaptive: windows of 5 and 6, overlapping
    ((2, 3, 32, 32), (8, 4)),    # sizes that divide: windows side by side
    ((2, 3, 10, 9), (3, 4)),
    ((2, 3, 3, 5), (5, 7)),      # more outputs than inputs: each input in several windows
    ((2, 3, 7, 7), (1, 7)),      # one window down or across, not the whole plane
    ((2, 3, 7, 7), (7, 1)),
    ((3, 50, 6, 6), (2, 2)),     # 150 planes: several blocks
    ((1, 2, 3, 300), (2, 3)),    # windows of 100 and more
]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("shape, out_size", ADAPTIVE_CASES)
def test_adaptive_avg_pool_windows_same_as_core(shape, out_size, dtype):
    x = np.random.default_rng(sum(shape)).standard_normal(shape).astype(dtype)
    assert_same_as_core(lambda t: F.adaptive_avg_pool2d(t, out_size), x)


@pytest.mark.parametrize("out_size", [1, 2, 7, 30, 45])
def test_adaptive_avg_pool1d_windows_same_as_core(out_size):
    x = np.random.default_rng(out_size).standard_normal((2, 3, 30)).astype(np.float32)
    assert_same_as_core(lambda t: F.adaptive_avg_pool1d(t, out_size), x)


@pytest.mark.torch
@pytest.mark.parametrize("pool", [
    lambda functional: lambda t: functional.avg_pool2d(t, 2),
    lambda functional: lambda t: functional.avg_pool2d(t, 3, 2, 1, ceil_mode=True),
    lambda functional: lambda t: functional.avg_pool2d(t, 3, 2, 1, count_include_pad=False),
    lambda functional: lambda t: functional.avg_pool2d(t, (3, 4), (1, 3), (1, 2)),
    lambda functional: lambda t: functional.avg_pool2d(t, (9, 12)),
    lambda functional: lambda t: functional.avg_pool1d(t[:, :, 0], 3, 2, 1),
    lambda functional: lambda t: functional.adaptive_avg_pool2d(t, (4, 5)),
], ids=["2x2", "3x3-ceil", "3x3-no-pad-count", "any-window", "whole-plane", "1d", "adaptive"])
def test_avg_pool_special_values_and_signed_zeros_match_pytorch(pool):
    # Sums start from +0.0 as PyTorch's do: a window of -0.0 averages to +0.0, and an input whose windows
    # all get a gradient of -0.0 gets +0.0. Infinities and NaN spread as in PyTorch.
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(0)
    x = rng.choice(np.array([-0.0, -0.0, -0.0, 0.0, 1.0, np.inf, -np.inf, np.nan]), size=(2, 3, 9, 12))
    x = x.astype(np.float32)
    ours_x, theirs_x = corenn.tensor(x, requires_grad=True), torch.tensor(x, requires_grad=True)
    out, expected = pool(F)(ours_x), pool(torch.nn.functional)(theirs_x)
    upstream = rng.choice(np.array([-0.0, -0.0, 1.0, -2.0]), size=tuple(expected.shape)).astype(np.float32)
    out.backward(corenn.tensor(upstream))
    expected.backward(torch.from_numpy(upstream))
    for got, want in [(out.detach().numpy(), expected.detach().numpy()), (ours_x.grad.numpy(), theirs_x.grad.numpy())]:
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=0)
        zeros = (got == 0) & (want == 0)
        np.testing.assert_array_equal(np.signbit(got[zeros]), np.signbit(want[zeros]))


# ---------------------------------------------------------------------------------------------------------
# Fallbacks and errors
# ---------------------------------------------------------------------------------------------------------

class _Ctx(numba_pool.MaxPool):
    xp = np


def test_integer_max_pool_falls_back_to_the_core():
    x = np.arange(32).reshape(1, 2, 4, 4)
    ctx = _Ctx()
    numba_pool.MaxPool.forward(ctx, x, (2, 2), (2, 2), (0, 0), (1, 1), False)
    assert fell_back(ctx)
    assert_same_as_core(lambda t: F.max_pool2d(t, 2), x)


def test_float16_falls_back_to_the_core():
    x = np.random.default_rng(0).standard_normal((1, 2, 4, 4)).astype(np.float16)
    ctx = _Ctx()
    numba_pool.MaxPool.forward(ctx, x, (2, 2), (2, 2), (0, 0), (1, 1), False)
    assert fell_back(ctx)
    assert_same_as_core(lambda t: F.max_pool2d(t, 2), x)
    assert_same_as_core(lambda t: F.avg_pool2d(t, 2), x)


def test_3d_pooling_falls_back_to_the_core():
    x = np.random.default_rng(0).standard_normal((1, 2, 4, 4, 4))
    ctx = _Ctx()
    numba_pool.MaxPool.forward(ctx, x, (2, 2, 2), (2, 2, 2), (0, 0, 0), (1, 1, 1), False)
    assert fell_back(ctx)


def test_front_end_errors_are_unchanged():
    with pytest.raises(RuntimeError, match="pad should be at most half"):
        F.max_pool2d(corenn.randn(1, 1, 4, 4), 2, padding=2)
    with pytest.raises(RuntimeError, match="Expected 3D or 4D"):
        F.avg_pool2d(corenn.randn(4, 4), 2)


# ---------------------------------------------------------------------------------------------------------
# The conformance kit with the plugin's kernels dispatched, and PyTorch
# ---------------------------------------------------------------------------------------------------------

def _fn(name, **kwargs):
    return lambda lib, x: getattr(lib.nn.functional, name)(x, **kwargs)


CONFORMANCE = [
    OpCase("max_pool2d", _fn("max_pool2d", kernel_size=3, stride=2, padding=1, ceil_mode=True),
           [Float((2, 3, 7, 6), distinct=True)]),
    OpCase("max_pool2d", _fn("max_pool2d", kernel_size=2, dilation=2, return_indices=True),
           [Float((1, 2, 6, 6), distinct=True)], label="indices"),
    OpCase("max_pool1d", _fn("max_pool1d", kernel_size=3, stride=1, padding=1), [Float((2, 3, 8), distinct=True)]),
    OpCase("avg_pool2d", _fn("avg_pool2d", kernel_size=3, stride=2, padding=1, count_include_pad=False,
                             ceil_mode=True), [Float((2, 3, 6, 7))]),
    OpCase("avg_pool2d", _fn("avg_pool2d", kernel_size=2, divisor_override=3), [Float((1, 2, 5, 4))],
           label="divisor"),
    OpCase("avg_pool1d", _fn("avg_pool1d", kernel_size=3, stride=2, padding=1), [Float((2, 2, 7))]),
    OpCase("adaptive_avg_pool2d", _fn("adaptive_avg_pool2d", output_size=(3, 4)), [Float((2, 3, 7, 5))]),
    OpCase("adaptive_avg_pool1d", _fn("adaptive_avg_pool1d", output_size=4), [Float((2, 3, 7))]),
]


@pytest.mark.parametrize("case", CONFORMANCE, ids=lambda c: c.id)
def test_conformance_kit(case):
    check_op(case, "cpu", reference="none")


@pytest.mark.torch
@pytest.mark.parametrize("case", CONFORMANCE, ids=lambda c: c.id)
def test_conformance_kit_against_pytorch(case):
    pytest.importorskip("torch")
    # torch, and the core's kernel on the host (the kit compares every override with the core kernel)
    assert check_op(case, "cpu", finite_differences=False) == "torch+core"


@pytest.mark.torch
@pytest.mark.parametrize("make", [
    lambda nn: nn.MaxPool2d(3, stride=2, padding=1, ceil_mode=True),
    lambda nn: nn.MaxPool1d(2),
    lambda nn: nn.AvgPool2d(3, stride=2, padding=1, count_include_pad=False),
    lambda nn: nn.AvgPool1d(3, stride=2, ceil_mode=True),
    lambda nn: nn.AdaptiveAvgPool2d((3, 5)),
    lambda nn: nn.AdaptiveAvgPool1d(4),
], ids=["maxpool2d", "maxpool1d", "avgpool2d", "avgpool1d", "adaptive2d", "adaptive1d"])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_layers_match_pytorch(make, dtype):
    torch = pytest.importorskip("torch")
    ours, theirs = make(corenn.nn), make(torch.nn)
    two_d = "2d" in type(theirs).__name__
    shape = (2, 3, 9, 10) if two_d else (2, 3, 11)
    x = np.random.default_rng(0).permutation(int(np.prod(shape))).reshape(shape).astype(dtype) / 5
    ours_x, theirs_x = corenn.tensor(x, requires_grad=True), torch.tensor(x, requires_grad=True)
    out, expected = ours(ours_x), theirs(theirs_x)
    tol = TOL[np.dtype(dtype).type]
    np.testing.assert_allclose(out.detach().numpy(), expected.detach().numpy(), **tol)
    upstream = np.random.default_rng(1).standard_normal(tuple(expected.shape)).astype(dtype)
    out.backward(corenn.tensor(upstream))
    expected.backward(torch.from_numpy(upstream))
    np.testing.assert_allclose(ours_x.grad.numpy(), theirs_x.grad.numpy(), **tol)


@pytest.mark.torch
def test_max_pool_indices_match_pytorch():
    torch = pytest.importorskip("torch")
    x = np.random.default_rng(0).standard_normal((2, 3, 9, 8)).astype(np.float32)
    out, indices = F.max_pool2d(corenn.tensor(x), 3, stride=2, padding=1, dilation=1, return_indices=True)
    expected, expected_indices = torch.nn.functional.max_pool2d(torch.from_numpy(x), 3, stride=2, padding=1,
                                                                return_indices=True)
    np.testing.assert_array_equal(out.numpy(), expected.numpy())
    np.testing.assert_array_equal(indices.numpy(), expected_indices.numpy())
