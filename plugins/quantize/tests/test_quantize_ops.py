"""Quantized average pooling, LayerNorm, Embedding and EmbeddingBag against PyTorch's, on the same weights and data."""
from __future__ import annotations

import warnings

import numpy as np
import pytest

import corenn
from corenn import nn
import corenn.nn.functional as F
import corenn_quantize as Q
from corenn_quantize.quantize_fx import convert_fx, prepare_fx

torch = pytest.importorskip("torch")
warnings.filterwarnings("ignore", message=".*quantiz.*")
TQ = torch.ao.quantization
import torch.ao.quantization.quantize_fx  # noqa: E402  (an attribute only once imported)
TF = torch.nn.functional
RNG = np.random.default_rng(31)


def both_quantized(x, scale, zero_point):
    ours = corenn.quantize_per_tensor(corenn.from_numpy(x), scale, zero_point, corenn.quint8)
    theirs = torch.quantize_per_tensor(torch.from_numpy(x), scale, zero_point, torch.quint8)
    np.testing.assert_array_equal(ours.int_repr().numpy(), theirs.int_repr().numpy())
    return ours, theirs


def assert_same_quantized(ours, theirs):
    assert isinstance(ours, Q.QTensor) and theirs.is_quantized
    np.testing.assert_array_equal(ours.int_repr().numpy(), theirs.int_repr().numpy())
    assert (ours.q_scale(), ours.q_zero_point()) == (theirs.q_scale(), theirs.q_zero_point())


# -- average pooling ------------------------------------------------------------------------------------------------

