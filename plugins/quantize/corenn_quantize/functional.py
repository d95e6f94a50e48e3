"""Functions on quantized tensors (``torch.ao.nn.quantized.functional``): pooling, layer norm, embedding lookups.

The pooling functions compute as PyTorch's quantized CPU kernels do, so their integers are
PyTorch's, bit for bit: window sums of the stored integers, less the zero point once per
element actually in the window, times ``input_scale / output_scale / divisor`` in float32,
added to the zero point and rounded half to even (fbgemm's ``Quantize``). A window wholly in
the padding gives the zero point.
"""
from __future__ import annotations

import numpy as np

import corenn
import corenn.nn.functional as F

from .qtensor import QTensor, per_tensor_affine, quantize_array, quint8

__all__ = ["avg_pool2d", "adaptive_avg_pool2d", "max_pool2d", "layer_norm_quantized"]


def _need_quantized(input, name: str) -> QTensor:
    if not isinstance(input, QTensor):
        raise ValueError(f"Input to 'quantized.{name}' must be quantized!")
    if input.qscheme().per_channel:
        raise RuntimeError(f"quantized.{name}: expected a per-tensor quantized input, got {input.qscheme()!r}")
    if input.dim() not in (3, 4):
        raise ValueError(f"quantized.{name}: expected a 3-d or 4-d input, got {input.dim()}-d")
    return input


def _window_sums(values: np.ndarray, rows: tuple, columns: tuple) -> np.ndarray:
    """Sums of ``values[..., r0:r1, c0:c1]`` for every (r0, r1) in ``rows`` and (c0, c1) in ``columns``.

    ``rows`` / ``columns`` are pairs of index arrays; an integral image gives each sum from four
    corners, exactly (int64).
    """
    integral = np.zeros(values.shape[:-2] + (values.shape[-2] + 1, values.shape[-1] + 1), np.int64)
    np.cumsum(np.cumsum(values, axis=-2, dtype=np.int64), axis=-1, out=integral[..., 1:, 1:])
    (r0, r1), (c0, c1) = rows, columns
    r0, r1, c0, c1 = r0[:, None], r1[:, None], c0[None, :], c1[None, :]
    return integral[..., r1, c1] - integral[..., r0, c1] - integral[..., r1, c0] + integral[..., r0, c0]


def _requantize_sums(input: QTensor, sums, counts, divisors, output_scale: float, output_zero_point: int):
    """PyTorch's store of a quantized average: ``nearbyint(zp + (sums - counts * zp_in) * (1 / (1 / multiplier)))``."""
    multiplier = (input.q_scale() / output_scale / divisors).astype(np.float32)   # double arithmetic, float result
    scale = np.float32(1.0) / multiplier                                           # quantize_val's scale argument
    inverse = np.float32(1.0) / scale                                              # fbgemm multiplies by 1 / scale
    accumulated = (sums - counts * input.q_zero_point()).astype(np.float32)
    q = np.rint(np.float32(output_zero_point) + accumulated * inverse)
    q = np.where(counts == 0, np.float32(output_zero_point), q)  # a window of padding only
    dtype = input.dtype
    return np.clip(q, dtype.quant_min, dtype.quant_max).astype(dtype.numpy)


def _pair(value, name: str, function: str):
    if isinstance(value, (tuple, list)):
        if len(value) == 1:
            return int(value[0]), int(value[0])
        if len(value) != 2:
            raise ValueError(f"{function}: {name} must be an int or a pair of ints, got {value!r}")
        return int(value[0]), int(value[1])
    return int(value), int(value)


def avg_pool2d(input, kernel_size, stride=None, padding=0, ceil_mode: bool = False, count_include_pad: bool = True,
               divisor_override=None):
    """Average pooling of a quantized tensor; the output keeps the input's scale and zero point.

    ``torch.ao.nn.quantized.functional.avg_pool2d``: arguments as ``F.avg_pool2d``'s.

        >>> q = corenn.quantize_per_tensor(corenn.arange(16.).reshape(1, 1, 4, 4), 0.5, 3, corenn.quint8)
        >>> avg_pool2d(q, 2).dequantize().tolist()
        [[[[2.5, 4.5], [10.5, 12.5]]]]
    """
    input = _need_quantized(input, "avg_pool2d")
    values = input.int_values
    # The float kernel validates the arguments (with its messages) and gives the output size.
    shape = F.avg_pool2d(corenn.zeros((1,) + values.shape[-3:-2] + values.shape[-2:]), kernel_size, stride, padding,
                         ceil_mode, count_include_pad, divisor_override).shape
    out_h, out_w = shape[-2], shape[-1]
    (kh, kw) = _pair(kernel_size, "kernel_size", "avg_pool2d")
    no_stride = stride is None or (isinstance(stride, (tuple, list)) and len(stride) == 0)
    (sh, sw) = _pair(kernel_size if no_stride else stride, "stride", "avg_pool2d")
    (ph, pw) = _pair(padding, "padding", "avg_pool2d")

    def bounds(out, k, s, p, size):
        start = np.arange(out) * s - p
        end = np.minimum(start + k, size + p)
        pool = end - start
        start, end = np.maximum(start, 0), np.minimum(end, size)
        return start, np.maximum(end, start), pool

    h0, h1, pool_h = bounds(out_h, kh, sh, ph, values.shape[-2])
    w0, w1, pool_w = bounds(out_w, kw, sw, pw, values.shape[-1])
    sums = _window_sums(values, (h0, h1), (w0, w1))
    counts = (h1 - h0)[:, None] * (w1 - w0)[None, :]
    if divisor_override is not None:
        divisors = np.full(counts.shape, float(divisor_override))
    elif count_include_pad:
        divisors = (pool_h[:, None] * pool_w[None, :]).astype(np.float64)
    else:
        divisors = counts.astype(np.float64)
    divisors = np.where(counts == 0, 1.0, divisors)
    q = _requantize_sums(input, sums, counts, divisors, input.q_scale(), input.q_zero_point())
    return input._like(q)


