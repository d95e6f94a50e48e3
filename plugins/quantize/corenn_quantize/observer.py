"""Observers: modules that watch float values pass and choose a scale and zero point (``torch.ao.quantization.observer``).

Each observer is an ``nn.Module`` whose state (``min_val``, ``max_val``, the
histogram) is in buffers, so it saves in ``state_dict`` and moves with the
model. ``calculate_qparams()`` returns ``(scale, zero_point)`` tensors computed
in float32 exactly as PyTorch's observers compute them, so the same data gives
the same parameters (the tests compare against ``torch.ao.quantization``).

Example::

    >>> obs = MinMaxObserver()
    >>> _ = obs(corenn.tensor([-1.0, 2.0]))
    >>> obs.calculate_qparams()
    (tensor([0.0118]), tensor([85]))
"""
from __future__ import annotations

import functools
import warnings

import numpy as np

import corenn
from corenn import nn

from .qtensor import (QuantizedDType, dtype_range, per_channel_affine, per_channel_affine_float_qparams,
                      per_channel_symmetric, per_tensor_affine, per_tensor_symmetric, qint8, quint8)

__all__ = ["ObserverBase", "MinMaxObserver", "MovingAverageMinMaxObserver", "PerChannelMinMaxObserver",
           "MovingAveragePerChannelMinMaxObserver", "HistogramObserver", "PlaceholderObserver", "NoopObserver",
           "default_observer", "default_weight_observer", "default_per_channel_weight_observer",
           "default_histogram_observer", "default_dynamic_quant_observer", "default_placeholder_observer"]

FLOAT32_EPS = float(np.finfo(np.float32).eps)


class _PartialWrapper:
    """What ``Observer.with_args(...)`` returns: a factory that makes configured observers (PyTorch's ``with_args``)."""

    def __init__(self, factory):
        self.factory = factory

    def __call__(self, **kwargs):
        return self.factory(**kwargs)

    def with_args(self, **kwargs):
        return _PartialWrapper(functools.partial(self.factory, **kwargs))

    def __repr__(self):
        return f"functools.partial({self.factory!r})" if not isinstance(self.factory, functools.partial) \
            else repr(self.factory)


def _with_args(cls_or_self, **kwargs):
    return _PartialWrapper(functools.partial(cls_or_self, **kwargs))


class ObserverBase(nn.Module):
    """Base of all observers: ``dtype``, ``qscheme``, the integer range, and ``with_args``."""

    with_args = classmethod(_with_args)

    def __init__(self, dtype=quint8, qscheme=per_tensor_affine, reduce_range: bool = False, quant_min=None,
                 quant_max=None, eps: float = FLOAT32_EPS, is_dynamic: bool = False):
        super().__init__()
        if not isinstance(dtype, QuantizedDType):
            raise TypeError(f"{type(self).__name__}(): argument 'dtype' must be corenn.quint8, corenn.qint8 or "
                            f"corenn.qint32, got {dtype!r}")
        self.dtype, self.qscheme, self.reduce_range, self.eps = dtype, qscheme, reduce_range, float(eps)
        self.is_dynamic = is_dynamic
        self.has_customized_qrange = quant_min is not None and quant_max is not None
        if self.has_customized_qrange:
            if not quant_min <= 0 <= quant_max:
                raise ValueError(f"{type(self).__name__}(): the range [quant_min, quant_max] must include 0, "
                                 f"got [{quant_min}, {quant_max}]")
            if reduce_range:
                quant_min, quant_max = quant_min // 2, quant_max // 2
        else:
            quant_min, quant_max = dtype_range(dtype, reduce_range)
        self.quant_min, self.quant_max = int(quant_min), int(quant_max)

    def calculate_qparams_from(self, min_val: np.ndarray, max_val: np.ndarray):
        """PyTorch's ``_calculate_qparams``: scale and zero point from float32 min and max (per tensor or channel)."""
        min_val = np.asarray(min_val, dtype=np.float32)
        max_val = np.asarray(max_val, dtype=np.float32)
        if min_val.size == 0 or not (np.all(min_val <= max_val)) or np.any(np.isinf(min_val)):
            warnings.warn("must run observer before calling calculate_qparams. Returning default values.",
                          stacklevel=3)
            return corenn.tensor([1.0]), corenn.tensor([0])
        quant_min, quant_max = self.quant_min, self.quant_max
        min_val_neg = np.minimum(min_val, np.float32(0))
        max_val_pos = np.maximum(max_val, np.float32(0))
        zero_point = np.zeros(min_val_neg.shape, dtype=np.int64)
        eps = np.float32(self.eps)
        if self.qscheme is per_channel_affine_float_qparams:
            # PyTorch's: the raw range (0 need not be in it), and a float zero point, -min / scale
            scale = ((max_val - min_val) / np.float32(quant_max - quant_min)).astype(np.float32)
            scale = np.where(scale > eps, scale, np.float32(1.0)).astype(np.float32)
            zero_point = (np.float32(-1) * min_val / scale).astype(np.float32)
            return corenn.from_numpy(np.atleast_1d(scale)), corenn.from_numpy(np.atleast_1d(zero_point))
        if self.qscheme in (per_tensor_symmetric, per_channel_symmetric):
            max_val_pos = np.maximum(-min_val_neg, max_val_pos)
            scale = np.maximum(max_val_pos / np.float32((quant_max - quant_min) / 2), eps).astype(np.float32)
            if self.dtype is quint8:
                zero_point[...] = (quant_min + quant_max) // 2 if self.has_customized_qrange else 128
        else:
            scale = np.maximum((max_val_pos - min_val_neg) / np.float32(quant_max - quant_min), eps)
            scale = scale.astype(np.float32)
            zero_point = quant_min - np.rint(min_val_neg / scale).astype(np.int64)
            zero_point = np.clip(zero_point, quant_min, quant_max)
        return (corenn.from_numpy(np.atleast_1d(scale).astype(np.float32)),
                corenn.from_numpy(np.atleast_1d(zero_point).astype(np.int64)))

    def extra_repr(self) -> str:
        return f"min_val={self.min_val.tolist()}, max_val={self.max_val.tolist()}" if hasattr(self, "min_val") else ""


