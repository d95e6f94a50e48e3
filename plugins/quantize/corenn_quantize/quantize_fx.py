"""FX graph mode quantization: ``prepare_fx``, ``prepare_qat_fx``, ``convert_fx`` and ``QConfigMapping``.

Built on ``corenn.fx`` (public API only). The model is traced symbolically, so no
``QuantStub`` / ``DeQuantStub`` is needed:

1. ``prepare_fx`` traces, records each node's qconfig (``QConfigMapping``), fuses
   conv-bn(-relu), conv-relu and linear-relu, and inserts observer modules
   (``activation_post_process_<n>``) on the inputs and outputs of quantizable ops, as
   PyTorch's default x86 backend config does. Ops that only move or clamp values
   (flatten, reshape, view, max pooling, relu, indexing) share their input's observer.
2. Calibration runs data through the prepared ``GraphModule`` (observers are identity).
3. ``convert_fx`` swaps observed modules for the quantized ones of eager mode, turns
   observers on float values into ``Quantize`` modules, add / mul / cat into
   ``QuantizedOperator`` modules, and puts ``dequantize`` before every op that
   computes in float, and before the output.

Example::

    >>> import corenn.ao.quantization as tq
    >>> from corenn.ao.quantization.quantize_fx import prepare_fx, convert_fx
    >>> prepared = prepare_fx(model.eval(), tq.get_default_qconfig_mapping("x86"), (example,))
    >>> prepared(calibration_batch)
    >>> quantized = convert_fx(prepared)
"""
from __future__ import annotations

import copy
import inspect
import operator
import re

import numpy as np

import corenn
import corenn.fx
from corenn import nn
from corenn.fx.passes import ShapeProp, TensorMetadata

from . import functional as qF
from . import modules as qm
from .fake_quantize import FakeQuantizeBase
from .observer import ObserverBase
from .qconfig import QConfig, get_default_qat_qconfig, get_default_qconfig
from .qtensor import QTensor, QuantizedDType, per_channel_affine_float_qparams, quint8
from .eager import refuse_unsupported

F = nn.functional

__all__ = ["QConfigMapping", "get_default_qconfig_mapping", "get_default_qat_qconfig_mapping", "prepare_fx",
           "prepare_qat_fx", "convert_fx", "QuantizationTracer", "QuantizedOperator", "quantized_relu",
           "quantized_max_pool2d", "quantized_flatten", "quantized_reshape"]


# -- QConfigMapping -------------------------------------------------------------------------------------------------

class QConfigMapping:
    """Which qconfig applies to which part of a model (``torch.ao.quantization.QConfigMapping``).

    Most specific wins, as in PyTorch: ``set_module_name`` (the module or any module under
    it) > ``set_module_name_regex`` > ``set_object_type`` (module class, function such as
    ``F.relu`` / ``operator.add``, or method name) > ``set_global``. A qconfig of ``None``
    leaves that part in float.

    Difference from PyTorch: ``set_module_name`` also applies to functions and methods called
    inside that module's ``forward`` (the tracer records the calling module); PyTorch does the
    same through ``nn_module_stack``.
    """

    def __init__(self):
        self.global_qconfig = None
        self.object_type_qconfigs: dict = {}
        self.module_name_regex_qconfigs: dict = {}
        self.module_name_qconfigs: dict = {}

    def set_global(self, global_qconfig):
        self.global_qconfig = global_qconfig
        return self

    def set_object_type(self, object_type, qconfig):
        self.object_type_qconfigs[object_type] = qconfig
        return self

    def set_module_name_regex(self, module_name_regex: str, qconfig):
        self.module_name_regex_qconfigs[module_name_regex] = qconfig
        return self

    def set_module_name(self, module_name: str, qconfig):
        self.module_name_qconfigs[module_name] = qconfig
        return self

    def to_dict(self) -> dict:
        return {"": self.global_qconfig, "object_type": list(self.object_type_qconfigs.items()),
                "module_name_regex": list(self.module_name_regex_qconfigs.items()),
                "module_name": list(self.module_name_qconfigs.items())}

    @classmethod
    def from_dict(cls, qconfig_dict: dict) -> "QConfigMapping":
        mapping = cls()
        if "" in qconfig_dict:
            mapping.set_global(qconfig_dict[""])
        for object_type, qconfig in qconfig_dict.get("object_type", []):
            mapping.set_object_type(object_type, qconfig)
        for regex, qconfig in qconfig_dict.get("module_name_regex", []):
            mapping.set_module_name_regex(regex, qconfig)
        for name, qconfig in qconfig_dict.get("module_name", []):
            mapping.set_module_name(name, qconfig)
        return mapping

    def qconfig_for(self, object_types, module_path: str):
        """The qconfig of an op of one of ``object_types`` (most specific first) run by module ``module_path``."""
        parts = module_path.split(".") if module_path else []
        for end in range(len(parts), -1, -1):  # the module itself, then its parents
            name = ".".join(parts[:end])
            if name in self.module_name_qconfigs:
                return self.module_name_qconfigs[name]
        for regex, qconfig in self.module_name_regex_qconfigs.items():
            if module_path and re.fullmatch(regex, module_path):
                return qconfig
        for object_type in object_types:
            if object_type in self.object_type_qconfigs:
                return self.object_type_qconfigs[object_type]
        return self.global_qconfig

    def __repr__(self):
        return (f"QConfigMapping(global={self.global_qconfig!r}, object_type={self.object_type_qconfigs!r}, "
                f"module_name_regex={self.module_name_regex_qconfigs!r}, module_name={self.module_name_qconfigs!r})")


