"""Physical structured pruning: ``shrink(model, example_inputs)`` removes pruned channels, giving a smaller dense model.

Structured pruning (``ln_structured(layer, "weight", amount, n, dim=0)``) masks whole
output channels of a ``Conv2d`` or neurons of a ``Linear``, but the layer keeps its size.
``shrink`` traces the model with ``corenn.fx`` and follows every channel from the layer
that produces it to the layers that read it, the way Torch-Pruning's dependency graph
does: through BatchNorm, activations, pooling, dropout, flattening (a channel becomes a
block of a Linear's inputs), residual additions (both operands' channel ``j`` are one
channel: it goes only when it is pruned in every producer) and concatenations (a channel
keeps its producer, at its offset). A channel is removed from its producers (weight rows,
bias), from BatchNorms (affine parameters, running statistics) and from every consumer's
inputs (weight columns) when it is *dead*: zero for every input, because its weights are
pruned and so are its bias and the BatchNorm parameters after it. So the shrunk model's
outputs equal the masked model's. :func:`complete_channel_pruning` prunes those biases and
BatchNorm parameters (with masks, PyTorch-style) for channels whose weights are pruned in
every producer, so that they are dead; call it before fine-tuning.

Channels that reach the model's output, an operation shrink does not know, a module
called from two places or a grouped convolution stay. The returned model is a copy of
``model`` with its own class and forward, whose layers are smaller and hold plain
parameters (masks applied).

Example::

    >>> import corenn_prune
    >>> net = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))
    >>> _ = corenn_prune.ln_structured(net[0], "weight", amount=0.5, n=2, dim=0)
    >>> _ = corenn_prune.complete_channel_pruning(net, corenn.randn(2, 8))
    >>> corenn_prune.shrink(net, corenn.randn(2, 8))
    Sequential(
      (0): Linear(in_features=8, out_features=8, bias=True)
      (1): ReLU()
      (2): Linear(in_features=8, out_features=4, bias=True)
    )
"""
from __future__ import annotations

import copy
import operator

import numpy as np

import corenn
import corenn.nn.functional as F
from corenn import nn

__all__ = ["shrink", "complete_channel_pruning", "ShrinkError"]


class ShrinkError(RuntimeError):
    """The model cannot be shrunk as asked (it does not trace, or the shrunk outputs would differ)."""


# Modules and functions that keep channels where they are and map zero to zero.
_PASSTHROUGH_MODULES = tuple(getattr(nn, name) for name in (
    "ReLU", "ReLU6", "LeakyReLU", "GELU", "SiLU", "Tanh", "Hardtanh", "Dropout", "Dropout2d", "Identity", "MaxPool1d",
    "MaxPool2d", "AvgPool1d", "AvgPool2d", "AdaptiveAvgPool1d", "AdaptiveAvgPool2d", "AdaptiveMaxPool2d")
    if hasattr(nn, name))
_PASSTHROUGH_FUNCTIONS = {getattr(F, name) for name in (
    "relu", "relu6", "leaky_relu", "gelu", "silu", "tanh", "hardtanh", "max_pool1d", "max_pool2d", "avg_pool1d",
    "avg_pool2d", "adaptive_avg_pool1d", "adaptive_avg_pool2d", "adaptive_max_pool2d", "dropout", "dropout2d")
    if hasattr(F, name)} | {corenn.relu, corenn.tanh}
_PASSTHROUGH_METHODS = {"relu", "tanh", "contiguous", "clone", "detach"}
_REDUCE_METHODS = {"mean", "sum", "amax"}       # over spatial dims: channels stay, zero stays zero
_ADD = {operator.add, corenn.add, "add"}
_CAT = {corenn.cat, "cat"}
_SHAPE_ONLY = {"size", "dim"}                  # read the shape, not the values


class _UnionFind:
    def __init__(self):
        self.parent: list[int] = []

    def new(self, count: int) -> np.ndarray:
        start = len(self.parent)
        self.parent.extend(range(start, start + count))
        return np.arange(start, start + count)

    def find(self, g: int) -> int:
        while self.parent[g] != g:
            self.parent[g] = self.parent[self.parent[g]]
            g = self.parent[g]
        return g

    def union(self, a: int, b: int) -> None:
        a, b = self.find(a), self.find(b)
        if a != b:
            self.parent[b] = a


def _effective(module, name):
    value = getattr(module, name, None)
    return None if value is None else value.detach().numpy()


