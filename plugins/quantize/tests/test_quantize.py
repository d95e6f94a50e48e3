"""corenn-quantize against torch.ao.quantization on the same data and weights, plus workflows and round trips."""
from __future__ import annotations

import copy

import numpy as np
import pytest

import corenn
import corenn_quantize
from corenn import nn
from corenn_quantize import kernels

torch = pytest.importorskip("torch")
import torch.ao.quantization as TQ  # noqa: E402

import corenn.ao.quantization as Q  # noqa: E402
from quantize_digits_training import accuracy, load_digits_split, train  # noqa: E402

pytestmark = [pytest.mark.filterwarnings("ignore::DeprecationWarning"),
              pytest.mark.filterwarnings("ignore:.*deprecated:UserWarning"),
              pytest.mark.filterwarnings("ignore:must run observer:UserWarning")]
RNG = np.random.default_rng(0)


def batches():
    return [RNG.standard_normal((32, 16)).astype(np.float32) * s + o for s, o in ((1, 0), (3, 1), (0.5, -2))]


def test_the_plugin_is_active_and_registers_names_and_paths():
    record = corenn.plugins.records["quantize"]
    assert record.status == "active", record.reason
    assert corenn.qint8 is corenn_quantize.qint8 and repr(corenn.quint8) == "corenn.quint8"
    assert Q is corenn_quantize
    assert "qint32" in record.names


def test_the_lazy_name_table_matches_the_modules_and_quantize_is_the_function():
    import importlib
    for module_name, names in corenn_quantize._LAZY_NAMES.items():
        module = importlib.import_module(f"corenn_quantize.{module_name}")
        if module_name in ("modules", "quantize_fx"):  # the package re-exports a few of these
            assert set(names) <= set(module.__all__), module_name
        else:
            assert sorted(names) == sorted(module.__all__), module_name
        for name in names:
            assert getattr(corenn_quantize, name) is getattr(module, name)
    assert callable(Q.quantize) and Q.quantize.__name__ == "quantize"
    with pytest.raises(AttributeError, match="has no attribute 'no_such_name'"):
        Q.no_such_name


def test_import_corenn_imports_only_the_quantized_tensor():
    import subprocess
    import sys
    code = ("import sys, corenn; corenn.plugins.list_plugins(); "
            "print(sorted(m for m in sys.modules if m.startswith('corenn_quantize')))")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "['corenn_quantize', 'corenn_quantize.qtensor']"


def test_quantize_per_tensor_matches_torch_and_prints_like_it():
    x = RNG.standard_normal(100).astype(np.float32) * 3
    for dtype, tdtype, zp in ((corenn.quint8, torch.quint8, 10), (corenn.qint8, torch.qint8, -3),
                              (corenn.qint32, torch.qint32, 0)):
        q = corenn.quantize_per_tensor(corenn.from_numpy(x), 0.05, zp, dtype)
        t = torch.quantize_per_tensor(torch.from_numpy(x), 0.05, zp, tdtype)
        np.testing.assert_array_equal(q.int_repr().numpy(), t.int_repr().numpy())
        np.testing.assert_allclose(q.dequantize().numpy(), t.dequantize().numpy(), rtol=0, atol=1e-6)
        assert q.q_scale() == t.q_scale() and q.q_zero_point() == t.q_zero_point()
    small = torch.tensor([-1.0, 0.0, 1.0, 2.0])
    q = corenn.quantize_per_tensor(corenn.tensor([-1.0, 0.0, 1.0, 2.0]), 0.1, 10, corenn.quint8)
    assert repr(q) == repr(torch.quantize_per_tensor(small, 0.1, 10, torch.quint8)).replace("torch.", "corenn.")


