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
from quantize_digits_training import accuracy, load_digits_split, train  # noqa: E402

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


def test_qconfig_none_leaves_parts_in_float_as_torch_does():
    ours_mapping = Q.get_default_qconfig_mapping("x86").set_module_name("fc", None).set_object_type(
        nn.MaxPool2d, None)
    theirs_mapping = TQ.get_default_qconfig_mapping("x86").set_module_name("fc", None).set_object_type(
        torch.nn.MaxPool2d, None)
    converted, tconverted, got, expected = within_steps_of_torch(ours_mapping, theirs_mapping)
    assert type(converted.fc) is nn.Linear and type(converted.pool) is nn.MaxPool2d
    # torch keeps the max pool quantized (a "share qparams" op ignores its qconfig); here it runs in float on the
    # dequantized cat, so the outputs differ by the rounding of the cat (one step, through the float Linear)
    step = converted.quantized_cat.scale.item()
    amplification = np.abs(converted.fc.weight.detach().numpy()).sum(1).max()
    assert np.abs(got - expected).max() <= 2.01 * step * amplification
    # the float max pool gets the dequantized cat; flatten and Linear then stay in float
    pool = next(n for n in converted.graph.nodes if n.op == "call_module" and n.target == "pool")
    assert pool.args[0].op == "call_method" and pool.args[0].target == "dequantize"
    assert [n.target for n in converted.graph.nodes if n.op == "call_method"] == ["dequantize"]


def test_qconfig_mapping_priorities_and_defaults():
    mapping = (Q.QConfigMapping().set_global(Q.default_qconfig).set_object_type(nn.Linear, Q.default_per_channel_qconfig)
               .set_module_name_regex(r"block\..*", None).set_module_name("block.conv", Q.default_qconfig))
    assert mapping.qconfig_for([nn.Conv2d], "conv") is Q.default_qconfig
    assert mapping.qconfig_for([nn.Linear], "fc") is Q.default_per_channel_qconfig
    assert mapping.qconfig_for([nn.Conv2d], "block.bn") is None
    assert mapping.qconfig_for([nn.Conv2d], "block.conv") is Q.default_qconfig
    assert Q.QConfigMapping.from_dict(mapping.to_dict()).to_dict() == mapping.to_dict()
    for backend in ("x86", "fbgemm", "qnnpack"):
        ours, theirs = Q.get_default_qconfig_mapping(backend), TQ.get_default_qconfig_mapping(backend)
        assert ours.global_qconfig.activation().reduce_range == theirs.global_qconfig.activation().reduce_range
        assert (ours.global_qconfig.weight().qscheme.per_channel
                == (theirs.global_qconfig.weight().qscheme == torch.per_channel_symmetric))
    assert isinstance(Q.get_default_qat_qconfig_mapping("x86").global_qconfig.activation(), Q.FakeQuantize)
    with pytest.raises(TypeError, match="prepare_fx\\(\\): argument 'qconfig_mapping'"):
        prepare_fx(nn.Linear(2, 2), 3, (corenn.ones(1, 2),))
    with pytest.raises(TypeError, match="prepare_fx\\(\\): argument 'example_inputs'"):
        prepare_fx(nn.Linear(2, 2), mapping, None)


def test_converted_state_dict_saves_and_loads_into_a_fresh_prepared_and_converted_model(tmp_path):
    _, prepared, _ = prepared_pair(Q.get_default_qconfig_mapping("x86"), TQ.get_default_qconfig_mapping("x86"))
    converted = convert_fx(prepared)
    path = tmp_path / "int8.safetensors"
    corenn.save(converted.state_dict(), str(path))
    fresh_model, _ = same_models()
    example = corenn.from_numpy(calibration()[0])
    fresh = convert_fx(prepare_fx(fresh_model, Q.get_default_qconfig_mapping("x86"), (example,)))
    fresh.load_state_dict(corenn.load(str(path)))
    x = corenn.from_numpy(calibration()[2])
    np.testing.assert_array_equal(fresh(x).numpy(), converted(x).numpy())
    import copy
    np.testing.assert_array_equal(copy.deepcopy(converted)(x).numpy(), converted(x).numpy())


def test_functional_linear_and_conv2d_are_quantized_like_torch():
    def make(lib, functional):
        class Functional(lib.nn.Module):
            def __init__(self):
                super().__init__()
                self.conv_weight = lib.nn.Parameter(lib.randn(3, 2, 3, 3) * 0.3)
                self.conv_bias = lib.nn.Parameter(lib.randn(3) * 0.1)
                self.weight = lib.nn.Parameter(lib.randn(5, 3 * 4 * 4) * 0.1)

            def forward(self, x):
                y = functional.relu(functional.conv2d(x, self.conv_weight, self.conv_bias, [1, 1], [1, 1], [1, 1], 1))
                return functional.linear(y.reshape(y.shape[0], -1), self.weight)
        return Functional()

    ours, theirs = make(corenn, F).eval(), make(torch, torch.nn.functional).eval()
    theirs.load_state_dict({k: torch.from_numpy(v.detach().numpy()) for k, v in ours.state_dict().items()})
    x = np.random.default_rng(3).standard_normal((8, 2, 4, 4)).astype(np.float32)
    prepared = prepare_fx(ours, Q.get_default_qconfig_mapping("x86"), (corenn.from_numpy(x),))
    tprepared = TQFX.prepare_fx(theirs, TQ.get_default_qconfig_mapping("x86"), (torch.from_numpy(x),))
    with corenn.no_grad(), torch.no_grad():
        prepared(corenn.from_numpy(x))
        tprepared(torch.from_numpy(x))
        converted, tconverted = convert_fx(prepared), TQFX.convert_fx(tprepared)
        got, expected = converted(corenn.from_numpy(x)).numpy(), tconverted(torch.from_numpy(x)).numpy()
    kinds = {type(m) for m in converted.modules()}
    assert Q.quantized.ConvReLU2d in kinds and Q.quantized.Linear in kinds  # F.conv2d + F.relu fused as in torch
    step = max(float(getattr(tconverted, name)) for name in dir(tconverted) if name.startswith("_scale_"))
    assert np.abs(got - expected).max() <= 2.01 * step


