"""Eager-mode workflows: ``fuse_modules``, ``prepare``, ``convert``, ``prepare_qat``, ``quantize_dynamic``.

The model is changed by swapping submodules (PyTorch's eager mode), never by changing a
module's class: every converted module is a plain module with buffers.
"""
from __future__ import annotations

import copy

import corenn
from corenn import nn

from . import modules as qm
from .qconfig import QConfig, default_dynamic_qconfig, float_qparams_weight_only_qconfig, per_channel_dynamic_qconfig

__all__ = ["fuse_modules", "fuse_modules_qat", "propagate_qconfig_", "prepare", "convert", "prepare_qat",
           "quantize", "quantize_dynamic", "quantize_qat", "get_default_static_quant_module_mappings",
           "get_default_qat_module_mappings", "get_default_dynamic_quant_module_mappings"]


# -- fusion ---------------------------------------------------------------------------------------------------------

def _fuse(mods, is_qat: bool):
    kinds = tuple(type(m) for m in mods)
    if kinds == (nn.Conv2d, nn.BatchNorm2d):
        # For QAT the BatchNorm stays (its statistics keep training); otherwise it is folded in now.
        return qm.ConvBn2d(*mods) if is_qat else qm.fold_batch_norm(*mods)
    if kinds == (nn.Conv2d, nn.BatchNorm2d, nn.ReLU):
        return qm.ConvBnReLU2d(*mods) if is_qat else qm.ConvReLU2d(qm.fold_batch_norm(mods[0], mods[1]), mods[2])
    if kinds == (nn.Conv2d, nn.ReLU):
        return qm.ConvReLU2d(mods[0], mods[1])
    if kinds == (nn.Linear, nn.ReLU):
        return qm.LinearReLU(mods[0], mods[1])
    names = ", ".join(k.__name__ for k in kinds)
    function = "fuse_modules_qat" if is_qat else "fuse_modules"
    raise NotImplementedError(f"{function}: cannot fuse ({names}); corenn-quantize fuses (Conv2d, BatchNorm2d), "
                              "(Conv2d, BatchNorm2d, ReLU), (Conv2d, ReLU) and (Linear, ReLU)")


def _fuse_groups(model, modules_to_fuse, inplace: bool, is_qat: bool):
    if not inplace:
        model = copy.deepcopy(model)
    groups = [modules_to_fuse] if modules_to_fuse and isinstance(modules_to_fuse[0], str) else modules_to_fuse
    for group in groups:
        mods = [model.get_submodule(name) for name in group]
        if not is_qat and any(isinstance(m, nn.BatchNorm2d) for m in mods) and model.training:
            raise AssertionError("fuse_modules: fusing BatchNorm needs eval mode; call model.eval() first "
                                 "(for quantization-aware training, fuse_modules_qat keeps the BatchNorm)")
        model.set_submodule(group[0], _fuse(mods, is_qat))
        for name in group[1:]:
            model.set_submodule(name, nn.Identity())
    return model


def fuse_modules(model, modules_to_fuse, inplace: bool = False, fuser_func=None, fuse_custom_config_dict=None):
    """Fuse lists of submodules into one (``torch.ao.quantization.fuse_modules``), in eval mode.

    ``modules_to_fuse`` is a list of names (``["conv", "bn", "relu"]``) or a list of such lists.
    The first module becomes the fused one, the others ``nn.Identity``. BatchNorm is folded
    into the convolution, so the model must be in eval mode.
    """
    refuse_unsupported("fuse_modules", fuser_func=fuser_func, fuse_custom_config_dict=fuse_custom_config_dict)
    return _fuse_groups(model, modules_to_fuse, inplace, is_qat=False)