def get_default_qconfig_mapping(backend: str = "x86", version: int = 0) -> QConfigMapping:
    """PyTorch's default post-training ``QConfigMapping`` for ``backend``: ``get_default_qconfig(backend)`` globally."""
    return QConfigMapping().set_global(get_default_qconfig(backend, version))


def get_default_qat_qconfig_mapping(backend: str = "x86", version: int = 1) -> QConfigMapping:
    """PyTorch's default quantization-aware-training ``QConfigMapping`` for ``backend``."""
    return QConfigMapping().set_global(get_default_qat_qconfig(backend, version))


def as_qconfig_mapping(qconfig_mapping, function: str) -> QConfigMapping:
    if isinstance(qconfig_mapping, QConfigMapping):
        return qconfig_mapping
    if isinstance(qconfig_mapping, dict):  # PyTorch's deprecated qconfig_dict
        return QConfigMapping.from_dict(qconfig_mapping)
    if qconfig_mapping is None or isinstance(qconfig_mapping, QConfig):
        return QConfigMapping().set_global(qconfig_mapping)
    raise TypeError(f"{function}(): argument 'qconfig_mapping' must be a QConfigMapping (or a qconfig dict), got "
                    f"{type(qconfig_mapping).__name__}")


# -- tracing --------------------------------------------------------------------------------------------------------

# Modules kept whole (one call_module node) while tracing for quantization.
QUANTIZATION_LEAF_MODULES = (qm.LinearReLU, qm.ConvReLU2d, qm.QATLinear, qm.QATConv2d, ObserverBase,
                             FakeQuantizeBase, qm.QuantStub, qm.DeQuantStub, qm.Quantize, qm.DeQuantize)


class QuantizationTracer(corenn.fx.Tracer):
    """A ``corenn.fx.Tracer`` that keeps fused / QAT / observer modules whole and records in each node's
    ``meta["module_path"]`` the qualified name of the module whose ``forward`` made the call."""

    def __init__(self):
        super().__init__()
        self.module_path_stack: list[str] = []

    def is_leaf_module(self, m, module_qualified_name: str) -> bool:
        return isinstance(m, QUANTIZATION_LEAF_MODULES) or super().is_leaf_module(m, module_qualified_name)

    def call_module(self, m, forward, args, kwargs):
        self.module_path_stack.append(self.path_of_module(m))
        try:
            return super().call_module(m, forward, args, kwargs)
        finally:
            self.module_path_stack.pop()

    def create_node(self, kind, target, args, kwargs, name=None, type_expr=None):
        node = super().create_node(kind, target, args, kwargs, name, type_expr)
        node.meta["module_path"] = self.module_path_stack[-1] if self.module_path_stack else ""
        return node


# -- op categories --------------------------------------------------------------------------------------------------

def is_relu(node, modules) -> bool:
    if node.op == "call_module":
        return isinstance(modules.get(node.target), nn.ReLU)
    if node.op == "call_function":
        return node.target in (F.relu, corenn.relu)
    return node.op == "call_method" and node.target == "relu"


