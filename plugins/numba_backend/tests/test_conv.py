"""corenn_numba.conv: conv (1-d, 2-d) and conv_transpose agree with the core kernels and with PyTorch.

Three layers of checks: the kernels against the core's on hypothesis-drawn geometries
(forward and every gradient, float32 and float64, through the public functions with the
plugin enabled and disabled); the conformance kit's ``check_op`` with the plugin's
kernels dispatched (gradients against finite differences in float64); the layers against
PyTorch when it is installed.
"""

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import corenn
import corenn.nn.functional as F
import corenn_numba
from corenn.kernels import fell_back
from corenn.dispatch import kernels
from corenn.testing.opcheck import Float, OpCase, check_op
from corenn_numba import conv as numba_conv

SETTINGS = settings(max_examples=25, deadline=None)
TOL = {np.float32: dict(rtol=1e-4, atol=1e-4), np.float64: dict(rtol=1e-10, atol=1e-10)}


def forward_backward(fn, arrays, needs_grad=None):
    """``fn(*tensors)`` and the gradients of the inputs (``needs_grad`` picks which require grad)."""
    needs_grad = needs_grad or [a is not None for a in arrays]
    tensors = [None if a is None else corenn.tensor(a, requires_grad=bool(g and a.dtype.kind == "f"))
               for a, g in zip(arrays, needs_grad)]
    out = fn(*tensors)
    upstream = np.random.default_rng(1).standard_normal(out.shape).astype(out.detach().numpy().dtype)
    if out.requires_grad:
        out.backward(corenn.tensor(upstream))
    return out.detach().numpy(), [None if t is None or t.grad is None else t.grad.numpy() for t in tensors]


def assert_same_as_core(fn, arrays, dtype, needs_grad=None):
    got, got_grads = forward_backward(fn, arrays, needs_grad)
    with corenn_numba.disabled():
        expected, expected_grads = forward_backward(fn, arrays, needs_grad)
    assert got.dtype == expected.dtype and got.shape == expected.shape
    np.testing.assert_allclose(got, expected, **TOL[dtype])
    for g, e in zip(got_grads, expected_grads):
        assert (g is None) == (e is None)
        if g is not None:
            assert g.dtype == e.dtype
            np.testing.assert_allclose(g, e, **TOL[dtype])


def test_plugin_kernels_are_dispatched():
    assert issubclass(kernels.lookup("conv", "cpu"), numba_conv.Conv)  # the calibrated subclass of the override
    assert issubclass(kernels.lookup("conv_transpose", "cpu"), numba_conv.ConvTranspose)  # the calibrated subclass of the override
    with corenn_numba.disabled():
        assert kernels.lookup("conv", "cpu") is not numba_conv.Conv


# ---------------------------------------------------------------------------------------------------------
# Against the core kernels on drawn geometries
# ---------------------------------------------------------------------------------------------------------

@st.composite
def conv_cases(draw, dims):
    groups = draw(st.integers(1, 3))
    in_channels = groups * draw(st.integers(1, 3))
    out_channels = groups * draw(st.integers(1, 3))
    kernel = tuple(draw(st.integers(1, 4)) for _ in range(dims))
    stride = tuple(draw(st.integers(1, 3)) for _ in range(dims))
    dilation = tuple(draw(st.integers(1, 2)) for _ in range(dims))
    padding = tuple(draw(st.integers(0, 2)) for _ in range(dims))
    # input at least as large as the dilated kernel once padded
    size = tuple(draw(st.integers(max(1, d * (k - 1) + 1 - 2 * p), 9))
                 for k, d, p in zip(kernel, dilation, padding))
    batch = draw(st.integers(1, 3))
    bias = draw(st.booleans())
    dtype = draw(st.sampled_from([np.float32, np.float64]))
    return groups, in_channels, out_channels, kernel, stride, dilation, padding, size, batch, bias, dtype


def _arrays(rng, dtype, *shapes):
    return [None if s is None else rng.uniform(-1, 1, s).astype(dtype) for s in shapes]