def fuse_modules_qat(model, modules_to_fuse, inplace: bool = False, fuser_func=None, fuse_custom_config_dict=None):
    """``fuse_modules`` for quantization-aware training (``torch.ao.quantization.fuse_modules_qat``).

    Conv2d + BatchNorm2d (+ ReLU) become ``intrinsic.ConvBn2d`` / ``ConvBnReLU2d``, which
    ``prepare_qat`` turns into QAT modules that train the BatchNorm with the weight's fake
    quantization folded in; ``convert`` folds the BatchNorm's running statistics at the end.
    """
    refuse_unsupported("fuse_modules_qat", fuser_func=fuser_func, fuse_custom_config_dict=fuse_custom_config_dict)
    return _fuse_groups(model, modules_to_fuse, inplace, is_qat=True)


# -- mappings -------------------------------------------------------------------------------------------------------

def get_default_static_quant_module_mappings() -> dict:
    """float (or QAT) module class -> quantized module class, for ``convert``."""
    return {qm.QuantStub: qm.Quantize, qm.DeQuantStub: qm.DeQuantize, nn.Linear: qm.Linear,
            qm.LinearReLU: qm.QuantizedLinearReLU, nn.Conv2d: qm.Conv2d, qm.ConvReLU2d: qm.QuantizedConvReLU2d,
            nn.ReLU: qm.ReLU, nn.MaxPool2d: qm.MaxPool2d, nn.Flatten: qm.Flatten, nn.AvgPool2d: qm.AvgPool2d,
            nn.AdaptiveAvgPool2d: qm.AdaptiveAvgPool2d, nn.LayerNorm: qm.LayerNorm, nn.Embedding: qm.Embedding,
            nn.EmbeddingBag: qm.EmbeddingBag,
            qm.FloatFunctional: qm.QFunctional, qm.QATLinear: qm.Linear,
            qm.QATLinearReLU: qm.QuantizedLinearReLU, qm.QATConv2d: qm.Conv2d,
            qm.QATConvReLU2d: qm.QuantizedConvReLU2d, qm.QATConvBn2d: qm.Conv2d,
            qm.QATConvBnReLU2d: qm.QuantizedConvReLU2d}


def get_default_qat_module_mappings() -> dict:
    """float module class -> QAT module class, for ``prepare_qat``."""
    return {nn.Linear: qm.QATLinear, qm.LinearReLU: qm.QATLinearReLU, nn.Conv2d: qm.QATConv2d,
            qm.ConvReLU2d: qm.QATConvReLU2d, qm.ConvBn2d: qm.QATConvBn2d, qm.ConvBnReLU2d: qm.QATConvBnReLU2d}


def get_default_dynamic_quant_module_mappings() -> dict:
    """float module class -> dynamically quantized module class, for ``quantize_dynamic``."""
    return {nn.Linear: qm.DynamicLinear, nn.LSTM: qm.DynamicLSTM, nn.Embedding: qm.Embedding,
            nn.EmbeddingBag: qm.EmbeddingBag}


# Modules whose output prepare observes (the ones convert turns into quantized modules that need an output scale).
_OBSERVED = (qm.QuantStub, nn.Linear, qm.LinearReLU, nn.Conv2d, qm.ConvReLU2d, qm.FloatFunctional, nn.LayerNorm)
# Modules convert swaps without an output observer: they keep their input's scale, or (embeddings) are
# quantized by weight only and give float outputs.
_UNOBSERVED = (qm.ReLU, qm.MaxPool2d, qm.AvgPool2d, qm.AdaptiveAvgPool2d, qm.Flatten, qm.DeQuantize, qm.Embedding,
               qm.EmbeddingBag)


# -- qconfig propagation, prepare, convert --------------------------------------------------------------------------

def propagate_qconfig_(module, qconfig_dict=None) -> None:
    """Give every submodule the ``qconfig`` of its nearest configured ancestor (or of ``qconfig_dict``)."""
    qconfig_dict = qconfig_dict or {}

    def visit(mod, inherited, prefix):
        own = qconfig_dict.get(type(mod), qconfig_dict.get(prefix, getattr(mod, "qconfig", inherited)))
        mod.qconfig = own
        for name, child in mod.named_children():
            visit(child, own, f"{prefix}.{name}" if prefix else name)
    visit(module, qconfig_dict.get("", getattr(module, "qconfig", None)), "")



