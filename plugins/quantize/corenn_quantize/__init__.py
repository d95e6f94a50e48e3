"""corenn-quantize: int8 quantization for corenn, with ``torch.ao.quantization``'s API.

Installed, it makes ``corenn.ao.quantization`` importable and adds PyTorch's
top-level quantization names to ``corenn`` (``corenn.qint8``,
``corenn.quantize_per_tensor``, ...) through the ``corenn_register_names`` hook.
See docs/quantize.md.
"""
from __future__ import annotations

import importlib

import corenn

from .qtensor import (QScheme, QTensor, QuantizedDType, dequantize, per_channel_affine, per_channel_symmetric,
                      per_tensor_affine, per_tensor_symmetric, qint8, qint32, quantize_per_channel,
                      quantize_per_tensor, quint8)

# The rest (observers, modules, prepare/convert, FX mode) imports corenn.nn and corenn.fx: it is
# loaded on first use, since `import corenn` loads this plugin and would otherwise pay about 80 ms
# for it. (module, the names this package re-exports from it: its __all__, or the ones listed)
_LAZY = {
    "observer": None, "fake_quantize": None, "qconfig": None, "quantize": None,
    "modules": ("DeQuantize", "DeQuantStub", "FloatFunctional", "QFunctional", "Quantize", "QuantStub",
                "QuantWrapper", "dynamic", "intrinsic", "qat", "quantized"),
    "quantize_fx": ("QConfigMapping", "convert_fx", "get_default_qat_qconfig_mapping", "get_default_qconfig_mapping",
                    "prepare_fx", "prepare_qat_fx"),
    "kernels": (),
}
_QTENSOR_NAMES = ("QScheme", "QTensor", "QuantizedDType", "dequantize", "per_channel_affine", "per_channel_symmetric",
                  "per_tensor_affine", "per_tensor_symmetric", "qint8", "qint32", "quantize_per_channel",
                  "quantize_per_tensor", "quint8")


def _lazy_name_owner(name: str) -> str | None:
    for module_name, names in _LAZY.items():
        module = importlib.import_module(f"{__name__}.{module_name}")
        if name in (module.__all__ if names is None else names):
            return module_name
    return None


def __getattr__(name):
    if name in _LAZY:
        return importlib.import_module(f"{__name__}.{name}")
    if name == "__all__":
        return sorted({*_QTENSOR_NAMES, *_LAZY, *(n for module_name, names in _LAZY.items()
                       for n in (importlib.import_module(f"{__name__}.{module_name}").__all__
                                 if names is None else names))})
    owner = None if name.startswith("_") else _lazy_name_owner(name)
    if owner is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{owner}"), name)
    globals()[name] = value
    return value


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
