"""Tensor operators (reflected and in-place forms), comparisons, logic, indexing and __setitem__ with gradients."""
from __future__ import annotations

import operator

import numpy as np
import pytest

import corenn

BINARY = {
    "+": operator.add, "-": operator.sub, "*": operator.mul, "/": operator.truediv, "//": operator.floordiv,
    "%": operator.mod, "**": operator.pow, ">": operator.gt, ">=": operator.ge, "<": operator.lt,
    "<=": operator.le, "==": operator.eq, "!=": operator.ne,
}
INPLACE = {"+": operator.iadd, "-": operator.isub, "*": operator.imul, "/": operator.itruediv,
           "//": operator.ifloordiv, "%": operator.imod, "**": operator.ipow}


def _pair():
    rng = np.random.default_rng(0)
    return rng.uniform(0.5, 3, (2, 3)).astype(np.float32), rng.uniform(0.5, 3, (3,)).astype(np.float32)


@pytest.mark.torch
@pytest.mark.parametrize("symbol", sorted(BINARY))
def test_binary_operators_match_torch(symbol, torch):
    f = BINARY[symbol]
    a, b = _pair()
    for left, right in [(a, b), (a, 2.0), (2.0, b), (a, 3)]:
        wrap_c = lambda v: corenn.tensor(v) if isinstance(v, np.ndarray) else v  # noqa: E731
        wrap_t = lambda v: torch.from_numpy(v) if isinstance(v, np.ndarray) else v  # noqa: E731
        ours, theirs = f(wrap_c(left), wrap_c(right)), f(wrap_t(left), wrap_t(right))
        assert ours.dtype.name == str(theirs.dtype)[6:]
        np.testing.assert_allclose(ours.numpy(), theirs.numpy(), rtol=1e-6)


@pytest.mark.torch
@pytest.mark.parametrize("symbol", sorted(INPLACE))
def test_inplace_operators_match_torch_and_keep_identity(symbol, torch):
    a, b = _pair()
    ours, theirs = corenn.tensor(a), torch.from_numpy(a.copy())
    alias = ours
    ours = INPLACE[symbol](ours, corenn.tensor(b))
    theirs = INPLACE[symbol](theirs, torch.from_numpy(b))
    assert ours is alias
    np.testing.assert_allclose(ours.numpy(), theirs.numpy(), rtol=1e-6)


def test_inplace_writes_through_views_and_numpy():
    base = np.zeros(3, dtype=np.float32)
    t = corenn.from_numpy(base)
    t += 1
    t *= 3
    assert base.tolist() == [3.0, 3.0, 3.0]
    t[1:] -= 1
    assert base.tolist() == [3.0, 2.0, 2.0]


def test_inplace_keeps_dtype_and_rejects_float_into_int():
    i = corenn.tensor([1, 2, 3])
    i += 2
    assert i.dtype is corenn.int64 and i.tolist() == [3, 4, 5]
    with pytest.raises(RuntimeError, match="result type Float can't be cast to the desired output type Long"):
        i += 0.5
    with pytest.raises(RuntimeError, match="can't be cast"):
        i /= 2


def test_inplace_on_leaf_requiring_grad_raises():
    w = corenn.tensor([1.0, 2.0], requires_grad=True)
    with pytest.raises(RuntimeError, match="a leaf Variable that requires grad is being used in an in-place "
                                           "operation"):
        w += 1
    for method in (lambda: w.mul_(2), lambda: w.exp_(), lambda: w.zero_(), lambda: w.fill_(1.0),
                   lambda: w.clamp_(0, 1), lambda: w.copy_(corenn.ones(2))):
        with pytest.raises(RuntimeError, match="leaf Variable"):
            method()
    with corenn.no_grad():
        w -= 1  # allowed without grad, as an optimizer step does
    assert w.tolist() == [0.0, 1.0] and w.requires_grad and w.is_leaf


def test_inplace_on_non_leaf_records_gradient():
    x = corenn.tensor([1.0, 2.0], requires_grad=True)
    y = x * 2
    y += x
    y.mul_(x)
    y.exp_()
    y.sum().backward()
    expected = np.exp(3 * np.array([1.0, 4.0])) * 6 * np.array([1.0, 2.0])
    np.testing.assert_allclose(x.grad.numpy(), expected, rtol=1e-5)


