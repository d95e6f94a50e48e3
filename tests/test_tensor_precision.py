"""Python numbers reach a float64 tensor in float64: not through float32's rounding first."""
from __future__ import annotations

import numpy as np
import pytest

import corenn

VALUE = 1.0 + 1e-6  # float32 rounds it to 1.0000009536743164


@pytest.mark.torch
@pytest.mark.parametrize("build", [
    lambda lib: lib.tensor([VALUE], dtype=lib.float64),
    lambda lib: lib.tensor(VALUE, dtype=lib.float64),
    lambda lib: lib.as_tensor([VALUE], dtype=lib.float64),
    lambda lib: lib.zeros(1, dtype=lib.float64).new_tensor([VALUE]),
    lambda lib: lib.tensor([[VALUE, 2 * VALUE]], dtype=lib.float64),
], ids=["tensor-list", "tensor-scalar", "as_tensor", "new_tensor", "nested"])
def test_float64_tensors_from_python_floats_keep_float64_precision(torch, build):
    ours, theirs = build(corenn), build(torch)
    assert ours.dtype == corenn.float64
    np.testing.assert_array_equal(ours.numpy(), theirs.numpy())


@pytest.mark.torch
def test_other_dtypes_convert_as_pytorch_does(torch):
    for values, name in (([1.7, -2.5], "int64"), ([1, 2], "float32"), ([0, 3], "bool"), ([1.1], "float16")):
        ours = corenn.tensor(values, dtype=getattr(corenn, name))
        theirs = torch.tensor(values, dtype=getattr(torch, name))
        np.testing.assert_array_equal(ours.numpy(), theirs.numpy())
        assert str(ours.dtype).split(".")[-1] == name
