"""Quantized tensors: ``corenn.quint8`` / ``qint8`` / ``qint32``, ``quantize_per_tensor``, ``quantize_per_channel``.

A quantized tensor stores integers ``q`` and the affine map back to reals,
``x = (q - zero_point) * scale``, per tensor or per channel along one axis,
as PyTorch's quantized tensors do. It is not a ``corenn.Tensor``: it carries no
autograd and takes part in no float op, exactly like PyTorch's, where a quantized
tensor reaches float ops only through ``dequantize()``.

Example::

    >>> import corenn, corenn_quantize
    >>> q = corenn.quantize_per_tensor(corenn.tensor([-1.0, 0.0, 1.0, 2.0]), 0.1, 10, corenn.quint8)
    >>> q.int_repr()
    tensor([ 0, 10, 20, 30], dtype=corenn.uint8)
"""
from __future__ import annotations

import numpy as np

import corenn

__all__ = ["QuantizedDType", "QScheme", "quint8", "qint8", "qint32", "per_tensor_affine", "per_channel_affine",
           "per_tensor_symmetric", "per_channel_symmetric", "per_channel_affine_float_qparams", "QTensor",
           "quantize_per_tensor",
           "quantize_per_channel", "dequantize", "quantize_array", "dtype_range"]


class QuantizedDType:
    """A quantized element type (``torch.quint8``, ``torch.qint8``, ``torch.qint32``): integers plus an affine map."""

    is_quantized = True
    is_floating_point = False
    is_complex = False

    def __init__(self, name: str, storage: corenn.dtype, quant_min: int, quant_max: int):
        self.name = name
        self.storage = storage            # the corenn dtype of int_repr()
        self.numpy = storage.numpy
        self.itemsize = storage.itemsize
        self.is_signed = storage.is_signed
        self.quant_min, self.quant_max = quant_min, quant_max

    def __repr__(self):
        return f"corenn.{self.name}"

    def __reduce__(self):
        return (_by_name.__getitem__, (self.name,))


class QScheme:
    """How a tensor is quantized (``torch.per_tensor_affine``, ``torch.per_channel_symmetric``, ...)."""

    def __init__(self, name: str):
        self.name = name
        self.per_channel = name.startswith("per_channel")
        self.symmetric = name.endswith("symmetric")
        # float zero points, x = (q - zero_point) * scale with both float32 (embedding weights)
        self.float_qparams = name.endswith("float_qparams")

    def __repr__(self):
        return f"corenn.{self.name}"

    def __reduce__(self):
        return (_by_name.__getitem__, (self.name,))


quint8 = QuantizedDType("quint8", corenn.uint8, 0, 255)
qint8 = QuantizedDType("qint8", corenn.int8, -128, 127)
qint32 = QuantizedDType("qint32", corenn.int32, -(2 ** 31), 2 ** 31 - 1)
per_tensor_affine = QScheme("per_tensor_affine")
per_channel_affine = QScheme("per_channel_affine")
per_tensor_symmetric = QScheme("per_tensor_symmetric")
per_channel_symmetric = QScheme("per_channel_symmetric")
per_channel_affine_float_qparams = QScheme("per_channel_affine_float_qparams")
_by_name = {o.name: o for o in (quint8, qint8, qint32, per_tensor_affine, per_channel_affine,
                                per_tensor_symmetric, per_channel_symmetric, per_channel_affine_float_qparams)}


def dtype_range(dtype: QuantizedDType, reduce_range: bool = False) -> tuple[int, int]:
    """``(quant_min, quant_max)`` of a quantized dtype; ``reduce_range`` drops one bit, as PyTorch's observers do."""
    if not isinstance(dtype, QuantizedDType):
        raise TypeError(f"expected corenn.quint8, corenn.qint8 or corenn.qint32, got {dtype!r}")
    if reduce_range and dtype is not qint32:
        return (0, 127) if dtype is quint8 else (-64, 63)
    return dtype.quant_min, dtype.quant_max


