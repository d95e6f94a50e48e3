"""conv / conv_transpose / pooling: PyTorch oracle over a grid of stride, padding, dilation, groups;
gradcheck in float64; clear errors for bad arguments."""
from __future__ import annotations

import itertools

import numpy as np
import pytest

import corenn
import corenn.nn.functional as F
from corenn.autograd import gradcheck

RNG = np.random.default_rng(1234)
TOL = {np.float32: dict(rtol=1e-4, atol=1e-4), np.float64: dict(rtol=1e-9, atol=1e-10)}


def _oracle(torch, corenn_fn, torch_fn, arrays, grad_of, kwargs, dtype):
    """Run both frameworks on the same arrays; compare output and the gradients of ``grad_of`` inputs."""
    arrays = [a.astype(dtype) if isinstance(a, np.ndarray) and a.dtype.kind == "f" else a for a in arrays]
    ours = [corenn.tensor(a, requires_grad=i in grad_of) if isinstance(a, np.ndarray) else a
            for i, a in enumerate(arrays)]
    theirs = [torch.tensor(a, requires_grad=i in grad_of) if isinstance(a, np.ndarray) else a
              for i, a in enumerate(arrays)]
    expected = torch_fn(*theirs, **kwargs)
    got = corenn_fn(*ours, **kwargs)
    if isinstance(expected, tuple):
        np.testing.assert_array_equal(got[1].numpy(), expected[1].numpy())
        expected, got = expected[0], got[0]
    np.testing.assert_allclose(got.detach().numpy(), expected.detach().numpy(), **TOL[dtype])
    seed = RNG.standard_normal(tuple(expected.shape)).astype(dtype)
    expected.backward(torch.tensor(seed))
    got.backward(corenn.tensor(seed))
    for i in grad_of:
        np.testing.assert_allclose(ours[i].grad.numpy(), theirs[i].grad.numpy(), **TOL[dtype],
                                   err_msg=f"gradient of input {i}")


CONV2D_GRID = [  # (stride, padding, dilation, groups)
    (s, p, d, g) for s, p, d, g in itertools.product([1, 2, (2, 1)], [0, 1, (2, 0), "same", "valid"], [1, 2, (1, 2)],
                                                     [1, 2])
    if not (p == "same" and s != 1)
]