def test_quantize_per_channel_matches_torch_and_prints_like_it():
    x = RNG.standard_normal((4, 6)).astype(np.float32)
    scales, zps = np.array([0.1, 0.02, 0.05, 0.03]), np.array([0, 3, -2, 1])
    q = corenn.quantize_per_channel(corenn.from_numpy(x), corenn.from_numpy(scales), corenn.from_numpy(zps), 0,
                                    corenn.qint8)
    t = torch.quantize_per_channel(torch.from_numpy(x), torch.from_numpy(scales), torch.from_numpy(zps), 0,
                                   torch.qint8)
    np.testing.assert_array_equal(q.int_repr().numpy(), t.int_repr().numpy())
    assert q.q_per_channel_axis() == 0
    np.testing.assert_array_equal(q.q_per_channel_scales().numpy(), t.q_per_channel_scales().numpy())
    np.testing.assert_array_equal(q.q_per_channel_zero_points().numpy(), t.q_per_channel_zero_points().numpy())
    x2 = corenn.tensor([[-1.0, 0.0], [1.0, 2.0]])
    q2 = corenn.quantize_per_channel(x2, corenn.tensor([0.1, 0.01]), corenn.tensor([10, 0]), 0, corenn.quint8)
    t2 = torch.quantize_per_channel(torch.tensor([[-1.0, 0.0], [1.0, 2.0]]), torch.tensor([0.1, 0.01]),
                                    torch.tensor([10, 0]), 0, torch.quint8)
    assert repr(q2) == repr(t2).replace("torch.", "corenn.")


def test_bad_arguments_raise_pytorchs_exception_types_naming_the_argument():
    x = corenn.ones(3)
    with pytest.raises(TypeError, match="quantize_per_tensor\\(\\): argument 'dtype'"):
        corenn.quantize_per_tensor(x, 0.1, 0, corenn.float32)
    with pytest.raises(RuntimeError, match="zero_point 300 is outside"):
        corenn.quantize_per_tensor(x, 0.1, 300, corenn.quint8)
    with pytest.raises(RuntimeError, match="q_per_channel_scales"):
        corenn.quantize_per_tensor(x, 0.1, 0, corenn.quint8).q_per_channel_scales()
    with pytest.raises(TypeError, match="prepare_fx\\(\\): argument 'model'"):
        Q.prepare_fx(lambda x: x, Q.QConfigMapping(), (x,))


OBSERVERS = [
    ("MinMaxObserver", {}, {}),
    ("MinMaxObserver", {"dtype": "qint8", "qscheme": "per_tensor_symmetric"}, None),
    ("MinMaxObserver", {"reduce_range": True}, None),
    ("MinMaxObserver", {"quant_min": 0, "quant_max": 127}, None),
    ("MovingAverageMinMaxObserver", {"averaging_constant": 0.1}, None),
    ("PerChannelMinMaxObserver", {"ch_axis": 1}, None),
    ("PerChannelMinMaxObserver", {"ch_axis": 0, "dtype": "qint8", "qscheme": "per_channel_symmetric"}, None),
    ("MovingAveragePerChannelMinMaxObserver", {"ch_axis": 1}, None),
    ("HistogramObserver", {}, None),
    ("HistogramObserver", {"reduce_range": True}, None),
    ("HistogramObserver", {"dtype": "qint8", "qscheme": "per_tensor_symmetric", "bins": 512}, None),
]


@pytest.mark.parametrize("name, kwargs, _", OBSERVERS)
def test_observers_choose_torchs_scale_and_zero_point(name, kwargs, _):
    ours = {k: getattr(corenn, v) if k in ("dtype", "qscheme") else v for k, v in kwargs.items()}
    theirs = {k: getattr(torch, v) if k in ("dtype", "qscheme") else v for k, v in kwargs.items()}
    observer, oracle = getattr(Q, name)(**ours), getattr(TQ, name)(**theirs)
    for data in batches():
        observer(corenn.from_numpy(data))
        oracle(torch.from_numpy(data))
    scale, zero_point = observer.calculate_qparams()
    oracle_scale, oracle_zero_point = oracle.calculate_qparams()
    np.testing.assert_array_equal(scale.numpy(), oracle_scale.numpy())
    np.testing.assert_array_equal(zero_point.numpy(), oracle_zero_point.numpy())


