"""corenn_numba.scatter: every add.at path agrees with the core, and repeated indices accumulate.

Each check runs the same expression with the plugin enabled and disabled (the core's kernels)
and compares outputs and gradients; the conformance kit and PyTorch check the ops as users call them.
"""

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import corenn
import corenn.nn.functional as F
import corenn_numba
from corenn.dispatch import kernels
from corenn.testing.opcheck import run_conformance
from corenn_numba import scatter as numba_scatter

SETTINGS = settings(max_examples=15, deadline=None)


def run_and_grads(fn, arrays, grad_inputs=(0,)):
    tensors = [corenn.tensor(a, requires_grad=i in grad_inputs) for i, a in enumerate(arrays)]
    out = fn(*tensors)
    if out.requires_grad:
        upstream = np.random.default_rng(0).standard_normal(out.shape).astype(out.detach().numpy().dtype)
        out.backward(corenn.tensor(upstream))
    return out.detach().numpy(), [tensors[i].grad.numpy() if tensors[i].grad is not None else None
                                  for i in grad_inputs]


def assert_same_as_core(fn, arrays, grad_inputs=(0,), rtol=1e-5, atol=1e-6):
    got, got_grads = run_and_grads(fn, arrays, grad_inputs)
    with corenn_numba.disabled():
        expected, expected_grads = run_and_grads(fn, arrays, grad_inputs)
    assert got.dtype == expected.dtype
    np.testing.assert_allclose(got, expected, rtol=rtol, atol=atol)
    for g, e in zip(got_grads, expected_grads):
        assert (g is None) == (e is None)
        if g is not None:
            assert g.dtype == e.dtype
            np.testing.assert_allclose(g, e, rtol=rtol, atol=atol)


def test_plugin_kernels_are_dispatched():
    for op, cls in numba_scatter.OVERRIDES:
        assert issubclass(kernels.lookup(op, "cpu"), cls)  # the calibrated subclass of the override


dtypes = st.sampled_from([np.float32, np.float64])


# ---------------------------------------------------------------------------------------------------------
# embedding
# ---------------------------------------------------------------------------------------------------------

@SETTINGS
@given(rows=st.integers(1, 8), dim=st.integers(1, 6), index_shape=st.sampled_from([(5,), (3, 4), (2, 2, 3)]),
       padding=st.booleans(), dtype=dtypes)
def test_embedding_backward_matches_core(rows, dim, index_shape, padding, dtype):
    rng = np.random.default_rng(rows * 10 + dim)
    weight = rng.standard_normal((rows, dim)).astype(dtype)
    indices = rng.integers(0, rows, index_shape)  # few rows, many indices: repeats are the rule
    padding_idx = int(indices.reshape(-1)[0]) if padding else None
    assert_same_as_core(lambda w, i: F.embedding(i, w, padding_idx=padding_idx), [weight, indices])


def test_embedding_repeated_indices_accumulate():
    weight = corenn.zeros(4, 2, requires_grad=True)
    F.embedding(corenn.tensor([[1, 1, 3], [1, 0, 3]]), weight).sum().backward()
    counts = np.bincount([1, 1, 3, 1, 0, 3], minlength=4).astype(np.float32)
    np.testing.assert_array_equal(weight.grad.numpy(), np.repeat(counts[:, None], 2, axis=1))


# ---------------------------------------------------------------------------------------------------------
# getitem backward, index_put(accumulate=True)
# ---------------------------------------------------------------------------------------------------------

INDEXERS = {
    "rows": lambda x, i: x[i],
    "rows-2d-index": lambda x, i: x[i.reshape(2, -1)] if i.shape[0] % 2 == 0 else x[i],
    "negative": lambda x, i: x[-1 - i],
    "two-axes": lambda x, i: x[i, i % x.shape[1]],
    "int-and-array": lambda x, i: x[0, i % x.shape[1]],
    "slice-then-array": lambda x, i: x[:, i % x.shape[1]],
    "mask": lambda x, i: x[x > 0],
    "ellipsis": lambda x, i: x[..., i % x.shape[-1]],
}


@SETTINGS
@given(rows=st.integers(1, 6), cols=st.integers(1, 5), depth=st.sampled_from([(), (3,)]), count=st.integers(1, 8),
       kind=st.sampled_from(sorted(INDEXERS)), dtype=dtypes)
