"""Fake quantization for quantization-aware training (``torch.ao.quantization.fake_quantize``).

``FakeQuantize`` rounds values to the int8 grid and back in float, so training
sees the quantization error; its backward is the straight-through estimator:
the gradient passes unchanged where the value fell inside the quantized range
and is zero where it was clamped.

Example::

    >>> fq = FakeQuantize()
    >>> y = fq(corenn.randn(4, requires_grad=True))   # observed, rounded; y.backward() passes through
"""
from __future__ import annotations

import numpy as np

import corenn
from corenn import nn
from corenn.autograd import Function

from .observer import (MovingAverageMinMaxObserver, MovingAveragePerChannelMinMaxObserver, _with_args)
from .qtensor import per_channel_symmetric, per_tensor_affine, per_tensor_symmetric, qint8, quint8

__all__ = ["FakeQuantize", "FakeQuantizeBase", "fake_quantize_per_tensor_affine", "fake_quantize_per_channel_affine",
           "default_fake_quant", "default_weight_fake_quant", "default_per_channel_weight_fake_quant",
           "disable_fake_quant", "enable_fake_quant", "disable_observer", "enable_observer"]


def _fake_quantize_array(x: np.ndarray, scale, zero_point, quant_min: int, quant_max: int):
    """The fake-quantized values and the straight-through mask (inside the range) of a float32 array."""
    inverse_scale = (1.0 / np.asarray(scale, dtype=np.float64)).astype(np.float32)
    q = np.rint(x * inverse_scale) + np.asarray(zero_point, dtype=np.float32)
    inside = (q >= quant_min) & (q <= quant_max)
    np.clip(q, quant_min, quant_max, out=q)
    out = (q - np.asarray(zero_point, dtype=np.float32)) * np.asarray(scale, dtype=np.float32)
    return out.astype(x.dtype, copy=False), inside


class _FakeQuantizeFunction(Function):
    """Round to the grid in forward; pass the gradient straight through where not clamped."""

    @staticmethod
    def forward(ctx, x, scale, zero_point, quant_min, quant_max, axis):
        array = x.detach().numpy()
        scale, zero_point = scale.numpy().astype(np.float32), zero_point.numpy()
        if axis is not None:
            shape = [1] * array.ndim
            shape[axis] = -1
            scale, zero_point = scale.reshape(shape), zero_point.reshape(shape)
        else:
            scale, zero_point = scale.reshape(()), zero_point.reshape(())
        out, inside = _fake_quantize_array(array, scale, zero_point, quant_min, quant_max)
        ctx.save_for_backward(corenn.from_numpy(inside))
        return corenn.from_numpy(out)

    @staticmethod
    def backward(ctx, grad_output):
        (inside,) = ctx.saved_tensors
        return grad_output * inside.to(grad_output.dtype), None, None, None, None, None


def fake_quantize_per_tensor_affine(input, scale, zero_point, quant_min: int, quant_max: int):
    """``torch.fake_quantize_per_tensor_affine``: quantize and dequantize, differentiable (straight through)."""
    return _FakeQuantizeFunction.apply(input, corenn.tensor(float(scale)), corenn.tensor(int(zero_point)),
                                       quant_min, quant_max, None)


def fake_quantize_per_channel_affine(input, scale, zero_point, axis: int, quant_min: int, quant_max: int):
    """``torch.fake_quantize_per_channel_affine``: per-channel version along ``axis``."""
    return _FakeQuantizeFunction.apply(input, scale, zero_point, quant_min, quant_max, axis)


class FakeQuantizeBase(nn.Module):
    """Switches shared by fake quantizers: observing on/off, fake quantizing on/off."""

    with_args = classmethod(_with_args)

    def __init__(self):
        super().__init__()
        self.register_buffer("fake_quant_enabled", corenn.tensor([1], dtype=corenn.uint8))
        self.register_buffer("observer_enabled", corenn.tensor([1], dtype=corenn.uint8))

    def enable_fake_quant(self, enabled: bool = True):
        self.fake_quant_enabled = corenn.tensor([1 if enabled else 0], dtype=corenn.uint8)

    def disable_fake_quant(self):
        self.enable_fake_quant(False)

    def enable_observer(self, enabled: bool = True):
        self.observer_enabled = corenn.tensor([1 if enabled else 0], dtype=corenn.uint8)

    def disable_observer(self):
        self.enable_observer(False)