def _values(x) -> np.ndarray:
    return x.detach().cpu().numpy().astype(np.float32, copy=False)


class MinMaxObserver(ObserverBase):
    """Running minimum and maximum of everything seen (``torch.ao.quantization.MinMaxObserver``)."""

    def __init__(self, dtype=quint8, qscheme=per_tensor_affine, reduce_range=False, quant_min=None, quant_max=None,
                 eps=FLOAT32_EPS, is_dynamic=False, **kwargs):
        if qscheme not in (per_tensor_affine, per_tensor_symmetric):
            raise NotImplementedError(f"{type(self).__name__}(): qscheme {qscheme!r} is per channel; use "
                                      "PerChannelMinMaxObserver")
        super().__init__(dtype, qscheme, reduce_range, quant_min, quant_max, eps, is_dynamic)
        self.register_buffer("min_val", corenn.tensor(float("inf")))
        self.register_buffer("max_val", corenn.tensor(float("-inf")))

    def forward(self, x_orig):
        if x_orig.numel() == 0:
            return x_orig
        x = _values(x_orig)
        self.update(x.min(), x.max())
        return x_orig

    def update(self, x_min, x_max):
        min_val = np.minimum(self.min_val.numpy(), np.float32(x_min))
        max_val = np.maximum(self.max_val.numpy(), np.float32(x_max))
        self.min_val = corenn.from_numpy(np.asarray(min_val, dtype=np.float32))
        self.max_val = corenn.from_numpy(np.asarray(max_val, dtype=np.float32))

    def calculate_qparams(self):
        return self.calculate_qparams_from(self.min_val.numpy(), self.max_val.numpy())

    def reset_min_max_vals(self):
        self.min_val = corenn.tensor(float("inf"))
        self.max_val = corenn.tensor(float("-inf"))


class MovingAverageMinMaxObserver(MinMaxObserver):
    """Exponential moving averages of each batch's min and max (``averaging_constant`` weighs the new batch)."""

    def __init__(self, averaging_constant=0.01, dtype=quint8, qscheme=per_tensor_affine, reduce_range=False,
                 quant_min=None, quant_max=None, eps=FLOAT32_EPS, is_dynamic=False, **kwargs):
        super().__init__(dtype, qscheme, reduce_range, quant_min, quant_max, eps, is_dynamic)
        self.averaging_constant = averaging_constant

    def update(self, x_min, x_max):
        min_val, max_val = self.min_val.numpy(), self.max_val.numpy()
        c = np.float32(self.averaging_constant)
        if np.isinf(min_val) and np.isinf(max_val):
            min_val, max_val = np.float32(x_min), np.float32(x_max)
        else:
            min_val = min_val + c * (np.float32(x_min) - min_val)
            max_val = max_val + c * (np.float32(x_max) - max_val)
        self.min_val = corenn.from_numpy(np.asarray(min_val, dtype=np.float32))
        self.max_val = corenn.from_numpy(np.asarray(max_val, dtype=np.float32))


