"""Modules of quantized models: stubs, fused float modules, QAT modules, quantized and dynamically quantized modules.

Names and places mirror PyTorch's: ``QuantStub`` / ``DeQuantStub`` / ``QuantWrapper``
(``torch.ao.quantization``), ``intrinsic.LinearReLU`` / ``ConvReLU2d``
(``torch.ao.nn.intrinsic``), ``qat.Linear`` (``torch.ao.nn.qat``), ``quantized.Linear``
(``torch.ao.nn.quantized``) and ``dynamic.Linear`` / ``dynamic.LSTM`` (``torch.ao.nn.quantized.dynamic``).

Quantized modules keep their state in plain buffers (int8 weights, float scales, integer
zero points), so ``state_dict`` saves with ``corenn.save`` like any model's and loads into a
freshly converted model.
"""
from __future__ import annotations

import copy
import types

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

import corenn
from corenn import nn
from corenn.nn.utils.rnn import PackedSequence

from . import functional as qF
from . import kernels
from .qtensor import QTensor, per_channel_affine_float_qparams, per_tensor_affine, qint8, quantize_array, quint8

__all__ = ["QuantStub", "DeQuantStub", "QuantWrapper", "Quantize", "DeQuantize", "FloatFunctional", "QFunctional",
           "intrinsic", "qat", "quantized", "dynamic"]


# -- stubs ------------------------------------------------------------------------------------------------------------

class QuantStub(nn.Module):
    """Marks where float values become quantized; an observer after ``prepare``, a ``Quantize`` after ``convert``."""

    def __init__(self, qconfig=None):
        super().__init__()
        if qconfig is not None:
            self.qconfig = qconfig

    def forward(self, x):
        return x


class DeQuantStub(nn.Module):
    """Marks where quantized values become float again; a ``DeQuantize`` after ``convert``."""

    def __init__(self, qconfig=None):
        super().__init__()
        if qconfig is not None:
            self.qconfig = qconfig

    def forward(self, x):
        return x


class QuantWrapper(nn.Module):
    """``QuantStub -> module -> DeQuantStub`` around ``module`` (``torch.ao.quantization.QuantWrapper``)."""

    def __init__(self, module):
        super().__init__()
        qconfig = getattr(module, "qconfig", None)
        self.quant = QuantStub(qconfig)
        self.dequant = DeQuantStub(qconfig)
        self.module = module

    def forward(self, x):
        return self.dequant(self.module(self.quant(x)))


def _scale_zero_point(observer) -> tuple[float, int]:
    scale, zero_point = observer.calculate_qparams()
    return float(scale.reshape(-1)[0].item()), int(zero_point.reshape(-1)[0].item())


class Quantize(nn.Module):
    """float -> quint8 with a fixed scale and zero point (``torch.ao.nn.quantized.Quantize``)."""

    def __init__(self, scale: float, zero_point: int, dtype=quint8):
        super().__init__()
        self.register_buffer("scale", corenn.tensor([float(scale)]))
        self.register_buffer("zero_point", corenn.tensor([int(zero_point)]))
        self.dtype = dtype

    def forward(self, x):
        if isinstance(x, QTensor):
            return x
        return corenn.quantize_per_tensor(x, self.scale.item(), int(self.zero_point.item()), self.dtype)

    @classmethod
    def from_float(cls, module):
        scale, zero_point = _scale_zero_point(module.activation_post_process)
        return cls(scale, zero_point, module.activation_post_process.dtype)

    def extra_repr(self):
        return f"scale={self.scale.tolist()}, zero_point={self.zero_point.tolist()}, dtype={self.dtype!r}"


class DeQuantize(nn.Module):
    """quantized -> float32 (``torch.ao.nn.quantized.DeQuantize``)."""

    def forward(self, x):
        return x.dequantize() if isinstance(x, QTensor) else x

    @classmethod
    def from_float(cls, module):
        return cls()


# -- functional arithmetic with observers --------------------------------------------------------------------------

class FloatFunctional(nn.Module):
    """``add`` / ``cat`` / ``mul`` / ``add_relu`` as a module, so that ``prepare`` can observe their outputs."""

    def __init__(self):
        super().__init__()
        self.activation_post_process = nn.Identity()

    def forward(self, x):
        raise RuntimeError("FloatFunctional is not meant to be called; use its methods (add, cat, mul, add_relu)")

    def add(self, x, y):
        return self.activation_post_process(x + y)

    def add_scalar(self, x, y):
        return x + y  # PyTorch does not observe add_scalar either: the output range is the input's, shifted

    def mul(self, x, y):
        return self.activation_post_process(x * y)

    def cat(self, x, dim: int = 0):
        return self.activation_post_process(corenn.cat(list(x), dim=dim))

    def add_relu(self, x, y):
        return self.activation_post_process(corenn.relu(x + y))


class QFunctional(nn.Module):
    """The quantized ``FloatFunctional``: float arithmetic on dequantized inputs, requantized to its own scale."""

    def __init__(self, scale: float = 1.0, zero_point: int = 0):
        super().__init__()
        self.register_buffer("scale", corenn.tensor([float(scale)]))
        self.register_buffer("zero_point", corenn.tensor([int(zero_point)]))

    def _requantize(self, values: np.ndarray, relu: bool = False) -> QTensor:
        scale, zero_point = self.scale.item(), int(self.zero_point.item())
        q = quantize_array(values, scale, zero_point, zero_point if relu else 0, 255, np.uint8)
        return QTensor(q, quint8, per_tensor_affine, scale, zero_point)

    def forward(self, x):
        raise RuntimeError("QFunctional is not meant to be called; use its methods (add, cat, mul, add_relu)")

    def add(self, x, y):
        return self._requantize(_real(x) + _real(y))

    def add_scalar(self, x, y):
        return self._requantize(_real(x) + np.float32(y))

    def mul(self, x, y):
        return self._requantize(_real(x) * _real(y))

    def cat(self, x, dim: int = 0):
        return self._requantize(np.concatenate([_real(t) for t in x], axis=dim))

    def add_relu(self, x, y):
        return self._requantize(_real(x) + _real(y), relu=True)

    @classmethod
    def from_float(cls, module):
        scale, zero_point = _scale_zero_point(module.activation_post_process)
        return cls(scale, zero_point)

    def extra_repr(self):
        return f"scale={self.scale.tolist()}, zero_point={self.zero_point.tolist()}"


def _real(x) -> np.ndarray:
    if isinstance(x, QTensor):
        return x.dequantize_array()
    return x.detach().numpy().astype(np.float32, copy=False)


# -- fused float modules (torch.ao.nn.intrinsic) --------------------------------------------------------------------

class LinearReLU(nn.Sequential):
    """``Linear`` followed by ``ReLU``, fused by ``fuse_modules`` so that they quantize as one op."""

    def __init__(self, linear, relu):
        super().__init__(linear, relu)