@pytest.mark.torch
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("stride,padding,dilation,groups", CONV2D_GRID)
def test_conv2d_matches_pytorch(torch, dtype, stride, padding, dilation, groups):
    x = RNG.standard_normal((2, 4, 9, 8))
    w = RNG.standard_normal((6, 4 // groups, 3, 2))
    b = RNG.standard_normal(6)
    _oracle(torch, F.conv2d, torch.nn.functional.conv2d, [x, w, b], (0, 1, 2),
            dict(stride=stride, padding=padding, dilation=dilation, groups=groups), dtype)


@pytest.mark.torch
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("stride,padding,dilation,groups", [(1, 0, 1, 1), (2, 1, 1, 2), (1, "same", 2, 1),
                                                            (3, 2, 2, 4), (1, "same", 1, 2)])
def test_conv1d_matches_pytorch(torch, dtype, stride, padding, dilation, groups):
    x = RNG.standard_normal((3, 4, 11))
    w = RNG.standard_normal((8, 4 // groups, 4))
    _oracle(torch, F.conv1d, torch.nn.functional.conv1d, [x, w, None], (0, 1),
            dict(stride=stride, padding=padding, dilation=dilation, groups=groups), dtype)


@pytest.mark.torch
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("stride,padding,output_padding,dilation,groups", [
    (1, 0, 0, 1, 1), (2, 1, 1, 1, 1), (2, 0, 0, 1, 2), ((2, 3), (1, 0), (1, 2), (2, 1), 2), (3, 2, 1, 2, 1)])
def test_conv_transpose2d_matches_pytorch(torch, dtype, stride, padding, output_padding, dilation, groups):
    x = RNG.standard_normal((2, 4, 5, 4))
    w = RNG.standard_normal((4, 6 // groups, 3, 2))
    b = RNG.standard_normal(6)
    _oracle(torch, F.conv_transpose2d, torch.nn.functional.conv_transpose2d, [x, w, b], (0, 1, 2),
            dict(stride=stride, padding=padding, output_padding=output_padding, dilation=dilation, groups=groups),
            dtype)


@pytest.mark.torch
def test_conv_transpose1d_and_unbatched_conv_match_pytorch(torch):
    x = RNG.standard_normal((2, 4, 6))
    w = RNG.standard_normal((4, 3, 3))
    _oracle(torch, F.conv_transpose1d, torch.nn.functional.conv_transpose1d, [x, w], (0, 1),
            dict(stride=2, padding=1, output_padding=1), np.float64)
    _oracle(torch, F.conv2d, torch.nn.functional.conv2d,
            [RNG.standard_normal((3, 6, 6)), RNG.standard_normal((5, 3, 3, 3))], (0, 1), dict(padding=1), np.float64)


MAXPOOL_GRID = [(k, s, p, d, c) for k, s, p, d, c in itertools.product(
    [2, 3, (3, 2)], [None, 1, 2, (2, 3)], [0, 1], [1, 2], [False, True])]


@pytest.mark.torch
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("kernel_size,stride,padding,dilation,ceil_mode", MAXPOOL_GRID)
def test_max_pool2d_matches_pytorch(torch, dtype, kernel_size, stride, padding, dilation, ceil_mode):
    x = RNG.standard_normal((2, 3, 9, 8))
    try:
        torch.nn.functional.max_pool2d(torch.tensor(x), kernel_size, stride, padding, dilation, ceil_mode)
    except RuntimeError:
        with pytest.raises(RuntimeError):
            F.max_pool2d(corenn.tensor(x), kernel_size, stride, padding, dilation, ceil_mode)
        return
    _oracle(torch, F.max_pool2d, torch.nn.functional.max_pool2d, [x], (0,),
            dict(kernel_size=kernel_size, stride=stride, padding=padding, dilation=dilation, ceil_mode=ceil_mode,
                 return_indices=True), dtype)


@pytest.mark.torch
def test_max_pool2d_ties_pick_first_like_pytorch(torch):
    # After a ReLU whole windows are 0: the gradient goes to the first position only.
    x = np.zeros((1, 1, 4, 4))
    x[0, 0, 0, 1] = 1.0
    _oracle(torch, F.max_pool2d, torch.nn.functional.max_pool2d, [x], (0,), dict(kernel_size=2), np.float64)


@pytest.mark.torch
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("kernel_size,stride,padding,ceil_mode,count_include_pad", [
    (k, s, p, c, i) for k, s, p, c, i in itertools.product([2, 3, (3, 2)], [None, 1, 2], [0, 1], [False, True],
                                                           [True, False])])
def test_avg_pool2d_matches_pytorch(torch, dtype, kernel_size, stride, padding, ceil_mode, count_include_pad):
    x = RNG.standard_normal((2, 3, 9, 8))
    _oracle(torch, F.avg_pool2d, torch.nn.functional.avg_pool2d, [x], (0,),
            dict(kernel_size=kernel_size, stride=stride, padding=padding, ceil_mode=ceil_mode,
                 count_include_pad=count_include_pad), dtype)


@pytest.mark.torch
def test_pool1d_divisor_override_and_adaptive_match_pytorch(torch):
    x1 = RNG.standard_normal((2, 3, 11))
    x2 = RNG.standard_normal((2, 3, 9, 8))
    tf = torch.nn.functional
    _oracle(torch, F.max_pool1d, tf.max_pool1d, [x1], (0,), dict(kernel_size=3, stride=2, padding=1,
                                                                  return_indices=True), np.float64)
    _oracle(torch, F.avg_pool1d, tf.avg_pool1d, [x1], (0,), dict(kernel_size=3, stride=2, padding=1, ceil_mode=True),
            np.float64)
    _oracle(torch, F.avg_pool2d, tf.avg_pool2d, [x2], (0,), dict(kernel_size=3, stride=2, padding=1,
                                                                  divisor_override=5), np.float64)
    for size in [1, (3, 4), (5, None), (9, 8), (4, 3)]:
        _oracle(torch, F.adaptive_avg_pool2d, tf.adaptive_avg_pool2d, [x2], (0,), dict(output_size=size), np.float32)
    _oracle(torch, F.adaptive_avg_pool1d, tf.adaptive_avg_pool1d, [x1], (0,), dict(output_size=4), np.float64)


def _leaf(shape):
    return corenn.tensor(RNG.standard_normal(shape), requires_grad=True)


def test_conv_gradcheck():
    x, w, b = _leaf((1, 2, 5, 4)), _leaf((4, 1, 2, 3)), _leaf(4)
    assert gradcheck(lambda x, w, b: F.conv2d(x, w, b, stride=(2, 1), padding=1, dilation=(1, 2), groups=2),
                     (x, w, b))
    x, w = _leaf((1, 2, 3, 3)), _leaf((2, 2, 2, 2))
    assert gradcheck(lambda x, w: F.conv_transpose2d(x, w, stride=2, padding=1, output_padding=1), (x, w))
    assert gradcheck(lambda x, w: F.conv1d(x, w, padding="same"), (_leaf((1, 2, 6)), _leaf((3, 2, 2))))


def test_pool_gradcheck():
    x = _leaf((1, 2, 5, 5))
    assert gradcheck(lambda x: F.max_pool2d(x, 3, 2, padding=1, ceil_mode=True), (x,))
    assert gradcheck(lambda x: F.max_pool2d(x, 2), (x,))
    assert gradcheck(lambda x: F.avg_pool2d(x, 3, 2, padding=1, count_include_pad=False), (x,))
    assert gradcheck(lambda x: F.adaptive_avg_pool2d(x, (2, 3)), (x,))


def test_conv_known_values_without_oracle():
    # A 3x3 box filter of ones on ones counts the in-bounds neighbours.
    out = F.conv2d(corenn.ones(1, 1, 3, 3), corenn.ones(1, 1, 3, 3), padding=1)
    assert out.tolist() == [[[[4.0, 6.0, 4.0], [6.0, 9.0, 6.0], [4.0, 6.0, 4.0]]]]
    pooled, indices = F.max_pool2d(corenn.arange(16.).reshape(1, 1, 4, 4), 2, return_indices=True)
    assert pooled.tolist() == [[[[5.0, 7.0], [13.0, 15.0]]]]
    assert indices.tolist() == [[[[5, 7], [13, 15]]]]


def test_conv_errors_name_what_is_wrong():
    x = corenn.randn(1, 3, 8, 8)
    with pytest.raises(RuntimeError, match="expected input.*to have 4 channels"):
        F.conv2d(x, corenn.randn(2, 4, 3, 3))
    with pytest.raises(RuntimeError, match="4D"):
        F.conv2d(corenn.randn(8, 8), corenn.randn(2, 3, 3, 3))
    with pytest.raises(RuntimeError, match="Kernel size can't be greater"):
        F.conv2d(corenn.randn(1, 3, 2, 2), corenn.randn(2, 3, 3, 3))
    with pytest.raises(ValueError, match="strided"):
        F.conv2d(x, corenn.randn(2, 3, 3, 3), stride=2, padding="same")
    with pytest.raises(ValueError, match="Invalid padding string"):
        F.conv2d(x, corenn.randn(2, 3, 3, 3), padding="full")
    with pytest.raises(RuntimeError, match="bias"):
        F.conv2d(x, corenn.randn(2, 3, 3, 3), corenn.randn(3))
    with pytest.raises(RuntimeError, match="type"):
        F.conv2d(x, corenn.randn(2, 3, 3, 3, dtype=corenn.float64))
    with pytest.raises(TypeError, match="must be Tensor"):
        F.conv2d(np.ones((1, 3, 8, 8)), corenn.randn(2, 3, 3, 3))
    with pytest.raises(RuntimeError, match="output padding must be smaller"):
        F.conv_transpose2d(x, corenn.randn(3, 2, 3, 3), stride=1, output_padding=1)


def test_pool_errors_name_what_is_wrong():
    x = corenn.randn(1, 3, 8, 8)
    with pytest.raises(RuntimeError, match="pad should be at most half"):
        F.max_pool2d(x, 2, padding=2)
    with pytest.raises(RuntimeError, match="3D or 4D"):
        F.max_pool2d(corenn.randn(8, 8), 2)
    with pytest.raises(RuntimeError, match="output size is too small"):
        F.avg_pool2d(corenn.randn(1, 1, 2, 2), 3)
    with pytest.raises(RuntimeError, match="stride must be greater than zero"):
        F.max_pool2d(x, 2, stride=0)