class PerChannelMinMaxObserver(ObserverBase):
    """Running min and max per slice along ``ch_axis`` (``torch.ao.quantization.PerChannelMinMaxObserver``)."""

    def __init__(self, ch_axis=0, dtype=quint8, qscheme=per_channel_affine, reduce_range=False, quant_min=None,
                 quant_max=None, eps=FLOAT32_EPS, is_dynamic=False, **kwargs):
        if qscheme not in (per_channel_affine, per_channel_symmetric, per_channel_affine_float_qparams):
            raise NotImplementedError(f"{type(self).__name__}(): qscheme {qscheme!r} is per tensor; use "
                                      "MinMaxObserver")
        super().__init__(dtype, qscheme, reduce_range, quant_min, quant_max, eps, is_dynamic)
        self.ch_axis = ch_axis
        self.register_buffer("min_val", corenn.tensor([]))
        self.register_buffer("max_val", corenn.tensor([]))
        self.register_load_state_dict_pre_hook(_resize_per_channel_buffers)

    def forward(self, x_orig):
        if x_orig.numel() == 0:
            return x_orig
        x = np.moveaxis(_values(x_orig), self.ch_axis, 0).reshape(x_orig.shape[self.ch_axis], -1)
        self.update(x.min(axis=1), x.max(axis=1))
        return x_orig

    def update(self, x_min, x_max):
        min_val, max_val = self.min_val.numpy(), self.max_val.numpy()
        if min_val.size == 0:
            min_val, max_val = x_min, x_max
        else:
            min_val, max_val = np.minimum(min_val, x_min), np.maximum(max_val, x_max)
        self.min_val = corenn.from_numpy(np.asarray(min_val, dtype=np.float32))
        self.max_val = corenn.from_numpy(np.asarray(max_val, dtype=np.float32))

    def calculate_qparams(self):
        return self.calculate_qparams_from(self.min_val.numpy(), self.max_val.numpy())

    def reset_min_max_vals(self):
        self.min_val = corenn.tensor([])
        self.max_val = corenn.tensor([])


def _resize_per_channel_buffers(module, state_dict, prefix, *args):
    # Per-channel buffers have the size of the data seen, so a fresh observer takes the saved size.
    for name in ("min_val", "max_val"):
        if prefix + name in state_dict:
            setattr(module, name, corenn.zeros(tuple(state_dict[prefix + name].shape)))


class MovingAveragePerChannelMinMaxObserver(PerChannelMinMaxObserver):
    """Per-channel moving averages of min and max (for quantization-aware training of weights)."""

    def __init__(self, averaging_constant=0.01, ch_axis=0, dtype=quint8, qscheme=per_channel_affine,
                 reduce_range=False, quant_min=None, quant_max=None, eps=FLOAT32_EPS, is_dynamic=False, **kwargs):
        super().__init__(ch_axis, dtype, qscheme, reduce_range, quant_min, quant_max, eps, is_dynamic)
        self.averaging_constant = averaging_constant

    def update(self, x_min, x_max):
        min_val, max_val = self.min_val.numpy(), self.max_val.numpy()
        if min_val.size == 0:
            min_val, max_val = x_min, x_max
        else:
            c = np.float32(self.averaging_constant)
            min_val = min_val + c * (x_min - min_val)
            max_val = max_val + c * (x_max - max_val)
        self.min_val = corenn.from_numpy(np.asarray(min_val, dtype=np.float32))
        self.max_val = corenn.from_numpy(np.asarray(max_val, dtype=np.float32))


def _histc(x: np.ndarray, bins: int, lo: np.float32, hi: np.float32) -> np.ndarray:
    """``torch.histc``: equal-width bins over [lo, hi], values outside ignored, the top edge in the last bin."""
    x = x[(x >= lo) & (x <= hi)]
    if hi == lo:
        return np.bincount(np.zeros(x.size, np.int64), minlength=bins)[:bins].astype(np.float32)
    index = ((x - lo) * np.float32(bins) / (hi - lo)).astype(np.int64)
    index = np.minimum(index, bins - 1)
    return np.bincount(index, minlength=bins).astype(np.float32)


