"""Checkpoint interoperability with PyTorch through safetensors (skipped without torch)."""
from __future__ import annotations

import collections
import os
import pickle

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="PyTorch is not installed (pip install torch==2.13.0)")
safetensors_torch = pytest.importorskip("safetensors.torch")

import corenn  # noqa: E402
from corenn.serialization import CheckpointError  # noqa: E402

pytestmark = pytest.mark.torch

DTYPE_NAMES = ["float16", "float32", "float64", "int8", "int16", "int32", "int64", "uint8", "bool"]


def torch_tensor_of(name: str) -> "torch.Tensor":
    """A small tensor of torch dtype ``name`` with values covering the type's range."""
    dtype = getattr(torch, name)
    if dtype is torch.bool:
        return torch.tensor([[True, False], [False, True]])
    if dtype.is_floating_point:
        info = torch.finfo(dtype)
        return torch.tensor([[0.0, -0.0, 1.5], [info.max, info.tiny, float("inf")]], dtype=dtype)
    info = torch.iinfo(dtype)
    return torch.tensor([info.min, 0, 1, info.max], dtype=dtype)


def to_corenn(value):
    """torch tensors -> corenn tensors inside nested containers (values copied bit-exactly)."""
    if isinstance(value, torch.Tensor):
        return corenn.from_numpy(value.detach().numpy().copy())
    if isinstance(value, dict):
        return type(value)((k, to_corenn(v)) for k, v in value.items())
    if isinstance(value, (list, tuple)):
        return type(value)(to_corenn(v) for v in value)
    return value


def assert_same_tensor(corenn_tensor, torch_tensor, name=""):
    assert str(corenn_tensor.dtype).split(".")[-1] == str(torch_tensor.dtype).split(".")[-1], name
    assert tuple(corenn_tensor.shape) == tuple(torch_tensor.shape), name
    assert corenn_tensor.detach().numpy().tobytes() == torch_tensor.detach().numpy().tobytes(), name


def test_pytorch_state_dict_saved_with_safetensors_loads_in_corenn(tmp_path):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.BatchNorm1d(3), torch.nn.Linear(3, 2))
    state = model.state_dict()  # includes the int64 buffer num_batches_tracked
    state.update({f"extra.{name}": torch_tensor_of(name) for name in DTYPE_NAMES})
    path = tmp_path / "torch.safetensors"
    safetensors_torch.save_file(state, path, metadata={"format": "pt"})

    loaded = corenn.load(path)

    assert type(loaded) is dict
    assert list(loaded) == list(safetensors_torch.load_file(path))  # file order
    assert set(loaded) == set(state)
    for name, tensor in state.items():
        assert_same_tensor(loaded[name], tensor, name)
        assert not loaded[name].requires_grad


def test_corenn_checkpoint_loads_with_safetensors_torch(tmp_path):
    state = collections.OrderedDict((f"layer.{name}", to_corenn(torch_tensor_of(name))) for name in DTYPE_NAMES)
    state["layer.transposed"] = corenn.from_numpy(np.arange(6, dtype=np.float32).reshape(2, 3).T)
    path = tmp_path / "corenn.safetensors"
    corenn.save(state, path)

    from_torch = safetensors_torch.load_file(path)

    assert set(from_torch) == set(state)
    for name, tensor in state.items():
        assert_same_tensor(tensor, from_torch[name], name)


def test_optimizer_state_of_pytorch_round_trips_through_corenn(tmp_path):
    torch.manual_seed(0)
    model = torch.nn.Linear(3, 2)
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01, betas=(0.8, 0.95))
    model(torch.randn(5, 3)).sum().backward()
    optimizer.step()
    torch_state = optimizer.state_dict()
    path = tmp_path / "optim.safetensors"

    corenn.save(to_corenn(torch_state), path)
    loaded = corenn.load(path)

    assert list(loaded["state"]) == list(torch_state["state"]) == [0, 1]
    assert loaded["param_groups"][0]["betas"] == (0.8, 0.95)
    assert loaded["param_groups"][0]["params"] == [0, 1]
    group = {k: v for k, v in torch_state["param_groups"][0].items()}
    assert loaded["param_groups"][0] == group  # every hyper-parameter, None and bools included
    for index, entry in torch_state["state"].items():
        assert list(loaded["state"][index]) == list(entry)
        for key, value in entry.items():
            assert_same_tensor(loaded["state"][index][key], value, f"state[{index}][{key!r}]")
    # And PyTorch can read the moments back under readable names.
    moments = safetensors_torch.load_file(path)
    assert torch.equal(moments["state.0.exp_avg"], torch_state["state"][0]["exp_avg"])


@pytest.mark.parametrize("zipfile_format", [True, False], ids=["zip", "legacy-pickle"])
def test_torch_save_files_are_refused_without_unpickling(tmp_path, zipfile_format):
    canary = tmp_path / "canary"

    class Payload:
        def __reduce__(self):
            return (open, (str(canary), "w"))

    path = tmp_path / "model.pt"
    torch.save({"weight": torch.ones(2), "payload": Payload()}, path,
               _use_new_zipfile_serialization=zipfile_format, pickle_module=pickle)
    with pytest.raises(CheckpointError, match="zip archive" if zipfile_format else "pickle"):
        corenn.load(path)
    assert not canary.exists()
    assert os.listdir(tmp_path) == ["model.pt"]


def test_bfloat16_weights_load_as_bfloat16(tmp_path):
    path = tmp_path / "bf16.safetensors"
    safetensors_torch.save_file({"w": torch.ones(2, dtype=torch.bfloat16)}, path)
    assert corenn.load(path)["w"].dtype is corenn.bfloat16


def test_weights_of_a_dtype_corenn_lacks_get_a_clear_error(tmp_path):
    path = tmp_path / "u32.safetensors"
    safetensors_torch.save_file({"w": torch.ones(2, dtype=torch.uint32)}, path)
    with pytest.raises(CheckpointError, match=r"tensor 'w' has dtype U32, which corenn does not support"):
        corenn.load(path)


def test_torch_linear_weights_load_into_corenn_linear(tmp_path):
    nn = getattr(corenn, "nn", None)
    linear, module = getattr(nn, "Linear", None), getattr(nn, "Module", None)
    if not (isinstance(linear, type) and isinstance(module, type) and issubclass(linear, module)):
        pytest.skip("corenn.nn.Linear (a corenn.nn.Module) does not exist yet")
    torch.manual_seed(0)
    torch_linear = torch.nn.Linear(4, 3)
    path = tmp_path / "linear.safetensors"
    safetensors_torch.save_file(torch_linear.state_dict(), path)

    corenn_linear = nn.Linear(4, 3)
    corenn_linear.load_state_dict(corenn.load(path))

    x = torch.randn(5, 4)
    expected = torch_linear(x).detach().numpy()
    actual = corenn_linear(corenn.from_numpy(x.numpy())).detach().numpy()
    np.testing.assert_allclose(actual, expected, rtol=1e-6, atol=1e-6)
