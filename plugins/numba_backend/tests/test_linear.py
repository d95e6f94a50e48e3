"""corenn_numba.linear: the dense layer's three products on the microkernel agree with the core kernel.

The same expression runs with the plugin enabled and disabled and outputs and gradients are
compared; the conformance kit checks gradients against finite differences in float64, and the
layer is compared with PyTorch when it is installed. ``MIN_WORK`` is lowered where a test wants
small shapes to take the compiled path (tile edges are what such shapes exercise).
"""

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import corenn
import corenn.nn.functional as F
import corenn_numba
from corenn.dispatch import kernels
from corenn.testing.opcheck import Float, OpCase, check_op
from corenn_numba import linear as numba_linear

TOL = {np.float32: dict(rtol=1e-4, atol=1e-4), np.float64: dict(rtol=1e-10, atol=1e-10)}


@pytest.fixture
def every_size(monkeypatch):
    """Let every product with enough rows take the compiled path, however small."""
    monkeypatch.setattr(numba_linear, "MIN_WORK", 0)


def forward_backward(fn, arrays):
    tensors = [None if a is None else corenn.tensor(a, requires_grad=True) for a in arrays]
    out = fn(*tensors)
    out.backward(corenn.tensor(np.random.default_rng(1).standard_normal(out.shape).astype(arrays[0].dtype)))
    return out.detach().numpy(), [None if t is None else t.grad.numpy() for t in tensors]


def assert_same_as_core(fn, arrays):
    dtype = arrays[0].dtype.type
    got, got_grads = forward_backward(fn, arrays)
    with corenn_numba.disabled():
        expected, expected_grads = forward_backward(fn, arrays)
    assert got.dtype == expected.dtype and got.shape == expected.shape
    np.testing.assert_allclose(got, expected, **TOL[dtype])
    for g, e in zip(got_grads, expected_grads):
        assert (g is None) == (e is None)
        if g is not None:
            np.testing.assert_allclose(g, e, **TOL[dtype])


def test_plugin_kernel_is_dispatched():
    assert issubclass(kernels.lookup("linear", "cpu"), numba_linear.Linear)  # the calibrated subclass of the override
    with corenn_numba.disabled():
        assert kernels.lookup("linear", "cpu") is not numba_linear.Linear


@settings(max_examples=25, deadline=None)
@given(rows=st.integers(8, 70), inputs=st.integers(1, 80), outputs=st.integers(8, 90), bias=st.booleans(),
       dtype=st.sampled_from([np.float32, np.float64]))
def test_linear_same_as_core_on_drawn_shapes(rows, inputs, outputs, bias, dtype):
    # Drawn sizes cut the microkernel's tiles (8 rows x 16 or 32 columns) anywhere.
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(numba_linear, "MIN_WORK", 0)
        rng = np.random.default_rng(0)
        arrays = [rng.uniform(-1, 1, (rows, inputs)).astype(dtype), rng.uniform(-1, 1, (outputs, inputs)).astype(dtype),
                  rng.uniform(-1, 1, outputs).astype(dtype) if bias else None]
        assert_same_as_core(lambda x, w, b: F.linear(x, w, b), arrays)


def test_batched_and_non_contiguous_inputs(every_size):
    rng = np.random.default_rng(0)
    x = rng.standard_normal((3, 5, 24))                  # (batch, sequence, features): seen as 15 rows
    w = rng.standard_normal((40, 24))
    b = rng.standard_normal(40)
    assert_same_as_core(lambda x, w, b: F.linear(x, w, b), [x, w, b])
    x_t = rng.standard_normal((24, 20)).T                # a transposed view: strided rows
    w_t = rng.standard_normal((24, 40)).T
    assert_same_as_core(lambda x, w, b: F.linear(x, w, b), [x_t, w_t, b])