# Quantized in, quantized at their own observed scale out (QAT modules subclass Linear / Conv2d).
WEIGHTED_MODULES = (nn.Linear, nn.Conv2d, qm.LinearReLU, qm.ConvReLU2d, nn.LayerNorm)
# Weight-only quantized modules (float in, float out), with a float-qparams weight qconfig.
EMBEDDING_MODULES = (nn.Embedding, nn.EmbeddingBag)
ADD_FUNCTIONS = (operator.add, corenn.add)
MUL_FUNCTIONS = (operator.mul, corenn.mul)
# Ops whose quantized output keeps the input's scale and zero point (PyTorch's "share qparams" ops).
SHARED_MODULES = (nn.ReLU, nn.MaxPool2d, nn.AvgPool2d, nn.AdaptiveAvgPool2d, nn.Flatten, nn.Identity, nn.Dropout)
SHARED_FUNCTIONS = (F.relu, corenn.relu, F.max_pool2d, F.avg_pool2d, F.adaptive_avg_pool2d, corenn.flatten,
                    corenn.reshape, operator.getitem)
SHARED_METHODS = ("relu", "flatten", "reshape", "view", "detach", "clone")
# Methods and attributes a quantized tensor answers itself (their results are not tensors).
QTENSOR_QUERIES = ("size", "dim", "numel", "shape")


def is_tensor(node) -> bool:
    return isinstance(node, corenn.fx.Node) and isinstance(node.meta.get("tensor_meta"), TensorMetadata)


def op_kind(node, modules) -> str | None:
    """"weighted", "functional" (add / mul / cat / F.linear / F.conv2d), "shared", or None (computes in float)."""
    if node.op == "call_module":
        module = modules[node.target]
        if isinstance(module, WEIGHTED_MODULES):
            return "weighted"
        if type(module) in EMBEDDING_MODULES:
            return "weight_only"
        if isinstance(module, SHARED_MODULES) and node.args and is_tensor(node.args[0]):
            return "shared"
        return None
    if node.op == "call_method":
        return "shared" if node.target in SHARED_METHODS and is_tensor(node.args[0]) else None
    if node.op != "call_function":
        return None
    target, args = node.target, node.args
    if target in ADD_FUNCTIONS + MUL_FUNCTIONS:
        tensor_pair = len(args) == 2 and all(is_tensor(a) for a in args) and not node.kwargs
        return "functional" if tensor_pair else None
    if target is corenn.cat:
        tensors = args[0] if args else node.kwargs.get("tensors")
        return "functional" if isinstance(tensors, (list, tuple)) and all(is_tensor(t) for t in tensors) else None
    if target in (F.linear, F.conv2d):
        weight = args[1] if len(args) > 1 else node.kwargs.get("weight")
        bias = args[2] if len(args) > 2 else node.kwargs.get("bias")
        constant = lambda v: v is None or (isinstance(v, corenn.fx.Node) and v.op == "get_attr")  # noqa: E731
        return "functional" if constant(weight) and weight is not None and constant(bias) else None
    if target is F.layer_norm:
        values = layer_norm_arguments(node)
        constant = lambda v: v is None or (isinstance(v, corenn.fx.Node) and v.op == "get_attr")  # noqa: E731
        literal = not isinstance(values["normalized_shape"], corenn.fx.Node) and not isinstance(values["eps"],
                                                                                              corenn.fx.Node)
        return "functional" if constant(values["weight"]) and constant(values["bias"]) and literal else None
    if target in SHARED_FUNCTIONS:
        return "shared" if args and is_tensor(args[0]) else None
    return None


def layer_norm_arguments(node) -> dict:
    """``F.layer_norm``'s arguments of ``node`` by name, defaults filled in."""
    bound = inspect.signature(F.layer_norm).bind(*node.args, **node.kwargs)
    bound.apply_defaults()
    return dict(bound.arguments)


def activation_inputs(node) -> list:
    """The tensor inputs of a quantizable op that must arrive quantized."""
    if node.op == "call_function" and node.target is corenn.cat:
        return list(node.args[0] if node.args else node.kwargs["tensors"])
    if node.op == "call_function" and node.target in ADD_FUNCTIONS + MUL_FUNCTIONS:
        return list(node.args)
    return [node.args[0]]


# -- prepare --------------------------------------------------------------------------------------------------------