def test_default_qconfigs_carry_torchs_settings():
    for backend in ("x86", "fbgemm", "qnnpack"):
        ours, theirs = Q.get_default_qconfig(backend), TQ.get_default_qconfig(backend)
        a, b = ours.activation(), theirs.activation()
        w, v = ours.weight(), theirs.weight()
        assert (a.quant_min, a.quant_max, type(a).__name__) == (b.quant_min, b.quant_max, type(b).__name__)
        assert (w.quant_min, w.quant_max, type(w).__name__, repr(w.qscheme)) == \
            (v.quant_min, v.quant_max, type(v).__name__, repr(v.qscheme).replace("torch.", "corenn."))
        qat, tqat = Q.get_default_qat_qconfig(backend).weight(), TQ.get_default_qat_qconfig(backend).weight()
        assert (qat.quant_min, qat.quant_max) == (tqat.quant_min, tqat.quant_max)
    assert Q.default_dynamic_qconfig.weight().dtype is corenn.qint8
    with pytest.raises(ValueError, match="backend 'arm'"):
        Q.get_default_qconfig("arm")


def test_fake_quantize_matches_torch_forward_and_straight_through_gradient():
    x = RNG.standard_normal((8, 5)).astype(np.float32) * 2
    fq, tfq = Q.FakeQuantize(), TQ.FakeQuantize()
    xc, xt = corenn.tensor(x, requires_grad=True), torch.tensor(x, requires_grad=True)
    yc, yt = fq(xc), tfq(xt)
    np.testing.assert_allclose(yc.detach().numpy(), yt.detach().numpy(), atol=1e-6)
    yc.sum().backward()
    yt.sum().backward()
    np.testing.assert_array_equal(xc.grad.numpy(), xt.grad.numpy())


def torch_linear(weight, bias):
    linear = torch.nn.Linear(weight.shape[1], weight.shape[0])
    with torch.no_grad():
        linear.weight.copy_(torch.from_numpy(weight))
        linear.bias.copy_(torch.from_numpy(bias))
    return linear


@pytest.mark.parametrize("backend", ["numba", "numpy"])
def test_dynamic_linear_within_one_quantization_step_of_torch(backend, monkeypatch):
    if backend == "numpy":
        monkeypatch.setattr(kernels, "_numba_kernels", False)
    elif kernels.backend() != "numba":
        pytest.skip("numba is not installed")
    weight = RNG.standard_normal((24, 40)).astype(np.float32) * 0.2
    bias = RNG.standard_normal(24).astype(np.float32)
    x = RNG.standard_normal((7, 40)).astype(np.float32)
    model = nn.Sequential(nn.Linear(40, 24), nn.ReLU(), nn.Sequential(nn.Linear(24, 24)))
    model[0].weight = nn.Parameter(corenn.from_numpy(weight))
    model[0].bias = nn.Parameter(corenn.from_numpy(bias))
    quantized = Q.quantize_dynamic(model, {nn.Linear}, dtype=corenn.qint8)
    assert isinstance(quantized[2][0], Q.dynamic.Linear) and isinstance(model[0], nn.Linear)  # recursive, a copy
    oracle = TQ.quantize_dynamic(torch.nn.Sequential(torch_linear(weight, bias)),
                                 {torch.nn.Linear: TQ.per_channel_dynamic_qconfig}, dtype=torch.qint8)
    ours = quantized[0](corenn.from_numpy(x)).numpy()
    theirs = oracle(torch.from_numpy(x)).detach().numpy()
    # One step of the output: the activation step times the weights' L1 norm is the worst case; use the
    # product of the two scales times sqrt(K), far below it, and check it holds.
    x_step = (max(x.max(), 0) - min(x.min(), 0)) / 127
    step = x_step * np.abs(weight).max() / 127 * 40
    assert np.abs(ours - theirs).max() <= step
    np.testing.assert_allclose(ours, x @ weight.T + bias, atol=5 * step)


def test_quantize_dynamic_refuses_what_it_does_not_provide():
    with pytest.raises(NotImplementedError, match="Conv2d is not supported .*LSTM"):
        Q.quantize_dynamic(nn.Sequential(nn.Conv2d(1, 1, 1)), {nn.Conv2d})
    with pytest.raises(NotImplementedError, match="dtype corenn.quint8"):
        Q.quantize_dynamic(nn.Linear(2, 2), {nn.Linear}, dtype=corenn.quint8)