class _ChannelGraph:
    """Where each channel of ``model`` comes from and goes to (groups of coupled channels), and which are dead."""

    def __init__(self, model, example_inputs):
        from corenn.fx.passes.shape_prop import ShapeProp
        try:
            self.gm = corenn.fx.symbolic_trace(model)
        except Exception as error:
            raise ShrinkError(f"shrink(): the model does not trace with corenn.fx ({error}); make the untraceable "
                              "part a leaf module or pass concrete_args") from error
        with corenn.no_grad():
            ShapeProp(self.gm).propagate(*example_inputs)
        self.groups = _UnionFind()
        self.pinned: set[int] = set()
        self.slots: dict = {}        # node -> group id per channel (or per feature, after flattening)
        self.dead: dict = {}         # node -> bool per slot
        self.appearances: list = []  # (slots, dead) of every value carrying groups
        self.producers: list = []    # (module, output slots)
        self.consumers: list = []    # (module, input slots)
        self.channelwise: list = []  # (BatchNorm module, slots)
        calls = {}
        for node in self.gm.graph.nodes:
            if node.op == "call_module":
                calls[node.target] = calls.get(node.target, 0) + 1
        self.calls = calls
        for node in self.gm.graph.nodes:
            self._visit(node)

    # -- helpers
    def _shape(self, node):
        meta = node.meta.get("tensor_meta") if hasattr(node, "meta") else None
        return tuple(meta.shape) if meta is not None and hasattr(meta, "shape") else None

    def _pin(self, node) -> None:
        if self._tracked(node):
            self.pinned.update(self.groups.find(int(g)) for g in self.slots[node])

    def _set(self, node, slots, dead) -> None:
        self.slots[node] = slots
        self.dead[node] = dead
        self.appearances.append((slots, dead))

    def _tracked(self, value) -> bool:
        return isinstance(value, corenn.fx.Node) and value in self.slots

    def _tracked_inputs(self, node):
        return [n for n in node.all_input_nodes if n in self.slots]

    def _unknown(self, node) -> None:
        for n in self._tracked_inputs(node):
            self._pin(n)

    def _visit(self, node) -> None:
        if node.op in ("placeholder", "get_attr"):
            return
        if node.op == "output":
            self._unknown(node)
            return
        if node.op == "call_module":
            module = self.gm.get_submodule(node.target)
            if self.calls[node.target] > 1:
                self._unknown(node)
                if isinstance(module, (nn.Linear, nn.Conv2d)):   # its outputs are not removable either
                    out = self.groups.new(self._out_channels(module))
                    self.pinned.update(int(g) for g in out)
                    self._set(node, out, np.zeros(len(out), bool))
                return
            self._visit_module(node, module)
            return
        self._visit_function(node)

    def _out_channels(self, module):
        return module.out_features if isinstance(module, nn.Linear) else module.out_channels

    def _visit_module(self, node, module) -> None:
        source = node.args[0] if node.args else None
        if isinstance(module, (nn.Linear, nn.Conv2d)):
            if isinstance(module, nn.Conv2d) and module.groups != 1:
                self._unknown(node)
                return
            if self._tracked(source):
                self.consumers.append((module, self.slots[source]))
            else:
                self._unknown(node)
            weight = _effective(module, "weight")
            rows = weight.reshape(weight.shape[0], -1)
            bias = _effective(module, "bias")
            dead = ~np.any(rows != 0, axis=1)
            if bias is not None:
                dead &= bias == 0
            out = self.groups.new(rows.shape[0])
            self.producers.append((module, out))
            shape = self._shape(node)
            if shape is None or len(shape) < 2 or (isinstance(module, nn.Linear) and len(shape) != 2):
                self.pinned.update(int(g) for g in out)   # a Linear on 3-D input: features are not channel 1
            self._set(node, out, dead)
            return
        if isinstance(module, (nn.BatchNorm1d, nn.BatchNorm2d)) and self._tracked(source):
            slots, dead = self.slots[source], self.dead[source].copy()
            beta = _effective(module, "bias")
            gamma = _effective(module, "weight")
            if beta is not None:
                shift = beta.astype(np.float64)
                if module.running_mean is not None and gamma is not None:
                    shift = shift - module.running_mean.numpy() * gamma   # BN(0) in eval mode, up to the scale
                elif module.running_mean is not None:
                    shift = shift - module.running_mean.numpy()
                dead &= (shift == 0) & (beta == 0)
            elif module.running_mean is not None:
                dead &= module.running_mean.numpy() == 0
            self.channelwise.append((module, slots))
            self._set(node, slots, dead)
            return
        if isinstance(module, _PASSTHROUGH_MODULES) and self._tracked(source):
            self._set(node, self.slots[source], self.dead[source])
            return
        if isinstance(module, nn.Flatten) and self._tracked(source):
            self._flatten(node, source)
            return
        self._unknown(node)

    def _flatten(self, node, source) -> None:
        before, after = self._shape(source), self._shape(node)
        if before is None or after is None or len(after) != 2 or before[0] != after[0] or len(before) < 2:
            self._unknown(node)
            return
        per_channel = int(np.prod(before[2:])) if len(before) > 2 else 1
        slots = self.slots[source]
        if len(slots) * per_channel != after[1]:
            self._unknown(node)
            return
        self._set(node, np.repeat(slots, per_channel), np.repeat(self.dead[source], per_channel))

    def _visit_function(self, node) -> None:
        target = node.target
        tracked = self._tracked_inputs(node)
        if not tracked:
            return
        if node.op == "call_function" and target is getattr and len(node.args) > 1 and node.args[1] == "shape":
            return
        if node.op == "call_method" and target in _SHAPE_ONLY:
            return
        source = node.args[0] if node.args else None
        before, after = (self._shape(source) if self._tracked(source) else None), self._shape(node)
        same_channels = before is not None and after is not None and len(after) >= 2 and after[:2] == before[:2]
        if ((node.op == "call_function" and target in _PASSTHROUGH_FUNCTIONS)
                or (node.op == "call_method" and target in _PASSTHROUGH_METHODS)) and self._tracked(source):
            if same_channels:
                self._set(node, self.slots[source], self.dead[source])
                return
        if node.op == "call_method" and target in _REDUCE_METHODS and same_channels:
            self._set(node, self.slots[source], self.dead[source])
            return
        if (node.op == "call_method" and target in ("view", "reshape", "flatten")) or \
                (node.op == "call_function" and target is corenn.flatten):
            if self._tracked(source):
                self._flatten(node, source)
                return
        if target in _ADD and len(node.args) == 2 and all(self._tracked(a) for a in node.args) and not node.kwargs:
            a, b = node.args
            if self._shape(a) == self._shape(b) == after and len(self.slots[a]) == len(self.slots[b]):
                for ga, gb in zip(self.slots[a], self.slots[b]):
                    self.groups.union(int(ga), int(gb))
                self._set(node, self.slots[a], self.dead[a] & self.dead[b])
                return
        if target in _CAT:
            parts = node.args[0] if node.args else node.kwargs.get("tensors")
            dim = node.args[1] if len(node.args) > 1 else node.kwargs.get("dim", 0)
            if isinstance(parts, (list, tuple)) and all(self._tracked(p) for p in parts) and after is not None \
                    and dim in (1, 1 - len(after)):
                self._set(node, np.concatenate([self.slots[p] for p in parts]),
                          np.concatenate([self.dead[p] for p in parts]))
                return
        self._unknown(node)

    # -- results
    def removable_groups(self) -> set[int]:
        """Groups not pinned and dead everywhere they appear."""
        alive_or_pinned = {self.groups.find(g) for g in self.pinned}
        for slots, dead in self.appearances:
            alive_or_pinned.update(self.groups.find(int(g)) for g in slots[~dead])
        every = {self.groups.find(int(g)) for slots, _ in self.appearances for g in slots}
        return every - alive_or_pinned

    def keep(self, slots, removed: set[int]) -> np.ndarray:
        return np.array([self.groups.find(int(g)) not in removed for g in slots], dtype=bool)