class DigitsNet(nn.Module):
    """The digits CNN of the eager tests, without stubs: FX finds the boundaries."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(1, 6, 3, padding=1)
        self.bn = nn.BatchNorm2d(6)
        self.pool = nn.MaxPool2d(2)
        self.fc1 = nn.Linear(6 * 4 * 4, 32)
        self.fc2 = nn.Linear(32, 10)

    def forward(self, x):
        x = self.pool(F.relu(self.bn(self.conv(x))))
        return self.fc2(F.relu(self.fc1(x.flatten(1))))


@pytest.fixture(scope="module")
def digits():
    return load_digits_split()


@pytest.fixture(scope="module")
def trained(digits):
    corenn.manual_seed(0)
    return train(DigitsNet(), *digits[:2])


def test_fx_static_quantization_on_digits_within_one_point_of_fp32(trained, digits):
    train_x, _, test_x, test_y = digits
    prepared = prepare_fx(trained, Q.get_default_qconfig_mapping("x86"), (corenn.from_numpy(train_x[:8]),))
    with corenn.no_grad():
        prepared(corenn.from_numpy(train_x[:512]))
    quantized = convert_fx(prepared)
    assert isinstance(quantized.fc1, Q.quantized.LinearReLU) and isinstance(quantized.conv, Q.quantized.ConvReLU2d)
    fp32, int8 = accuracy(trained, test_x, test_y), accuracy(quantized, test_x, test_y)
    assert fp32 > 0.9
    assert int8 >= fp32 - 0.01, (fp32, int8)


def test_fx_qat_on_digits_within_one_point_of_fp32(trained, digits):
    import copy
    train_x, train_y, test_x, test_y = digits
    fp32 = accuracy(trained, test_x, test_y)
    prepared = prepare_qat_fx(copy.deepcopy(trained).train(), Q.get_default_qat_qconfig_mapping("x86"),
                              (corenn.from_numpy(train_x[:8]),))
    assert isinstance(prepared.fc1, Q.qat.LinearReLU) and isinstance(prepared.conv, Q.qat.Conv2d)
    assert any(isinstance(m, Q.FakeQuantize) for m in prepared.modules())
    train(prepared, train_x, train_y, epochs=2)
    quantized = convert_fx(prepared.eval())
    assert isinstance(quantized.fc1, Q.quantized.LinearReLU)
    assert accuracy(quantized, test_x, test_y) >= fp32 - 0.01
    with pytest.raises(AssertionError, match="prepare_qat_fx: the model must be in training mode"):
        prepare_qat_fx(trained.eval(), Q.get_default_qat_qconfig_mapping("x86"), (corenn.from_numpy(train_x[:8]),))


def test_mul_indexing_and_float_ops_between_quantized_ops():
    class Mixed(nn.Module):
        def __init__(self):
            super().__init__()
            self.a, self.b = nn.Linear(6, 6), nn.Linear(6, 6)

        def forward(self, x):
            product = self.a(x) * self.b(x)
            return corenn.sigmoid(product[:, :4]) + product.size(0)   # sigmoid computes in float

    model = Mixed().eval()
    x = corenn.randn(64, 6)
    prepared = prepare_fx(model, Q.get_default_qconfig_mapping("qnnpack"), (x,))
    with corenn.no_grad():
        prepared(x)
        converted = convert_fx(prepared)
        expected, got = model(x).numpy(), converted(x).numpy()
    assert converted.quantized_mul.operator_name == "mul"
    assert [n.target for n in converted.graph.nodes if n.op == "call_method"].count("dequantize") == 1
    assert np.abs(got - expected).max() <= 0.25 * 2 * converted.quantized_mul.scale.item()  # sigmoid' <= 1/4


@pytest.mark.parametrize("call, option", [
    (lambda m, x: prepare_fx(m, Q.get_default_qconfig_mapping(), (x,), backend_config={}), "backend_config"),
    (lambda m, x: prepare_fx(m, Q.get_default_qconfig_mapping(), (x,), prepare_custom_config={}), "prepare_custom_config"),
    (lambda m, x: convert_fx(prepare_fx(m, Q.get_default_qconfig_mapping(), (x,)), convert_custom_config={}),
     "convert_custom_config"),
    (lambda m, x: Q.prepare(m, prepare_custom_config_dict={}), "prepare_custom_config_dict"),
])
def test_options_not_built_are_refused_by_name_not_ignored(call, option):
    model = nn.Sequential(nn.Linear(4, 3)).eval()
    with pytest.raises(NotImplementedError, match=f"{option} is not supported by corenn-quantize"):
        call(model, corenn.randn(2, 4))
