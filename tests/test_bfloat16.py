"""corenn.bfloat16 and the float8 dtypes (ml_dtypes): conversions, printing, promotion, arithmetic and
safetensors files, against PyTorch's CPU kernels."""
from __future__ import annotations

import io
import subprocess
import sys

import numpy as np
import pytest

import corenn
import corenn.nn.functional as F

torch = pytest.importorskip("torch")


def to_torch(t):
    return torch.from_numpy(t.float().numpy()).to(getattr(torch, t.dtype.name))


def assert_same(ours, theirs, atol=0.0):
    assert ours.dtype.name == str(theirs.dtype).split(".")[-1]
    np.testing.assert_allclose(ours.float().numpy(), theirs.float().numpy(), atol=atol, rtol=0)


def test_import_corenn_does_not_load_ml_dtypes():
    code = "import sys, corenn; assert 'ml_dtypes' not in sys.modules; corenn.bfloat16; print('ml_dtypes' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "True"


def test_conversions_round_as_torch():
    values = torch.randn(1000, generator=torch.Generator().manual_seed(0)) * 100
    ours = corenn.tensor(values.numpy()).to(corenn.bfloat16)
    assert ours.dtype is corenn.bfloat16 and ours.element_size() == 2
    assert_same(ours, values.bfloat16())
    assert_same(corenn.tensor(values.numpy()).bfloat16().float(), values.bfloat16().float())
    assert_same(corenn.tensor([1, 2, 300], dtype=corenn.bfloat16).long(),
                torch.tensor([1, 2, 300], dtype=torch.bfloat16).long())
    assert corenn.bfloat16.is_floating_point and corenn.bfloat16.itemsize == 2
    assert corenn.tensor([1.0], dtype=corenn.bfloat16).is_floating_point()


def test_printing_matches_torch_but_for_the_module_name():
    t = corenn.tensor([1.5391, -0.2930, -2.1719], dtype=corenn.bfloat16)
    expected = repr(torch.tensor([1.5391, -0.2930, -2.1719], dtype=torch.bfloat16)).replace("torch.", "corenn.")
    assert repr(t) == expected


@pytest.mark.parametrize("a, b", [("bfloat16", "float16"), ("bfloat16", "float32"), ("bfloat16", "float64"),
                                  ("bfloat16", "int64"), ("bfloat16", "bool"), ("uint8", "bfloat16"),
                                  ("bfloat16", "bfloat16")])
def test_promotion_matches_torch(a, b):
    ours = corenn.promote_types(getattr(corenn, a), getattr(corenn, b))
    assert ours.name == str(torch.promote_types(getattr(torch, a), getattr(torch, b))).split(".")[-1]


def test_float8_promotion_with_other_floats_is_refused_as_in_torch():
    with pytest.raises(RuntimeError, match="Float8"):
        torch.promote_types(torch.float8_e4m3fn, torch.float32)
    with pytest.raises(RuntimeError, match="Float8"):
        corenn.promote_types(corenn.float8_e4m3fn, corenn.float32)
    with pytest.raises(RuntimeError, match="Float8"):
        corenn.promote_types(corenn.int32, corenn.float8_e5m2)


OPS = {
    "add": lambda m, a, b: a + b, "sub": lambda m, a, b: a - b, "mul": lambda m, a, b: a * b,
    "div": lambda m, a, b: a / b, "mul_scalar": lambda m, a, b: a * 2.5, "add_float32": lambda m, a, b: a + b.float(),
    "add_int": lambda m, a, b: a + m.arange(a.shape[-1]), "matmul": lambda m, a, b: a @ b.T,
    "linear": lambda m, a, b: m.nn.functional.linear(a, b, b[0, :16]), "sum": lambda m, a, b: a.sum(),
    "sum_dim": lambda m, a, b: a.sum(1), "mean": lambda m, a, b: a.mean(0), "exp": lambda m, a, b: a.exp(),
    "tanh": lambda m, a, b: a.tanh(), "relu": lambda m, a, b: m.relu(a), "sqrt": lambda m, a, b: a.abs().sqrt(),
    "pow": lambda m, a, b: a ** 2, "max": lambda m, a, b: a.max(), "neg": lambda m, a, b: -a,
}