def _bake_masks(model) -> None:
    """Make every pruning of ``model`` permanent (masks applied to plain parameters)."""
    from corenn_prune.prune import _pruned_tensor, remove
    for _, module in model.named_modules():
        for name in list(module.computed_attribute_names()):
            if _pruned_tensor(module, name) is not None:
                remove(module, name)


def _slice_parameter(module, name: str, keep: np.ndarray, dim: int) -> None:
    tensor = getattr(module, name, None)
    if tensor is None:
        return
    index = corenn.from_numpy(np.flatnonzero(keep))
    sliced = tensor.detach().index_select(dim, index).clone()
    if isinstance(tensor, nn.Parameter):
        setattr(module, name, nn.Parameter(sliced, requires_grad=tensor.requires_grad))
    else:
        setattr(module, name, sliced)


def shrink(model, example_inputs, *, check: bool = True, atol: float = 1e-5):
    """A copy of ``model`` with its dead channels removed: smaller ``Conv2d``/``Linear``/``BatchNorm`` layers, same outputs.

    ``example_inputs`` (a tensor or a tuple of them) is what tracing and shape
    propagation run on. With ``check`` the copy is run on them next to ``model`` and a
    difference above ``atol`` raises :class:`ShrinkError` (it never should). The copy
    holds plain parameters: pruning masks are applied and gone.

    Example::

        >>> small = corenn_prune.shrink(masked_cnn, corenn.randn(1, 1, 8, 8))   # doctest: +SKIP
    """
    if not isinstance(example_inputs, (tuple, list)):
        example_inputs = (example_inputs,)
    shrunk = copy.deepcopy(model)
    _bake_masks(shrunk)
    graph = _ChannelGraph(shrunk, example_inputs)
    removed = graph.removable_groups()
    with corenn.no_grad():
        for module, slots in graph.producers:
            keep = graph.keep(slots, removed)
            if keep.all():
                continue
            _slice_parameter(module, "weight", keep, 0)
            _slice_parameter(module, "bias", keep, 0)
            if isinstance(module, nn.Linear):
                module.out_features = int(keep.sum())
            else:
                module.out_channels = int(keep.sum())
        for module, slots in graph.channelwise:
            keep = graph.keep(slots, removed)
            if keep.all():
                continue
            for name in ("weight", "bias", "running_mean", "running_var"):
                _slice_parameter(module, name, keep, 0)
            module.num_features = int(keep.sum())
        for module, slots in graph.consumers:
            keep = graph.keep(slots, removed)
            if keep.all():
                continue
            _slice_parameter(module, "weight", keep, 1)
            if isinstance(module, nn.Linear):
                module.in_features = int(keep.sum())
            else:
                module.in_channels = int(keep.sum())
    if check:
        with corenn.no_grad():
            was_training = model.training
            model.eval()
            shrunk.eval()
            expected, got = model(*example_inputs), shrunk(*example_inputs)
            model.train(was_training)
            shrunk.train(was_training)
        difference = float((expected - got).abs().max()) if expected.numel() else 0.0
        if difference > atol:
            raise ShrinkError(f"shrink(): the shrunk model's outputs differ from the model's by {difference:.3g} "
                              f"(> atol={atol}); please report this model")
    return shrunk


