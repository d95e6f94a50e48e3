"""FX graph mode quantization against torch.ao.quantization.quantize_fx on the same weights and calibration data."""
from __future__ import annotations

import numpy as np
import pytest

import corenn
import corenn.fx
from corenn import nn

torch = pytest.importorskip("torch")
import torch.ao.quantization as TQ  # noqa: E402
import torch.ao.quantization.quantize_fx as TQFX  # noqa: E402

import corenn.ao.quantization as Q  # noqa: E402
from corenn.ao.quantization.quantize_fx import convert_fx, prepare_fx, prepare_qat_fx  # noqa: E402

pytestmark = [pytest.mark.filterwarnings("ignore::DeprecationWarning"),
              pytest.mark.filterwarnings("ignore::UserWarning"),
              pytest.mark.filterwarnings("ignore::FutureWarning")]
F = nn.functional


def small_cnn_classes(lib, functional):
    """The same small CNN (conv-bn-relu, a residual add + F.relu, cat, max pool, flatten, linear) in either library."""

    class Block(lib.nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = lib.nn.Conv2d(4, 4, 3, padding=1)
            self.bn = lib.nn.BatchNorm2d(4)

        def forward(self, x):
            return functional.relu(self.bn(self.conv(x)) + x)

    class SmallCNN(lib.nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = lib.nn.Conv2d(1, 4, 3, padding=1)
            self.bn = lib.nn.BatchNorm2d(4)
            self.relu = lib.nn.ReLU()
            self.block = Block()
            self.side = lib.nn.Conv2d(1, 4, 3, padding=1)
            self.pool = lib.nn.MaxPool2d(2)
            self.fc = lib.nn.Linear(8 * 4 * 4, 10)

        def forward(self, x):
            y = self.block(self.relu(self.bn(self.conv(x))))
            z = functional.relu(self.side(x))
            joined = self.pool(lib.cat([y, z], 1))
            return self.fc(lib.flatten(joined, 1))

    return SmallCNN


def same_models():
    corenn.manual_seed(0)
    ours = small_cnn_classes(corenn, F)()
    theirs = small_cnn_classes(torch, torch.nn.functional)()
    rng = np.random.default_rng(0)
    state = {}
    for name, value in ours.state_dict().items():
        array = value.numpy()
        if name.endswith("running_var"):
            array = rng.uniform(0.5, 2.0, array.shape).astype(np.float32)
        elif name.endswith("running_mean") or (".bn." in name or name.startswith("bn.")) and array.dtype.kind == "f":
            array = rng.uniform(-0.3, 0.3, array.shape).astype(np.float32) + (name.endswith("weight"))
        state[name] = array
    ours.load_state_dict({k: corenn.from_numpy(np.array(v)) for k, v in state.items()})
    theirs.load_state_dict({k: torch.from_numpy(np.array(v)) for k, v in state.items()})
    return ours.eval(), theirs.eval()


def calibration():
    rng = np.random.default_rng(1)
    return [rng.standard_normal((16, 1, 8, 8)).astype(np.float32) * s for s in (1.0, 1.5, 0.7)]


def prepared_pair(ours_mapping, theirs_mapping):
    ours, theirs = same_models()
    example = calibration()[0]
    prepared = prepare_fx(ours, ours_mapping, (corenn.from_numpy(example),))
    tprepared = TQFX.prepare_fx(theirs, theirs_mapping, (torch.from_numpy(example),))
    with corenn.no_grad(), torch.no_grad():
        for batch in calibration():
            prepared(corenn.from_numpy(batch))
            tprepared(torch.from_numpy(batch))
    return ours, prepared, tprepared


def test_prepared_model_computes_fp32_and_needs_no_stubs():
    ours, prepared, _ = prepared_pair(Q.get_default_qconfig_mapping("x86"), TQ.get_default_qconfig_mapping("x86"))
    x = corenn.from_numpy(calibration()[2])
    with corenn.no_grad():
        np.testing.assert_allclose(prepared(x).numpy(), ours(x).numpy(), rtol=1e-5, atol=1e-5)
    assert isinstance(prepared, corenn.fx.GraphModule)
    observers = [n for n in prepared.graph.nodes if n.op == "call_module" and "activation_post_process" in n.target]
    assert observers and all(isinstance(prepared.get_submodule(n.target), Q.HistogramObserver) for n in observers)
    assert not any(isinstance(m, (Q.QuantStub, Q.DeQuantStub)) for m in prepared.modules())
    # conv-bn-relu fused into one module; bn folded away; F.relu after the add observed after the relu
    assert isinstance(prepared.conv, Q.intrinsic.ConvReLU2d) and isinstance(prepared.side, Q.intrinsic.ConvReLU2d)
    assert not any(isinstance(m, nn.BatchNorm2d) for m in prepared.modules())


def within_steps_of_torch(ours_mapping, theirs_mapping, steps=2.0):
    _, prepared, tprepared = prepared_pair(ours_mapping, theirs_mapping)
    converted, tconverted = convert_fx(prepared), TQFX.convert_fx(tprepared)
    x = calibration()[1]
    with corenn.no_grad(), torch.no_grad():
        got, expected = converted(corenn.from_numpy(x)).numpy(), tconverted(torch.from_numpy(x)).numpy()
    return converted, tconverted, got, expected


def test_converted_small_cnn_within_two_quantization_steps_of_torch():
    converted, tconverted, got, expected = within_steps_of_torch(Q.get_default_qconfig_mapping("x86"),
                                                                 TQ.get_default_qconfig_mapping("x86"))
    step = float(tconverted.fc.scale)
    assert converted.fc.scale.item() == pytest.approx(step, rel=1e-5)
    assert np.abs(got - expected).max() <= 2.01 * step, (np.abs(got - expected).max(), step)
    # the same quantize / dequantize boundaries as PyTorch: one quantize at the input, one dequantize at the output
    ours = [n.target for n in converted.graph.nodes]
    theirs = [n.target for n in tconverted.graph.nodes]
    assert ours.count("dequantize") == theirs.count("dequantize") == 1
    assert sum(isinstance(converted.get_submodule(n.target), Q.quantized.Quantize)
               for n in converted.graph.nodes if n.op == "call_module") == 1
    assert sum(t is torch.quantize_per_tensor for t in theirs) == 1
    assert isinstance(converted.conv, Q.quantized.ConvReLU2d) and isinstance(converted.fc, Q.quantized.Linear)
    assert isinstance(converted.block.conv, Q.quantized.Conv2d)
    assert converted.quantized_add.operator_name == "add_relu" and converted.quantized_cat.operator_name == "cat"