class ConvReLU2d(nn.Sequential):
    """``Conv2d`` (with any BatchNorm already folded in) followed by ``ReLU``."""

    def __init__(self, conv, relu):
        super().__init__(conv, relu)


class ConvBn2d(nn.Sequential):
    """``Conv2d`` + ``BatchNorm2d`` kept apart for quantization-aware training (``fuse_modules_qat``)."""

    def __init__(self, conv, bn):
        super().__init__(conv, bn)


class ConvBnReLU2d(nn.Sequential):
    """``Conv2d`` + ``BatchNorm2d`` + ``ReLU`` kept apart for quantization-aware training (``fuse_modules_qat``)."""

    def __init__(self, conv, bn, relu):
        super().__init__(conv, bn, relu)


def fold_batch_norm(conv, bn):
    """A Conv2d equal to ``bn(conv(x))`` in eval mode: the normalisation folded into weight and bias."""
    fused = copy.deepcopy(conv)
    var = bn.running_var.numpy().astype(np.float64)
    gamma = bn.weight.detach().numpy() if bn.weight is not None else np.ones_like(var)
    beta = bn.bias.detach().numpy() if bn.bias is not None else np.zeros_like(var)
    factor = gamma / np.sqrt(var + bn.eps)
    weight = conv.weight.detach().numpy().astype(np.float64) * factor.reshape(-1, 1, 1, 1)
    bias = conv.bias.detach().numpy() if conv.bias is not None else np.zeros_like(var)
    bias = (bias - bn.running_mean.numpy()) * factor + beta
    fused.weight = nn.Parameter(corenn.from_numpy(weight.astype(np.float32)))
    fused.bias = nn.Parameter(corenn.from_numpy(bias.astype(np.float32)))
    return fused





# -- quantization-aware training modules (torch.ao.nn.qat) ----------------------------------------------------------

def _qat_init(self, float_module, qconfig):
    self.qconfig = qconfig
    self.weight_fake_quant = qconfig.weight()


class QATLinear(nn.Linear):
    """``Linear`` whose weight passes a fake quantizer in every forward (``torch.ao.nn.qat.Linear``)."""

    relu = False

    def forward(self, x):
        out = nn.functional.linear(x, self.weight_fake_quant(self.weight), self.bias)
        return corenn.relu(out) if self.relu else out

    @classmethod
    def from_float(cls, module):
        linear = module[0] if isinstance(module, LinearReLU) else module
        qat = cls(linear.in_features, linear.out_features, bias=linear.bias is not None)
        qat.weight, qat.bias = linear.weight, linear.bias
        _qat_init(qat, module, module.qconfig)
        return qat

    def to_float(self):
        linear = nn.Linear(self.in_features, self.out_features, bias=self.bias is not None)
        linear.weight, linear.bias = self.weight, self.bias
        return LinearReLU(linear, nn.ReLU()) if self.relu else linear


class QATLinearReLU(QATLinear):
    """``qat.Linear`` + ReLU (``torch.ao.nn.intrinsic.qat.LinearReLU``)."""

    relu = True


class QATConv2d(nn.Conv2d):
    """``Conv2d`` whose weight passes a fake quantizer in every forward (``torch.ao.nn.qat.Conv2d``)."""

    relu = False

    def forward(self, x):
        out = nn.functional.conv2d(x, self.weight_fake_quant(self.weight), self.bias, self.stride, self.padding,
                                   self.dilation, self.groups)
        return corenn.relu(out) if self.relu else out

    @classmethod
    def from_float(cls, module):
        conv = module[0] if isinstance(module, ConvReLU2d) else module
        qat = cls(conv.in_channels, conv.out_channels, conv.kernel_size, conv.stride, conv.padding, conv.dilation,
                  conv.groups, bias=conv.bias is not None)
        qat.weight, qat.bias = conv.weight, conv.bias
        _qat_init(qat, module, module.qconfig)
        return qat


class QATConvReLU2d(QATConv2d):
    """``qat.Conv2d`` + ReLU (``torch.ao.nn.intrinsic.qat.ConvReLU2d``)."""

    relu = True


class QATConvBn2d(QATConv2d):
    """Conv2d with BatchNorm2d trained through fake-quantized folded weights (``torch.ao.nn.intrinsic.qat.ConvBn2d``).

    The forward is PyTorch's single-pass approximation: the weight, scaled by
    ``bn.weight / sqrt(running_var + eps)`` as folding will scale it, is fake-quantized and
    convolved; the scaling is divided out again and the conv bias added, and the BatchNorm
    then normalises with batch statistics (training) or running ones (frozen, eval), so the
    network trains against the weights it will be quantized with.
    """

    def forward(self, x):
        bn = self.bn
        scale_factor = bn.weight / corenn.sqrt(bn.running_var + bn.eps)
        scaled_weight = self.weight_fake_quant(self.weight * scale_factor.reshape(-1, 1, 1, 1))
        zero_bias = corenn.zeros(self.out_channels, dtype=x.dtype)
        out = nn.functional.conv2d(x, scaled_weight, zero_bias, self.stride, self.padding, self.dilation,
                                   self.groups)
        out = out / scale_factor.reshape(1, -1, 1, 1)
        if self.bias is not None:
            out = out + self.bias.reshape(1, -1, 1, 1)
        out = bn(out)
        return corenn.relu(out) if self.relu else out

    def freeze_bn_stats(self):
        """Stop updating the BatchNorm's running statistics; it normalises with them from now on."""
        self.freeze_bn = True
        self.bn.training = False
        return self

    def update_bn_stats(self):
        self.freeze_bn = False
        self.bn.training = True
        return self

    def train(self, mode: bool = True):
        # As PyTorch's: a frozen BatchNorm stays in eval mode through model.train().
        self.training = mode
        if not self.freeze_bn:
            for module in self.children():
                module.train(mode)
        return self

    @classmethod
    def from_float(cls, module):
        conv, bn = module[0], module[1]
        if conv.padding_mode != "zeros":
            raise NotImplementedError(f"qat.{cls.__name__}: padding_mode {conv.padding_mode!r} is not supported by "
                                      "corenn-quantize (zeros only)")
        qat = cls(conv.in_channels, conv.out_channels, conv.kernel_size, conv.stride, conv.padding, conv.dilation,
                  conv.groups, bias=conv.bias is not None)
        qat.weight, qat.bias = conv.weight, conv.bias
        qat.bn = bn  # its parameters and running statistics, shared as PyTorch shares them
        _qat_init(qat, module, module.qconfig)
        qat.freeze_bn = not module.training
        qat.train(module.training)
        return qat


class QATConvBnReLU2d(QATConvBn2d):
    """``qat.ConvBn2d`` + ReLU (``torch.ao.nn.intrinsic.qat.ConvBnReLU2d``)."""

    relu = True