def quantize_array(x: np.ndarray, scale, zero_point, quant_min: int, quant_max: int, dtype) -> np.ndarray:
    """``clamp(round(x / scale + zero_point))`` on numpy arrays (round half to even), as fbgemm's ``Quantize``.

    ``scale`` and ``zero_point`` broadcast against ``x`` (per-channel callers reshape them).
    As in PyTorch's vectorised kernels: ``1 / float32(scale)`` in float32, then ``x * inverse +
    zero_point`` fused (one rounding, as their FMA: the float64 product is exact and the sum
    rounds once more only when the zero point dwarfs it) before rounding to an integer.
    """
    inverse_scale = (np.float32(1.0) / np.asarray(scale, dtype=np.float32)).astype(np.float64)
    scaled = x.astype(np.float64) * inverse_scale
    scaled += np.asarray(zero_point, dtype=np.float64)
    scaled = np.rint(scaled.astype(np.float32))
    np.clip(scaled, quant_min, quant_max, out=scaled)
    return scaled.astype(dtype)


def _as_numpy(value, what: str, function: str) -> np.ndarray:
    if isinstance(value, corenn.Tensor):
        return value.detach().cpu().numpy()
    if isinstance(value, np.ndarray):
        return value
    raise TypeError(f"{function}(): argument '{what}' must be Tensor, not {type(value).__name__}")


