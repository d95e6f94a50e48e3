"""``QConfig``: which observer (or fake quantizer) watches activations and which watches weights.

The defaults carry PyTorch's names and settings (``get_default_qconfig("x86")``,
``default_dynamic_qconfig``, ...), so a configuration ports by renaming.
"""
from __future__ import annotations

from typing import NamedTuple

from .fake_quantize import (FakeQuantize, default_fake_quant, default_per_channel_weight_fake_quant,  # noqa: F401
                            default_weight_fake_quant)
from .observer import (HistogramObserver, MovingAverageMinMaxObserver, PerChannelMinMaxObserver, PlaceholderObserver,
                       default_dynamic_quant_observer, default_observer, default_per_channel_weight_observer,
                       default_weight_observer)
from .qtensor import per_channel_affine_float_qparams, per_tensor_affine, quint8

__all__ = ["QConfig", "QConfigDynamic", "default_qconfig", "default_per_channel_qconfig", "default_dynamic_qconfig",
           "per_channel_dynamic_qconfig", "default_qat_qconfig", "default_weight_only_qconfig",
           "get_default_qconfig", "get_default_qat_qconfig", "float_qparams_weight_only_qconfig"]


class QConfig(NamedTuple):
    """``QConfig(activation=..., weight=...)``: two factories (``Observer.with_args(...)`` or classes)."""

    activation: object
    weight: object

    def __repr__(self):
        return f"QConfig(activation={self.activation!r}, weight={self.weight!r})"


QConfigDynamic = QConfig  # PyTorch's deprecated alias

default_qconfig = QConfig(activation=default_observer, weight=default_weight_observer)
default_per_channel_qconfig = QConfig(activation=default_observer, weight=default_per_channel_weight_observer)
default_dynamic_qconfig = QConfig(activation=default_dynamic_quant_observer, weight=default_weight_observer)
per_channel_dynamic_qconfig = QConfig(activation=default_dynamic_quant_observer,
                                      weight=default_per_channel_weight_observer)
default_qat_qconfig = QConfig(activation=default_fake_quant, weight=default_weight_fake_quant)
default_weight_only_qconfig = QConfig(activation=PlaceholderObserver, weight=default_weight_fake_quant)
# Embedding weights: 8 bits per row, each with a float scale and a float zero point; activations stay float.
float_qparams_weight_only_qconfig = QConfig(
    activation=PlaceholderObserver,
    weight=PerChannelMinMaxObserver.with_args(dtype=quint8, qscheme=per_channel_affine_float_qparams, ch_axis=0))

_BACKENDS = ("x86", "fbgemm", "qnnpack", "onednn")


def _check_backend(backend: str, function: str) -> None:
    if backend not in _BACKENDS:
        raise ValueError(f"{function}(): backend {backend!r} is not supported; choose one of "
                         f"{', '.join(map(repr, _BACKENDS))}")


def get_default_qconfig(backend: str = "x86", version: int = 0) -> QConfig:
    """PyTorch's post-training qconfig for ``backend``: histogram-observed activations, int8 weights.

    ``"x86"`` / ``"fbgemm"``: activations quint8 in a reduced range (7 bits, as fbgemm needs for
    its u8 x s8 pair sums), weights per channel; ``"qnnpack"``: full range, weights per tensor.
    """
    _check_backend(backend, "get_default_qconfig")
    if backend in ("x86", "fbgemm"):
        return QConfig(activation=HistogramObserver.with_args(reduce_range=True),
                       weight=default_per_channel_weight_observer)
    if backend == "onednn":
        return QConfig(activation=HistogramObserver.with_args(reduce_range=False),
                       weight=default_per_channel_weight_observer)
    return QConfig(activation=HistogramObserver.with_args(reduce_range=False), weight=default_weight_observer)


def get_default_qat_qconfig(backend: str = "x86", version: int = 1) -> QConfig:
    """PyTorch's quantization-aware-training qconfig for ``backend`` (moving-average fake quantizers)."""
    _check_backend(backend, "get_default_qat_qconfig")
    reduce_range = backend in ("x86", "fbgemm")
    activation = FakeQuantize.with_args(observer=MovingAverageMinMaxObserver, quant_min=0, quant_max=255,
                                        reduce_range=reduce_range, dtype=quint8, qscheme=per_tensor_affine)
    if backend == "qnnpack":
        return QConfig(activation=activation, weight=default_weight_fake_quant)
    return QConfig(activation=activation, weight=default_per_channel_weight_fake_quant)