def freeze_bn_stats(module):
    """For ``model.apply``: freeze the BatchNorm statistics of QAT conv-bn modules (PyTorch's function)."""
    if isinstance(module, QATConvBn2d):
        module.freeze_bn_stats()


def update_bn_stats(module):
    """For ``model.apply``: resume updating the BatchNorm statistics of QAT conv-bn modules."""
    if isinstance(module, QATConvBn2d):
        module.update_bn_stats()


qat = types.SimpleNamespace(Linear=QATLinear, Conv2d=QATConv2d, LinearReLU=QATLinearReLU,
                            ConvReLU2d=QATConvReLU2d)
intrinsic = types.SimpleNamespace(
    LinearReLU=LinearReLU, ConvReLU2d=ConvReLU2d, ConvBn2d=ConvBn2d, ConvBnReLU2d=ConvBnReLU2d,
    qat=types.SimpleNamespace(LinearReLU=QATLinearReLU, ConvReLU2d=QATConvReLU2d, ConvBn2d=QATConvBn2d,
                              ConvBnReLU2d=QATConvBnReLU2d, freeze_bn_stats=freeze_bn_stats,
                              update_bn_stats=update_bn_stats))


# -- quantized modules (torch.ao.nn.quantized) ----------------------------------------------------------------------

def _weight_observed(module, weight_observer):
    """Quantize ``module.weight`` with ``weight_observer``: int8 values, per-output-channel scales and zero points."""
    return _quantize_weight(module.weight.detach(), weight_observer)


def _quantize_weight(weight, observer):
    """Quantize the float tensor ``weight`` with ``observer`` (an observer or a FakeQuantize, which observes too)."""
    observer(weight)
    scales, zero_points = observer.calculate_qparams()
    scales = scales.numpy().astype(np.float64).reshape(-1)
    zero_points = zero_points.numpy().astype(np.int64).reshape(-1)
    channels = weight.shape[0]
    if scales.size == 1:  # per tensor: one scale for every output channel
        scales, zero_points = np.repeat(scales, channels), np.repeat(zero_points, channels)
    if np.any(zero_points != 0):
        raise NotImplementedError("quantized weights must be symmetric (zero_point 0): use a weight observer with "
                                  "qscheme per_tensor_symmetric or per_channel_symmetric, as PyTorch's defaults do")
    shape = (-1,) + (1,) * (weight.ndim - 1)
    values = quantize_array(weight.numpy(), scales.reshape(shape), 0, -128, 127, np.int8)
    return values, scales, zero_points


class _PackedWeights(nn.Module):
    """int8 weights (per output channel), their scales and zero points, and float bias, in buffers."""

    def set_weights(self, values: np.ndarray, scales: np.ndarray, zero_points: np.ndarray, bias, prepare=True):
        """Store the int8 weights in buffers; with ``prepare``, lay them out for the kernels now (see ``gemm_operands``)."""
        self.register_buffer("packed_weight", corenn.from_numpy(np.ascontiguousarray(values, dtype=np.int8)))
        self.register_buffer("packed_weight_scales", corenn.from_numpy(scales.astype(np.float64)))
        self.register_buffer("packed_weight_zero_points", corenn.from_numpy(zero_points.astype(np.int64)))
        self.register_buffer("packed_bias", None if bias is None else
                             corenn.from_numpy(np.asarray(bias, dtype=np.float32).copy()))
        self.cache = None
        if prepare:
            self.gemm_operands()

    def repack(self, *args):
        """Lay the buffers out for the kernels again (after ``load_state_dict`` replaced them)."""
        self.cache = None
        self.gemm_operands()

    def gemm_operands(self):
        """The weights as the kernels want them: ``kernels.LinearWeights`` (packed once), float32 scales, bias.

        The packed layout is derived from the buffers, so ``state_dict`` keeps the plain
        ``(out, in...)`` int8 weights and a loaded model packs what it loaded.
        """
        if self.cache is None:
            wq = self.packed_weight.numpy().reshape(self.packed_weight.shape[0], -1)
            self.cache = dict(weights=kernels.LinearWeights(wq),
                              scales=self.packed_weight_scales.numpy().astype(np.float32),
                              bias=None if self.packed_bias is None else self.packed_bias.numpy())
        return self.cache

    def weight(self) -> QTensor:
        """The int8 weight as a per-channel quantized tensor (PyTorch's ``module.weight()``)."""
        return QTensor(self.packed_weight.numpy().copy(), qint8, corenn.per_channel_symmetric,
                       self.packed_weight_scales.numpy(), self.packed_weight_zero_points.numpy(), 0)

    def bias(self):
        return self.packed_bias


def _new_packed(module, *, weight_shape, has_bias):
    nn.Module.__init__(module)
    channels = weight_shape[0]
    module.set_weights(np.zeros(weight_shape, np.int8), np.ones(channels), np.zeros(channels, np.int64),
                       np.zeros(channels, np.float32) if has_bias else None, prepare=False)
    module.register_load_state_dict_post_hook(module.repack)


class Linear(_PackedWeights):
    """Statically quantized ``Linear``: quint8 in, quint8 out (``torch.ao.nn.quantized.Linear``)."""

    relu = False

    def __init__(self, in_features: int, out_features: int, bias_: bool = True, dtype=qint8):
        _new_packed(self, weight_shape=(out_features, in_features), has_bias=bias_)
        self.in_features, self.out_features = in_features, out_features
        self.register_buffer("scale", corenn.tensor(1.0))
        self.register_buffer("zero_point", corenn.tensor(0))

    def forward(self, x: QTensor) -> QTensor:
        if not isinstance(x, QTensor):
            raise RuntimeError(f"{type(self).__name__}: expected a quantized input (quint8), got a float tensor; "
                               "put a QuantStub before it")
        ops = self.gemm_operands()
        rows = x.int_values.reshape(-1, self.in_features)
        scales = ops["scales"] * np.float32(x.q_scale())
        out_scale, out_zero_point = self.scale.item(), int(self.zero_point.item())
        q = kernels.linear_requantized(rows, x.q_zero_point(), ops["weights"], scales, ops["bias"], out_scale,
                                       out_zero_point, self.relu)
        q = q.reshape(x.int_values.shape[:-1] + (self.out_features,))
        return QTensor(q, quint8, per_tensor_affine, out_scale, out_zero_point)

    @classmethod
    def from_float(cls, module):
        float_linear = module[0] if isinstance(module, LinearReLU) else module
        if isinstance(module, QATLinear):
            weight_observer = module.weight_fake_quant
        else:
            weight_observer = module.qconfig.weight()
        values, scales, zero_points = _weight_observed(float_linear, weight_observer)
        quantized = cls(float_linear.in_features, float_linear.out_features, float_linear.bias is not None)
        bias = None if float_linear.bias is None else float_linear.bias.detach().numpy()
        quantized.set_weights(values, scales, zero_points, bias)
        scale, zero_point = _scale_zero_point(module.activation_post_process)
        quantized.scale, quantized.zero_point = corenn.tensor(scale), corenn.tensor(zero_point)
        return quantized

    def extra_repr(self):
        return (f"in_features={self.in_features}, out_features={self.out_features}, scale={self.scale.item()}, "
                f"zero_point={self.zero_point.item()}, qscheme=corenn.per_channel_symmetric")


