"""Seed 004 section 4 (overloaded operators) with ``corenn`` in place of ``torch``."""
from __future__ import annotations

import numpy as np
import pytest

import corenn


def test_slicing_is_narrow():
    x = corenn.rand([500, 10])
    begin, end = 3, 9
    z = x[begin:end]
    assert corenn.equal(z, corenn.narrow(x, 0, begin, end - begin))


def test_three_ways_to_sum_rows_agree():
    x = corenn.rand([500, 10])
    z = corenn.zeros([10])
    for i in range(500):
        z += x[i]
    z2 = corenn.zeros([10])
    for x_i in corenn.unbind(x):
        z2 += x_i
    z3 = corenn.sum(x, dim=0)
    expected = x.numpy().astype(np.float64).sum(0)
    for result in (z, z2, z3):
        np.testing.assert_allclose(result.numpy(), expected, rtol=1e-4)


@pytest.fixture
def xy():
    rng = np.random.default_rng(0)
    return (corenn.tensor(rng.uniform(0.5, 2.0, (3, 3)).astype(np.float32)),
            corenn.tensor(rng.uniform(0.5, 2.0, (3, 3)).astype(np.float32)))


def test_arithmetic_operators(xy):
    x, y = xy
    a, b = x.numpy(), y.numpy()
    np.testing.assert_allclose((-x).numpy(), -a)
    assert corenn.equal(-x, corenn.neg(x))
    assert corenn.equal(x + y, corenn.add(x, y))
    np.testing.assert_allclose((x - y).numpy(), a - b)
    assert corenn.equal(x * y, corenn.mul(x, y))
    assert corenn.equal(x / y, corenn.div(x, y))
    np.testing.assert_allclose((x // y).numpy(), a // b)
    np.testing.assert_allclose((x % y).numpy(), np.mod(a, b), rtol=1e-6, atol=1e-6)
    assert corenn.equal(x ** y, corenn.pow(x, y))
    assert corenn.allclose(x @ y, corenn.matmul(x, y))
    assert corenn.equal(abs(x - y), corenn.abs(x - y))


def test_comparison_operators(xy):
    x, y = xy
    a, b = x.numpy(), y.numpy()
    assert (x > y).tolist() == (a > b).tolist()
    assert (x >= y).tolist() == (a >= b).tolist()
    assert (x < y).tolist() == (a < b).tolist()
    assert (x <= y).tolist() == (a <= b).tolist()
    assert corenn.equal(x == y, corenn.eq(x, y)) and corenn.equal(x != y, corenn.ne(x, y))


def test_logical_operators_on_masks(xy):
    x, y = xy
    p, q = x > 1, y > 1
    assert (p & q).tolist() == (p.numpy() & q.numpy()).tolist()
    assert (p | q).tolist() == (p.numpy() | q.numpy()).tolist()
    assert corenn.equal(p ^ q, corenn.logical_xor(p, q))
    assert corenn.equal(~p, corenn.logical_not(p))


def test_augmented_assignment(xy):
    x, y = xy
    expected = (x.numpy() + y.numpy()) ** 2
    x += y
    x **= 2
    np.testing.assert_allclose(x.numpy(), expected, rtol=1e-6)