def test_quantized_avg_pool2d_equals_torch_bit_for_bit():
    for _ in range(150):
        height, width = (int(v) for v in RNG.integers(3, 10, 2))
        kernel = int(RNG.integers(1, 4))
        args = (kernel, int(RNG.integers(1, 3)), int(RNG.integers(0, kernel // 2 + 1)), bool(RNG.integers(0, 2)),
                bool(RNG.integers(0, 2)), None if RNG.integers(0, 3) else int(RNG.integers(1, 6)))
        x = RNG.standard_normal((2, 3, height, width)).astype(np.float32)
        ours, theirs = both_quantized(x, float(RNG.choice([0.05, 0.013, 0.2])), int(RNG.integers(0, 200)))
        assert_same_quantized(Q.quantized.functional.avg_pool2d(ours, *args), TF.avg_pool2d(theirs, *args))
    ours, theirs = both_quantized(RNG.standard_normal((3, 5, 7)).astype(np.float32), 0.1, 7)  # unbatched
    assert_same_quantized(Q.quantized.AvgPool2d((2, 3), stride=(1, 2), padding=1)(ours),
                          torch.nn.AvgPool2d((2, 3), stride=(1, 2), padding=1)(theirs))


def test_quantized_adaptive_avg_pool2d_equals_torch_bit_for_bit():
    for _ in range(150):
        height, width = (int(v) for v in RNG.integers(2, 10, 2))
        size = (int(RNG.integers(1, height + 2)), int(RNG.integers(1, width + 2)))
        x = RNG.standard_normal((2, 2, height, width)).astype(np.float32)
        ours, theirs = both_quantized(x, 0.05, int(RNG.integers(0, 200)))
        assert_same_quantized(Q.quantized.functional.adaptive_avg_pool2d(ours, size),
                              TF.adaptive_avg_pool2d(theirs, size))
    ours, theirs = both_quantized(RNG.standard_normal((1, 2, 6, 5)).astype(np.float32), 0.05, 3)
    assert_same_quantized(Q.quantized.AdaptiveAvgPool2d((None, 2))(ours), torch.nn.AdaptiveAvgPool2d((None, 2))(theirs))


def test_quantized_pooling_checks_its_input():
    x = corenn.randn(1, 1, 4, 4)
    with pytest.raises(ValueError, match="must be quantized"):
        Q.quantized.functional.avg_pool2d(x, 2)
    with pytest.raises(ValueError, match="must be quantized"):
        Q.quantized.functional.adaptive_avg_pool2d(x, 2)
    q = corenn.quantize_per_tensor(x, 0.1, 0, corenn.quint8)
    with pytest.raises(RuntimeError, match="pad should be"):  # the float kernel's argument checks, and messages
        Q.quantized.functional.avg_pool2d(q, 2, padding=2)
    np.testing.assert_array_equal(Q.quantized.AvgPool2d(2)(x).numpy(), nn.AvgPool2d(2)(x).numpy())  # float passes


class PoolNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.quant = Q.QuantStub()
        self.conv = nn.Conv2d(2, 4, 3, padding=1)
        self.pool = nn.AvgPool2d(2, ceil_mode=True)
        self.adaptive = nn.AdaptiveAvgPool2d((2, 3))
        self.norm = nn.LayerNorm([4, 2, 3])
        self.dequant = Q.DeQuantStub()

    def forward(self, x):
        return self.dequant(self.norm(self.adaptive(self.pool(self.conv(self.quant(x))))))


class TorchPoolNet(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.quant = TQ.QuantStub()
        self.conv = torch.nn.Conv2d(2, 4, 3, padding=1)
        self.pool = torch.nn.AvgPool2d(2, ceil_mode=True)
        self.adaptive = torch.nn.AdaptiveAvgPool2d((2, 3))
        self.norm = torch.nn.LayerNorm([4, 2, 3])
        self.dequant = TQ.DeQuantStub()

    def forward(self, x):
        return self.dequant(self.norm(self.adaptive(self.pool(self.conv(self.quant(x))))))


def copy_weights(ours, theirs):
    with torch.no_grad():
        for name, parameter in ours.named_parameters():
            theirs.get_parameter(name).copy_(torch.from_numpy(parameter.detach().numpy()))


def test_eager_static_quantization_of_pooling_and_layer_norm_matches_torch():
    corenn.manual_seed(3)
    ours, theirs = PoolNet().eval(), TorchPoolNet().eval()
    with corenn.no_grad():
        ours.norm.weight.copy_(corenn.rand(4, 2, 3) + 0.5)
        ours.norm.bias.copy_(corenn.randn(4, 2, 3) * 0.1)
    copy_weights(ours, theirs)
    ours.qconfig, theirs.qconfig = Q.get_default_qconfig("x86"), TQ.get_default_qconfig("x86")
    prepared, tprepared = Q.prepare(ours), TQ.prepare(theirs)
    calibration = [RNG.standard_normal((8, 2, 7, 5)).astype(np.float32) for _ in range(4)]
    with corenn.no_grad(), torch.no_grad():
        for batch in calibration:
            prepared(corenn.from_numpy(batch))
            tprepared(torch.from_numpy(batch))
    converted, tconverted = Q.convert(prepared), TQ.convert(tprepared)
    assert isinstance(converted.pool, Q.quantized.AvgPool2d) and isinstance(converted.norm, Q.quantized.LayerNorm)
    # the histogram observer sees the convolution's outputs, PyTorch's to float rounding: scales agree as closely
    assert converted.norm.zero_point.item() == tconverted.norm.zero_point.item()
    np.testing.assert_allclose(converted.norm.scale.item(), tconverted.norm.scale.item(), rtol=1e-6)
    x = RNG.standard_normal((6, 2, 7, 5)).astype(np.float32)
    step = converted.norm.scale.item()
    with corenn.no_grad(), torch.no_grad():
        got, want = converted(corenn.from_numpy(x)).numpy(), tconverted(torch.from_numpy(x)).numpy()
    # within one output step (a rounding boundary in the conv or the norm may fall differently)
    assert np.abs(got - want).max() <= step * 1.01
    assert np.mean(np.isclose(got, want, rtol=1e-5, atol=1e-6)) > 0.9


def test_quantized_layer_norm_matches_torch_within_one_step():
    x = (RNG.standard_normal((5, 3, 16)) * 2 + 0.5).astype(np.float32)
    weight = (RNG.random(16) + 0.5).astype(np.float32)
    bias = (RNG.standard_normal(16) * 0.2).astype(np.float32)
    ours_in, theirs_in = both_quantized(x, 0.04, 70)
    layer = Q.quantized.LayerNorm([16], nn.Parameter(corenn.from_numpy(weight)),
                                  nn.Parameter(corenn.from_numpy(bias)), 0.03, 120)
    tlayer = torch.ao.nn.quantized.LayerNorm([16], torch.nn.Parameter(torch.from_numpy(weight)),
                                             torch.nn.Parameter(torch.from_numpy(bias)), 0.03, 120)
    got, want = layer(ours_in), tlayer(theirs_in)
    assert (got.q_scale(), got.q_zero_point()) == (want.q_scale(), want.q_zero_point())
    difference = np.abs(got.int_repr().numpy().astype(int) - want.int_repr().numpy().astype(int))
    assert difference.max() <= 1 and difference.mean() < 0.05
    plain = Q.quantized.LayerNorm([3, 16], None, None, 0.03, 120, elementwise_affine=False)
    tplain = torch.ao.nn.quantized.LayerNorm([3, 16], None, None, 0.03, 120, elementwise_affine=False)
    difference = np.abs(plain(ours_in).int_repr().numpy().astype(int) - tplain(theirs_in).int_repr().numpy())
    assert difference.max() <= 1
    with pytest.raises(RuntimeError, match="quantized input"):
        layer(corenn.from_numpy(x))


class FxNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(2, 4, 3)
        self.adaptive = nn.AdaptiveAvgPool2d(2)
        self.norm = nn.LayerNorm(16)
        self.fc = nn.Linear(16, 3)

    def forward(self, x):
        y = F.avg_pool2d(self.conv(x), 2, stride=1, padding=1, count_include_pad=False)
        y = F.adaptive_avg_pool2d(y, (3, 3))
        y = self.adaptive(y)
        return self.fc(self.norm(corenn.flatten(y, 1)))


class TorchFxNet(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(2, 4, 3)
        self.adaptive = torch.nn.AdaptiveAvgPool2d(2)
        self.norm = torch.nn.LayerNorm(16)
        self.fc = torch.nn.Linear(16, 3)

    def forward(self, x):
        y = TF.avg_pool2d(self.conv(x), 2, stride=1, padding=1, count_include_pad=False)
        y = TF.adaptive_avg_pool2d(y, (3, 3))
        y = self.adaptive(y)
        return self.fc(self.norm(torch.flatten(y, 1)))


def test_fx_quantizes_pooling_and_layer_norm_as_torch_does():
    corenn.manual_seed(5)
    ours, theirs = FxNet().eval(), TorchFxNet().eval()
    copy_weights(ours, theirs)
    example = RNG.standard_normal((2, 2, 8, 8)).astype(np.float32)
    prepared = prepare_fx(ours, Q.get_default_qconfig_mapping("x86"), (corenn.from_numpy(example),))
    tprepared = torch.ao.quantization.quantize_fx.prepare_fx(theirs, TQ.get_default_qconfig_mapping("x86"),
                                                             (torch.from_numpy(example),))
    with corenn.no_grad(), torch.no_grad():
        for _ in range(4):
            batch = RNG.standard_normal((8, 2, 8, 8)).astype(np.float32)
            prepared(corenn.from_numpy(batch))
            tprepared(torch.from_numpy(batch))
    converted = convert_fx(prepared)
    tconverted = torch.ao.quantization.quantize_fx.convert_fx(tprepared)
    code = converted.code
    assert "quantized_avg_pool2d" in code and "quantized_adaptive_avg_pool2d" in code
    assert isinstance(converted.norm, Q.quantized.LayerNorm) and isinstance(converted.adaptive,
                                                                            Q.quantized.AdaptiveAvgPool2d)
    assert code.count(".dequantize()") == 1  # everything up to the output stays quantized
    x = RNG.standard_normal((4, 2, 8, 8)).astype(np.float32)
    with corenn.no_grad(), torch.no_grad():
        got, want = converted(corenn.from_numpy(x)).numpy(), tconverted(torch.from_numpy(x)).numpy()
    assert np.abs(got - want).max() <= 2 * converted.fc.scale.item()


# -- embeddings -----------------------------------------------------------------------------------------------------

def embedding_pair(bag: bool, **kwargs):
    weight = (RNG.standard_normal((20, 6)) * RNG.random((20, 1)) * 3).astype(np.float32)
    if bag:
        ours = nn.EmbeddingBag(20, 6, _weight=corenn.from_numpy(weight), **kwargs)
        theirs = torch.nn.EmbeddingBag(20, 6, _weight=torch.from_numpy(weight), **kwargs)
    else:
        ours = nn.Embedding(20, 6, _weight=corenn.from_numpy(weight), **kwargs)
        theirs = torch.nn.Embedding(20, 6, _weight=torch.from_numpy(weight), **kwargs)
    return ours, theirs


def convert_both(ours, theirs):
    ours.qconfig, theirs.qconfig = Q.float_qparams_weight_only_qconfig, TQ.float_qparams_weight_only_qconfig
    wrapper, twrapper = nn.Sequential(ours), torch.nn.Sequential(theirs)
    return Q.convert(Q.prepare(wrapper))[0], TQ.convert(TQ.prepare(twrapper))[0]


def assert_same_weight(quantized, tquantized):
    weight, tweight = quantized.weight(), tquantized.weight()
    assert weight.qscheme() is corenn.per_channel_affine_float_qparams
    np.testing.assert_array_equal(weight.int_repr().numpy(), tweight.int_repr().numpy())
    np.testing.assert_array_equal(weight.q_per_channel_scales().numpy(), tweight.q_per_channel_scales().numpy())
    np.testing.assert_array_equal(weight.q_per_channel_zero_points().numpy(),
                                  tweight.q_per_channel_zero_points().numpy())
    np.testing.assert_array_equal(weight.dequantize().numpy(), tweight.dequantize().numpy())


def test_float_qparams_observer_and_quantization_equal_torch():
    x = (RNG.standard_normal((9, 5)) * 2 + 1).astype(np.float32)
    observer, tobserver = Q.float_qparams_weight_only_qconfig.weight(), TQ.float_qparams_weight_only_qconfig.weight()
    observer(corenn.from_numpy(x))
    tobserver(torch.from_numpy(x))
    (scales, zero_points), (tscales, tzero_points) = observer.calculate_qparams(), tobserver.calculate_qparams()
    np.testing.assert_array_equal(scales.numpy(), tscales.numpy())
    np.testing.assert_array_equal(zero_points.numpy(), tzero_points.numpy())
    assert zero_points.dtype == corenn.float32
    q = corenn.quantize_per_channel(corenn.from_numpy(x), scales, zero_points, 0, corenn.quint8)
    tq = torch.quantize_per_channel(torch.from_numpy(x), tscales, tzero_points, 0, torch.quint8)
    np.testing.assert_array_equal(q.int_repr().numpy(), tq.int_repr().numpy())
    np.testing.assert_array_equal(q.dequantize().numpy(), tq.dequantize().numpy())
    assert "per_channel_affine_float_qparams" in repr(q)


def test_quantized_embedding_matches_torch():
    ours, theirs = embedding_pair(bag=False)
    quantized, tquantized = convert_both(ours, theirs)
    assert isinstance(quantized, Q.quantized.Embedding)
    assert_same_weight(quantized, tquantized)
    indices = RNG.integers(0, 20, (4, 7))
    got = quantized(corenn.from_numpy(indices)).numpy()
    want = tquantized(torch.from_numpy(indices)).numpy()
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)
    assert got.shape == (4, 7, 6)
    step = quantized.weight().q_per_channel_scales().numpy().max()
    np.testing.assert_allclose(got, ours(corenn.from_numpy(indices)).detach().numpy(), atol=step)
    with pytest.raises(IndexError, match="index out of range"):
        quantized(corenn.tensor([20]))


@pytest.mark.parametrize("offsets, include_last_offset", [(None, False), ([0, 3, 3, 8], False), ([0, 2, 9], True)])
def test_quantized_embedding_bag_sums_as_torch(offsets, include_last_offset):
    ours, theirs = embedding_pair(bag=True, mode="sum", include_last_offset=include_last_offset)
    quantized, tquantized = convert_both(ours, theirs)
    assert_same_weight(quantized, tquantized)
    indices = RNG.integers(0, 20, (3, 3) if offsets is None else (9,))
    weights = RNG.random(indices.shape).astype(np.float32)
    for per_sample in (None, weights):
        arguments = [corenn.from_numpy(indices), None if offsets is None else corenn.tensor(offsets),
                     None if per_sample is None else corenn.from_numpy(per_sample)]
        targuments = [torch.from_numpy(indices), None if offsets is None else torch.tensor(offsets),
                      None if per_sample is None else torch.from_numpy(per_sample)]
        np.testing.assert_allclose(quantized(*arguments).numpy(), tquantized(*targuments).numpy(), rtol=1e-5,
                                   atol=1e-5)


def test_quantized_embedding_bag_mean_and_max_reduce_the_dequantized_rows():
    # PyTorch's quantized EmbeddingBag sums whatever its mode; this one computes the mode it is given
    # (checked against PyTorch's float EmbeddingBag over the same dequantized weight).
    for mode in ("mean", "max"):
        ours, theirs = embedding_pair(bag=True, mode=mode)
        quantized, _ = convert_both(ours, theirs)
        dequantized = torch.from_numpy(quantized.weight().dequantize().numpy())
        indices, offsets = RNG.integers(0, 20, (10,)), [0, 4, 4, 7]
        want = TF.embedding_bag(torch.from_numpy(indices), dequantized, torch.tensor(offsets), mode=mode)
        got = quantized(corenn.from_numpy(indices), corenn.tensor(offsets))
        np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-6, atol=1e-6)


def test_embeddings_quantize_dynamically_save_and_refuse_other_qconfigs(tmp_path):
    model = nn.Sequential(nn.Embedding(20, 6), nn.EmbeddingBag(20, 6, mode="sum"))
    quantized = Q.quantize_dynamic(model, dtype=corenn.quint8)
    tmodel = torch.nn.Sequential(torch.nn.Embedding(20, 6), torch.nn.EmbeddingBag(20, 6, mode="sum"))
    copy_weights(model, tmodel)
    tquantized = TQ.quantize_dynamic(tmodel, dtype=torch.quint8)
    for index in (0, 1):
        assert_same_weight(quantized[index], tquantized[index])
    path = tmp_path / "embeddings.safetensors"
    corenn.save(quantized.state_dict(), str(path))
    fresh = Q.quantize_dynamic(nn.Sequential(nn.Embedding(20, 6), nn.EmbeddingBag(20, 6, mode="sum")),
                               {nn.Embedding: Q.float_qparams_weight_only_qconfig,
                                nn.EmbeddingBag: Q.float_qparams_weight_only_qconfig})
    fresh.load_state_dict(corenn.load(str(path)))
    indices = corenn.tensor([[1, 5, 19]])
    np.testing.assert_array_equal(fresh[0](indices).numpy(), quantized[0](indices).numpy())
    np.testing.assert_array_equal(fresh[1](indices).numpy(), quantized[1](indices).numpy())
    with pytest.raises(AssertionError, match="float_qparams_weight_only_qconfig"):
        Q.quantize_dynamic(nn.Sequential(nn.Embedding(4, 2)), {nn.Embedding}, dtype=corenn.qint8)
    with pytest.raises(NotImplementedError, match="dtype corenn.quint8"):
        Q.quantize_dynamic(nn.Sequential(nn.Linear(4, 2)), {nn.Linear}, dtype=corenn.quint8)
    with pytest.raises(NotImplementedError, match="max_norm"):
        Q.quantized.Embedding.from_float(nn.Embedding(4, 2, max_norm=1.0), Q.float_qparams_weight_only_qconfig.weight())


def test_fx_quantizes_embeddings_with_a_float_qparams_qconfig():
    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.embedding = nn.Embedding(20, 6)
            self.fc = nn.Linear(6, 2)

        def forward(self, indices):
            return self.fc(self.embedding(indices))

    model = Net().eval()
    indices = corenn.tensor([[1, 2, 3], [4, 5, 19]])
    mapping = Q.QConfigMapping().set_object_type(nn.Embedding, Q.float_qparams_weight_only_qconfig)
    converted = convert_fx(prepare_fx(model, mapping, (indices,)))
    assert isinstance(converted.embedding, Q.quantized.Embedding) and isinstance(converted.fc, nn.Linear)
    step = converted.embedding.weight().q_per_channel_scales().numpy().max()
    np.testing.assert_allclose(converted(indices).detach().numpy(), model(indices).detach().numpy(),
                               atol=step * float(np.abs(model.fc.weight.detach().numpy()).sum(1).max()))
    # the global x86 qconfig (int8 weights) leaves an embedding in float, as PyTorch's backend config does
    plain = convert_fx(prepare_fx(model, Q.get_default_qconfig_mapping("x86"), (indices,)))
    assert type(plain.embedding) is nn.Embedding


def test_pytorch_import_paths_of_the_quantized_modules():
    import corenn.ao.nn.intrinsic as nni
    import corenn.ao.nn.qat as nnqat
    import corenn.ao.nn.quantized as nnq
    import corenn.ao.nn.quantized.dynamic as nnqd
    import corenn.ao.nn.quantized.functional as qF
    assert nnq.LayerNorm is Q.quantized.LayerNorm and nnq.Embedding is Q.quantized.Embedding
    assert nnq.EmbeddingBag is Q.quantized.EmbeddingBag and nnq.Linear is Q.quantized.Linear
    assert nnqd.Linear is Q.dynamic.Linear and nnqd.LSTM is Q.dynamic.LSTM
    assert qF.avg_pool2d is Q.quantized.functional.avg_pool2d
    assert nni.LinearReLU is Q.intrinsic.LinearReLU and nni.qat.ConvBnReLU2d is Q.intrinsic.qat.ConvBnReLU2d
    assert nnqat.Linear is Q.qat.Linear
    ours, theirs = both_quantized(RNG.standard_normal((1, 2, 6, 6)).astype(np.float32), 0.1, 5)
    assert_same_quantized(qF.max_pool2d(ours, 3, 2, 1), torch.ao.nn.quantized.functional.max_pool2d(theirs, 3, 2, 1))
    assert nnq.Embedding(10, 4).weight().dtype is corenn.quint8


def test_fx_quantizes_functional_layer_norm_as_torch_does():
    weight = (RNG.random(12) + 0.5).astype(np.float32)
    bias = (RNG.standard_normal(12) * 0.1).astype(np.float32)

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(8, 12)
            self.gamma = nn.Parameter(corenn.from_numpy(weight.copy()))
            self.beta = nn.Parameter(corenn.from_numpy(bias.copy()))

        def forward(self, x):
            return F.layer_norm(self.fc(x), (12,), self.gamma, self.beta, 1e-4)

    class TorchNet(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = torch.nn.Linear(8, 12)
            self.gamma = torch.nn.Parameter(torch.from_numpy(weight.copy()))
            self.beta = torch.nn.Parameter(torch.from_numpy(bias.copy()))

        def forward(self, x):
            return TF.layer_norm(self.fc(x), (12,), self.gamma, self.beta, 1e-4)

    corenn.manual_seed(2)
    ours, theirs = Net().eval(), TorchNet().eval()
    copy_weights(ours, theirs)
    example = RNG.standard_normal((4, 8)).astype(np.float32)
    prepared = prepare_fx(ours, Q.get_default_qconfig_mapping("x86"), (corenn.from_numpy(example),))
    tprepared = torch.ao.quantization.quantize_fx.prepare_fx(theirs, TQ.get_default_qconfig_mapping("x86"),
                                                             (torch.from_numpy(example),))
    with corenn.no_grad(), torch.no_grad():
        for _ in range(4):
            batch = RNG.standard_normal((16, 8)).astype(np.float32)
            prepared(corenn.from_numpy(batch))
            tprepared(torch.from_numpy(batch))
    converted = convert_fx(prepared)
    tconverted = torch.ao.quantization.quantize_fx.convert_fx(tprepared)
    layer_norms = [m for m in converted.modules() if isinstance(m, Q.quantized.LayerNorm)]
    assert len(layer_norms) == 1 and layer_norms[0].eps == 1e-4
    x = RNG.standard_normal((6, 8)).astype(np.float32)
    with corenn.no_grad(), torch.no_grad():
        got, want = converted(corenn.from_numpy(x)).numpy(), tconverted(torch.from_numpy(x)).numpy()
    assert np.abs(got - want).max() <= 1.01 * layer_norms[0].scale.item()
