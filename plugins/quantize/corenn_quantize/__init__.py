"""corenn-quantize: int8 quantization for corenn, with ``torch.ao.quantization``'s API.

Installed, it makes ``corenn.ao.quantization`` importable and adds PyTorch's
top-level quantization names to ``corenn`` (``corenn.qint8``,
``corenn.quantize_per_tensor``, ...) through the ``corenn_register_names`` hook.
See docs/quantize.md.
"""
from __future__ import annotations

import importlib

import corenn

from .qtensor import (QScheme, QTensor, QuantizedDType, dequantize, per_channel_affine,
                      per_channel_affine_float_qparams, per_channel_symmetric, per_tensor_affine, per_tensor_symmetric,
                      qint8, qint32, quantize_per_channel, quantize_per_tensor, quint8)

# The rest (observers, modules, prepare/convert, FX mode) imports corenn.nn and corenn.fx: it is
# loaded on first use, since `import corenn` loads this plugin and would otherwise pay about 80 ms
# for it. The table is static so that asking for a name (corenn's loader asks every plugin for
# hook names it may lack) imports nothing; a test keeps it equal to each module's __all__.
_SUBMODULES = ("observer", "fake_quantize", "qconfig", "eager", "modules", "quantize_fx", "kernels")
_LAZY_NAMES = {
    "observer": (
        "ObserverBase", "MinMaxObserver", "MovingAverageMinMaxObserver", "PerChannelMinMaxObserver",
        "MovingAveragePerChannelMinMaxObserver", "HistogramObserver", "PlaceholderObserver", "NoopObserver",
        "default_observer", "default_weight_observer", "default_per_channel_weight_observer",
        "default_histogram_observer", "default_dynamic_quant_observer", "default_placeholder_observer"),
    "fake_quantize": (
        "FakeQuantize", "FakeQuantizeBase", "fake_quantize_per_tensor_affine", "fake_quantize_per_channel_affine",
        "default_fake_quant", "default_weight_fake_quant", "default_per_channel_weight_fake_quant",
        "disable_fake_quant", "enable_fake_quant", "disable_observer", "enable_observer"),
    "qconfig": (
        "QConfig", "QConfigDynamic", "default_qconfig", "default_per_channel_qconfig", "default_dynamic_qconfig",
        "per_channel_dynamic_qconfig", "default_qat_qconfig", "default_weight_only_qconfig", "get_default_qconfig",
        "get_default_qat_qconfig", "float_qparams_weight_only_qconfig"),
    # Eager mode's workflow. (PyTorch's module is named quantize, like its function; the package attribute
    # `quantize` is the function there, which a lazily imported submodule of that name would shadow.)
    "eager": (
        "fuse_modules", "fuse_modules_qat", "propagate_qconfig_", "prepare", "convert", "prepare_qat", "quantize",
        "quantize_dynamic", "quantize_qat", "get_default_static_quant_module_mappings",
        "get_default_qat_module_mappings", "get_default_dynamic_quant_module_mappings"),
    "modules": ("DeQuantize", "DeQuantStub", "FloatFunctional", "QFunctional", "Quantize", "QuantStub",
                "QuantWrapper", "dynamic", "intrinsic", "qat", "quantized"),
    "quantize_fx": ("QConfigMapping", "convert_fx", "get_default_qat_qconfig_mapping", "get_default_qconfig_mapping",
                    "prepare_fx", "prepare_qat_fx"),
}
_OWNER = {name: module_name for module_name, names in _LAZY_NAMES.items() for name in names}
_QTENSOR_NAMES = ("QScheme", "QTensor", "QuantizedDType", "dequantize", "per_channel_affine",
                  "per_channel_affine_float_qparams", "per_channel_symmetric",
                  "per_tensor_affine", "per_tensor_symmetric", "qint8", "qint32", "quantize_per_channel",
                  "quantize_per_tensor", "quint8")
__all__ = sorted({*_QTENSOR_NAMES, *_SUBMODULES, *_OWNER})


def __getattr__(name):
    owner = _OWNER.get(name)
    if owner is not None:
        value = getattr(importlib.import_module(f"{__name__}.{owner}"), name)
    elif name in _SUBMODULES:
        value = importlib.import_module(f"{__name__}.{name}")
    else:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    globals()[name] = value
    return value


def __dir__():
    return sorted(set(globals()) | set(__all__))


TOP_LEVEL_NAMES = {
    "quint8": quint8, "qint8": qint8, "qint32": qint32,
    "per_tensor_affine": per_tensor_affine, "per_channel_affine": per_channel_affine,
    "per_tensor_symmetric": per_tensor_symmetric, "per_channel_symmetric": per_channel_symmetric,
    "per_channel_affine_float_qparams": per_channel_affine_float_qparams,
    "quantize_per_tensor": quantize_per_tensor, "quantize_per_channel": quantize_per_channel,
    "dequantize": dequantize, "qscheme": QScheme,
}


@corenn.hookimpl
def corenn_register_names():
    return TOP_LEVEL_NAMES


@corenn.hookimpl
def corenn_register_import_paths():
    return {"corenn.ao.quantization": "corenn_quantize", "corenn.ao.nn": "corenn_quantize.ao_nn"}
