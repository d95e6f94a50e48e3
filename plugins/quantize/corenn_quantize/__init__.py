"""corenn-quantize: int8 quantization for corenn, with ``torch.ao.quantization``'s API.

Installed, it makes ``corenn.ao.quantization`` importable and adds PyTorch's
top-level quantization names to ``corenn`` (``corenn.qint8``,
``corenn.quantize_per_tensor``, ...) through the ``corenn_register_names`` hook.
See docs/quantize.md.
"""
from __future__ import annotations

import corenn

from .qtensor import (QScheme, QTensor, QuantizedDType, dequantize, per_channel_affine, per_channel_symmetric,
                      per_tensor_affine, per_tensor_symmetric, qint8, qint32, quantize_per_channel,
                      quantize_per_tensor, quint8)
from .observer import *  # noqa: F401,F403
from .fake_quantize import *  # noqa: F401,F403
from .qconfig import *  # noqa: F401,F403
from .modules import (DeQuantize, DeQuantStub, FloatFunctional, QFunctional, Quantize, QuantStub,  # noqa: F401
                      QuantWrapper, dynamic, intrinsic, qat, quantized)
from .quantize import *  # noqa: F401,F403
from .quantize_fx import (QConfigMapping, convert_fx, get_default_qat_qconfig_mapping,  # noqa: F401
                          get_default_qconfig_mapping, prepare_fx, prepare_qat_fx)
from . import fake_quantize, kernels, modules, observer, qconfig, quantize_fx  # noqa: F401

TOP_LEVEL_NAMES = {
    "quint8": quint8, "qint8": qint8, "qint32": qint32,
    "per_tensor_affine": per_tensor_affine, "per_channel_affine": per_channel_affine,
    "per_tensor_symmetric": per_tensor_symmetric, "per_channel_symmetric": per_channel_symmetric,
    "quantize_per_tensor": quantize_per_tensor, "quantize_per_channel": quantize_per_channel,
    "dequantize": dequantize, "qscheme": QScheme,
}


@corenn.hookimpl
def corenn_register_names():
    return TOP_LEVEL_NAMES


@corenn.hookimpl
def corenn_register_import_paths():
    return {"corenn.ao.quantization": "corenn_quantize"}