def refuse_unsupported(function: str, **options) -> None:
    """NotImplementedError naming the first of ``options`` that was given: PyTorch accepts them, corenn-quantize
    does not build them, and ignoring one would quantize differently from what the caller asked for."""
    for name, value in options.items():
        if value is not None:
            raise NotImplementedError(f"{function}(): {name} is not supported by corenn-quantize (pass None); "
                                      f"see docs/quantize.md for what is built")

def _observe_output(module, inputs, output):
    return module.activation_post_process(output)


def prepare(model, inplace: bool = False, allow_list=None, observer_non_leaf_module_list=None,
            prepare_custom_config_dict=None):
    """Attach observers to the outputs of the modules ``convert`` will quantize (``torch.ao.quantization.prepare``).

    Run calibration data through the returned model, then ``convert`` it.
    """
    refuse_unsupported("prepare", allow_list=allow_list, observer_non_leaf_module_list=observer_non_leaf_module_list,
                       prepare_custom_config_dict=prepare_custom_config_dict)
    if not inplace:
        model = copy.deepcopy(model)
    propagate_qconfig_(model)
    for module in list(model.modules()):
        if module.qconfig is None or not isinstance(module, _OBSERVED):
            continue
        if isinstance(module, qm.FloatFunctional):
            module.activation_post_process = module.qconfig.activation()
            continue
        if "activation_post_process" in dict(module.named_children()):
            continue
        module.activation_post_process = module.qconfig.activation()
        module.register_forward_hook(_observe_output)
    return model


def _swap(module, mapping: dict):
    """The module ``convert`` puts in place of ``module``, or ``module`` itself."""
    target = mapping.get(type(module))
    if target is None or getattr(module, "qconfig", None) is None:
        return module
    if target in _UNOBSERVED:
        return target.from_float(module)
    if not hasattr(module, "activation_post_process"):
        return module
    return target.from_float(module)


def convert(module, mapping=None, inplace: bool = False, remove_qconfig: bool = True,
            convert_custom_config_dict=None):
    """Swap observed float (or QAT) modules for quantized ones (``torch.ao.quantization.convert``)."""
    refuse_unsupported("convert", convert_custom_config_dict=convert_custom_config_dict)
    if not inplace:
        module = copy.deepcopy(module)
    mapping = get_default_static_quant_module_mappings() if mapping is None else mapping

    def visit(parent):
        for name, child in list(parent.named_children()):
            swapped = _swap(child, mapping)
            if swapped is child:
                visit(child)
            else:
                setattr(parent, name, swapped)
    visit(module)
    if remove_qconfig:
        for sub in module.modules():
            if "qconfig" in sub.__dict__:
                del sub.__dict__["qconfig"]
    return module


def prepare_qat(model, mapping=None, inplace: bool = False):
    """Swap Linear / Conv2d (and fused ReLU forms) for QAT modules with fake-quantized weights, then ``prepare``.

    The model must be in training mode; activations get the qconfig's fake quantizers.
    """
    if not model.training:
        raise AssertionError("prepare_qat: the model must be in training mode (call model.train())")
    if not inplace:
        model = copy.deepcopy(model)
    propagate_qconfig_(model)
    mapping = get_default_qat_module_mappings() if mapping is None else mapping

    def visit(parent):
        for name, child in list(parent.named_children()):
            target = mapping.get(type(child))
            if target is not None and getattr(child, "qconfig", None) is not None:
                setattr(parent, name, target.from_float(child))
            else:
                visit(child)
    visit(model)
    return prepare(model, inplace=True)


def quantize(model, run_fn, run_args, mapping=None, inplace: bool = False):
    """``prepare``, ``run_fn(model, *run_args)`` for calibration, ``convert`` (``torch.ao.quantization.quantize``)."""
    if not inplace:
        model = copy.deepcopy(model)
    model.eval()
    prepare(model, inplace=True)
    run_fn(model, *run_args)
    return convert(model, mapping, inplace=True)