class HistogramObserver(ObserverBase):
    """A running histogram; the range minimizing the L2 quantization error (``torch.ao.quantization.HistogramObserver``).

    The search follows PyTorch's (caffe2's ``NonlinearQuantizationParamsSearch``):
    the range shrinks from whichever end holds less mass while the error falls.
    """

    def __init__(self, bins: int = 2048, dtype=quint8, qscheme=per_tensor_affine, reduce_range=False,
                 quant_min=None, quant_max=None, eps=FLOAT32_EPS, is_dynamic=False, **kwargs):
        if qscheme not in (per_tensor_affine, per_tensor_symmetric):
            raise NotImplementedError("HistogramObserver's qscheme only supports corenn.per_tensor_symmetric and "
                                      "corenn.per_tensor_affine")
        if is_dynamic:
            raise NotImplementedError("HistogramObserver doesn't support dynamic quantization")
        super().__init__(dtype, qscheme, reduce_range, quant_min, quant_max, eps, is_dynamic)
        self.bins = bins
        self.register_buffer("histogram", corenn.zeros(bins))
        self.register_buffer("min_val", corenn.tensor(float("inf")))
        self.register_buffer("max_val", corenn.tensor(float("-inf")))
        self.dst_nbins = 2 ** (8 * dtype.itemsize)
        self.upsample_rate = 16

    def forward(self, x_orig):
        if x_orig.numel() == 0:
            return x_orig
        x = _values(x_orig).reshape(-1)
        if np.isinf(x).any():
            warnings.warn("inf detected in input tensor, ignoring input", stacklevel=2)
            x = x[~np.isinf(x)]
            if x.size == 0:
                return x_orig
        x_min, x_max = x.min(), x.max()
        current_min, current_max = np.float32(self.min_val.item()), np.float32(self.max_val.item())
        if np.isinf(current_min) or np.isinf(current_max):
            histogram, new_min, new_max = _histc(x, self.bins, x_min, x_max), x_min, x_max
        else:
            new_min, new_max = min(current_min, x_min), max(current_max, x_max)
            update = _histc(x, self.bins, new_min, new_max)
            old = self.histogram.numpy()
            if new_min == current_min and new_max == current_max:
                histogram = old + update
            elif current_min == current_max:
                histogram = _histc(np.array([current_min], np.float32), self.bins, new_min, new_max) * old.sum() \
                    + update
            else:
                histogram = update + self._upscale_histogram(old, current_min, current_max, new_min, new_max)
        self.histogram = corenn.from_numpy(histogram.astype(np.float32))
        self.min_val = corenn.tensor(float(new_min))
        self.max_val = corenn.tensor(float(new_max))
        return x_orig

    def _upscale_histogram(self, histogram, orig_min, orig_max, update_min, update_max):
        rate = self.upsample_rate
        histogram = np.repeat(histogram, rate) / np.float32(rate)
        bin_size = (orig_max - orig_min) / np.float32(self.bins * rate)
        mid_points = np.linspace(orig_min, orig_max, self.bins * rate + 1, dtype=np.float32)[:-1] \
            + np.float32(0.5) * bin_size
        boundaries = np.linspace(update_min, update_max, self.bins + 1, dtype=np.float32)
        assignments = np.searchsorted(boundaries, mid_points, side="right") - 1
        assignments = np.clip(assignments, 0, self.bins - 1)
        return np.bincount(assignments, weights=histogram, minlength=self.bins).astype(np.float32)

    def _quantization_error(self, next_start_bin: int, next_end_bin: int) -> float:
        bin_width = (self.max_val.item() - self.min_val.item()) / self.bins
        dst_bin_width = bin_width * (next_end_bin - next_start_bin + 1) / self.dst_nbins
        if dst_bin_width == 0.0:
            return 0.0
        f32 = np.float32
        src_bin = np.arange(self.bins, dtype=np.float32)
        src_bin_begin = (src_bin - f32(next_start_bin)) * f32(bin_width)
        src_bin_end = src_bin_begin + f32(bin_width)
        dst_bin_of_begin = np.clip(np.floor(src_bin_begin / f32(dst_bin_width)), 0, self.dst_nbins - 1)
        dst_bin_of_begin_center = (dst_bin_of_begin + f32(0.5)) * f32(dst_bin_width)
        dst_bin_of_end = np.clip(np.floor(src_bin_end / f32(dst_bin_width)), 0, self.dst_nbins - 1)
        density = self.histogram.numpy() / f32(bin_width)

        def norm_of(begin, end):
            return density * ((end * end * end - begin * begin * begin) / f32(3))
        half = f32(dst_bin_width / 2)
        norm = norm_of(src_bin_begin - dst_bin_of_begin_center, half)
        norm = norm + (dst_bin_of_end - dst_bin_of_begin - f32(1)) * norm_of(-half, half)
        dst_bin_of_end_center = dst_bin_of_end * f32(dst_bin_width) + half
        norm = norm + norm_of(-half, src_bin_end - dst_bin_of_end_center)
        return float(norm.astype(np.float32).sum(dtype=np.float32))

    def _non_linear_param_search(self):
        histogram = self.histogram.numpy()
        min_val, max_val = np.float32(self.min_val.item()), np.float32(self.max_val.item())
        bin_width = (max_val - min_val) / np.float32(self.bins)
        total = float(histogram.sum(dtype=np.float32))
        cumulative = np.cumsum(histogram, dtype=np.float32)
        stepsize, alpha, beta = 1e-5, 0.0, 1.0
        start_bin, end_bin = 0, self.bins - 1
        norm_min = float("inf")
        while alpha < beta:
            next_alpha, next_beta = alpha + stepsize, beta - stepsize
            left, right = start_bin, end_bin
            # The first bin whose cumulative mass reaches next_alpha, the last one within next_beta.
            while left < end_bin and cumulative[left] < next_alpha * total:
                left += 1
            while right > start_bin and cumulative[right] > next_beta * total:
                right -= 1
            next_start_bin, next_end_bin = start_bin, end_bin
            if (left - start_bin) > (end_bin - right):
                next_start_bin, alpha = left, next_alpha
            else:
                next_end_bin, beta = right, next_beta
            if next_start_bin == start_bin and next_end_bin == end_bin:
                continue
            norm = self._quantization_error(next_start_bin, next_end_bin)
            if norm > norm_min:
                break
            norm_min, start_bin, end_bin = norm, next_start_bin, next_end_bin
        return min_val + bin_width * np.float32(start_bin), min_val + bin_width * np.float32(end_bin + 1)

    def calculate_qparams(self):
        if np.isinf(self.min_val.item()) and np.isinf(self.max_val.item()):
            warnings.warn("must run observer before calling calculate_qparams. Returning default scale and zero "
                          "point", stacklevel=2)
            return corenn.tensor([1.0]), corenn.tensor([0])
        new_min, new_max = self._non_linear_param_search()
        return self.calculate_qparams_from(new_min, new_max)


