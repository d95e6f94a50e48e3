"""Every case of the conformance kit, compiled: replayed values and gradients equal eager's (issue #21)."""
from __future__ import annotations

import warnings

import numpy as np
import pytest

import corenn
import corenn.compiler.pointwise
from corenn.testing import opcheck

CASES = [case for case in opcheck.cases() if case.grad]
# The numba backend differs from replay only on chains of pointwise ops.
PARAMS = [pytest.param(case, "replay", id=f"replay-{case.id}") for case in CASES] + \
    [pytest.param(case, "numba", id=f"numba-{case.id}") for case in CASES
     if case.op in corenn.compiler.pointwise.POINTWISE]


def _inputs(case, seed=0):
    rng = np.random.default_rng(seed)
    arrays = [spec.make(rng, np.float64) for spec in case.args]
    tensors = []
    for array, spec in zip(arrays, case.args):
        t = corenn.tensor(array)
        if isinstance(spec, opcheck.Float) and spec.grad:
            t.requires_grad_(True)
        tensors.append(t)
    return tensors


def _loss(case, tensors, weights):
    """The case's outputs, each weighted by fixed random numbers and summed: gradients that are not all ones."""
    outputs = opcheck._outputs(case.fn(corenn, *tensors))
    total = None
    for out, weight in zip(outputs, weights):
        if not out.dtype.is_floating_point or not out.requires_grad:
            continue
        term = (out * weight).sum()
        total = term if total is None else total + term
    return outputs, total


@pytest.mark.parametrize("case, backend", PARAMS)
def test_compiled_case_equals_eager(case, backend):
    if backend not in corenn.compiler.list_backends():
        pytest.skip("corenn-numba is not installed")
    eager_inputs, compiled_inputs = _inputs(case), _inputs(case)
    eager_outputs = opcheck._outputs(case.fn(corenn, *eager_inputs))
    rng = np.random.default_rng(1)
    weights = [corenn.tensor(rng.uniform(0.5, 1.5, tuple(o.shape))) if o.dtype.is_floating_point else None
               for o in eager_outputs]
    eager_outputs, eager_loss = _loss(case, eager_inputs, weights)
    if eager_loss is None:
        pytest.skip("no differentiable output")
    eager_loss.backward()

    compiled = corenn.compile(lambda *tensors: _loss(case, tensors, weights), backend=backend)
    for _ in range(2):  # the capture, then a replay
        for t in compiled_inputs:
            t.grad = None
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # a case that cannot be captured runs eagerly: still equal
            outputs, loss = compiled(*compiled_inputs)
        for got, want in zip(outputs, eager_outputs):
            np.testing.assert_allclose(got.detach().numpy(), want.detach().numpy(), rtol=1e-12, atol=1e-12,
                                       equal_nan=True)
        loss.backward()
        for got, want in zip(compiled_inputs, eager_inputs):
            if want.grad is None:
                assert got.grad is None
            else:
                np.testing.assert_allclose(got.grad.numpy(), want.grad.numpy(), rtol=1e-10, atol=1e-12,
                                           equal_nan=True)