def _adaptive_bounds(size: int, out: int):
    index = np.arange(out)
    return (index * size) // out, -((-(index + 1) * size) // out)


def adaptive_avg_pool2d(input, output_size):
    """Adaptive average pooling of a quantized tensor, keeping its scale and zero point.

    ``torch.ao.nn.quantized.functional.adaptive_avg_pool2d``: output_size an int, a pair, or
    ``None`` in a pair to keep that input size.
    """
    input = _need_quantized(input, "functional.adaptive_avg_pool2d")
    values = input.int_values
    shape = F.adaptive_avg_pool2d(corenn.zeros((1,) + values.shape[-2:]), output_size).shape
    (h0, h1), (w0, w1) = _adaptive_bounds(values.shape[-2], shape[-2]), _adaptive_bounds(values.shape[-1], shape[-1])
    sums = _window_sums(values, (h0, h1), (w0, w1))
    counts = (h1 - h0)[:, None] * (w1 - w0)[None, :]
    # PyTorch's kernel averages the stored integers themselves (scale and zero point are kept, so the
    # zero point passes through the mean), multiplying by a float32 reciprocal of the window size.
    reciprocal = (1.0 / counts).astype(np.float32)
    q = np.rint(sums.astype(np.float32) * reciprocal)
    return input._like(np.clip(q, input.dtype.quant_min, input.dtype.quant_max).astype(input.dtype.numpy))


def max_pool2d(input, kernel_size, stride=None, padding=0, dilation=1, ceil_mode: bool = False,
               return_indices: bool = False):
    """Max pooling of a quantized tensor (the maximum of the integers is the integer of the maximum)."""
    if not isinstance(input, QTensor):
        raise ValueError("Input to 'quantized.max_pool2d' must be quantized!")
    if return_indices:
        raise NotImplementedError("quantized.max_pool2d: return_indices=True is not supported (PyTorch's quantized "
                                  "max_pool2d does not return indices either)")
    pooled = F.max_pool2d(corenn.from_numpy(input.int_values.astype(np.float32)), kernel_size, stride, padding,
                          dilation, ceil_mode)
    return input._like(pooled.numpy().astype(input.dtype.numpy))


def layer_norm_quantized(input: QTensor, normalized_shape, weight, bias, eps: float, output_scale: float,
                         output_zero_point: int) -> QTensor:
    """Layer norm of a quantized tensor, quantized to ``output_scale`` / ``output_zero_point`` (quint8).

    The statistics are computed in float64 on the dequantized values and the result rounded
    once, half to even; PyTorch's kernel takes them in float32 from the integers, so an output
    can differ from its by one step where a value lies on a rounding boundary.
    """
    if not isinstance(input, QTensor) or input.qscheme().per_channel:
        raise RuntimeError("quantized LayerNorm: expected a per-tensor quantized input; put a QuantStub before it")
    normalized_shape = tuple(normalized_shape)
    dims = tuple(range(input.dim() - len(normalized_shape), input.dim()))
    if input.int_values.shape[input.dim() - len(normalized_shape):] != normalized_shape:
        raise RuntimeError(f"quantized LayerNorm: expected input with shape [*, {', '.join(map(str, normalized_shape))}]"
                           f", but got input of size{list(input.int_values.shape)}")
    x = (input.int_values.astype(np.float64) - input.q_zero_point()) * input.q_scale()
    mean = x.mean(axis=dims, keepdims=True)
    variance = ((x - mean) ** 2).mean(axis=dims, keepdims=True)
    y = (x - mean) / np.sqrt(variance + eps)
    if weight is not None:
        y = y * weight.detach().numpy().astype(np.float64)
    if bias is not None:
        y = y + bias.detach().numpy().astype(np.float64)
    q = quantize_array(y.astype(np.float32), output_scale, output_zero_point, quint8.quant_min, quint8.quant_max,
                       np.uint8)
    return QTensor(q, quint8, per_tensor_affine, output_scale, output_zero_point)