class QuantizedLinearReLU(Linear):
    """Quantized ``Linear`` + ReLU in one kernel: the ReLU is the lower clamp of the requantization."""

    relu = True


class Conv2d(_PackedWeights):
    """Statically quantized ``Conv2d`` (im2col + the int8 GEMM; groups=1): quint8 in, quint8 out."""

    relu = False

    def __init__(self, in_channels, out_channels, kernel_size, stride=1, padding=0, dilation=1, groups=1,
                 bias=True, padding_mode="zeros"):
        pair = lambda v: tuple(v) if isinstance(v, (tuple, list)) else (v, v)  # noqa: E731
        if groups != 1:
            raise NotImplementedError("quantized Conv2d: groups other than 1 are not supported by corenn-quantize")
        if padding_mode != "zeros" or isinstance(padding, str):
            raise NotImplementedError("quantized Conv2d: only numeric zero padding is supported by corenn-quantize")
        self.in_channels, self.out_channels = in_channels, out_channels
        self.kernel_size, self.stride = pair(kernel_size), pair(stride)
        self.padding, self.dilation, self.groups = pair(padding), pair(dilation), groups
        _new_packed(self, weight_shape=(out_channels, in_channels) + self.kernel_size, has_bias=bias)
        self.register_buffer("scale", corenn.tensor(1.0))
        self.register_buffer("zero_point", corenn.tensor(0))

    def forward(self, x: QTensor) -> QTensor:
        if not isinstance(x, QTensor) or x.dim() != 4:
            raise RuntimeError(f"{type(self).__name__}: expected a 4-d quantized input (quint8); put a QuantStub "
                               "before it")
        batch, channels, height, width = x.int_values.shape
        (ph, pw), (sh, sw), (dh, dw), (kh, kw) = self.padding, self.stride, self.dilation, self.kernel_size
        zero_point = x.q_zero_point()
        # Padding with the zero point is padding with real zeros.
        padded = np.pad(x.int_values, ((0, 0), (0, 0), (ph, ph), (pw, pw)), constant_values=zero_point)
        windows = sliding_window_view(padded, (dh * (kh - 1) + 1, dw * (kw - 1) + 1), axis=(2, 3))
        windows = windows[:, :, ::sh, ::sw, ::dh, ::dw]                      # (B, C, Ho, Wo, kh, kw)
        out_h, out_w = windows.shape[2], windows.shape[3]
        columns = np.ascontiguousarray(windows.transpose(0, 2, 3, 1, 4, 5)).reshape(batch * out_h * out_w, -1)
        ops = self.gemm_operands()
        out_scale, out_zero_point = self.scale.item(), int(self.zero_point.item())
        q = kernels.linear_requantized(columns, zero_point, ops["weights"], ops["scales"] * np.float32(x.q_scale()),
                                       ops["bias"], out_scale, out_zero_point, self.relu)
        q = np.ascontiguousarray(q.reshape(batch, out_h, out_w, self.out_channels).transpose(0, 3, 1, 2))
        return QTensor(q, quint8, per_tensor_affine, out_scale, out_zero_point)

    @classmethod
    def from_float(cls, module):
        conv = module[0] if isinstance(module, ConvReLU2d) else module
        if isinstance(module, QATConvBn2d):  # as PyTorch's convert: the running statistics are folded in now
            conv = fold_batch_norm(module, module.bn)
        weight_observer = module.weight_fake_quant if isinstance(module, QATConv2d) else module.qconfig.weight()
        values, scales, zero_points = _weight_observed(conv, weight_observer)
        quantized = cls(conv.in_channels, conv.out_channels, conv.kernel_size, conv.stride, conv.padding,
                        conv.dilation, conv.groups, conv.bias is not None)
        quantized.set_weights(values, scales, zero_points, None if conv.bias is None else conv.bias.detach().numpy())
        scale, zero_point = _scale_zero_point(module.activation_post_process)
        quantized.scale, quantized.zero_point = corenn.tensor(scale), corenn.tensor(zero_point)
        return quantized

    def extra_repr(self):
        return (f"{self.in_channels}, {self.out_channels}, kernel_size={self.kernel_size}, stride={self.stride}, "
                f"padding={self.padding}, scale={self.scale.item()}, zero_point={self.zero_point.item()}")


class QuantizedConvReLU2d(Conv2d):
    """Quantized ``Conv2d`` + ReLU in one kernel."""

    relu = True


class ReLU(nn.Module):
    """ReLU on quantized values: a clamp at the zero point, scale and zero point unchanged."""

    def forward(self, x):
        if not isinstance(x, QTensor):
            return corenn.relu(x)
        return x._like(np.maximum(x.int_values, x.dtype.numpy.type(x.zero_points)))

    @classmethod
    def from_float(cls, module):
        return cls()


class MaxPool2d(nn.MaxPool2d):
    """Max pooling on quantized values: the maximum of the integers is the integer of the maximum."""

    def forward(self, x):
        if not isinstance(x, QTensor):
            return super().forward(x)
        pooled = super().forward(corenn.from_numpy(x.int_values.astype(np.float32)))
        return x._like(pooled.numpy().astype(x.dtype.numpy))

    @classmethod
    def from_float(cls, module):
        return cls(module.kernel_size, module.stride, module.padding, module.dilation, ceil_mode=module.ceil_mode)


class Flatten(nn.Flatten):
    """``Flatten`` that also flattens quantized tensors."""

    @classmethod
    def from_float(cls, module):
        return cls(module.start_dim, module.end_dim)


class AvgPool2d(nn.AvgPool2d):
    """Average pooling that also pools quantized tensors (their scale and zero point kept), as PyTorch's does.

    PyTorch's float ``nn.AvgPool2d`` accepts quantized input itself; corenn's float pooling
    knows nothing of ``QTensor``, so ``convert`` puts this subclass in its place.
    """

    def forward(self, input):
        if not isinstance(input, QTensor):
            return super().forward(input)
        return qF.avg_pool2d(input, self.kernel_size, self.stride, self.padding, self.ceil_mode,
                             self.count_include_pad, self.divisor_override)

    @classmethod
    def from_float(cls, module):
        return cls(module.kernel_size, module.stride, module.padding, module.ceil_mode, module.count_include_pad,
                   module.divisor_override)