def object_types_of(node, modules) -> list:
    if node.op == "call_module":
        module = modules[node.target]
        inner = [type(module[0])] if isinstance(module, (qm.LinearReLU, qm.ConvReLU2d)) else []
        return [type(module)] + inner + [base for base in type(module).__mro__[1:] if base in WEIGHTED_MODULES]
    return [node.target]


def record_qconfigs(gm, mapping: QConfigMapping) -> None:
    modules = dict(gm.named_modules())
    for node in gm.graph.nodes:
        if node.op in ("call_module", "call_function", "call_method"):
            path = node.target if node.op == "call_module" else node.meta.get("module_path", "")
            node.meta["qconfig"] = mapping.qconfig_for(object_types_of(node, modules), path)


def single_user(node):
    return next(iter(node.users)) if len(node.users) == 1 else None


def fuse(gm, fold_batch_norm: bool) -> None:
    """Fuse conv-bn(-relu), conv-relu and linear-relu in place, keeping the conv / linear node and its name."""
    modules = dict(gm.named_modules())
    graph = gm.graph
    for node in list(graph.nodes):
        if node.op != "call_module" or type(modules.get(node.target)) not in (nn.Conv2d, nn.Linear):
            continue
        module = modules[node.target]
        user = single_user(node)
        if (fold_batch_norm and isinstance(module, nn.Conv2d) and user is not None and user.op == "call_module"
                and type(modules[user.target]) is nn.BatchNorm2d and not modules[user.target].training
                and modules[user.target].running_mean is not None):
            module = qm.fold_batch_norm(module, modules[user.target])
            gm.set_submodule(node.target, module)
            user.replace_all_uses_with(node)
            graph.erase_node(user)
            user = single_user(node)
        if user is not None and is_relu(user, modules) and node.meta.get("qconfig") is not None:
            fused_type = qm.ConvReLU2d if isinstance(module, nn.Conv2d) else qm.LinearReLU
            gm.set_submodule(node.target, fused_type(module, nn.ReLU()))
            user.replace_all_uses_with(node)
            graph.erase_node(user)
    gm.delete_all_unused_submodules()


def activation_observer(qconfig, function: str):
    observer = qconfig.activation()
    dtype = getattr(observer, "dtype", None)
    if not isinstance(dtype, QuantizedDType):
        return None  # a float "observer" (PlaceholderObserver): the op stays in float
    if dtype is not quint8:
        raise NotImplementedError(f"{function}(): activation dtype {dtype!r} is not supported; corenn-quantize "
                                  "quantizes activations to corenn.quint8")
    return observer


class ObserverInserter:
    """Inserts ``activation_post_process_<n>`` observer nodes and remembers which observer each value has."""

    def __init__(self, gm, function: str):
        self.gm, self.function, self.count = gm, function, 0
        self.observer_of: dict = {}  # node -> the observer node whose scale its value will carry

    def observe(self, node, qconfig):
        if node in self.observer_of:
            return self.observer_of[node]
        observer = activation_observer(qconfig, self.function)
        if observer is None:
            return None
        name = f"activation_post_process_{self.count}"
        self.count += 1
        self.gm.add_submodule(name, observer)
        graph = self.gm.graph
        anchor = node
        if node.op == "placeholder":  # placeholders stay first
            anchor = [n for n in graph.nodes if n.op == "placeholder"][-1]
        with graph.inserting_after(anchor):
            observer_node = graph.call_module(name, (node,))
        observer_node.meta["tensor_meta"] = node.meta.get("tensor_meta")  # an observer returns its input
        node.replace_all_uses_with(observer_node, delete_user_cb=lambda user: user is not observer_node)
        self.observer_of[node] = self.observer_of[observer_node] = observer_node
        return observer_node

    def share(self, observer_nodes) -> None:
        """Make observer nodes use the first one's module (PyTorch's cat: inputs and output share one observer)."""
        first = observer_nodes[0]
        for other in observer_nodes[1:]:
            if other.target != first.target:
                old = other.target
                other.target = first.target
                if not any(n.op == "call_module" and n.target == old for n in self.gm.graph.nodes):
                    self.gm.delete_submodule(old)