def test_getitem_backward_matches_core(rows, cols, depth, count, kind, dtype):
    rng = np.random.default_rng(rows * cols + count)
    x = rng.standard_normal((rows, cols) + depth).astype(dtype)
    index = corenn.tensor(rng.integers(0, rows, count))
    assert_same_as_core(lambda t: INDEXERS[kind](t, index), [x])


def test_getitem_repeated_indices_accumulate():
    x = corenn.zeros(3, 2, requires_grad=True)
    x[corenn.tensor([0, 0, 2, 0])].sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), [[3, 3], [0, 0], [1, 1]])
    y = corenn.zeros(2, 3, requires_grad=True)
    y[corenn.tensor([1, 1]), corenn.tensor([2, 2])].sum().backward()
    np.testing.assert_array_equal(y.grad.numpy(), [[0, 0, 0], [0, 0, 2]])


@SETTINGS
@given(rows=st.integers(1, 6), cols=st.integers(1, 4), count=st.integers(1, 8), scalar=st.booleans(), dtype=dtypes)
def test_index_put_accumulate_matches_core(rows, cols, count, scalar, dtype):
    rng = np.random.default_rng(rows + 7 * count)
    x = rng.standard_normal((rows, cols)).astype(dtype)
    index = corenn.tensor(rng.integers(-rows, rows, count))
    values = rng.standard_normal((count, cols)).astype(dtype)
    if scalar:
        assert_same_as_core(lambda t: t.index_put((index,), 1.5, accumulate=True), [x])
    else:
        assert_same_as_core(lambda t, v: t.index_put((index,), v, accumulate=True), [x, values], grad_inputs=(0, 1))


def test_index_put_accumulate_repeated():
    out = corenn.zeros(4).index_put((corenn.tensor([1, 1, 1, 3]),), corenn.tensor([1.0, 2.0, 3.0, 4.0]),
                                    accumulate=True)
    np.testing.assert_array_equal(out.numpy(), [0, 6, 0, 4])


def test_index_put_out_of_range_raises_index_error():
    with pytest.raises(IndexError, match="out of bounds"):
        corenn.zeros(3, 2).index_put((corenn.tensor([0, 3]),), corenn.ones(2, 2), accumulate=True)
    x = corenn.zeros(3, requires_grad=True)
    with pytest.raises(IndexError):
        x[corenn.tensor([5])].sum().backward()


# ---------------------------------------------------------------------------------------------------------
# gather backward, scatter_add, index_select backward, index_add, pad backward
# ---------------------------------------------------------------------------------------------------------

@SETTINGS
@given(shape=st.lists(st.integers(1, 5), min_size=1, max_size=3).map(tuple), data=st.data(), dtype=dtypes)
def test_gather_and_scatter_add_match_core(shape, data, dtype):
    axis = data.draw(st.integers(0, len(shape) - 1))
    index_shape = tuple(data.draw(st.integers(1, s)) if d != axis else data.draw(st.integers(1, 6))
                        for d, s in enumerate(shape))
    rng = np.random.default_rng(sum(shape) + axis)
    x = rng.standard_normal(shape).astype(dtype)
    index = corenn.tensor(rng.integers(0, shape[axis], index_shape))
    src = rng.standard_normal(index_shape).astype(dtype)
    assert_same_as_core(lambda t: t.gather(axis, index), [x])
    assert_same_as_core(lambda t, s: t.scatter_add(axis, index, s), [x, src], grad_inputs=(0, 1))
    assert_same_as_core(lambda t: t.scatter(axis, index, 2.0, reduce="add"), [x])


@SETTINGS
@given(shape=st.lists(st.integers(1, 5), min_size=1, max_size=3).map(tuple), data=st.data(), dtype=dtypes,
       alpha=st.sampled_from([1, -0.5]))
def test_index_select_and_index_add_match_core(shape, data, dtype, alpha):
    axis = data.draw(st.integers(0, len(shape) - 1))
    count = data.draw(st.integers(1, 7))
    rng = np.random.default_rng(sum(shape) * 3 + count)
    x = rng.standard_normal(shape).astype(dtype)
    index = corenn.tensor(rng.integers(0, shape[axis], count))
    source = rng.standard_normal(shape[:axis] + (count,) + shape[axis + 1:]).astype(dtype)
    assert_same_as_core(lambda t: t.index_select(axis, index), [x])
    assert_same_as_core(lambda t, s: t.index_add(axis, index, s, alpha=alpha), [x, source], grad_inputs=(0, 1))


