"""Conv + batch-norm fusion for inference: fold an eval-mode batch norm into the convolution before it.

In eval mode ``bn(conv(x))`` is ``conv'(x)`` with ``w' = w * g / sqrt(v + eps)`` (per output
channel) and ``b' = (b - m) * g / sqrt(v + eps) + beta``: one op instead of two.

Unlike a fuser that edits the convolution module in place, every fused pair here gets
its own new convolution module and the original modules are never modified, so the
result stays correct when

- a convolution feeds two batch norms (each gets its own fused copy),
- a convolution module is called more than once (only the call followed by the
  batch norm is replaced; the other calls keep the original weights),
- a convolution's output is also used elsewhere (the original call stays for those users).

Both ``nn.BatchNorm1d/2d/3d`` modules in eval mode and ``F.batch_norm(..., training=False)``
whose statistics are module attributes (``get_attr``) are fused.

Example::

    >>> import corenn
    >>> from corenn import nn
    >>> model = nn.Sequential(nn.Conv2d(3, 8, 3), nn.BatchNorm2d(8), nn.ReLU()).eval()
    >>> fused = corenn.fx.passes.fuse.fuse_conv_bn(model)
    >>> [type(m).__name__ for m in fused.modules()][1:]
    ['Conv2d', 'ReLU']
"""
from __future__ import annotations

import copy
import inspect

from corenn.fx.graph_module import GraphModule
from corenn.fx.node import Node

__all__ = ["fuse_conv_bn", "fuse", "fuse_conv_bn_weights"]

_CONV_TYPES = ("Conv1d", "Conv2d", "Conv3d")
_BN_TYPES = ("BatchNorm1d", "BatchNorm2d", "BatchNorm3d")


def _is_standard(module, names) -> bool:
    cls = type(module)
    return cls.__name__ in names and (cls.__module__ or "").startswith("corenn.")


def fuse_conv_bn_weights(conv_w, conv_b, bn_mean, bn_var, bn_eps, bn_w, bn_b):
    """The weight and bias of a convolution followed by an eval-mode batch norm, as tensors.

    Computed in float64 and returned in the convolution's dtype.

    Example::

        >>> w, b = fuse_conv_bn_weights(conv.weight, conv.bias, bn.running_mean, bn.running_var,   # doctest: +SKIP
        ...                             bn.eps, bn.weight, bn.bias)
    """
    import corenn
    dtype = conv_w.dtype
    with corenn.no_grad():
        w = conv_w.detach().to(corenn.float64)
        out_channels = w.shape[0]
        mean = bn_mean.detach().to(corenn.float64)
        var = bn_var.detach().to(corenn.float64)
        gamma = corenn.ones(out_channels, dtype=corenn.float64) if bn_w is None else bn_w.detach().to(corenn.float64)
        beta = corenn.zeros(out_channels, dtype=corenn.float64) if bn_b is None else bn_b.detach().to(corenn.float64)
        bias = corenn.zeros(out_channels, dtype=corenn.float64) if conv_b is None else conv_b.detach().to(corenn.float64)
        scale = gamma / corenn.sqrt(var + bn_eps)
        fused_w = w * scale.reshape([-1] + [1] * (w.ndim - 1))
        fused_b = (bias - mean) * scale + beta
    return fused_w.to(dtype), fused_b.to(dtype)


def _fused_conv(conv, mean, var, eps, gamma, beta):
    from corenn.module.parameter import Parameter
    fused = copy.deepcopy(conv)
    weight, bias = fuse_conv_bn_weights(conv.weight, conv.bias, mean, var, eps, gamma, beta)
    fused.weight = Parameter(weight, requires_grad=conv.weight.requires_grad)
    fused.bias = Parameter(bias, requires_grad=conv.weight.requires_grad)
    return fused


def _attr_value(gm, arg):
    """The value of a get_attr node (or a plain value); raises LookupError for anything computed."""
    if isinstance(arg, Node):
        if arg.op != "get_attr":
            raise LookupError(arg.name)
        value = gm
        for part in arg.target.split("."):
            value = getattr(value, part)
        return value
    return arg


