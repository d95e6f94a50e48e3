"""corenn.testing.assert_close against torch.testing.assert_close: the same verdicts and the same messages."""
from __future__ import annotations

import math

import numpy as np
import pytest

import corenn
from corenn.testing import assert_close

# (make the pair with a library, keyword arguments): each is judged by both libraries.
CASES = {
    "close-float32": (lambda lib: (lib.tensor([1.0, 2.0]), lib.tensor([1.0, 2.0 + 1e-6])), {}),
    "far-float32": (lambda lib: (lib.tensor([1.0, 2.0, 3.0]), lib.tensor([1.0, 2.5, 3.0])), {}),
    "far-2d": (lambda lib: (lib.tensor([[1.0, 2.0], [3.0, 4.0]]), lib.tensor([[1.0, 2.0], [3.0, 4.5]])), {}),
    "float64-tighter": (lambda lib: (lib.tensor([1.0], dtype=lib.float64), lib.tensor([1.0 + 1e-6], dtype=lib.float64)), {}),
    "dtype": (lambda lib: (lib.tensor([1.0, 2.0]), lib.tensor([1.0, 2.0], dtype=lib.float64)), {}),
    "dtype-unchecked": (lambda lib: (lib.tensor([1.0, 2.0]), lib.tensor([1.0, 2.0], dtype=lib.float64)),
                        {"check_dtype": False}),
    "shape": (lambda lib: (lib.tensor([1.0, 2.0]), lib.tensor([1.0, 2.0, 3.0])), {}),
    "integers": (lambda lib: (lib.tensor([1, 2]), lib.tensor([1, 3])), {}),
    "scalars": (lambda lib: (1.0, 1.5), {}),
    "zero-dim": (lambda lib: (lib.tensor(1.0), lib.tensor(2.0)), {}),
    "nan": (lambda lib: (lib.tensor([math.nan]), lib.tensor([math.nan])), {}),
    "nan-equal": (lambda lib: (lib.tensor([math.nan]), lib.tensor([math.nan])), {"equal_nan": True}),
    "sequence": (lambda lib: ([lib.tensor(1.0)], [lib.tensor(2.0)]), {}),
    "mapping": (lambda lib: ({"a": lib.tensor([1.0])}, {"a": lib.tensor([2.0])}), {}),
    "explicit-tolerances": (lambda lib: (lib.tensor([1.0]), lib.tensor([1.05])), {"rtol": 0.1, "atol": 0.0}),
    "custom-message": (lambda lib: (lib.tensor([1.0]), lib.tensor([1.1])), {"msg": "custom"}),
}


def _verdict(check, pair, kwargs):
    try:
        check(*pair, **kwargs)
    except Exception as error:  # noqa: BLE001  the type and text are what is compared
        return type(error).__name__, str(error).replace("torch.", "corenn.")
    return None


@pytest.mark.torch
@pytest.mark.parametrize("case", sorted(CASES))
def test_same_verdict_and_message_as_pytorch(torch, case):
    make, kwargs = CASES[case]
    assert _verdict(assert_close, make(corenn), kwargs) == _verdict(torch.testing.assert_close, make(torch), kwargs)


def test_one_tolerance_without_the_other_is_refused():
    with pytest.raises(ValueError, match="Both 'rtol' and 'atol' must be either specified or omitted, but got no atol"):
        assert_close(corenn.tensor([1.0]), corenn.tensor([1.0]), rtol=1e-3)


def test_a_tensor_and_a_number_are_not_compared():
    with pytest.raises(TypeError, match="No comparison pair was able to handle inputs"):
        assert_close(corenn.tensor([1.0]), 1.0)


def test_float_inputs_at_the_edge_of_float32_tolerance():
    x = np.float32(1000.0)
    assert_close(corenn.tensor([x]), corenn.tensor([x + np.float32(0.0006)]))  # 1e-5 + 1.3e-6 * 1000 allowed
    with pytest.raises(AssertionError, match="Mismatched elements: 1 / 1"):
        assert_close(corenn.tensor([x]), corenn.tensor([x + np.float32(0.002)]))