def insert_observers(gm, function: str) -> None:
    modules = dict(gm.named_modules())
    inserter = ObserverInserter(gm, function)
    for node in list(gm.graph.nodes):
        if node.op not in ("call_module", "call_function", "call_method") or node in inserter.observer_of:
            continue
        qconfig = node.meta.get("qconfig")
        kind = op_kind(node, modules) if qconfig is not None else None
        if kind is None:
            continue
        if kind == "weight_only":
            # Only a float-qparams weight qconfig quantizes an embedding (as PyTorch's backend config says)
            weight = qconfig.weight() if qconfig.weight is not None else None
            if getattr(weight, "qscheme", None) is per_channel_affine_float_qparams:
                node.meta["quantize_kind"] = "weight_only"
            continue
        if kind == "shared":
            # Quantized in, quantized out with the same scale; a float input stays float (nothing to gain by
            # quantizing it here: the next quantizable op observes its own input).
            observer_node = inserter.observer_of.get(node.args[0])
            if observer_node is not None:
                inserter.observer_of[node] = observer_node
                node.meta["quantize_kind"] = "shared"
            continue
        inputs = activation_inputs(node)
        input_observers = [inserter.observer_of.get(i) or inserter.observe(i, qconfig) for i in inputs]
        if any(o is None for o in input_observers):
            continue
        output = node
        user = single_user(node)
        if (node.target in ADD_FUNCTIONS + (F.linear, F.conv2d) and user is not None and is_relu(user, modules)
                and user.meta.get("qconfig") is not None):
            # PyTorch's add-relu / linear-relu / conv-relu patterns of functionals: observed after the relu
            node.meta["fused_relu"] = True
            output = user
        output_observer = inserter.observe(output, qconfig)
        if output_observer is None:
            continue
        node.meta["quantize_kind"] = kind
        if node.op == "call_function" and node.target is corenn.cat:
            inserter.share(input_observers + [output_observer])


def trace_for_quantization(model, qconfig_mapping, example_inputs, function: str):
    if not isinstance(model, nn.Module):
        raise TypeError(f"{function}(): argument 'model' must be a corenn.nn.Module, got {type(model).__name__}")
    if example_inputs is None:
        raise TypeError(f"{function}(): argument 'example_inputs' is required (a tuple of inputs to the model)")
    if not isinstance(example_inputs, tuple):
        example_inputs = (example_inputs,)
    mapping = as_qconfig_mapping(qconfig_mapping, function)
    model = copy.deepcopy(model)
    gm = corenn.fx.GraphModule(model, QuantizationTracer().trace(model), type(model).__name__)
    # Shapes tell tensors from other values; run in eval mode so batch norm statistics are left alone.
    modes = {name: m.training for name, m in gm.named_modules()}
    gm.eval()
    with corenn.no_grad():
        ShapeProp(gm).propagate(*example_inputs)
    for name, m in gm.named_modules():
        m.training = modes[name]
    record_qconfigs(gm, mapping)
    return gm


def prepare_fx(model, qconfig_mapping, example_inputs, prepare_custom_config=None, _equalization_config=None,
               backend_config=None):
    """Trace ``model``, fuse, and insert observers (``torch.ao.quantization.quantize_fx.prepare_fx``).

    The model should be in eval mode (batch norm is folded into the convolution before it).
    Returns a ``GraphModule`` computing exactly what ``model`` computes; run calibration data
    through it, then ``convert_fx``. ``example_inputs`` is a tuple of inputs (used to tell tensors
    from other values).
    """
    refuse_unsupported("prepare_fx", prepare_custom_config=prepare_custom_config, _equalization_config=_equalization_config,
                       backend_config=backend_config)
    gm = trace_for_quantization(model, qconfig_mapping, example_inputs, "prepare_fx")
    fuse(gm, fold_batch_norm=not model.training)
    insert_observers(gm, "prepare_fx")
    gm.graph.lint()
    gm.recompile()
    return gm