def _bn_statistics(gm, node, modules):
    """(input node, mean, var, eps, gamma, beta) for a fusable eval-mode batch norm node, else None."""
    if node.op == "call_module":
        bn = modules.get(node.target)
        if bn is None or not _is_standard(bn, _BN_TYPES) or bn.training or node.kwargs or len(node.args) != 1:
            return None
        if getattr(bn, "running_mean", None) is None or getattr(bn, "running_var", None) is None:
            return None  # without running statistics eval mode normalises by the batch: not a fixed affine map
        return node.args[0], bn.running_mean, bn.running_var, bn.eps, getattr(bn, "weight", None), \
            getattr(bn, "bias", None)
    if node.op == "call_function" and getattr(node.target, "__name__", "") == "batch_norm" \
            and (node.target.__module__ or "").startswith("corenn."):
        try:
            bound = inspect.signature(node.target).bind(*node.args, **node.kwargs)
        except TypeError:
            return None
        bound.apply_defaults()
        a = bound.arguments
        if a["training"] is not False or not isinstance(a["input"], Node):
            return None
        try:
            mean, var = _attr_value(gm, a["running_mean"]), _attr_value(gm, a["running_var"])
            gamma, beta = _attr_value(gm, a["weight"]), _attr_value(gm, a["bias"])
            eps = _attr_value(gm, a["eps"])
        except LookupError:
            return None  # statistics computed in the graph: not constants, cannot fold
        if mean is None or var is None or not isinstance(eps, (int, float)):
            return None
        return a["input"], mean, var, eps, gamma, beta
    return None


def fuse_conv_bn(model, inplace: bool = False) -> GraphModule:
    """Fold every eval-mode batch norm that directly follows a convolution into a new fused convolution.

    ``model`` is a Module (traced here) or a GraphModule (copied first unless
    ``inplace``). The original modules are never changed. Batch norms in training
    mode, without running statistics, or after something other than a Conv1d/2d/3d
    module are left as they are.

    Example::

        >>> model.eval()                                    # doctest: +SKIP
        >>> fused = fuse_conv_bn(model)                     # doctest: +SKIP
        >>> corenn.allclose(fused(x), model(x), rtol=1e-5, atol=1e-5)    # doctest: +SKIP
    """
    from corenn.fx.tracer import symbolic_trace
    if isinstance(model, GraphModule):
        gm = model if inplace else copy.deepcopy(model)
    else:
        gm = symbolic_trace(model)
    graph = gm.graph
    modules = dict(gm.named_modules())
    # How many call sites each conv module has: a module called once, whose only user is
    # the batch norm, can be replaced under its own name (state-dict keys stay familiar).
    call_counts: dict[str, int] = {}
    for node in graph.nodes:
        if node.op == "call_module":
            call_counts[node.target] = call_counts.get(node.target, 0) + 1
    for node in list(graph.nodes):
        stats = _bn_statistics(gm, node, modules)
        if stats is None:
            continue
        source, mean, var, eps, gamma, beta = stats
        if not isinstance(source, Node) or source.op != "call_module":
            continue
        conv = modules.get(source.target)
        if conv is None or not _is_standard(conv, _CONV_TYPES):
            continue
        fused = _fused_conv(conv, mean, var, eps, gamma, beta)
        if call_counts.get(source.target) == 1 and len(source.users) == 1:
            _set_module(gm, source.target, fused)
            modules[source.target] = fused
            node.replace_all_uses_with(source)
            graph.erase_node(node)
            continue
        name = _free_name(gm, source.target.replace(".", "_") + "_bn_fused")
        gm.add_submodule(name, fused)
        modules[name] = fused
        with graph.inserting_before(node):
            new = graph.call_module(name, source.args, source.kwargs)
        new.meta = dict(node.meta)
        node.replace_all_uses_with(new)
        graph.erase_node(node)
    graph.eliminate_dead_code()
    gm.delete_all_unused_submodules()
    gm.recompile()
    graph.lint()
    return gm


def _set_module(gm, target: str, module) -> None:
    *parents, name = target.split(".")
    # The parents on the path are the GraphModule's own containers (GraphModule builds them), so
    # replacing the child here leaves the traced model untouched.
    setattr(gm.get_submodule(".".join(parents)), name, module)


def _free_name(gm, base: str) -> str:
    name = base
    i = 0
    while hasattr(gm, name):
        i += 1
        name = f"{base}_{i}"
    return name


#: PyTorch's name for the same pass (``torch.fx.experimental.optimization.fuse``).
fuse = fuse_conv_bn
