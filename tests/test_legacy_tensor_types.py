"""corenn.FloatTensor, LongTensor, ...: PyTorch's legacy constructors and isinstance checks."""
from __future__ import annotations

import numpy as np
import pytest

import corenn

NAMES = ["FloatTensor", "DoubleTensor", "HalfTensor", "LongTensor", "IntTensor", "ShortTensor", "CharTensor",
         "ByteTensor", "BoolTensor"]


@pytest.mark.parametrize("name", NAMES)
def test_constructors_and_isinstance_match_torch(torch, name):
    ours, theirs = getattr(corenn, name), getattr(torch, name)
    data = [1, 0, 1]
    made, expected = ours(data), theirs(data)
    assert str(made.dtype).split(".")[1] == str(expected.dtype).split(".")[1]
    assert made.tolist() == expected.tolist()
    assert tuple(ours(2, 3).shape) == tuple(theirs(2, 3).shape) == (2, 3)
    assert tuple(ours().shape) == tuple(theirs().shape) == (0,)
    assert tuple(ours(corenn.Size([4])).shape) == (4,)
    assert ours(np.array(data)).tolist() == theirs(np.array(data)).tolist()
    other_dtype = corenn.float32 if name == "DoubleTensor" else corenn.float64
    assert isinstance(made, ours) and not isinstance(made.to(other_dtype), ours)
    assert not isinstance([1], ours)
    assert repr(ours) == repr(theirs).replace("torch", "corenn")


def test_tensor_type_converts_to_a_legacy_type():
    t = corenn.tensor([1.5, 2.5])
    assert t.type() == "corenn.FloatTensor"
    assert t.type(corenn.LongTensor).tolist() == [1, 2]
    assert t.type("corenn.DoubleTensor").dtype == corenn.float64


def test_bad_arguments_raise_type_errors_naming_the_type():
    with pytest.raises(TypeError, match="LongTensor"):
        corenn.LongTensor(1, "a")
    with pytest.raises(TypeError, match="expected corenn.int64"):
        corenn.LongTensor(corenn.zeros(2))
    with pytest.raises(RuntimeError, match="legacy constructor expects device type: cpu"):
        corenn.FloatTensor([1.0], device="cuda")