def complete_channel_pruning(model, example_inputs):
    """Prune the biases and BatchNorm parameters of channels whose weights are pruned in every producer; returns ``model``.

    After ``ln_structured(..., dim=0)`` a pruned channel still carries its bias (and the
    BatchNorm after it adds its shift), so it is a constant, not zero, and removing it
    would change the outputs. This prunes those entries with masks (``bias_mask``, the
    BatchNorm's ``weight_mask`` and ``bias_mask``), so the channels are dead, stay dead
    while fine-tuning, and :func:`shrink` removes them. Channels that cannot be removed
    (they reach the output, pass an operation shrink does not follow) are left alone.

    Example::

        >>> _ = corenn_prune.complete_channel_pruning(masked_cnn, corenn.randn(1, 1, 8, 8))   # doctest: +SKIP
    """
    from corenn_prune.prune import custom_from_mask
    if not isinstance(example_inputs, (tuple, list)):
        example_inputs = (example_inputs,)
    graph = _ChannelGraph(model, example_inputs)
    weight_pruned: dict[int, bool] = {}
    for module, slots in graph.producers:
        weight = _effective(module, "weight")
        zero = ~np.any(weight.reshape(weight.shape[0], -1) != 0, axis=1)
        for g, z in zip(slots, zero):
            root = graph.groups.find(int(g))
            weight_pruned[root] = weight_pruned.get(root, True) and bool(z)
    pinned = {graph.groups.find(g) for g in graph.pinned}
    targets = {g for g, pruned in weight_pruned.items() if pruned and g not in pinned}
    if not targets:
        return model

    def mask_entries(module, name, slots):
        if getattr(module, name, None) is None:
            return
        keep = ~np.array([graph.groups.find(int(g)) in targets for g in slots])
        if keep.all():
            return
        current = getattr(module, name)
        custom_from_mask(module, name, mask=corenn.tensor(keep.astype(np.float32), dtype=current.dtype))

    for module, slots in graph.producers:
        mask_entries(module, "bias", slots)
    for module, slots in graph.channelwise:
        mask_entries(module, "weight", slots)
        mask_entries(module, "bias", slots)
    return model
