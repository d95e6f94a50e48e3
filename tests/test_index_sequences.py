"""Indexing with any sequence PyTorch accepts: a Python range, nested lists and tuples, on read and on write."""
from __future__ import annotations

import numpy as np
import pytest

import corenn


@pytest.mark.torch
@pytest.mark.parametrize("make_index", [
    lambda n: range(n),
    lambda n: range(n - 1, -1, -2),
    lambda n: (range(n), [0, 2, 1, 0][:n]),
    lambda n: ([0, 1], (2, 3)),
    lambda n: (slice(None), range(2)),
    lambda n: range(0),
], ids=["range", "range-step", "range-and-list", "list-and-tuple", "slice-and-range", "empty-range"])
def test_reading_with_sequences_matches_pytorch_with_gradients(torch, make_index):
    values = np.arange(12.0).reshape(3, 4)
    index = make_index(3)
    x = corenn.tensor(values, requires_grad=True)
    t = torch.tensor(values, requires_grad=True)
    out, expected = x[index], t[index]
    np.testing.assert_array_equal(out.detach().numpy(), expected.detach().numpy())
    if expected.numel():
        out.sum().backward()
        expected.sum().backward()
        np.testing.assert_array_equal(x.grad.numpy(), t.grad.numpy())


@pytest.mark.torch
def test_writing_with_a_range_matches_pytorch(torch):
    # The classic: pick one entry per row, x[range(n), labels] = value.
    labels = [2, 0, 3]
    x, t = corenn.zeros(3, 4), torch.zeros(3, 4)
    x[range(3), corenn.tensor(labels)] = 1.0
    t[range(3), torch.tensor(labels)] = 1.0
    np.testing.assert_array_equal(x.numpy(), t.numpy())


def test_a_float_sequence_is_refused_by_name():
    with pytest.raises(IndexError, match="tensors used as indices must be long, int, byte or bool tensors"):
        corenn.zeros(3)[[0.5, 1.0]]