def test_large_product_runs_compiled_and_small_ones_fall_back(monkeypatch):
    calls = []
    original = numba_linear.matmul
    monkeypatch.setattr(numba_linear, "matmul", lambda *a: calls.append(a[0].shape) or original(*a))
    rng = np.random.default_rng(0)
    big = [rng.standard_normal((64, 128)).astype(np.float32), rng.standard_normal((96, 128)).astype(np.float32), None]
    assert_same_as_core(lambda x, w, b: F.linear(x, w), big)
    assert len(calls) == 3  # forward, grad_x and grad_weight
    calls.clear()
    small = [rng.standard_normal((4, 128)), rng.standard_normal((96, 128)), None]  # fewer rows than a tile
    assert_same_as_core(lambda x, w, b: F.linear(x, w), small)
    vector = [rng.standard_normal(128), rng.standard_normal((96, 128)), None]
    assert_same_as_core(lambda x, w, b: F.linear(x, w), vector)
    assert calls == []


def test_only_the_needed_gradients_are_computed(every_size):
    rng = np.random.default_rng(0)
    x = corenn.tensor(rng.standard_normal((16, 12)))
    w = corenn.tensor(rng.standard_normal((20, 12)), requires_grad=True)
    F.linear(x, w).sum().backward()
    np.testing.assert_allclose(w.grad.numpy(), np.ones((16, 20)).T @ x.numpy(), rtol=1e-12)
    assert x.grad is None


@pytest.mark.parametrize("dtype", [np.float16, np.int64])
def test_other_dtypes_fall_back_to_the_core(every_size, dtype):
    x = corenn.tensor(np.arange(24 * 10).reshape(24, 10).astype(dtype))
    w = corenn.tensor(np.ones((16, 10), dtype=dtype))
    with corenn_numba.disabled():
        expected = F.linear(x, w).numpy()
    np.testing.assert_array_equal(F.linear(x, w).numpy(), expected)


def test_front_end_errors_are_unchanged():
    with pytest.raises(RuntimeError, match=r"mat1 and mat2 shapes cannot be multiplied \(64x10 and 12x32\)"):
        F.linear(corenn.randn(64, 10), corenn.randn(32, 12))


CONFORMANCE = OpCase("linear", lambda lib, x, w, b: lib.nn.functional.linear(x, w, b),
                     [Float((9, 7)), Float((35, 7)), Float((35,))], rtol=1e-4, atol=1e-5)


def test_conformance_kit(every_size):
    # gradients against finite differences in float64, through the compiled kernel
    check_op(CONFORMANCE, "cpu", reference="none")


@pytest.mark.torch
def test_conformance_kit_against_pytorch(every_size):
    pytest.importorskip("torch")
    # torch, and the core's linear on the host (the kit compares every override with the core kernel)
    assert check_op(CONFORMANCE, "cpu", finite_differences=False) == "torch+core"


@pytest.mark.torch
def test_mlp_matches_pytorch_with_copied_weights():
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(0)
    x = rng.standard_normal((128, 784)).astype(np.float32)
    ours = corenn.nn.Sequential(corenn.nn.Linear(784, 256), corenn.nn.ReLU(), corenn.nn.Linear(256, 10))
    theirs = torch.nn.Sequential(torch.nn.Linear(784, 256), torch.nn.ReLU(), torch.nn.Linear(256, 10))
    with torch.no_grad():
        for p, q in zip(ours.parameters(), theirs.parameters()):
            q.copy_(torch.from_numpy(p.detach().numpy()))
    out, expected = ours(corenn.tensor(x)), theirs(torch.from_numpy(x))
    np.testing.assert_allclose(out.detach().numpy(), expected.detach().numpy(), rtol=1e-4, atol=1e-5)
    out.square().sum().backward()
    expected.square().sum().backward()
    for p, q in zip(ours.parameters(), theirs.parameters()):
        np.testing.assert_allclose(p.grad.numpy(), q.grad.numpy(), rtol=1e-4, atol=1e-4)