def test_int8_gemm_kernels_accumulate_exactly():
    xq = RNG.integers(0, 256, (9, 1500)).astype(np.uint8)
    wq = RNG.integers(-128, 128, (13, 1500)).astype(np.int8)
    exact = xq.astype(np.int64) @ wq.T.astype(np.int64)
    ones = np.ones(13, np.float32)
    got = kernels.linear_dequantized(xq, 0, kernels.LinearWeights(wq), ones, None)
    np.testing.assert_array_equal(got.astype(np.int64), exact)
    np.testing.assert_array_equal(kernels._accumulate_numpy(xq, wq.T.astype(np.float32)), exact)
    with pytest.raises(RuntimeError, match="expected uint8"):
        kernels.linear_dequantized(xq.astype(np.int8), 0, kernels.LinearWeights(wq), ones, None)


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.quant = Q.QuantStub()
        self.conv = nn.Conv2d(1, 6, 3, padding=1)
        self.bn = nn.BatchNorm2d(6)
        self.relu = nn.ReLU()
        self.pool = nn.MaxPool2d(2)
        self.flatten = nn.Flatten()
        self.fc1 = nn.Linear(6 * 4 * 4, 32)
        self.relu1 = nn.ReLU()
        self.fc2 = nn.Linear(32, 10)
        self.dequant = Q.DeQuantStub()

    def forward(self, x):
        x = self.pool(self.relu(self.bn(self.conv(self.quant(x)))))
        return self.dequant(self.fc2(self.relu1(self.fc1(self.flatten(x)))))


FUSE = [["conv", "bn", "relu"], ["fc1", "relu1"]]


@pytest.fixture(scope="module")
def digits():
    return load_digits_split()


@pytest.fixture(scope="module")
def trained(digits):
    corenn.manual_seed(0)
    return train(Net(), *digits[:2])


def test_static_quantization_on_digits_within_one_point_of_fp32(trained, digits):
    train_x, _, test_x, test_y = digits
    fused = Q.fuse_modules(trained, FUSE)
    fused.qconfig = Q.get_default_qconfig("x86")
    prepared = Q.prepare(fused)
    prepared(corenn.from_numpy(train_x[:512]))
    quantized = Q.convert(prepared)
    assert isinstance(quantized.conv, Q.quantized.ConvReLU2d) and isinstance(quantized.fc1, Q.quantized.LinearReLU)
    fp32, int8 = accuracy(trained, test_x, test_y), accuracy(quantized, test_x, test_y)
    assert fp32 > 0.9
    assert int8 >= fp32 - 0.01, (fp32, int8)


def test_qat_on_digits_within_one_point_of_fp32(trained, digits):
    train_x, train_y, test_x, test_y = digits
    fp32 = accuracy(trained, test_x, test_y)
    fused = Q.fuse_modules(copy.deepcopy(trained).eval(), FUSE).train()
    fused.qconfig = Q.get_default_qat_qconfig("x86")
    prepared = Q.prepare_qat(fused)
    assert isinstance(prepared.fc1, Q.qat.LinearReLU)
    train(prepared, train_x, train_y, epochs=2)
    quantized = Q.convert(prepared.eval())
    assert accuracy(quantized, test_x, test_y) >= fp32 - 0.01


def fused_torch_and_ours():
    corenn.manual_seed(3)
    conv = nn.Conv2d(2, 4, 3, padding=1)
    fc = nn.Linear(4 * 5 * 5, 6)
    tconv, tfc = torch.nn.Conv2d(2, 4, 3, padding=1), torch.nn.Linear(100, 6)
    with torch.no_grad():
        for ours, theirs in ((conv, tconv), (fc, tfc)):
            theirs.weight.copy_(torch.from_numpy(ours.weight.detach().numpy()))
            theirs.bias.copy_(torch.from_numpy(ours.bias.detach().numpy()))
    ours = nn.Sequential(Q.QuantStub(), conv, nn.ReLU(), nn.Flatten(), fc, Q.DeQuantStub()).eval()
    theirs = torch.nn.Sequential(TQ.QuantStub(), tconv, torch.nn.ReLU(), torch.nn.Flatten(), tfc,
                                 TQ.DeQuantStub()).eval()
    return ours, theirs