def test_index_add_repeated_and_bad_index():
    out = corenn.zeros(3, 2).index_add(0, corenn.tensor([2, 2, 0]), corenn.ones(3, 2))
    np.testing.assert_array_equal(out.numpy(), [[1, 1], [0, 0], [2, 2]])
    with pytest.raises(RuntimeError, match="index 3 is out of bounds for dimension 0 with size 3"):  # PyTorch's
        corenn.zeros(3, 2).index_add(0, corenn.tensor([3]), corenn.ones(1, 2))


@pytest.mark.parametrize("mode", ["reflect", "replicate", "circular"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_pad_backward_matches_core(mode, dtype):
    x = np.random.default_rng(2).standard_normal((2, 3, 5, 6)).astype(dtype)
    assert_same_as_core(lambda t: F.pad(t, (2, 3, 1, 2), mode=mode), [x])


# ---------------------------------------------------------------------------------------------------------
# fallbacks: dtypes the compiled loops do not handle run the core kernel
# ---------------------------------------------------------------------------------------------------------

def test_integer_and_half_targets_fall_back():
    ints = corenn.zeros(4, dtype=corenn.int64).index_put((corenn.tensor([1, 1]),), corenn.tensor([2, 3]),
                                                         accumulate=True)
    np.testing.assert_array_equal(ints.numpy(), [0, 5, 0, 0])
    added = corenn.zeros(3, dtype=corenn.int32).index_add(0, corenn.tensor([0, 0]),
                                                           corenn.ones(2, dtype=corenn.int32))
    np.testing.assert_array_equal(added.numpy(), [2, 0, 0])
    half = np.random.default_rng(0).standard_normal((4, 3)).astype(np.float16)
    assert_same_as_core(lambda t: t.gather(1, corenn.tensor([[0, 0], [1, 2], [2, 2], [0, 1]])), [half])
    assert_same_as_core(lambda t: t[corenn.tensor([0, 0, 3])], [half])


# ---------------------------------------------------------------------------------------------------------
# the conformance kit and PyTorch
# ---------------------------------------------------------------------------------------------------------

def test_conformance_kit():
    pytest.importorskip("torch")  # the kit compares with PyTorch when the test imported it
    ops = ["gather", "scatter", "scatter_add", "index_select", "getitem", "setitem", "take_along_dim", "pad"]
    results = run_conformance("cpu", ops=ops)
    assert results and all(not outcome.startswith("FAIL") for _, outcome in results)


@pytest.mark.torch
def test_embedding_and_indexing_against_torch():
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(5)
    weight = rng.standard_normal((10, 4)).astype(np.float32)
    indices = rng.integers(0, 10, (6, 7))
    w = corenn.tensor(weight, requires_grad=True)
    tw = torch.tensor(weight, requires_grad=True)
    upstream = rng.standard_normal((6, 7, 4)).astype(np.float32)
    F.embedding(corenn.tensor(indices), w, padding_idx=3).backward(corenn.tensor(upstream))
    torch.nn.functional.embedding(torch.tensor(indices), tw, padding_idx=3).backward(torch.tensor(upstream))
    np.testing.assert_allclose(w.grad.numpy(), tw.grad.numpy(), rtol=1e-5, atol=1e-6)

    x = rng.standard_normal((5, 3)).astype(np.float32)
    idx = rng.integers(0, 5, 9)
    a, ta = corenn.tensor(x, requires_grad=True), torch.tensor(x, requires_grad=True)
    (a[corenn.tensor(idx)] * 2).sum().backward()
    (ta[torch.tensor(idx)] * 2).sum().backward()
    np.testing.assert_allclose(a.grad.numpy(), ta.grad.numpy())

    src = rng.standard_normal((9, 3)).astype(np.float32)
    got = corenn.tensor(x).index_add(0, corenn.tensor(idx), corenn.tensor(src), alpha=0.5)
    expected = torch.tensor(x).index_add(0, torch.tensor(idx), torch.tensor(src), alpha=0.5)
    np.testing.assert_allclose(got.numpy(), expected.numpy(), rtol=1e-6)
    got = corenn.tensor(x).index_put((corenn.tensor(idx),), corenn.tensor(src), accumulate=True)
    expected = torch.tensor(x).index_put((torch.tensor(idx),), torch.tensor(src), accumulate=True)
    np.testing.assert_allclose(got.numpy(), expected.numpy(), rtol=1e-6)