@pytest.mark.parametrize("name", sorted(OPS))
def test_primitive_ops_compute_in_float32_and_round_once_as_torch(name):
    generator = torch.Generator().manual_seed(1)
    a, b = torch.randn(16, 32, generator=generator), torch.randn(16, 32, generator=generator)
    theirs = OPS[name](torch, a.bfloat16(), b.bfloat16())
    ours = OPS[name](corenn, corenn.tensor(a.numpy()).bfloat16(), corenn.tensor(b.numpy()).bfloat16())
    # Each primitive rounds once from float32, as PyTorch's CPU kernels do; matmul and the sums differ
    # only where float32 summation order differs (BLAS vs PyTorch's kernels): one bfloat16 ulp at most.
    tolerance = 0.0 if name not in ("matmul", "linear", "sum", "sum_dim", "mean") else \
        float(theirs.float().abs().max()) * 2 ** -7
    assert_same(ours, theirs, atol=tolerance)


@pytest.mark.parametrize("name", ["softmax", "log_softmax", "layer_norm", "gelu", "sigmoid", "cross_entropy"])
def test_composite_ops_stay_bfloat16_within_bfloat16_tolerance(name):
    functions = {"softmax": lambda F, x: F.softmax(x, 1), "log_softmax": lambda F, x: F.log_softmax(x, 1),
                 "layer_norm": lambda F, x: F.layer_norm(x, (32,)), "gelu": lambda F, x: F.gelu(x),
                 "sigmoid": lambda F, x: F.sigmoid(x),
                 "cross_entropy": lambda F, x: F.cross_entropy(x, (x.float().abs() * 0).long()[:, 0])}
    x = torch.randn(8, 32, generator=torch.Generator().manual_seed(2))
    theirs = functions[name](torch.nn.functional, x.bfloat16())
    ours = functions[name](F, corenn.tensor(x.numpy()).bfloat16())
    # Composites round between their steps, PyTorch's fused kernels only at the end: a few ulps.
    assert_same(ours, theirs, atol=float(theirs.float().abs().max()) * 2 ** -5 + 1e-2)


def test_backward_of_a_bfloat16_linear_layer_gives_bfloat16_gradients_close_to_torch():
    x = torch.randn(4, 8, generator=torch.Generator().manual_seed(3))
    layer_t = torch.nn.Linear(8, 3).bfloat16()
    layer = corenn.nn.Linear(8, 3)
    layer.load_state_dict({k: corenn.tensor(v.float().numpy()) for k, v in layer_t.state_dict().items()})
    layer = layer.to(corenn.bfloat16)
    layer(corenn.tensor(x.numpy()).bfloat16()).sum().backward()
    layer_t(x.bfloat16()).sum().backward()
    assert layer.weight.grad.dtype is corenn.bfloat16
    assert_same(layer.weight.grad, layer_t.weight.grad, atol=0.05)
    assert_same(layer.bias.grad, layer_t.bias.grad, atol=0.05)


def test_safetensors_bf16_round_trip_and_exchange_with_torch(tmp_path):
    from safetensors.torch import load_file, save_file
    values = torch.randn(3, 5, generator=torch.Generator().manual_seed(4)).bfloat16()
    ours = corenn.tensor(values.float().numpy()).bfloat16()
    path = tmp_path / "ours.safetensors"
    corenn.save({"w": ours, "f8": corenn.tensor([0.5, 2.0]).to(corenn.float8_e4m3fn)}, path)
    back = corenn.load(path)
    assert back["w"].dtype is corenn.bfloat16 and back["f8"].dtype is corenn.float8_e4m3fn
    assert_same(back["w"], values)
    read_by_torch = load_file(str(path))  # PyTorch reads corenn's BF16 entries
    assert read_by_torch["w"].dtype is torch.bfloat16 and torch.equal(read_by_torch["w"], values)
    assert read_by_torch["f8"].dtype is torch.float8_e4m3fn
    save_file({"w": values}, str(tmp_path / "theirs.safetensors"))
    from_torch = corenn.load(tmp_path / "theirs.safetensors")
    assert_same(from_torch["w"], values)
    buffer = io.BytesIO()
    corenn.save(ours, buffer)
    buffer.seek(0)
    assert corenn.load(buffer).dtype is corenn.bfloat16