class AdaptiveAvgPool2d(nn.AdaptiveAvgPool2d):
    """Adaptive average pooling that also pools quantized tensors (scale and zero point kept)."""

    def forward(self, input):
        if not isinstance(input, QTensor):
            return super().forward(input)
        return qF.adaptive_avg_pool2d(input, self.output_size)

    @classmethod
    def from_float(cls, module):
        return cls(module.output_size)


class LayerNorm(nn.LayerNorm):
    """Quantized ``LayerNorm`` (``torch.ao.nn.quantized.LayerNorm``): quint8 in, quint8 at its own scale out.

    ``weight`` and ``bias`` stay float (shared with the float module, as PyTorch's); the
    output ``scale`` / ``zero_point`` are buffers, from the observer ``prepare`` put after
    the float module.
    """

    def __init__(self, normalized_shape, weight, bias, scale, zero_point, eps=1e-5, elementwise_affine=True,
                 device=None, dtype=None):
        super().__init__(normalized_shape, eps=eps, elementwise_affine=elementwise_affine)
        self.weight, self.bias = weight, bias
        self.register_buffer("scale", corenn.tensor(float(scale)))
        self.register_buffer("zero_point", corenn.tensor(int(zero_point)))

    def forward(self, input):
        return qF.layer_norm_quantized(input, self.normalized_shape, self.weight, self.bias, self.eps,
                                       self.scale.item(), int(self.zero_point.item()))

    @classmethod
    def from_float(cls, module):
        scale, zero_point = _scale_zero_point(module.activation_post_process)
        return cls(module.normalized_shape, module.weight, module.bias, scale, zero_point, module.eps,
                   module.elementwise_affine)

    def extra_repr(self):
        return super().extra_repr() + f", scale={self.scale.item()}, zero_point={self.zero_point.item()}"


# -- quantized embeddings: rows of uint8 with a float scale and a float zero point each --------------------------------

def _embedding_weight_observer(module, weight_observer, name: str):
    """The weight observer for ``module`` (its qconfig's, or PyTorch's float-qparams default), checked as PyTorch does."""
    if weight_observer is None:
        qconfig = getattr(module, "qconfig", None)
        if qconfig is not None and qconfig.weight is not None:
            weight_observer = qconfig.weight()
        else:
            from .qconfig import float_qparams_weight_only_qconfig
            weight_observer = float_qparams_weight_only_qconfig.weight()
    if getattr(weight_observer, "qscheme", None) is not per_channel_affine_float_qparams:
        raise AssertionError(f"{name} quantization is only supported with float_qparams_weight_only_qconfig.")
    if weight_observer.dtype is not quint8:
        raise NotImplementedError(f"quantized.{name}: weight dtype {weight_observer.dtype!r} is not supported by "
                                  "corenn-quantize (corenn.quint8 only; PyTorch also has quint4x2)")
    return weight_observer


class _QuantizedEmbeddingBase(nn.Module):
    """uint8 rows, float32 scales and zero points in buffers (``packed_weight``, ``packed_weight_scales``, ...)."""

    def _init_weight(self, num_embeddings: int, embedding_dim: int, dtype, name: str):
        if dtype is not quint8:
            raise NotImplementedError(f"quantized.{name}: dtype {dtype!r} is not supported by corenn-quantize "
                                      "(corenn.quint8 only; PyTorch also has quint4x2)")
        self.num_embeddings, self.embedding_dim, self.dtype = num_embeddings, embedding_dim, dtype
        # PyTorch's default weight: zeros, scale 1, zero point 0
        self.register_buffer("packed_weight", corenn.zeros((num_embeddings, embedding_dim), dtype=corenn.uint8))
        self.register_buffer("packed_weight_scales", corenn.ones(num_embeddings))
        self.register_buffer("packed_weight_zero_points", corenn.zeros(num_embeddings))

    def set_weight(self, weight: QTensor) -> None:
        """Take ``weight``, a quint8 tensor quantized per row with float qparams (``quantize_per_channel``, axis 0)."""
        if not isinstance(weight, QTensor) or weight.qscheme() is not per_channel_affine_float_qparams or \
                weight.q_per_channel_axis() != 0 or weight.dtype is not quint8:
            raise RuntimeError(f"quantized.{type(self).__name__}.set_weight: expected a corenn.quint8 weight "
                               "quantized per row (axis 0) with corenn.per_channel_affine_float_qparams")
        if tuple(weight.shape) != (self.num_embeddings, self.embedding_dim):
            raise RuntimeError(f"quantized.{type(self).__name__}.set_weight: expected a weight of shape "
                               f"{(self.num_embeddings, self.embedding_dim)}, got {tuple(weight.shape)}")
        self.packed_weight = corenn.from_numpy(weight.int_values.copy())
        self.packed_weight_scales = corenn.from_numpy(weight.scales.copy())
        self.packed_weight_zero_points = corenn.from_numpy(weight.zero_points.copy())

    def weight(self) -> QTensor:
        """The quantized weight (PyTorch's ``module.weight()``)."""
        return QTensor(self.packed_weight.numpy().copy(), quint8, per_channel_affine_float_qparams,
                       self.packed_weight_scales.numpy(), self.packed_weight_zero_points.numpy(), 0)

    def rows(self, indices: np.ndarray) -> np.ndarray:
        """float32 rows ``indices`` as PyTorch's kernel computes them: ``q * scale + bias``, ``bias = -zero_point * scale``."""
        indices = np.asarray(indices)
        if indices.dtype.kind not in "iu":
            raise RuntimeError(f"quantized.{type(self).__name__}: expected indices of an integer type, got "
                               f"{indices.dtype}")
        if indices.size and (indices.min() < 0 or indices.max() >= self.num_embeddings):
            raise IndexError("index out of range in self")
        scales = self.packed_weight_scales.numpy()[indices][..., None]
        bias = -(self.packed_weight_zero_points.numpy()[indices][..., None] * scales)
        return self.packed_weight.numpy()[indices].astype(np.float32) * scales + bias

    @classmethod
    def _quantized_weight(cls, module, weight_observer, name: str) -> QTensor:
        observer = _embedding_weight_observer(module, weight_observer, name)
        weight = module.weight.detach()
        observer(weight)
        scales, zero_points = observer.calculate_qparams()
        return corenn.quantize_per_channel(weight, scales, zero_points, 0, quint8)

    def extra_repr(self):
        return f"num_embeddings={self.num_embeddings}, embedding_dim={self.embedding_dim}, dtype={self.dtype!r}, " \
               f"qscheme={per_channel_affine_float_qparams!r}"


def _refuse_max_norm(max_norm, name: str) -> None:
    """NotImplementedError for a ``max_norm``: the rows are not renormalised (PyTorch's quantized embeddings ignore it)."""
    if max_norm is not None:
        raise NotImplementedError(f"quantized.{name}: max_norm is not supported by corenn-quantize (the rows are not "
                                  f"renormalised; PyTorch's quantized {name} ignores it)")