@pytest.mark.torch
def test_logic_and_unary_operators_match_torch(torch):
    m1 = np.array([True, False, True, False])
    m2 = np.array([True, True, False, False])
    for f in (operator.and_, operator.or_, operator.xor):
        assert f(corenn.tensor(m1), corenn.tensor(m2)).tolist() == f(torch.from_numpy(m1),
                                                                     torch.from_numpy(m2)).tolist()
    assert (~corenn.tensor(m1)).tolist() == (~torch.from_numpy(m1)).tolist()
    ints = np.array([5, -3, 12])
    for f in (operator.and_, operator.or_, operator.xor):
        assert f(corenn.tensor(ints), 6).tolist() == f(torch.from_numpy(ints), 6).tolist()
    assert (~corenn.tensor(ints)).tolist() == (~torch.from_numpy(ints)).tolist()
    x = np.array([-1.5, 0.0, 2.0], dtype=np.float32)
    assert abs(corenn.tensor(x)).tolist() == abs(torch.from_numpy(x)).tolist()
    assert (-corenn.tensor(x)).tolist() == (-torch.from_numpy(x)).tolist()
    assert (+corenn.tensor(x)).tolist() == x.tolist()
    m = corenn.tensor(m1)
    m &= corenn.tensor(m2)
    assert m.tolist() == [True, False, False, False]


def test_matmul_operator_forms():
    a, b = corenn.ones(2, 3), corenn.ones(3, 4)
    assert (a @ b).shape == (2, 4)
    assert (a.numpy() @ b).shape == (2, 4)  # numpy on the left defers to Tensor.__rmatmul__
    c = corenn.ones(3, 3)
    c @= corenn.eye(3) * 2
    assert c.tolist() == [[2.0] * 3] * 3


def test_comparisons_with_none_and_containment():
    t = corenn.tensor([1, 2, 3])
    assert (t == None) is False  # noqa: E711 - Python semantics, as in PyTorch
    assert 2 in t and 5 not in t


def test_gradient_broadcast_reduced_to_each_input_shape():
    a = corenn.ones(2, 1, 3, requires_grad=True)
    b = corenn.ones(4, 1, requires_grad=True)
    c = corenn.tensor(2.0, requires_grad=True)
    ((a + b) * c).sum().backward()
    assert a.grad.shape == a.shape and b.grad.shape == b.shape and c.grad.shape == c.shape
    assert a.grad.tolist() == [[[8.0] * 3]] * 2
    assert b.grad.tolist() == [[12.0]] * 4
    assert c.item() == 2.0 and c.grad.item() == 48.0


# -- indexing ---------------------------------------------------------------------------------------------

INDEXES = [
    "[1]", "[-1]", "[1:]", "[::2]", "[:, 1]", "[..., 0]", "[None, 1]", "[1, None, :]", "[[0, 2, 0]]",
    "[[0, 1], [1, 2]]", "[:, [2, 2, 0]]", "[m]", "[m[:, 0]]", "[idx]", "[idx, :2]", "[1:, idx2]",
    "[[[0, 1]], [[1], [2]]]", "[True]", "[0, 1]", "[-2:, -1]",
]


@pytest.mark.torch
@pytest.mark.parametrize("index", INDEXES)
def test_getitem_and_gradient_match_torch(index, torch):
    values = np.arange(12, dtype=np.float64).reshape(3, 4) / 3
    mask = values > 1.5
    results = []
    for lib, wrap in ((corenn, corenn.tensor), (torch, torch.from_numpy)):
        x = wrap(values.copy()).requires_grad_(True)
        env = {"x": x, "m": wrap(mask), "idx": wrap(np.array([2, 0, 2])), "idx2": wrap(np.array([[1, 1], [3, 0]]))}
        y = eval("x" + index, env)
        weights = wrap(np.random.default_rng(1).standard_normal(tuple(y.shape)))
        (y * weights).sum().backward()
        results.append((y.detach().numpy(), x.grad.numpy()))
    (ours, our_grad), (theirs, their_grad) = results
    np.testing.assert_allclose(ours, theirs)
    np.testing.assert_allclose(our_grad, their_grad)  # repeated indices accumulate