def prepare_qat_fx(model, qconfig_mapping, example_inputs, prepare_custom_config=None, backend_config=None):
    """``prepare_fx`` for quantization-aware training: Linear / Conv2d (and fused ReLU forms) become QAT
    modules with fake-quantized weights, activations get the qconfig's ``FakeQuantize``.

    The model must be in training mode. Batch norm is not folded (no QAT conv-bn module): it
    trains in float between a fake-quantized convolution and what follows.
    """
    if not model.training:
        raise AssertionError("prepare_qat_fx: the model must be in training mode (call model.train())")
    refuse_unsupported("prepare_qat_fx", prepare_custom_config=prepare_custom_config, backend_config=backend_config)
    gm = trace_for_quantization(model, qconfig_mapping, example_inputs, "prepare_qat_fx")
    fuse(gm, fold_batch_norm=False)
    modules = dict(gm.named_modules())
    qat_types = {nn.Linear: qm.QATLinear, nn.Conv2d: qm.QATConv2d, qm.LinearReLU: qm.QATLinearReLU,
                 qm.ConvReLU2d: qm.QATConvReLU2d}
    for node in gm.graph.nodes:
        qconfig = node.meta.get("qconfig")
        if node.op == "call_module" and type(modules[node.target]) in qat_types and qconfig is not None:
            module = modules[node.target]
            module.qconfig = qconfig
            qat = qat_types[type(module)].from_float(module)
            gm.set_submodule(node.target, qat.train())
    insert_observers(gm, "prepare_qat_fx")
    gm.graph.lint()
    gm.recompile()
    return gm


# -- quantized ops used by converted graphs --------------------------------------------------------------------------

class QuantizedOperator(qm.QFunctional):
    """A quantized ``add`` / ``add_relu`` / ``mul`` / ``cat`` node: its output scale and zero point in buffers."""

    def __init__(self, operator_name: str = "add", scale: float = 1.0, zero_point: int = 0):
        super().__init__(scale, zero_point)
        self.operator_name = operator_name

    def forward(self, *args, **kwargs):
        if self.operator_name == "cat" and "tensors" in kwargs:
            args = (kwargs.pop("tensors"),) + args
        return getattr(self, self.operator_name)(*args, **kwargs)

    def extra_repr(self):
        return f"{self.operator_name}, " + super().extra_repr()


def quantized_relu(input, inplace: bool = False):
    """``F.relu`` on a quantized tensor (a clamp at the zero point), or on a float one."""
    return qm.ReLU()(input)


def quantized_max_pool2d(input, *args, **kwargs):
    """``F.max_pool2d`` on the integers of a quantized tensor: scale and zero point unchanged."""
    if not isinstance(input, QTensor):
        return F.max_pool2d(input, *args, **kwargs)
    pooled = F.max_pool2d(corenn.from_numpy(input.int_values.astype(np.float32)), *args, **kwargs)
    return input._like(pooled.numpy().astype(input.dtype.numpy))


def quantized_avg_pool2d(input, *args, **kwargs):
    """``F.avg_pool2d`` of a quantized tensor (PyTorch's integers; scale and zero point unchanged), or a float one."""
    return qF.avg_pool2d(input, *args, **kwargs) if isinstance(input, QTensor) else F.avg_pool2d(input, *args,
                                                                                                   **kwargs)


def quantized_adaptive_avg_pool2d(input, output_size):
    """``F.adaptive_avg_pool2d`` of a quantized tensor (scale and zero point unchanged), or a float one."""
    if isinstance(input, QTensor):
        return qF.adaptive_avg_pool2d(input, output_size)
    return F.adaptive_avg_pool2d(input, output_size)


def quantized_flatten(input, start_dim: int = 0, end_dim: int = -1):
    return input.flatten(start_dim, end_dim) if isinstance(input, QTensor) else corenn.flatten(input, start_dim,
                                                                                                end_dim)


def quantized_reshape(input, shape):
    return input.reshape(shape) if isinstance(input, QTensor) else corenn.reshape(input, shape)


QUANTIZED_FUNCTIONS = {F.relu: quantized_relu, corenn.relu: quantized_relu, F.max_pool2d: quantized_max_pool2d,
                       F.avg_pool2d: quantized_avg_pool2d, F.adaptive_avg_pool2d: quantized_adaptive_avg_pool2d,
                       corenn.flatten: quantized_flatten, corenn.reshape: quantized_reshape}


# -- convert --------------------------------------------------------------------------------------------------------

def is_observer(module) -> bool:
    return isinstance(module, (ObserverBase, FakeQuantizeBase))


def quantized_module_for(module, qconfig, observer):
    """The quantized module replacing observed float (or QAT) ``module`` whose output ``observer`` watched."""
    mapping = {nn.Linear: qm.Linear, nn.Conv2d: qm.Conv2d, qm.LinearReLU: qm.QuantizedLinearReLU,
               qm.ConvReLU2d: qm.QuantizedConvReLU2d, qm.QATLinear: qm.Linear, qm.QATConv2d: qm.Conv2d,
               qm.QATLinearReLU: qm.QuantizedLinearReLU, qm.QATConvReLU2d: qm.QuantizedConvReLU2d,
               nn.LayerNorm: qm.LayerNorm}
    module.qconfig, module.activation_post_process = qconfig, observer
    try:
        return mapping[type(module)].from_float(module)
    finally:
        del module.qconfig, module.activation_post_process