@SETTINGS
@given(conv_cases(2), st.sampled_from(["all", "x", "weight"]))
def test_conv2d_same_as_core(case, which):
    groups, c_in, c_out, kernel, stride, dilation, padding, size, batch, bias, dtype = case
    rng = np.random.default_rng(0)
    arrays = _arrays(rng, dtype, (batch, c_in) + size, (c_out, c_in // groups) + kernel, (c_out,) if bias else None)
    needs = {"all": [True, True, True], "x": [True, False, False], "weight": [False, True, False]}[which]
    assert_same_as_core(lambda x, w, b: F.conv2d(x, w, b, stride, padding, dilation, groups), arrays, dtype, needs)


@SETTINGS
@given(conv_cases(1))
def test_conv1d_same_as_core(case):
    groups, c_in, c_out, kernel, stride, dilation, padding, size, batch, bias, dtype = case
    rng = np.random.default_rng(0)
    arrays = _arrays(rng, dtype, (batch, c_in) + size, (c_out, c_in // groups) + kernel, (c_out,) if bias else None)
    assert_same_as_core(lambda x, w, b: F.conv1d(x, w, b, stride, padding, dilation, groups), arrays, dtype)


@SETTINGS
@given(conv_cases(2), st.data())
def test_conv_transpose2d_same_as_core(case, data):
    groups, c_in, c_out, kernel, stride, dilation, padding, size, batch, bias, dtype = case
    # output_padding must stay below stride or dilation; padding may not empty the output
    output_padding = tuple(data.draw(st.integers(0, max(s, d) - 1)) for s, d in zip(stride, dilation))
    padding = tuple(min(p, ((n - 1) * s + d * (k - 1)) // 2)
                    for p, n, s, d, k in zip(padding, size, stride, dilation, kernel))
    rng = np.random.default_rng(0)
    arrays = _arrays(rng, dtype, (batch, c_in) + size, (c_in, c_out // groups) + kernel, (c_out,) if bias else None)
    assert_same_as_core(lambda x, w, b: F.conv_transpose2d(x, w, b, stride, padding, output_padding, groups,
                                                           dilation), arrays, dtype)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_conv_transpose1d_same_as_core(dtype):
    rng = np.random.default_rng(0)
    arrays = _arrays(rng, dtype, (2, 4, 7), (4, 3, 3), (6,))
    assert_same_as_core(lambda x, w, b: F.conv_transpose1d(x, w, b, stride=2, padding=1, output_padding=1,
                                                           groups=2), arrays, dtype)


@pytest.mark.parametrize("padding", ["same", "valid"])
@pytest.mark.parametrize("kernel", [(2, 4), (3, 3)])
def test_conv2d_string_padding_same_as_core(padding, kernel):
    # 'same' with an even kernel pads asymmetrically (the extra element after)
    rng = np.random.default_rng(0)
    arrays = _arrays(rng, np.float64, (2, 3, 7, 8), (4, 3) + kernel, (4,))
    assert_same_as_core(lambda x, w, b: F.conv2d(x, w, b, padding=padding, dilation=(1, 2)), arrays, np.float64)


@pytest.mark.parametrize("chunk_bytes", [1, 2000, 1 << 30])
def test_chunking_does_not_change_results(monkeypatch, chunk_bytes):
    # one image per chunk, a few images per chunk (the last one partial), the whole batch at once
    monkeypatch.setattr(numba_conv, "CHUNK_BYTES", chunk_bytes)
    rng = np.random.default_rng(0)
    arrays = _arrays(rng, np.float64, (5, 4, 6, 5), (6, 2, 3, 3), (6,))
    # stride 2: the conv's backward runs on the chunked im2col (stride 1 has no im2col any more)
    assert_same_as_core(lambda x, w, b: F.conv2d(x, w, b, stride=2, padding=1, groups=2), arrays, np.float64)
    arrays = _arrays(rng, np.float64, (5, 4, 6, 5), (4, 3, 3, 3), (6,))
    assert_same_as_core(lambda x, w, b: F.conv_transpose2d(x, w, b, stride=2, padding=1, groups=2),
                        arrays, np.float64)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("stride", [1, 2])
@pytest.mark.parametrize("groups", [1, 2])
def test_tile_edges_same_as_core(dtype, stride, groups):
    # 22 output channels per group: two full blocks of microkernel rows and a partial one; 13x17 pixels:
    # several pixel blocks with a partial last one, on the implicit-GEMM grid (stride 1) and the packed path.
    rng = np.random.default_rng(0)
    arrays = _arrays(rng, dtype, (3, 5 * groups, 13, 17), (22 * groups, 5, 3, 3), (22 * groups,))
    assert_same_as_core(lambda x, w, b: F.conv2d(x, w, b, stride, padding=(1, 2), groups=groups), arrays, dtype)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("stride", [1, 2])
@pytest.mark.parametrize("last_rows", [1, numba_conv.gemm.PARTIAL_ROWS])
def test_tile_edges_short_last_block_same_as_core(dtype, stride, last_rows):
    # A full block of tile rows, then a last one short enough for the partial-block kernel (forward, and the
    # stride-1 input gradient, a conv with as many output channels as this one has input channels).
    gemm = numba_conv.gemm
    channels = gemm.MR + last_rows
    rng = np.random.default_rng(0)
    arrays = _arrays(rng, dtype, (2, channels, 6, 7), (channels, channels, 3, 3), (channels,))
    assert_same_as_core(lambda x, w, b: F.conv2d(x, w, b, stride, padding=1), arrays, dtype)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("size, padding", [((29, 30), 1), ((7, 9), 1), ((8, 6), ((0, 2), (2, 0)))])
@pytest.mark.parametrize("vector", ["whole", "half"])
def test_winograd_same_as_core(monkeypatch, dtype, size, padding, vector):
    # Winograd F(2x2, 3x3) for the forward and the stride-1 input gradient, forced on for small shapes too, on
    # either width of the transforms' vectors: odd output sizes (a partial tile row and column), rows of tiles
    # shorter than a vector, asymmetric padding (the core pads with F.pad first, then convolves unpadded).
    winograd = numba_conv.winograd
    whole = winograd.VECTOR_BYTES // np.dtype(dtype).itemsize
    monkeypatch.setattr(winograd, "worthwhile", lambda channels, out_channels, out_w, dtype: True)
    monkeypatch.setattr(winograd, "lanes", lambda out_w, dtype: whole if vector == "whole" else whole // 2)
    calls = []
    forward = winograd.winograd_forward
    monkeypatch.setattr(winograd, "winograd_forward", lambda *args: calls.append(1) or forward(*args))
    rng = np.random.default_rng(0)
    arrays = _arrays(rng, dtype, (2, 5) + size, (7, 5, 3, 3), (7,))
    if isinstance(padding, tuple):
        (top, bottom), (left, right) = padding
        conv = lambda x, w, b: F.conv2d(F.pad(x, (left, right, top, bottom)), w, b)
    else:
        conv = lambda x, w, b: F.conv2d(x, w, b, padding=padding)
    with corenn_numba.calibration.choosing("kernel"):
        assert_same_as_core(conv, arrays, dtype)
    assert calls  # it ran


def test_winograd_runs_where_it_pays_and_leaves_inf_and_nan_to_the_direct_product():
    winograd = numba_conv.winograd
    # Tiles per vector: 16 float32 (a whole AVX-512 register), or 8 where that wastes less, as long as at most
    # one tile in 8 is computed past a row's end.
    assert [winograd.lanes(out_w, np.float32) for out_w in (32, 28, 16, 14, 20, 6)] == [16, 16, 8, 8, None, None]
    assert winograd.lanes(16, np.float64) == 8 and winograd.lanes(8, np.float64) == 4
    assert winograd.worthwhile(64, 64, 32, np.float32) and winograd.worthwhile(32, 64, 16, np.float32)
    assert not winograd.worthwhile(16, 32, 14, np.float32)  # too few channels for the 16 products
    assert not winograd.worthwhile(64, 64, 20, np.float32)  # 10 tiles a row: 6 of 16 wasted
    # An inf in the input: Winograd's transforms would give nan (inf - inf) to outputs whose window does not
    # hold it; the direct product runs instead and gives the core's values, inf, nan and numbers alike.
    rng = np.random.default_rng(0)
    arrays = _arrays(rng, np.float32, (1, 32, 8, 32), (32, 32, 3, 3), (32,))
    arrays[0][0, 3, 4, 10] = np.inf
    arrays[0][0, 5, 2, 20] = np.nan
    with corenn_numba.calibration.choosing("kernel"):
        got = F.conv2d(corenn.tensor(arrays[0]), corenn.tensor(arrays[1]), corenn.tensor(arrays[2]), padding=1)
    with corenn_numba.disabled():
        expected = F.conv2d(corenn.tensor(arrays[0]), corenn.tensor(arrays[1]), corenn.tensor(arrays[2]), padding=1)
    got, expected = got.numpy(), expected.numpy()
    np.testing.assert_array_equal(np.isnan(got), np.isnan(expected))
    np.testing.assert_allclose(np.nan_to_num(got), np.nan_to_num(expected), rtol=1e-4, atol=1e-4)


def test_winograd_refuses_a_weight_of_another_shape_by_name():
    winograd = numba_conv.winograd
    x = np.zeros((1, 4, 6, 6), np.float32)
    out = np.zeros((1, 8, 36), np.float32)
    u_panels = winograd.transform_weight(np.zeros((8, 3, 3, 3), np.float32))  # 3 input channels, not 4
    with pytest.raises(ValueError, match=r"winograd_forward\(\): argument 'u_panels' must have shape"):
        winograd.winograd_forward(0, 1, x, 1, 1, 8, 8, u_panels, np.zeros(8, np.float32), True, out,
                                  numba_conv.gemm.nr(np.float32), 16, 3, 6, 6)
    u_panels = winograd.transform_weight(np.zeros((8, 4, 3, 3), np.float32))
    with pytest.raises(ValueError, match=r"winograd_forward\(\): argument 'per_vector' must be 16 or 8 tiles"):
        winograd.winograd_forward(0, 1, x, 1, 1, 8, 8, u_panels, np.zeros(8, np.float32), True, out,
                                  numba_conv.gemm.nr(np.float32), 12, 3, 6, 6)


def test_stride1_tiles_follow_output_rows_where_that_computes_fewer():
    # (columns, padded width, out_h, out_w): 32x32 'same' in tiles of 32 -> 32 tiles along rows, 34 along the grid;
    # 14x14 -> 14 along rows, 7 along the grid (two rows and their padding per tile).
    assert numba_conv.gemm.stride1_line_blocks(32, 34, 32, 32) == 1
    assert numba_conv.gemm.stride1_line_blocks(16, 34, 32, 32) == 2
    assert numba_conv.gemm.stride1_line_blocks(32, 16, 14, 14) == 0


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("along_rows", [True, False])
@pytest.mark.parametrize("groups", [1, 2])
def test_stride1_forward_tiles_along_rows_or_grid_same_as_core(monkeypatch, dtype, along_rows, groups):
    # Both ways of cutting the padded grid into tiles forced, on rows of 39 pixels (whole tiles and a partial
    # one in either dtype) with asymmetric padding and dilation; the input gradient is a stride-1 conv too.
    gemm = numba_conv.gemm
    monkeypatch.setattr(gemm, "stride1_line_blocks",
                        lambda columns, width_p, out_h, out_w: -(-out_w // columns) if along_rows else 0)
    rng = np.random.default_rng(0)
    arrays = _arrays(rng, dtype, (2, 3 * groups, 5, 39), (10 * groups, 3, 3, 3), (10 * groups,))
    assert_same_as_core(lambda x, w, b: F.conv2d(x, w, b, padding=(1, 2), dilation=(1, 2), groups=groups), arrays,
                        dtype)


def test_stride1_forward_refuses_another_tiling():
    gemm = numba_conv.gemm
    x = np.zeros((1, 2, 4, 40), np.float32)
    panels = gemm.pack_weight(np.zeros((1, 8, 18), np.float32))
    out = np.zeros((1, 8, 4 * 40), np.float32)
    columns = gemm.nr(np.float32)
    with pytest.raises(ValueError, match=r"conv_forward_stride1\(\): argument 'line_blocks' must be 0"):
        gemm.conv_forward_stride1(0, 1, x, 1, 1, 6, 42, panels, np.zeros(8, np.float32), True, out, columns,
                                  -(-40 // columns) + 1, 3, 3, 1, 1, 4, 40)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("stride", [1, 2])
@pytest.mark.parametrize("out_per_group", [1, 3])
def test_few_output_channels_run_one_weight_row_at_a_time_same_as_core(dtype, stride, out_per_group):
    # At most MR/2 output channels per group: the weight is used as single rows (microkernel_store_row), in the
    # forward and in the stride-1 input gradient of a conv with as few input channels.
    rng = np.random.default_rng(0)
    assert out_per_group <= numba_conv.gemm.SINGLE_ROWS_MAX
    assert numba_conv.gemm.pack_weight(np.zeros((2, out_per_group, 5), dtype)).shape == (2, out_per_group, 5)
    arrays = _arrays(rng, dtype, (3, 2 * out_per_group, 9, 11), (2 * out_per_group, out_per_group, 3, 3),
                     (2 * out_per_group,))
    assert_same_as_core(lambda x, w, b: F.conv2d(x, w, b, stride, padding=1, groups=2), arrays, dtype)


@pytest.mark.parametrize("dtype, in_per_group, out_per_group", [(np.float32, 20, 30), (np.float32, 40, 8),
                                                                (np.float64, 8, 20), (np.float64, 16, 11)])
@pytest.mark.parametrize("input_rows", [True, False])
@pytest.mark.parametrize("groups", [1, 2])
@pytest.mark.parametrize("kernel, padding, dilation", [((3, 3), (1, 1), (1, 1)), ((2, 3), (0, 2), (2, 1))])
def test_weight_gradient_on_the_microkernel_same_as_core(monkeypatch, dtype, in_per_group, out_per_group, input_rows,
                                                         groups, kernel, padding, dilation):
    # Enough channels per group for the implicit-GEMM weight gradient; either side of its products forced
    # (partial blocks of tile rows and columns on both), whichever the heuristic would pick here.
    rng = np.random.default_rng(0)
    arrays = _arrays(rng, dtype, (3, in_per_group * groups, 7, 9), (out_per_group * groups, in_per_group) + kernel,
                     (out_per_group * groups,))
    assert numba_conv._stride1_rows(arrays[0], arrays[1].reshape(groups, out_per_group, -1)) is not None
    monkeypatch.setattr(numba_conv, "_stride1_rows", lambda x4, weight_g: input_rows)
    assert_same_as_core(lambda x, w, b: F.conv2d(x, w, b, padding=padding, dilation=dilation, groups=groups),
                        arrays, dtype)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("padding, output_padding, dilation", [(1, 0, 1), (0, 1, 2), (2, 1, 2)])
def test_stride1_conv_transpose_on_the_microkernel_same_as_core(dtype, padding, output_padding, dilation):
    # 20 output channels per group: the weight gradient runs on the microkernel too; output_padding
    # above padding makes the underlying conv ignore the last rows (a negative pad, cropped).
    rng = np.random.default_rng(0)
    arrays = _arrays(rng, dtype, (2, 6, 7, 9), (6, 20, 3, 2), (40,))
    assert_same_as_core(lambda x, w, b: F.conv_transpose2d(x, w, b, padding=padding, output_padding=output_padding,
                                                           groups=2, dilation=dilation), arrays, dtype)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("in_channels, stride, groups, kernel", [
    (1, 1, 1, "weight_grad_by_dots"),            # 9 rows: dot products
    (1, 2, 1, "weight_grad_by_dots"),
    (3, 2, 1, "conv_weight_grad_im2col"),        # 27 rows, strided: im2col packed for the microkernel
    (6, 1, 2, "conv_weight_grad_im2col"),        # 3 channels per group: too few for the channels-last kernel
    (24, 2, 1, "conv_weight_grad_im2col"),       # 216 rows, strided
])
def test_weight_gradients_off_the_channels_last_kernel_same_as_core(monkeypatch, dtype, in_channels, stride, groups,
                                                                    kernel):
    # No weight gradient goes to numpy's BLAS any more; each case checks which compiled kernel ran.
    module = numba_conv.jit if kernel == "weight_grad_by_dots" else numba_conv.gemm
    calls = []
    original = getattr(module, kernel)
    monkeypatch.setattr(module, kernel, lambda *args: calls.append(args[:2]) or original(*args), raising=False)
    rng = np.random.default_rng(0)
    arrays = _arrays(rng, dtype, (5, in_channels, 11, 13), (40, in_channels // groups, 3, 3), (40,))
    assert_same_as_core(lambda x, w, b: F.conv2d(x, w, b, stride, padding=1, groups=groups), arrays, dtype)
    assert calls, f"the weight gradient did not run on {kernel}"


@pytest.mark.filterwarnings("ignore:invalid value encountered")  # the core's matmul meets inf - inf
@pytest.mark.filterwarnings("ignore:overflow encountered")
@pytest.mark.parametrize("stride", [1, 2])
def test_float32_sums_that_overflow_are_computed_again_as_the_core_does(stride):
    # Products of +-1e30 and 1e10 overflow float32 in both directions: the kernel reports what it stored
    # is not finite, and those outputs are computed again in float64 (-inf here, as the core and PyTorch give).
    x = np.zeros((2, 3, 6, 6), np.float32)
    x[0, :, 2, 2] = 1e30
    w = np.zeros((4, 3, 3, 3), np.float32)
    w[1, :, 1, 1] = [1e10, -1e10, -1e10]
    got = F.conv2d(corenn.tensor(x), corenn.tensor(w), padding=1, stride=stride).numpy()
    with corenn_numba.disabled():
        expected = F.conv2d(corenn.tensor(x), corenn.tensor(w), padding=1, stride=stride).numpy()
    assert np.isneginf(got).any()
    np.testing.assert_array_equal(got, expected)


@pytest.mark.parametrize("padding", [0, 4])
def test_input_gradient_when_padding_exceeds_the_kernel_reach(padding):
    # Stride 1's input gradient runs as a conv padded by reach - padding: negative here, so it crops.
    rng = np.random.default_rng(0)
    arrays = _arrays(rng, np.float64, (2, 3, 6, 7), (4, 3, 2, 3), (4,))
    assert_same_as_core(lambda x, w, b: F.conv2d(x, w, b, padding=padding), arrays, np.float64)


def test_unbatched_and_non_contiguous_inputs():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((8, 3, 9)).transpose(1, 2, 0)  # (3, 9, 8), not contiguous
    w = rng.standard_normal((5, 3, 3, 3))
    assert_same_as_core(lambda x, w: F.conv2d(x, w, padding=1), [x, w], np.float64)


# ---------------------------------------------------------------------------------------------------------
# What the plugin does not handle runs the core kernel
# ---------------------------------------------------------------------------------------------------------

class _Ctx(numba_conv.Conv):
    """A standalone ctx for calling a kernel directly, as ``run`` does."""

    xp = np


@pytest.mark.parametrize("dtype", [np.float16, np.int64])
def test_other_dtypes_fall_back_to_the_core(dtype):
    x = np.arange(2 * 2 * 5 * 5).reshape(2, 2, 5, 5).astype(dtype)
    w = np.ones((3, 2, 3, 3), dtype=dtype)
    ctx = _Ctx()
    out = numba_conv.Conv.forward(ctx, x, w, stride=(1, 1), padding=((1, 1), (1, 1)), dilation=(1, 1), groups=1)
    assert fell_back(ctx)
    expected = numba_conv.core_conv.Conv.forward(_Ctx(), x, w, stride=(1, 1), padding=((1, 1), (1, 1)),
                                                 dilation=(1, 1), groups=1)
    assert out.dtype == expected.dtype
    np.testing.assert_array_equal(out, expected)


def test_conv3d_and_its_gradient_fall_back_to_the_core():
    rng = np.random.default_rng(0)
    arrays = _arrays(rng, np.float64, (2, 2, 4, 4, 4), (3, 2, 2, 2, 2), (3,))
    ctx = _Ctx()
    numba_conv.Conv.forward(ctx, *arrays, stride=(1, 1, 1), padding=((0, 0),) * 3, dilation=(1, 1, 1), groups=1)
    assert fell_back(ctx)
    assert_same_as_core(lambda x, w, b: F.conv3d(x, w, b, padding=1), arrays, np.float64)


def test_mixed_dtypes_are_still_rejected_by_the_front_end():
    x = corenn.randn(1, 2, 5, 5)
    w = corenn.randn(3, 2, 3, 3, dtype=corenn.float64)
    with pytest.raises(RuntimeError, match="should be the same"):
        F.conv2d(x, w)
    with pytest.raises(RuntimeError, match="expected input.*to have 4 channels"):
        F.conv2d(corenn.randn(1, 3, 5, 5), corenn.randn(2, 2, 3, 3), groups=2)


def test_disable_enable_gives_the_same_results():
    rng = np.random.default_rng(0)
    x = corenn.tensor(rng.standard_normal((2, 3, 8, 8)).astype(np.float32))
    w = corenn.tensor(rng.standard_normal((4, 3, 3, 3)).astype(np.float32))
    fast = F.conv2d(x, w, padding=1).numpy()
    corenn_numba.disable()
    try:
        assert kernels.lookup("conv", "cpu") is not numba_conv.Conv
        slow = F.conv2d(x, w, padding=1).numpy()
    finally:
        corenn_numba.enable()
    np.testing.assert_allclose(fast, slow, rtol=1e-5, atol=1e-5)


# ---------------------------------------------------------------------------------------------------------
# The conformance kit, with the plugin's kernels dispatched
# ---------------------------------------------------------------------------------------------------------

CONFORMANCE = [
    OpCase("conv2d", lambda lib, x, w, b: lib.nn.functional.conv2d(x, w, b, stride=(2, 1), padding=1, groups=2),
           [Float((2, 4, 6, 5)), Float((6, 2, 3, 2)), Float((6,))], rtol=1e-4, atol=1e-5),
    OpCase("conv2d", lambda lib, x, w: lib.nn.functional.conv2d(x, w, padding="same", dilation=2),
           [Float((1, 2, 7, 6)), Float((3, 2, 2, 3))], rtol=1e-4, atol=1e-5, label="same"),
    OpCase("conv1d", lambda lib, x, w, b: lib.nn.functional.conv1d(x, w, b, stride=2, padding=2, dilation=2),
           [Float((2, 3, 9)), Float((4, 3, 3)), Float((4,))], rtol=1e-4, atol=1e-5),
    OpCase("conv_transpose2d",
           lambda lib, x, w, b: lib.nn.functional.conv_transpose2d(x, w, b, stride=2, padding=1, output_padding=1,
                                                                   groups=2),
           [Float((2, 4, 4, 3)), Float((4, 2, 3, 3)), Float((4,))], rtol=1e-4, atol=1e-5),
    OpCase("conv_transpose1d", lambda lib, x, w: lib.nn.functional.conv_transpose1d(x, w, stride=3, dilation=2),
           [Float((2, 3, 5)), Float((3, 2, 2))], rtol=1e-4, atol=1e-5),
]


@pytest.mark.parametrize("case", CONFORMANCE, ids=lambda c: c.id)
def test_conformance_kit(case):
    # gradients against finite differences in float64 (no forward reference without PyTorch)
    assert issubclass(kernels.lookup("conv", "cpu"), numba_conv.Conv)  # the calibrated subclass of the override
    check_op(case, "cpu", reference="none")


@pytest.mark.torch
@pytest.mark.parametrize("case", CONFORMANCE, ids=lambda c: c.id)
def test_conformance_kit_against_pytorch(case):
    pytest.importorskip("torch")  # the kit uses PyTorch as its reference once the caller has imported it
    # torch, and the core's conv on the host (the kit compares every override with the core kernel)
    assert check_op(case, "cpu", finite_differences=False) == "torch+core"


# ---------------------------------------------------------------------------------------------------------
# PyTorch oracle, layers with the plugin active
# ---------------------------------------------------------------------------------------------------------

def _copy_layer(torch, ours, theirs):
    with torch.no_grad():
        for (name, p), (_, q) in zip(ours.named_parameters(), theirs.named_parameters()):
            q.copy_(torch.from_numpy(p.detach().numpy()))


@pytest.mark.torch
@pytest.mark.parametrize("make", [
    lambda nn: nn.Conv2d(4, 6, 3, stride=2, padding=1, groups=2),
    lambda nn: nn.Conv2d(3, 8, (3, 5), padding="same", dilation=(2, 1), bias=False),
    lambda nn: nn.Conv1d(3, 4, 5, stride=2, padding=2),
    lambda nn: nn.ConvTranspose2d(4, 6, 3, stride=2, padding=1, output_padding=1, groups=2),
    lambda nn: nn.ConvTranspose1d(3, 2, 4, stride=2, padding=1),
], ids=["conv2d-groups", "conv2d-same", "conv1d", "conv_transpose2d", "conv_transpose1d"])
def test_layers_match_pytorch(make):
    torch = pytest.importorskip("torch")
    ours, theirs = make(corenn.nn).double(), make(torch.nn).double()
    _copy_layer(torch, ours, theirs)
    rng = np.random.default_rng(0)
    in_channels = theirs.in_channels
    shape = (2, in_channels) + ((9, 8) if isinstance(theirs, (torch.nn.Conv2d, torch.nn.ConvTranspose2d)) else (11,))
    x = rng.standard_normal(shape)
    ours_x = corenn.tensor(x, requires_grad=True)
    theirs_x = torch.tensor(x, requires_grad=True)
    out, expected = ours(ours_x), theirs(theirs_x)
    np.testing.assert_allclose(out.detach().numpy(), expected.detach().numpy(), rtol=1e-10, atol=1e-10)
    upstream = rng.standard_normal(tuple(expected.shape))
    out.backward(corenn.tensor(upstream))
    expected.backward(torch.from_numpy(upstream))
    np.testing.assert_allclose(ours_x.grad.numpy(), theirs_x.grad.numpy(), rtol=1e-10, atol=1e-10)
    for (name, p), (_, q) in zip(ours.named_parameters(), theirs.named_parameters()):
        np.testing.assert_allclose(p.grad.numpy(), q.grad.numpy(), rtol=1e-10, atol=1e-10, err_msg=name)


@pytest.mark.torch
def test_float32_conv_matches_pytorch_on_a_training_sized_batch():
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(0)
    x = rng.standard_normal((4, 16, 14, 14)).astype(np.float32)
    w = (rng.standard_normal((32, 16, 3, 3)) * 0.1).astype(np.float32)
    b = rng.standard_normal(32).astype(np.float32)
    out = F.conv2d(corenn.tensor(x), corenn.tensor(w), corenn.tensor(b), padding=1).numpy()
    expected = torch.nn.functional.conv2d(torch.from_numpy(x), torch.from_numpy(w), torch.from_numpy(b),
                                          padding=1).numpy()
    np.testing.assert_allclose(out, expected, rtol=1e-4, atol=1e-4)


@pytest.mark.torch
def test_winograd_conv_matches_pytorch_forward_and_backward():
    # A layer Winograd takes (64 channels each way, 32-wide output rows), float32, against PyTorch's direct
    # product: outputs and both gradients (the input gradient runs as a Winograd conv too).
    torch = pytest.importorskip("torch")
    assert numba_conv.winograd.worthwhile(64, 64, 32, np.float32)
    rng = np.random.default_rng(0)
    x = rng.standard_normal((2, 64, 12, 32)).astype(np.float32)
    w = (rng.standard_normal((64, 64, 3, 3)) * 0.05).astype(np.float32)
    b = rng.standard_normal(64).astype(np.float32)
    upstream = rng.standard_normal((2, 64, 12, 32)).astype(np.float32)
    with corenn_numba.calibration.choosing("kernel"):
        ours = [corenn.tensor(a, requires_grad=True) for a in (x, w, b)]
        out = F.conv2d(*ours, padding=1)
        out.backward(corenn.tensor(upstream))
    theirs = [torch.tensor(a, requires_grad=True) for a in (x, w, b)]
    expected = torch.nn.functional.conv2d(*theirs, padding=1)
    expected.backward(torch.from_numpy(upstream))
    np.testing.assert_allclose(out.detach().numpy(), expected.detach().numpy(), rtol=1e-4, atol=1e-4)
    for mine, reference in zip(ours, theirs):
        np.testing.assert_allclose(mine.grad.numpy(), reference.grad.numpy(), rtol=1e-4, atol=2e-4)