class Embedding(_QuantizedEmbeddingBase):
    """Quantized ``Embedding`` (``torch.ao.nn.quantized.Embedding``): uint8 rows with float qparams, float output.

    ``convert`` (with ``float_qparams_weight_only_qconfig`` on the embedding) or
    ``quantize_dynamic(model, {nn.Embedding: float_qparams_weight_only_qconfig})`` builds it.
    The weight is 4x smaller than float32 (plus two floats per row).
    """

    def __init__(self, num_embeddings: int, embedding_dim: int, padding_idx=None, max_norm=None, norm_type=2.0,
                 scale_grad_by_freq=False, sparse=False, _weight=None, dtype=quint8):
        super().__init__()
        _refuse_max_norm(max_norm, "Embedding")
        self._init_weight(num_embeddings, embedding_dim, dtype, "Embedding")
        self.padding_idx = padding_idx
        if _weight is not None:
            self.set_weight(_weight)

    def forward(self, indices):
        if not isinstance(indices, corenn.Tensor):
            raise TypeError(f"quantized.Embedding.forward(): argument 'indices' must be Tensor, not "
                            f"{type(indices).__name__}")
        return corenn.from_numpy(self.rows(indices.numpy()))

    @classmethod
    def from_float(cls, module, weight_observer=None):
        if type(module) is not nn.Embedding:
            raise AssertionError("nnq.Embedding.from_float only works for Embedding")
        _refuse_max_norm(module.max_norm, "Embedding")
        quantized = cls(module.num_embeddings, module.embedding_dim)
        quantized.set_weight(cls._quantized_weight(module, weight_observer, "Embedding"))
        return quantized


class EmbeddingBag(_QuantizedEmbeddingBase):
    """Quantized ``EmbeddingBag`` (``torch.ao.nn.quantized.EmbeddingBag``): bags of uint8 rows, float output.

    ``forward(indices, offsets=None, per_sample_weights=None)`` as the float module's. The
    looked-up rows are dequantized as PyTorch's kernel does and reduced by ``mode`` (sum,
    mean or max). PyTorch's quantized EmbeddingBag sums whatever its ``mode`` says; this one
    computes the mode it is given.
    """

    def __init__(self, num_embeddings: int, embedding_dim: int, max_norm=None, norm_type=2.0,
                 scale_grad_by_freq=False, mode="sum", sparse=False, _weight=None, include_last_offset=False,
                 dtype=quint8):
        super().__init__()
        _refuse_max_norm(max_norm, "EmbeddingBag")
        if mode not in ("sum", "mean", "max"):
            raise ValueError(f"quantized.EmbeddingBag: mode has to be one of sum, mean or max, got {mode!r}")
        self._init_weight(num_embeddings, embedding_dim, dtype, "EmbeddingBag")
        self.mode, self.include_last_offset = mode, include_last_offset
        if _weight is not None:
            self.set_weight(_weight)

    def forward(self, indices, offsets=None, per_sample_weights=None, compressed_indices_mapping=None):
        if compressed_indices_mapping is not None:
            raise NotImplementedError("quantized.EmbeddingBag: compressed_indices_mapping (pruned weights) is not "
                                      "supported by corenn-quantize")
        if not isinstance(indices, corenn.Tensor):
            raise TypeError(f"quantized.EmbeddingBag.forward(): argument 'indices' must be Tensor, not "
                            f"{type(indices).__name__}")
        flat = indices.numpy().reshape(-1)
        rows = corenn.from_numpy(self.rows(flat))
        # The bags of the looked-up rows are the core's embedding_bag over a table of exactly those rows.
        positions = corenn.arange(flat.size).reshape(tuple(indices.shape))
        return nn.functional.embedding_bag(positions, rows, offsets, mode=self.mode,
                                           per_sample_weights=per_sample_weights,
                                           include_last_offset=self.include_last_offset)

    @classmethod
    def from_float(cls, module, weight_observer=None):
        if type(module) is not nn.EmbeddingBag:
            raise AssertionError("nnq.EmbeddingBag.from_float only works for EmbeddingBag")
        _refuse_max_norm(module.max_norm, "EmbeddingBag")
        if module.padding_idx is not None:
            raise NotImplementedError("quantized.EmbeddingBag: padding_idx is not supported by corenn-quantize "
                                      "(PyTorch's quantized EmbeddingBag has none)")
        quantized = cls(module.num_embeddings, module.embedding_dim, mode=module.mode,
                        include_last_offset=module.include_last_offset)
        quantized.set_weight(cls._quantized_weight(module, weight_observer, "EmbeddingBag"))
        return quantized

    def extra_repr(self):
        return super().extra_repr() + f", mode={self.mode!r}"


quantized = types.SimpleNamespace(Linear=Linear, LinearReLU=QuantizedLinearReLU, Conv2d=Conv2d,
                                  ConvReLU2d=QuantizedConvReLU2d, ReLU=ReLU, MaxPool2d=MaxPool2d, Flatten=Flatten,
                                  AvgPool2d=AvgPool2d, AdaptiveAvgPool2d=AdaptiveAvgPool2d, LayerNorm=LayerNorm,
                                  Embedding=Embedding, EmbeddingBag=EmbeddingBag,
                                  Quantize=Quantize, DeQuantize=DeQuantize, QFunctional=QFunctional,
                                  functional=types.SimpleNamespace(avg_pool2d=qF.avg_pool2d,
                                                                   adaptive_avg_pool2d=qF.adaptive_avg_pool2d,
                                                                   max_pool2d=qF.max_pool2d))


# -- dynamically quantized modules (torch.ao.nn.quantized.dynamic) --------------------------------------------------

class DynamicLinear(_PackedWeights):
    """``Linear`` with int8 weights whose float input is quantized at run time; float output.

    Activations are quantized per call to quint8 over their own range (7 bits, as PyTorch's
    x86 dynamic quantization), multiplied by the int8 weights with int32 accumulation, and
    dequantized, zero-point corrected and biased in the kernel's store.
    """

    def __init__(self, in_features: int, out_features: int, bias_: bool = True, dtype=qint8):
        _new_packed(self, weight_shape=(out_features, in_features), has_bias=bias_)
        self.in_features, self.out_features = in_features, out_features

    def forward(self, x):
        if isinstance(x, QTensor):
            raise RuntimeError("dynamic quantized Linear: expected a float input, got a quantized tensor")
        array = x.detach().numpy()
        out = self.linear_rows(array.reshape(-1, self.in_features))
        return corenn.from_numpy(out.reshape(array.shape[:-1] + (self.out_features,)))

    def linear_rows(self, rows: np.ndarray) -> np.ndarray:
        """float32 (M, out_features) from float (M, in_features) rows, quantized together over their own range."""
        ops = self.gemm_operands()
        return kernels.linear_dynamic(np.ascontiguousarray(rows, dtype=np.float32), ops["weights"], ops["scales"],
                                      ops["bias"])

    @classmethod
    def from_float(cls, module, weight_observer=None):
        if weight_observer is None:
            weight_observer = module.qconfig.weight()
        if getattr(weight_observer, "dtype", qint8) is not qint8:
            raise NotImplementedError(f"quantize_dynamic: weight dtype {weight_observer.dtype!r} is not supported; "
                                      "corenn-quantize quantizes dynamic Linear weights to corenn.qint8")
        values, scales, zero_points = _weight_observed(module, weight_observer)
        quantized = cls(module.in_features, module.out_features, module.bias is not None)
        quantized.set_weights(values, scales, zero_points,
                              None if module.bias is None else module.bias.detach().numpy())
        return quantized

    def extra_repr(self):
        return (f"in_features={self.in_features}, out_features={self.out_features}, dtype=corenn.qint8, "
                "qscheme=corenn.per_channel_symmetric")