class PlaceholderObserver(ObserverBase):
    """Observes nothing; carries ``dtype`` (and ``is_dynamic``) for dynamic quantization."""

    def __init__(self, dtype=corenn.float32, custom_op_name: str = "", compute_dtype=None, quant_min=None,
                 quant_max=None, qscheme=None, eps=None, is_dynamic=False):
        nn.Module.__init__(self)
        self.dtype, self.is_dynamic, self.qscheme = dtype, is_dynamic, qscheme
        self.quant_min, self.quant_max = quant_min, quant_max

    def forward(self, x):
        return x

    def calculate_qparams(self):
        raise RuntimeError("PlaceholderObserver.calculate_qparams(): a placeholder observer has no parameters")


class NoopObserver(PlaceholderObserver):
    """Observes nothing (for float16 'quantization' in PyTorch); here only for configs that name it."""


default_observer = MinMaxObserver.with_args(quant_min=0, quant_max=127)
default_weight_observer = MinMaxObserver.with_args(dtype=qint8, qscheme=per_tensor_symmetric)
default_per_channel_weight_observer = PerChannelMinMaxObserver.with_args(dtype=qint8,
                                                                         qscheme=per_channel_symmetric)
default_histogram_observer = HistogramObserver.with_args(quant_min=0, quant_max=127)
default_dynamic_quant_observer = PlaceholderObserver.with_args(dtype=quint8, quant_min=0, quant_max=255,
                                                               is_dynamic=True)
default_placeholder_observer = PlaceholderObserver