def quantize_qat(model, run_fn, run_args, inplace: bool = False):
    """``prepare_qat``, ``run_fn(model, *run_args)`` (training), ``convert``."""
    if not inplace:
        model = copy.deepcopy(model)
    model.train()
    prepare_qat(model, inplace=True)
    run_fn(model, *run_args)
    return convert(model.eval(), inplace=True)


def quantize_dynamic(model, qconfig_spec=None, dtype=None, mapping=None, inplace: bool = False):
    """Quantize the weights of the chosen module types to int8; activations are quantized at run time.

    ``qconfig_spec`` is a set of module types (``{nn.Linear, nn.LSTM}``) or a dict from types or
    qualified names to ``QConfig``; by default every ``nn.Linear``. Weights are quantized per
    output channel (``per_channel_dynamic_qconfig``) unless a qconfig says otherwise; an
    ``nn.LSTM`` becomes a ``dynamic.LSTM`` with every ``weight_ih`` / ``weight_hh`` in int8.
    ``dtype=corenn.quint8`` quantizes ``nn.Embedding`` / ``nn.EmbeddingBag`` (by default both)
    with ``float_qparams_weight_only_qconfig``, as PyTorch does; float16 is not provided.
    Applied recursively: a module matched by type anywhere in the model is replaced.
    """
    dtype = corenn.qint8 if dtype is None else dtype
    embeddings = (nn.Embedding, nn.EmbeddingBag)
    if dtype is corenn.quint8:
        keys = embeddings if qconfig_spec is None else qconfig_spec
        if isinstance(keys, (set, frozenset, list, tuple)) and not set(keys) <= set(embeddings):
            raise NotImplementedError(f"quantize_dynamic: dtype {dtype!r} quantizes Embedding and EmbeddingBag only "
                                      "(float-qparams weights); use corenn.qint8 for the other modules")
        default_qconfig = float_qparams_weight_only_qconfig
    elif dtype is corenn.qint8:
        keys, default_qconfig = (nn.Linear,) if qconfig_spec is None else qconfig_spec, per_channel_dynamic_qconfig
    else:
        raise NotImplementedError(f"quantize_dynamic: dtype {dtype!r} is not supported; corenn-quantize provides "
                                  "dynamic quantization to corenn.qint8 (and corenn.quint8 for embeddings) only")
    qconfig_spec = keys
    if isinstance(qconfig_spec, (set, frozenset, list, tuple)):
        qconfig_spec = {key: default_qconfig for key in qconfig_spec}
    supported = get_default_dynamic_quant_module_mappings() if mapping is None else mapping
    for key in qconfig_spec:
        if isinstance(key, type) and key not in supported:
            raise NotImplementedError(f"quantize_dynamic: {key.__name__} is not supported by corenn-quantize "
                                      f"(dynamic quantization covers {', '.join(k.__name__ for k in supported)})")
        if not isinstance(key, (type, str)):
            raise TypeError(f"quantize_dynamic: qconfig_spec keys must be module types or qualified names, got "
                            f"{key!r}")
    if not inplace:
        model = copy.deepcopy(model)

    def qconfig_of(module, name):
        if name in qconfig_spec:
            return qconfig_spec[name]
        return qconfig_spec.get(type(module))

    def visit(parent, prefix):
        for name, child in list(parent.named_children()):
            qualified = f"{prefix}.{name}" if prefix else name
            qconfig = qconfig_of(child, qualified)
            target = supported.get(type(child))
            if qconfig is not None and target is not None:
                qconfig = qconfig if isinstance(qconfig, QConfig) else default_dynamic_qconfig
                setattr(parent, name, target.from_float(child, weight_observer=qconfig.weight()))
            else:
                visit(child, qualified)
    visit(model, "")
    return model