class FakeQuantize(FakeQuantizeBase):
    """An observer plus fake quantization with its current scale and zero point (``torch.ao.quantization.FakeQuantize``)."""

    def __init__(self, observer=MovingAverageMinMaxObserver, quant_min=None, quant_max=None, **observer_kwargs):
        super().__init__()
        if quant_min is not None and quant_max is not None:
            observer_kwargs.update(quant_min=quant_min, quant_max=quant_max)
        self.activation_post_process = observer(**observer_kwargs)
        self.quant_min = self.activation_post_process.quant_min
        self.quant_max = self.activation_post_process.quant_max
        self.dtype = self.activation_post_process.dtype
        self.qscheme = self.activation_post_process.qscheme
        self.is_per_channel = self.qscheme.per_channel
        self.ch_axis = getattr(self.activation_post_process, "ch_axis", -1)
        self.register_buffer("scale", corenn.tensor([1.0]))
        self.register_buffer("zero_point", corenn.tensor([0], dtype=corenn.int32))

    def calculate_qparams(self):
        return self.activation_post_process.calculate_qparams()

    def forward(self, x):
        if self.observer_enabled.item():
            self.activation_post_process(x.detach())
            scale, zero_point = self.calculate_qparams()
            self.scale, self.zero_point = scale, zero_point.to(corenn.int32)
        if self.fake_quant_enabled.item():
            if self.is_per_channel:
                x = fake_quantize_per_channel_affine(x, self.scale, self.zero_point, self.ch_axis,
                                                     self.quant_min, self.quant_max)
            else:
                x = fake_quantize_per_tensor_affine(x, self.scale.item(), self.zero_point.item(),
                                                    self.quant_min, self.quant_max)
        return x

    def extra_repr(self):
        return (f"fake_quant_enabled={self.fake_quant_enabled.tolist()}, observer_enabled="
                f"{self.observer_enabled.tolist()}, quant_min={self.quant_min}, quant_max={self.quant_max}, "
                f"dtype={self.dtype!r}, qscheme={self.qscheme!r}, ch_axis={self.ch_axis}, "
                f"scale={self.scale.tolist()}, zero_point={self.zero_point.tolist()}")


default_fake_quant = FakeQuantize.with_args(observer=MovingAverageMinMaxObserver, quant_min=0, quant_max=255,
                                            dtype=quint8, qscheme=per_tensor_affine, reduce_range=True)
default_weight_fake_quant = FakeQuantize.with_args(observer=MovingAverageMinMaxObserver, quant_min=-128,
                                                   quant_max=127, dtype=qint8,
                                                   qscheme=per_tensor_symmetric,
                                                   reduce_range=False)
default_per_channel_weight_fake_quant = FakeQuantize.with_args(observer=MovingAveragePerChannelMinMaxObserver,
                                                               quant_min=-128, quant_max=127, dtype=qint8,
                                                               qscheme=per_channel_symmetric, reduce_range=False,
                                                               ch_axis=0)


def _apply_to_fake_quantizers(method: str):
    def apply(module):
        if isinstance(module, FakeQuantizeBase):
            getattr(module, method)()
    apply.__name__ = method
    apply.__doc__ = f"``model.apply({method})``: call ``{method}()`` on every fake quantizer."
    return apply


disable_fake_quant = _apply_to_fake_quantizers("disable_fake_quant")
enable_fake_quant = _apply_to_fake_quantizers("enable_fake_quant")
disable_observer = _apply_to_fake_quantizers("disable_observer")
enable_observer = _apply_to_fake_quantizers("enable_observer")