class QTensor:
    """A quantized tensor (what ``quantize_per_tensor`` / ``quantize_per_channel`` return).

    ``int_repr()`` gives the stored integers, ``dequantize()`` the float32 values;
    ``q_scale()`` / ``q_zero_point()`` (per tensor) and ``q_per_channel_scales()`` /
    ``q_per_channel_zero_points()`` / ``q_per_channel_axis()`` (per channel) the map.
    """

    is_quantized = True
    requires_grad = False

    def __init__(self, int_repr: np.ndarray, dtype: QuantizedDType, qscheme: QScheme, scale, zero_point,
                 axis: int | None = None):
        self.int_values = int_repr
        self.dtype = dtype
        self.qscheme_value = qscheme
        self.axis = axis
        if qscheme.float_qparams:  # PyTorch keeps both in float32 for this scheme
            self.scales = np.asarray(scale, dtype=np.float32).reshape(-1)
            self.zero_points = np.asarray(zero_point, dtype=np.float32).reshape(-1)
        elif qscheme.per_channel:
            self.scales = np.asarray(scale, dtype=np.float64).reshape(-1)
            self.zero_points = np.asarray(zero_point, dtype=np.int64).reshape(-1)
        else:
            self.scales, self.zero_points = float(scale), int(zero_point)

    # -- PyTorch's accessors ---------------------------------------------------------------------------
    @property
    def shape(self):
        return corenn.Size(self.int_values.shape) if hasattr(corenn, "Size") else tuple(self.int_values.shape)

    @property
    def device(self):
        return corenn.device("cpu")

    def size(self, dim: int | None = None):
        return self.shape if dim is None else self.int_values.shape[dim]

    def dim(self) -> int:
        return self.int_values.ndim

    ndim = property(dim)

    def numel(self) -> int:
        return int(self.int_values.size)

    def element_size(self) -> int:
        return self.dtype.itemsize

    def qscheme(self) -> QScheme:
        return self.qscheme_value

    def q_scale(self) -> float:
        self._need_per_tensor("q_scale")
        return self.scales

    def q_zero_point(self) -> int:
        self._need_per_tensor("q_zero_point")
        return self.zero_points

    def q_per_channel_scales(self) -> corenn.Tensor:
        self._need_per_channel("q_per_channel_scales")
        return corenn.from_numpy(self.scales.copy())

    def q_per_channel_zero_points(self) -> corenn.Tensor:
        self._need_per_channel("q_per_channel_zero_points")
        return corenn.from_numpy(self.zero_points.copy())

    def q_per_channel_axis(self) -> int:
        self._need_per_channel("q_per_channel_axis")
        return self.axis

    def _need_per_tensor(self, name):
        if self.qscheme_value.per_channel:
            raise RuntimeError(f"{name}(): expected a per-tensor quantized tensor, got {self.qscheme_value!r}")

    def _need_per_channel(self, name):
        if not self.qscheme_value.per_channel:
            raise RuntimeError(f"{name}(): expected a per-channel quantized tensor, got {self.qscheme_value!r}")

    def int_repr(self) -> corenn.Tensor:
        return corenn.from_numpy(self.int_values.copy())

    def dequantize_array(self) -> np.ndarray:
        """The float32 values as a numpy array (what the quantized modules compute with)."""
        if self.qscheme_value.float_qparams:
            shape = [1] * self.int_values.ndim
            shape[self.axis] = -1
            return (self.int_values.astype(np.float32) - self.zero_points.reshape(shape)) * self.scales.reshape(shape)
        if self.qscheme_value.per_channel:
            shape = [1] * self.int_values.ndim
            shape[self.axis] = -1
            scales = self.scales.reshape(shape).astype(np.float32)
            zero_points = self.zero_points.reshape(shape)
            return ((self.int_values.astype(np.int64) - zero_points) * scales).astype(np.float32)
        return ((self.int_values.astype(np.int32) - self.zero_points) * np.float32(self.scales)).astype(np.float32)

    def dequantize(self) -> corenn.Tensor:
        return corenn.from_numpy(self.dequantize_array())

    # -- shape ops that keep the quantization (what models do with activations) -------------------------
    def _like(self, int_values):
        return QTensor(int_values, self.dtype, self.qscheme_value, self.scales, self.zero_points, self.axis)

    def reshape(self, *shape):
        self._need_per_tensor("reshape")
        shape = shape[0] if len(shape) == 1 and isinstance(shape[0], (tuple, list)) else shape
        return self._like(self.int_values.reshape(tuple(shape)))

    view = reshape

    def flatten(self, start_dim: int = 0, end_dim: int = -1):
        self._need_per_tensor("flatten")
        shape = self.int_values.shape
        end = end_dim % len(shape) if shape else 0
        return self.reshape(shape[:start_dim] + (-1,) + shape[end + 1:])

    def clone(self):
        return self._like(self.int_values.copy())

    def detach(self):
        return self

    def __getitem__(self, index):
        self._need_per_tensor("__getitem__")
        return self._like(self.int_values[index])

    def __len__(self):
        return len(self.int_values)

    def __deepcopy__(self, memo):
        return self.clone()

    def __repr__(self):
        values = repr(self.dequantize())[:-1]  # "tensor([...]" without its closing parenthesis
        indent = " " * len("tensor(")
        scheme = self.qscheme_value
        text = f"{values}, size={tuple(self.int_values.shape)}, dtype={self.dtype!r},\n{indent}quantization_scheme={scheme!r}"
        if scheme.per_channel:
            scales = repr(self.q_per_channel_scales()).replace("\n", "\n" + indent)
            zero_points = repr(self.q_per_channel_zero_points()).replace("\n", "\n" + indent)
            return f"{text},\n{indent}scale={scales},\n{indent}zero_point={zero_points}, axis={self.axis})"
        return f"{text}, scale={self.scales!r}, zero_point={self.zero_points})"


def _check_dtype(dtype, function: str) -> QuantizedDType:
    if not isinstance(dtype, QuantizedDType):
        raise TypeError(f"{function}(): argument 'dtype' must be corenn.quint8, corenn.qint8 or corenn.qint32, "
                        f"got {dtype!r}")
    return dtype