def test_static_fused_conv_relu_and_linear_within_one_step_of_torch():
    ours, theirs = fused_torch_and_ours()
    ours = Q.fuse_modules(ours, ["1", "2"])
    theirs = TQ.fuse_modules(theirs, ["1", "2"])
    ours.qconfig, theirs.qconfig = Q.get_default_qconfig("x86"), TQ.get_default_qconfig("x86")
    ours, theirs = Q.prepare(ours), TQ.prepare(theirs)
    x = RNG.standard_normal((16, 2, 5, 5)).astype(np.float32)
    ours(corenn.from_numpy(x))
    theirs(torch.from_numpy(x))
    ours, theirs = Q.convert(ours), TQ.convert(theirs)
    assert ours[4].scale.item() == pytest.approx(theirs[4].scale, rel=1e-6)
    got, expected = ours(corenn.from_numpy(x)).numpy(), theirs(torch.from_numpy(x)).numpy()
    assert np.abs(got - expected).max() <= 1.01 * theirs[4].scale


def test_float_functional_add_and_cat_quantize():
    class Adder(nn.Module):
        def __init__(self):
            super().__init__()
            self.quant, self.dequant = Q.QuantStub(), Q.DeQuantStub()
            self.add, self.cat = Q.FloatFunctional(), Q.FloatFunctional()

        def forward(self, x):
            x = self.quant(x)
            return self.dequant(self.cat.cat([self.add.add(x, x), x], dim=1))
    model = Adder().eval()
    model.qconfig = Q.default_qconfig
    prepared = Q.prepare(model)
    x = corenn.from_numpy(RNG.standard_normal((4, 3)).astype(np.float32))
    prepared(x)
    quantized = Q.convert(prepared)
    assert isinstance(quantized.add, Q.QFunctional)
    expected = np.concatenate([2 * x.numpy(), x.numpy()], axis=1)
    assert np.abs(quantized(x).numpy() - expected).max() < 4 * quantized.cat.scale.item()


def converted_net(trained):
    fused = Q.fuse_modules(trained, FUSE)
    fused.qconfig = Q.get_default_qconfig("x86")
    return Q.prepare(fused)


def test_saved_quantized_model_loads_into_a_fresh_converted_model_and_is_4x_smaller(trained, digits, tmp_path):
    prepared = converted_net(trained)
    prepared(corenn.from_numpy(digits[0][:256]))
    quantized = Q.convert(prepared)
    corenn.save(quantized.state_dict(), tmp_path / "int8.safetensors")
    fresh = Q.convert(converted_net(Net().eval()))
    fresh.load_state_dict(corenn.load(tmp_path / "int8.safetensors"))
    x = corenn.from_numpy(digits[2][:50])
    np.testing.assert_array_equal(fresh(x).numpy(), quantized(x).numpy())
    np.testing.assert_array_equal(copy.deepcopy(quantized)(x).numpy(), quantized(x).numpy())

    big = nn.Sequential(nn.Linear(256, 256), nn.ReLU(), nn.Linear(256, 256))
    dynamic = Q.quantize_dynamic(big, {nn.Linear})
    corenn.save(big.state_dict(), tmp_path / "fp32.safetensors")
    corenn.save(dynamic.state_dict(), tmp_path / "dyn.safetensors")
    ratio = (tmp_path / "fp32.safetensors").stat().st_size / (tmp_path / "dyn.safetensors").stat().st_size
    assert ratio > 3.5
    fresh_dynamic = Q.quantize_dynamic(nn.Sequential(nn.Linear(256, 256), nn.ReLU(), nn.Linear(256, 256)))
    fresh_dynamic.load_state_dict(corenn.load(tmp_path / "dyn.safetensors"))
    y = corenn.randn(3, 256)
    np.testing.assert_array_equal(fresh_dynamic(y).numpy(), dynamic(y).numpy())
    np.testing.assert_array_equal(copy.deepcopy(dynamic)(y).numpy(), dynamic(y).numpy())


def test_prepared_model_with_per_channel_observers_saves_and_loads(tmp_path):
    observer = Q.PerChannelMinMaxObserver(ch_axis=0)
    observer(corenn.randn(5, 3))
    holder = nn.Sequential(observer)
    corenn.save(holder.state_dict(), tmp_path / "obs.safetensors")
    fresh = nn.Sequential(Q.PerChannelMinMaxObserver(ch_axis=0))
    fresh.load_state_dict(corenn.load(tmp_path / "obs.safetensors"))
    np.testing.assert_array_equal(fresh[0].calculate_qparams()[0].numpy(), observer.calculate_qparams()[0].numpy())