def _sigmoid(x: np.ndarray) -> np.ndarray:
    # The tanh form stays in float32 and never overflows, unlike 1 / (1 + exp(-x)) for very negative x.
    return np.float32(0.5) * (np.tanh(np.float32(0.5) * x) + np.float32(1.0))


def _lstm_cell(input_gates, h, c, hh, hr):
    """One LSTM step on float32 rows: ``input_gates`` is ``x W_ih^T + b_ih``, already computed."""
    gates = input_gates + hh.linear_rows(h)          # h is quantized here, over this step's rows
    in_gate, forget_gate, cell_gate, out_gate = np.split(gates, 4, axis=1)
    c = _sigmoid(forget_gate) * c + _sigmoid(in_gate) * np.tanh(cell_gate)
    h = _sigmoid(out_gate) * np.tanh(c)
    if hr is not None:  # proj_size > 0: the hidden state is projected down, by a quantized weight too
        h = hr.linear_rows(h)
    return h, c


def _lstm_direction(input_gates, batch_sizes, h0, c0, hh, hr, reverse):
    """One direction of one layer over packed rows (step after step); returns (output rows, h_n, c_n).

    Sequences are sorted longest first, so the running rows are always a prefix: forwards,
    finished sequences leave the end of the state; backwards, they join as their last step comes.
    """
    offsets = np.cumsum([0] + batch_sizes)
    outputs = [None] * len(batch_sizes)
    if not reverse:
        h, c, finished = h0, c0, []
        for t, size in enumerate(batch_sizes):
            if size < h.shape[0]:
                finished.append((h[size:], c[size:]))
                h, c = h[:size], c[:size]
            h, c = _lstm_cell(input_gates[offsets[t]:offsets[t + 1]], h, c, hh, hr)
            outputs[t] = h
        finished.append((h, c))
        h = np.concatenate([part[0] for part in reversed(finished)])
        c = np.concatenate([part[1] for part in reversed(finished)])
    else:
        h, c = h0[:batch_sizes[-1]], c0[:batch_sizes[-1]]
        for t in range(len(batch_sizes) - 1, -1, -1):
            size, running = batch_sizes[t], h.shape[0]
            if size > running:
                h = np.concatenate([h, h0[running:size]])
                c = np.concatenate([c, c0[running:size]])
            h, c = _lstm_cell(input_gates[offsets[t]:offsets[t + 1]], h, c, hh, hr)
            outputs[t] = h
    return np.concatenate(outputs), h, c