def attribute(gm, target: str):
    value = gm
    for part in target.split("."):
        value = getattr(value, part)
    return value


def float_module_for_functional(gm, node):
    """An ``nn.Linear`` / ``nn.Conv2d`` holding the ``get_attr`` weight and bias of an F.linear / F.conv2d node."""
    signature = inspect.signature(node.target)
    bound = signature.bind(*node.args, **node.kwargs)
    bound.apply_defaults()
    values = dict(bound.arguments)
    weight = attribute(gm, values["weight"].target).detach()
    bias = None if values["bias"] is None else attribute(gm, values["bias"].target).detach()
    if node.target is F.linear:
        module = nn.Linear(weight.shape[1], weight.shape[0], bias=bias is not None)
    else:
        module = nn.Conv2d(weight.shape[1] * values["groups"], weight.shape[0], tuple(weight.shape[2:]),
                           values["stride"], values["padding"], values["dilation"], values["groups"],
                           bias=bias is not None)
    module.weight = nn.Parameter(weight.clone())
    if bias is not None:
        module.bias = nn.Parameter(bias.clone())
    return module


def scale_zero_point(observer) -> tuple[float, int]:
    scale, zero_point = observer.calculate_qparams()
    return float(scale.reshape(-1)[0].item()), int(zero_point.reshape(-1)[0].item())


