"""Quantization-aware training with Conv2d + BatchNorm2d: fuse_modules_qat, qat.ConvBn2d / ConvBnReLU2d,
freezing the BatchNorm statistics and convert, against torch.ao.quantization on the same weights and data."""
from __future__ import annotations

import numpy as np
import pytest

import corenn
from corenn import nn

torch = pytest.importorskip("torch")
import torch.ao.quantization as TQ  # noqa: E402
import torch.ao.nn.intrinsic.qat as tnniqat  # noqa: E402

import corenn.ao.quantization as Q  # noqa: E402

pytestmark = [pytest.mark.filterwarnings("ignore::DeprecationWarning"),
              pytest.mark.filterwarnings("ignore:.*deprecated:UserWarning")]


def models(with_relu: bool):
    """The same conv-bn(-relu)-flatten-linear net in both frameworks, PyTorch's weights copied into corenn's."""
    def build(lib, stub, destub):
        layers = [stub(), lib.nn.Conv2d(2, 4, 3, padding=1), lib.nn.BatchNorm2d(4)]
        layers += [lib.nn.ReLU()] if with_relu else []
        layers += [lib.nn.Flatten(), lib.nn.Linear(4 * 6 * 6, 3), destub()]
        return lib.nn.Sequential(*layers)
    torch.manual_seed(0)
    theirs = build(torch, TQ.QuantStub, TQ.DeQuantStub)
    with torch.no_grad():  # BatchNorm's affine parameters away from their 1 / 0 defaults
        theirs[2].weight.uniform_(0.5, 1.5)
        theirs[2].bias.uniform_(-0.2, 0.2)
    ours = build(corenn, Q.QuantStub, Q.DeQuantStub)
    ours.load_state_dict({k: corenn.from_numpy(v.detach().numpy().copy()) for k, v in theirs.state_dict().items()})
    return ours, theirs


def prepared(with_relu: bool):
    ours, theirs = models(with_relu)
    group = ["1", "2", "3"] if with_relu else ["1", "2"]
    ours, theirs = Q.fuse_modules_qat(ours.train(), group), TQ.fuse_modules_qat(theirs.train(), group)
    ours.qconfig, theirs.qconfig = qat_qconfig(Q, corenn), qat_qconfig(TQ, torch)
    return Q.prepare_qat(ours), TQ.prepare_qat(theirs)


def qat_qconfig(quantization, lib):
    """x86's QAT settings with the plain FakeQuantize in both frameworks. (PyTorch's default x86 QAT qconfig uses
    its fused fake quantizer, whose C++ kernel picks symmetric weight scales as max(-min / 128, max / 127)
    rather than its own observers' max(|min|, |max|) / 127.5, which corenn follows: see docs/quantize.md.)"""
    activation = quantization.FakeQuantize.with_args(observer=quantization.MovingAverageMinMaxObserver,
                                                     quant_min=0, quant_max=255, reduce_range=True)
    weight = quantization.FakeQuantize.with_args(observer=quantization.MovingAveragePerChannelMinMaxObserver,
                                                 quant_min=-128, quant_max=127, dtype=lib.qint8,
                                                 qscheme=lib.per_channel_symmetric)
    return quantization.QConfig(activation=activation, weight=weight)


def assert_within_one_step(ours, theirs, step):
    """Fake quantization rounds: a float difference at a rounding boundary moves a value by one step."""
    difference = np.abs(ours - theirs)
    assert difference.max() <= 1.01 * step, (difference.max(), step)
    assert np.mean(difference > 1e-4) <= 0.1, np.mean(difference > 1e-4)


def output_step(model) -> float:
    """The quantization step of the model's output: the last Linear's output fake quantizer or scale."""
    linear = model[len(model) - 2]
    return linear.scale.item() if hasattr(linear, "packed_weight") else \
        float(linear.activation_post_process.scale.reshape(-1)[0])