SETITEMS = [("[1]", "v0"), ("[:, 1]", "1.5"), ("[m]", "-1.0"), ("[[0, 0]]", "v1"), ("[1:, :2]", "v2"),
            ("[idx]", "v1"), ("[..., -1]", "v3")]


@pytest.mark.torch
@pytest.mark.parametrize("index, value", SETITEMS)
def test_setitem_and_gradient_match_torch(index, value, torch):
    base = np.arange(12, dtype=np.float64).reshape(3, 4)
    values = {"v0": np.full(4, 7.0), "v1": np.arange(4.0), "v2": np.ones((2, 2)), "v3": np.arange(3.0)}
    results = []
    for lib, wrap in ((corenn, corenn.tensor), (torch, torch.from_numpy)):
        x = wrap(base.copy()).requires_grad_(True)
        env = {"m": wrap(base > 6), "idx": wrap(np.array([2, 0]))}
        v = eval(value, {}) if value not in values else wrap(values[value].copy()).requires_grad_(True)
        y = x * 1
        exec(f"y{index} = v", {**env, "y": y, "v": v})
        weights = wrap(np.arange(12.0).reshape(3, 4))
        (y * weights).sum().backward()
        results.append((y.detach().numpy(), x.grad.numpy(), None if isinstance(v, float) else v.grad.numpy()))
    for ours, theirs in zip(*results):
        if theirs is None:
            assert ours is None
        else:
            np.testing.assert_allclose(ours, theirs)


def test_index_errors():
    t = corenn.zeros(3, 4)
    with pytest.raises(IndexError, match="index 3 is out of bounds for dimension 0 with size 3"):
        t[3]
    with pytest.raises(IndexError, match="too many indices"):
        t[0, 0, 0]
    with pytest.raises(IndexError):
        t[corenn.tensor([0, 5])]


def test_setitem_on_leaf_requiring_grad_raises():
    w = corenn.zeros(3, requires_grad=True)
    with pytest.raises(RuntimeError, match="leaf Variable"):
        w[0] = 1.0


def test_basic_slices_are_views():
    t = corenn.zeros(3, 4)
    row = t[1]
    row += 5
    assert t[1].tolist() == [5.0] * 4
    t[:, 0] = corenn.tensor([1.0, 2.0, 3.0])
    assert t[:, 0].tolist() == [1.0, 2.0, 3.0]


def test_tensor_properties():
    t = corenn.zeros(2, 3, dtype=corenn.float64)
    assert t.shape == (2, 3) and t.size() == corenn.Size([2, 3]) and t.size(-1) == 3
    assert t.ndim == t.dim() == 2 and t.numel() == 6 and len(t) == 2
    assert t.device == corenn.device("cpu") and str(t.device) == "cpu"
    assert t.is_leaf and not t.requires_grad and t.grad_fn is None
    assert t.T.shape == (3, 2) and t.stride() == (3, 1) and t.is_contiguous()
    assert corenn.tensor(2.5).item() == 2.5 and int(corenn.tensor(3)) == 3
    with pytest.raises(RuntimeError, match="a Tensor with 6 elements cannot be converted to Scalar"):
        t.item()
    with pytest.raises(RuntimeError, match="Boolean value of Tensor with 6 values is ambiguous"):
        bool(t)
    with pytest.raises(TypeError, match="len\\(\\) of a 0-d tensor"):
        len(corenn.tensor(1.0))


def test_numpy_round_trip_shares_memory():
    a = np.arange(4.0)
    t = corenn.from_numpy(a)
    assert t.numpy() is a or np.shares_memory(t.numpy(), a)
    b = corenn.tensor(a)
    a[0] = 100
    assert t[0].item() == 100 and b[0].item() == 0
    with pytest.raises(RuntimeError, match="Can't call numpy\\(\\) on Tensor that requires grad"):
        corenn.ones(2, requires_grad=True).numpy()