def quantize_per_tensor(input, scale, zero_point, dtype) -> QTensor:
    """Quantize ``input`` with one ``scale`` and ``zero_point`` (``torch.quantize_per_tensor``).

    Example::

        >>> corenn.quantize_per_tensor(corenn.tensor([-1.0, 0.0, 1.0, 2.0]), 0.1, 10, corenn.quint8)
        tensor([-1.,  0.,  1.,  2.], size=(4,), dtype=corenn.quint8,
               quantization_scheme=corenn.per_tensor_affine, scale=0.1, zero_point=10)
    """
    dtype = _check_dtype(dtype, "quantize_per_tensor")
    x = _as_numpy(input, "input", "quantize_per_tensor")
    if isinstance(scale, corenn.Tensor):
        scale = scale.item()
    if isinstance(zero_point, corenn.Tensor):
        zero_point = zero_point.item()
    if not float(scale) > 0 or not np.isfinite(scale):
        raise RuntimeError(f"quantize_per_tensor(): scale must be positive and finite, got {scale}")
    if not dtype.quant_min <= int(zero_point) <= dtype.quant_max:
        raise RuntimeError(f"quantize_per_tensor(): zero_point {zero_point} is outside the range of {dtype!r} "
                           f"[{dtype.quant_min}, {dtype.quant_max}]")
    q = quantize_array(x, float(scale), int(zero_point), dtype.quant_min, dtype.quant_max, dtype.numpy)
    return QTensor(q, dtype, per_tensor_affine, float(scale), int(zero_point))


def quantize_per_channel(input, scales, zero_points, axis: int, dtype) -> QTensor:
    """Quantize ``input`` with one scale and zero point per slice along ``axis`` (``torch.quantize_per_channel``).

    Floating ``zero_points`` give ``per_channel_affine_float_qparams`` (as PyTorch): ``q =
    round(x / scale + zero_point)`` and ``x = (q - zero_point) * scale``, all in float32, the
    scheme of quantized embedding weights.
    """
    dtype = _check_dtype(dtype, "quantize_per_channel")
    x = _as_numpy(input, "input", "quantize_per_channel")
    zero_points = _as_numpy(zero_points, "zero_points", "quantize_per_channel")
    float_qparams = zero_points.dtype.kind == "f"
    scales = _as_numpy(scales, "scales", "quantize_per_channel")
    scales = scales.astype(np.float32 if float_qparams else np.float64).reshape(-1)
    zero_points = zero_points.astype(np.float32 if float_qparams else np.int64).reshape(-1)
    if not -x.ndim <= axis < x.ndim:
        raise IndexError(f"quantize_per_channel(): axis {axis} is out of range for a {x.ndim}-d input")
    axis %= x.ndim
    if scales.shape[0] != x.shape[axis] or zero_points.shape[0] != x.shape[axis]:
        raise RuntimeError(f"quantize_per_channel(): expected {x.shape[axis]} scales and zero points (the size of "
                           f"axis {axis}), got {scales.shape[0]} and {zero_points.shape[0]}")
    shape = [1] * x.ndim
    shape[axis] = -1
    if float_qparams:
        inverse_scales = np.where(scales == 0, np.float32(1), np.float32(1) / np.where(scales == 0, 1, scales))
        q = np.rint(x.astype(np.float32) * inverse_scales.reshape(shape) + zero_points.reshape(shape))
        q = np.clip(q, dtype.quant_min, dtype.quant_max).astype(dtype.numpy)
        return QTensor(q, dtype, per_channel_affine_float_qparams, scales, zero_points, axis)
    q = quantize_array(x, scales.reshape(shape), zero_points.reshape(shape), dtype.quant_min, dtype.quant_max,
                       dtype.numpy)
    return QTensor(q, dtype, per_channel_affine, scales, zero_points, axis)


def dequantize(tensor):
    """The float values of a quantized tensor (``torch.dequantize``); a list of them gives a list."""
    if isinstance(tensor, (list, tuple)):
        return [dequantize(t) for t in tensor]
    if isinstance(tensor, QTensor):
        return tensor.dequantize()
    if isinstance(tensor, corenn.Tensor):
        return tensor
    raise TypeError(f"dequantize(): argument 'tensor' must be a quantized Tensor, not {type(tensor).__name__}")