class DynamicLSTM(nn.Module):
    """``LSTM`` with int8 weights whose float activations are quantized at run time (``torch.ao.nn.quantized.dynamic.LSTM``).

    Every layer and direction holds two ``dynamic.Linear``: ``ih_l{k}[_reverse]`` (``W_ih``,
    ``b_ih``) and ``hh_l{k}[_reverse]`` (``W_hh``, ``b_hh``), plus ``hr_l{k}[_reverse]``
    (``W_hr``) with ``proj_size``. As in PyTorch's CPU kernel, a layer's input projection is
    one product over every time step, its input quantized over the whole sequence (step by
    step for a PackedSequence, as PyTorch does); the hidden state is quantized at each step.
    Biases and the cell arithmetic stay float32. Forward API as ``nn.LSTM``'s: ``(output,
    (h_n, c_n))``, batched or not, ``batch_first``, ``(h_0, c_0)``, PackedSequence.
    """

    def __init__(self, input_size: int, hidden_size: int, num_layers: int = 1, bias: bool = True,
                 batch_first: bool = False, dropout: float = 0.0, bidirectional: bool = False, proj_size: int = 0,
                 dtype=qint8):
        super().__init__()
        if dtype is not qint8:
            raise NotImplementedError(f"dynamic quantized LSTM: dtype {dtype!r} is not supported; corenn-quantize "
                                      "quantizes LSTM weights to corenn.qint8 only")
        if not 0 <= proj_size < hidden_size:
            raise ValueError(f"dynamic quantized LSTM: proj_size must be 0 or smaller than hidden_size "
                             f"({hidden_size}), got {proj_size}")
        self.mode = "LSTM"
        self.input_size, self.hidden_size, self.num_layers = input_size, hidden_size, num_layers
        self.bias, self.batch_first, self.dropout = bias, batch_first, float(dropout)
        self.bidirectional, self.proj_size, self.dtype = bidirectional, proj_size, dtype
        directions = 2 if bidirectional else 1
        real_hidden_size = proj_size if proj_size > 0 else hidden_size
        for layer in range(num_layers):
            layer_input_size = input_size if layer == 0 else real_hidden_size * directions
            for direction in range(directions):
                suffix = f"_l{layer}" + ("_reverse" if direction == 1 else "")
                setattr(self, "ih" + suffix, DynamicLinear(layer_input_size, 4 * hidden_size, bias))
                setattr(self, "hh" + suffix, DynamicLinear(real_hidden_size, 4 * hidden_size, bias))
                if proj_size > 0:
                    setattr(self, "hr" + suffix, DynamicLinear(hidden_size, proj_size, False))

    def _suffixes(self):
        directions = ("", "_reverse") if self.bidirectional else ("",)
        return [f"_l{layer}{reverse}" for layer in range(self.num_layers) for reverse in directions]

    def get_weight(self) -> dict:
        """The int8 weights as quantized tensors, under the float module's names (PyTorch's ``get_weight``)."""
        kinds = ("ih", "hh", "hr") if self.proj_size > 0 else ("ih", "hh")
        return {f"weight_{kind}{suffix}": getattr(self, kind + suffix).weight()
                for suffix in self._suffixes() for kind in kinds}

    def get_bias(self) -> dict:
        """The float biases under the float module's names (PyTorch's ``get_bias``)."""
        return {f"bias_{kind}{suffix}": getattr(self, kind + suffix).bias()
                for suffix in self._suffixes() for kind in ("ih", "hh")}

    def forward(self, input, hx=None):
        name = "dynamic quantized LSTM"
        packed = isinstance(input, PackedSequence)
        directions = 2 if self.bidirectional else 1
        state_sizes = (self.proj_size if self.proj_size > 0 else self.hidden_size, self.hidden_size)
        if packed:
            data, batch_sizes_tensor, sorted_indices, unsorted_indices = input
            batch_sizes = [int(n) for n in batch_sizes_tensor.tolist()]
            batch, batched = batch_sizes[0], True
            if data.ndim != 2:
                raise RuntimeError(f"{name}: packed input data must have 2 dimensions, got {data.ndim}")
            rows = data.detach().numpy()
        else:
            if not isinstance(input, corenn.Tensor):
                raise TypeError(f"{name}.forward(): input must be a Tensor or a PackedSequence, got "
                                f"{type(input).__name__}")
            if input.ndim not in (2, 3):
                raise ValueError(f"{name}: Expected input to be 2D or 3D, got {input.ndim}D tensor instead")
            batched = input.ndim == 3
            array = input.detach().numpy()
            if not batched:
                array = array[:, None]
            elif self.batch_first:
                array = array.transpose(1, 0, 2)
            steps, batch = array.shape[0], array.shape[1]
            batch_sizes = [batch] * steps
            rows = array.reshape(steps * batch, array.shape[2])
            sorted_indices = unsorted_indices = None
        if rows.shape[-1] != self.input_size:
            raise RuntimeError(f"{name}: input.size(-1) must be equal to input_size. Expected {self.input_size}, "
                               f"got {rows.shape[-1]}")
        layer_input = np.ascontiguousarray(rows, dtype=np.float32)

        # the initial state: (layers * directions, N, size) float32 arrays for h and c
        if hx is None:
            states0 = [np.zeros((self.num_layers * directions, batch, size), np.float32) for size in state_sizes]
        else:
            if not isinstance(hx, (tuple, list)) or len(hx) != 2:
                raise RuntimeError(f"{name}: hx must be a tuple (h_0, c_0)")
            wanted = 3 if batched else 2
            if any(s.ndim != wanted for s in hx):
                got = ", ".join(f"{s.ndim}-D" for s in hx)
                raise RuntimeError(f"For {'batched 3-D' if batched else 'unbatched 2-D'} input, hx and cx should "
                                   f"also be {wanted}-D but got ({got}) tensors")
            states0 = [np.asarray(s.detach().numpy(), np.float32) for s in hx]
            if not batched:
                states0 = [s[:, None] for s in states0]
            for index, (s, size) in enumerate(zip(states0, state_sizes)):
                expected = (self.num_layers * directions, batch, size)
                if s.shape != expected:
                    raise RuntimeError(f"Expected hidden[{index}] size {expected}, got {list(s.shape)}")
            if sorted_indices is not None:
                order = sorted_indices.numpy()
                states0 = [s[:, order] for s in states0]

        finals_h, finals_c = [], []
        for layer in range(self.num_layers):
            if layer > 0 and self.dropout > 0 and self.training:
                layer_input = nn.functional.dropout(corenn.from_numpy(layer_input), self.dropout).numpy()
            outputs = []
            for direction in range(directions):
                suffix = f"_l{layer}" + ("_reverse" if direction == 1 else "")
                ih, hh = getattr(self, "ih" + suffix), getattr(self, "hh" + suffix)
                hr = getattr(self, "hr" + suffix) if self.proj_size > 0 else None
                # every time step in one product, quantized over the whole (padded or packed) sequence,
                # as PyTorch's kernel does: quantizing step by step would give other scales
                input_gates = ih.linear_rows(layer_input)
                index = layer * directions + direction
                output, h, c = _lstm_direction(input_gates, batch_sizes, states0[0][index], states0[1][index],
                                               hh, hr, reverse=direction == 1)
                outputs.append(output)
                finals_h.append(h)
                finals_c.append(c)
            layer_input = outputs[0] if directions == 1 else np.concatenate(outputs, axis=1)
        h_n, c_n = np.stack(finals_h), np.stack(finals_c)

        if packed:
            if unsorted_indices is not None:
                order = unsorted_indices.numpy()
                h_n, c_n = h_n[:, order], c_n[:, order]
            output = PackedSequence(corenn.from_numpy(layer_input), batch_sizes_tensor, sorted_indices,
                                    unsorted_indices)
        else:
            output = layer_input.reshape(len(batch_sizes), batch, layer_input.shape[-1])
            if not batched:
                output, h_n, c_n = output[:, 0], h_n[:, 0], c_n[:, 0]
            elif self.batch_first:
                output = output.transpose(1, 0, 2)
            output = corenn.from_numpy(np.ascontiguousarray(output))
        return output, (corenn.from_numpy(np.ascontiguousarray(h_n)), corenn.from_numpy(np.ascontiguousarray(c_n)))

    @classmethod
    def from_float(cls, module, weight_observer=None):
        """Quantize every ``weight_ih`` / ``weight_hh`` (and ``weight_hr``) of ``module``, each with its own observer.

        ``weight_observer`` is an observer not yet used (``quantize_dynamic`` passes
        ``qconfig.weight()``); each weight gets a fresh copy of it, as PyTorch makes one
        observer per weight, so that no weight's range widens another's scale.
        """
        if not isinstance(module, nn.LSTM):
            raise TypeError(f"dynamic quantized LSTM.from_float: expected an nn.LSTM, got {type(module).__name__}")
        if weight_observer is None:
            weight_observer = module.qconfig.weight()
        if getattr(weight_observer, "dtype", qint8) is not qint8:
            raise NotImplementedError(f"quantize_dynamic: weight dtype {weight_observer.dtype!r} is not supported; "
                                      "corenn-quantize quantizes dynamic LSTM weights to corenn.qint8")
        quantized = cls(module.input_size, module.hidden_size, module.num_layers, module.bias, module.batch_first,
                        module.dropout, module.bidirectional, module.proj_size)
        for suffix in quantized._suffixes():
            for kind in ("ih", "hh", "hr"):
                target = getattr(quantized, kind + suffix, None)
                if target is None:
                    continue
                weight = getattr(module, f"weight_{kind}{suffix}").detach()
                values, scales, zero_points = _quantize_weight(weight, copy.deepcopy(weight_observer))
                bias = getattr(module, f"bias_{kind}{suffix}") if module.bias and kind != "hr" else None
                target.set_weights(values, scales, zero_points, None if bias is None else bias.detach().numpy())
        # A fresh module is in training mode; keep the float module's, so that dropout between layers
        # does not switch on in a model that was quantized in eval mode.
        return quantized.train(module.training)

    def extra_repr(self):
        # The float LSTM's description (it reads only the attributes both keep), and the weights' dtype.
        return nn.RNNBase.extra_repr(self) + ", dtype=corenn.qint8"


dynamic = types.SimpleNamespace(Linear=DynamicLinear, LSTM=DynamicLSTM)