@pytest.mark.parametrize("with_relu", [False, True])
def test_fuse_modules_qat_keeps_the_batch_norm_and_prepare_qat_makes_conv_bn_qat_modules(with_relu):
    ours, theirs = prepared(with_relu)
    expected = Q.intrinsic.qat.ConvBnReLU2d if with_relu else Q.intrinsic.qat.ConvBn2d
    assert type(ours[1]) is expected
    assert type(theirs[1]) is (tnniqat.ConvBnReLU2d if with_relu else tnniqat.ConvBn2d)
    assert ours[1].bn.training and not ours[1].freeze_bn


@pytest.mark.parametrize("with_relu", [False, True])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_qat_conv_bn_trains_as_pytorch_then_converts_within_one_step(with_relu, seed):
    rng = np.random.default_rng(seed)
    ours, theirs = prepared(with_relu)
    for step in range(4):
        x = rng.standard_normal((8, 2, 6, 6)).astype(np.float32)
        y = rng.integers(0, 3, 8)
        if step == 0:
            opt = corenn.optim.SGD(ours.parameters(), lr=0.05)
            topt = torch.optim.SGD(theirs.parameters(), lr=0.05)
        outs = []
        for model, optimizer, lib in ((ours, opt, corenn), (theirs, topt, torch)):
            optimizer.zero_grad()
            out = model(lib.from_numpy(x))
            lib.nn.functional.cross_entropy(out, lib.from_numpy(y)).backward()
            optimizer.step()
            outs.append(out.detach().numpy())
        assert_within_one_step(outs[0], outs[1], output_step(ours))
    np.testing.assert_allclose(ours[1].bn.running_mean.numpy(), theirs[1].bn.running_mean.numpy(), rtol=1e-4,
                               atol=1e-5)
    np.testing.assert_allclose(ours[1].bn.running_var.numpy(), theirs[1].bn.running_var.numpy(), rtol=1e-4)
    np.testing.assert_allclose(ours[1].weight.detach().numpy(), theirs[1].weight.detach().numpy(), rtol=1e-3,
                               atol=1e-4)

    ours.apply(Q.intrinsic.qat.freeze_bn_stats)
    theirs.apply(tnniqat.freeze_bn_stats)
    ours.train()
    assert not ours[1].bn.training and ours[1].freeze_bn  # frozen statistics survive model.train()
    x = rng.standard_normal((8, 2, 6, 6)).astype(np.float32)
    frozen_mean = ours[1].bn.running_mean.numpy().copy()
    assert_within_one_step(ours(corenn.from_numpy(x)).detach().numpy(), theirs(torch.from_numpy(x)).detach().numpy(),
                           output_step(ours))
    assert np.array_equal(ours[1].bn.running_mean.numpy(), frozen_mean)  # a forward in train mode left them alone

    quantized, tquantized = Q.convert(ours.eval()), TQ.convert(theirs.eval())
    expected = Q.quantized.ConvReLU2d if with_relu else Q.quantized.Conv2d
    assert type(quantized[1]) is expected
    # The quantized conv-bn layer itself: within one step of PyTorch's.
    conv_in, tconv_in = quantized[0](corenn.from_numpy(x)), tquantized[0](torch.from_numpy(x))
    assert_within_one_step(quantized[1](conv_in).dequantize().numpy(), tquantized[1](tconv_in).dequantize().numpy(),
                           quantized[1].scale.item())
    # The whole network: a one-step difference in the conv's output can move the Linear's by a few steps.
    got, want = quantized(corenn.from_numpy(x)).numpy(), tquantized(torch.from_numpy(x)).numpy()
    assert np.abs(got - want).max() <= 3.01 * output_step(quantized)


def test_fuse_modules_without_qat_still_needs_eval_mode_and_options_it_lacks_are_refused():
    ours, _ = models(with_relu=True)
    with pytest.raises(AssertionError, match="fuse_modules_qat keeps the BatchNorm"):
        Q.fuse_modules(ours.train(), ["1", "2", "3"])
    with pytest.raises(NotImplementedError, match="fuse_modules_qat\\(\\): fuser_func is not supported"):
        Q.fuse_modules_qat(ours, ["1", "2"], fuser_func=lambda *m: m[0])
