"""corenn.save / load with file objects and numpy arrays, and the safe-globals functions PyTorch programs call."""
from __future__ import annotations

import collections
import io
import warnings

import numpy as np
import pytest

import corenn
from corenn import serialization


def test_numpy_array_round_trips_through_a_file_object_as_an_array():
    buffer = io.BytesIO()
    corenn.save(np.zeros((2, 2)), buffer)  # the call the issue names
    buffer.seek(0)
    loaded = corenn.load(buffer)
    assert type(loaded) is np.ndarray and loaded.dtype == np.float64 and loaded.shape == (2, 2)
    loaded[0, 0] = 1.0  # an ordinary writable array


def test_nested_arrays_and_tensors_keep_types_values_and_identity(tmp_path):
    shared = np.arange(6, dtype=np.int32).reshape(2, 3)
    obj = {"weights": corenn.tensor([1.0, 2.0]), "mean": np.array([0.5, 0.25], dtype=np.float32),
           "pair": [shared, shared], "scalar_array": np.array(3.0), "flags": np.array([True, False]),
           "strided": np.arange(10.0)[::3]}
    path = tmp_path / "mixed.safetensors"
    with open(path, "wb") as f:
        corenn.save(obj, f)
    with open(path, "rb") as f:
        loaded = corenn.load(f)
    assert isinstance(loaded["weights"], corenn.Tensor)
    for key in ("mean", "scalar_array", "flags", "strided"):
        assert type(loaded[key]) is np.ndarray and loaded[key].dtype == obj[key].dtype
        np.testing.assert_array_equal(loaded[key], obj[key])
    assert loaded["pair"][0] is loaded["pair"][1]
    np.testing.assert_array_equal(loaded["pair"][0], shared)


def test_array_of_an_unsupported_dtype_raises_type_error_naming_the_place(tmp_path):
    with pytest.raises(TypeError, match=r"numpy array of dtype object at obj\['x'\]"):
        corenn.save({"x": np.array([object()])}, tmp_path / "bad.safetensors")
    assert not (tmp_path / "bad.safetensors").exists()


def test_file_written_to_a_file_object_opens_with_safetensors(tmp_path):
    import safetensors.numpy
    path = tmp_path / "arr.safetensors"
    with open(path, "wb") as f:
        corenn.save({"a": np.ones(3, dtype=np.float32)}, f)
    np.testing.assert_array_equal(safetensors.numpy.load_file(str(path))["a"], np.ones(3, dtype=np.float32))


def test_safe_globals_exist_change_nothing_and_warn_once_naming_them(monkeypatch):
    monkeypatch.setattr(serialization, "_safe_globals", [])
    monkeypatch.setattr(serialization, "_safe_globals_warned", False)
    with pytest.warns(UserWarning, match=r"collections.OrderedDict.*never unpickles"):
        corenn.serialization.add_safe_globals([collections.OrderedDict])
    assert corenn.serialization.get_safe_globals() == [collections.OrderedDict]
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the second use is silent
        with corenn.serialization.safe_globals([np.dtype]):
            assert corenn.serialization.get_safe_globals() == [collections.OrderedDict, np.dtype]
            buffer = io.BytesIO()
            corenn.save({"x": corenn.ones(2)}, buffer)
            buffer.seek(0)
            assert corenn.load(buffer, weights_only=True)["x"].tolist() == [1.0, 1.0]
    assert corenn.serialization.get_safe_globals() == [collections.OrderedDict]
    corenn.serialization.clear_safe_globals()
    assert corenn.serialization.get_safe_globals() == []
    with pytest.raises(TypeError, match="add_safe_globals"):
        corenn.serialization.add_safe_globals(collections.OrderedDict)


def test_same_names_exist_in_torch():
    torch = pytest.importorskip("torch")
    for name in ("add_safe_globals", "safe_globals", "get_safe_globals", "clear_safe_globals"):
        assert hasattr(torch.serialization, name) and hasattr(corenn.serialization, name)