def convert_fx(graph_module, inplace: bool = False, convert_custom_config=None, _remove_qconfig: bool = True,
               qconfig_mapping=None, backend_config=None):
    """Turn a prepared (and calibrated or trained) ``GraphModule`` into a quantized one.

    Observed Linear / Conv2d (fused or QAT) become ``quantized.Linear`` / ``Conv2d`` /
    ``LinearReLU`` / ``ConvReLU2d``; add / mul / cat become ``QuantizedOperator`` modules;
    relu, max pooling, flatten and reshape run on the quantized integers; observers on float
    values become ``Quantize`` modules; ``dequantize`` goes before every float op and the output.
    """
    refuse_unsupported("convert_fx", convert_custom_config=convert_custom_config, qconfig_mapping=qconfig_mapping,
                       backend_config=backend_config)
    if not isinstance(graph_module, corenn.fx.GraphModule):
        raise TypeError(f"convert_fx(): argument 'graph_module' must be a GraphModule returned by prepare_fx, got "
                        f"{type(graph_module).__name__}")
    gm = graph_module if inplace else copy.deepcopy(graph_module)
    graph = gm.graph
    modules = dict(gm.named_modules())
    quantized: set = set()       # nodes whose value is a quantized tensor at run time
    dequantized: dict = {}       # quantized node -> its dequantize node

    def output_observer_of(node):
        output = single_user(node) if node.meta.get("fused_relu") else node
        observer_node = single_user(output)
        if observer_node is None or observer_node.op != "call_module" or not is_observer(
                modules.get(observer_node.target)):
            raise RuntimeError(f"convert_fx: the output of node {node.name} has no observer; pass the model "
                               "returned by prepare_fx")
        return output, modules[observer_node.target]

    def dequantize(node):
        if node not in dequantized:
            with graph.inserting_after(node):
                dequantized[node] = graph.call_method("dequantize", (node,))
        return dequantized[node]

    erased: set = set()
    for node in list(graph.nodes):
        if node in erased:
            continue
        if node.op == "call_module" and is_observer(modules.get(node.target)) or (
                node.op == "call_module" and isinstance(modules.get(node.target), qm.Quantize)):
            source = node.args[0]
            module = modules[node.target]
            if source in quantized:  # the op before already produces this scale: nothing to do
                node.replace_all_uses_with(source)
                graph.erase_node(node)
                continue
            if is_observer(module):
                scale, zero_point = scale_zero_point(module)
                module = qm.Quantize(scale, zero_point, quint8)
                gm.set_submodule(node.target, module)
                modules[node.target] = module
            quantized.add(node)
            continue
        kind = node.meta.get("quantize_kind")
        inputs_quantized = kind is not None and all(i in quantized for i in activation_inputs(node))
        if kind == "weighted" and inputs_quantized:
            _, observer = output_observer_of(node)
            module = quantized_module_for(modules[node.target], node.meta["qconfig"], observer)
            gm.set_submodule(node.target, module)
            modules[node.target] = module
            quantized.add(node)
            continue
        if kind == "functional" and inputs_quantized:
            output, observer = output_observer_of(node)
            name = f"quantized_{node.name}"
            if node.target is F.layer_norm:
                values = layer_norm_arguments(node)
                weight, bias = (None if values[key] is None else attribute(gm, values[key].target)
                                for key in ("weight", "bias"))
                shape = values["normalized_shape"]
                module = qm.LayerNorm(tuple(shape) if isinstance(shape, (tuple, list)) else (shape,), weight, bias,
                                      *scale_zero_point(observer), eps=values["eps"],
                                      elementwise_affine=weight is not None)
                args = (values["input"],)
            elif node.target in (F.linear, F.conv2d):
                float_module = float_module_for_functional(gm, node)
                if node.meta.get("fused_relu"):
                    fused_type = qm.LinearReLU if node.target is F.linear else qm.ConvReLU2d
                    float_module = fused_type(float_module, nn.ReLU())
                module = quantized_module_for(float_module, node.meta["qconfig"], observer)
                args = (node.args[0],)
            else:
                operator_name = ("add_relu" if node.meta.get("fused_relu") else "add") if node.target in ADD_FUNCTIONS \
                    else "mul" if node.target in MUL_FUNCTIONS else "cat"
                module = QuantizedOperator(operator_name, *scale_zero_point(observer))
                args = node.args
            gm.add_submodule(name, module)
            modules[name] = module
            with graph.inserting_before(node):
                replacement = graph.call_module(name, args, dict(node.kwargs) if node.target is corenn.cat else {})
            replacement.meta.update(node.meta)
            if output is not node:  # the fused relu goes: the quantized op clamps
                output.replace_all_uses_with(node)
                graph.erase_node(output)
                erased.add(output)
            node.replace_all_uses_with(replacement)
            graph.erase_node(node)
            quantized.add(replacement)
            continue
        if kind == "weight_only":
            module = modules[node.target]
            quantized_type = qm.Embedding if type(module) is nn.Embedding else qm.EmbeddingBag
            module = quantized_type.from_float(module, weight_observer=node.meta["qconfig"].weight())
            gm.set_submodule(node.target, module)
            modules[node.target] = module
            continue
        if kind == "shared" and node.args[0] in quantized:
            if node.op == "call_module":
                module = modules[node.target]
                if isinstance(module, nn.ReLU):
                    module = qm.ReLU()
                elif isinstance(module, nn.MaxPool2d):
                    module = qm.MaxPool2d.from_float(module)
                elif isinstance(module, nn.AvgPool2d):
                    module = qm.AvgPool2d.from_float(module)
                elif isinstance(module, nn.AdaptiveAvgPool2d):
                    module = qm.AdaptiveAvgPool2d.from_float(module)
                elif isinstance(module, nn.Flatten):
                    module = qm.Flatten.from_float(module)
                else:
                    module = nn.Identity()  # Identity, Dropout (eval)
                gm.set_submodule(node.target, module)
                modules[node.target] = module
            elif node.op == "call_function" and node.target in QUANTIZED_FUNCTIONS:
                node.target = QUANTIZED_FUNCTIONS[node.target]
            elif node.op == "call_method" and node.target == "relu":
                with graph.inserting_before(node):
                    replacement = graph.call_function(quantized_relu, (node.args[0],))
                replacement.meta.update(node.meta)
                node.replace_all_uses_with(replacement)
                graph.erase_node(node)
                node = replacement
            quantized.add(node)
            continue
        # Everything else computes in float: dequantize its quantized inputs (size / dim / shape excepted).
        if node.op in ("call_method", "call_function") and (node.target in QTENSOR_QUERIES or (
                node.target is getattr and node.args[1] in QTENSOR_QUERIES)):
            continue
        for value in node.all_input_nodes:
            if value in quantized:
                node.replace_input_with(value, dequantize(value))
    graph.eliminate_dead_code()
    graph.lint()
    gm.recompile()
    gm.delete_all_unused_submodules()
    return gm
