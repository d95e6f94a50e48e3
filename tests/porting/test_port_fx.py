"""Ports of the FX programs of pytorch/examples ``fx`` and of the PyTorch FX tutorials: ``replace_op.py``
(rewrite every add into a mul by walking ``graph.nodes``), ``subgraph_rewriter_basic_use.py``
(``replace_pattern``), the "Building a Convolution/Batch Norm fuser in FX" tutorial (``fuse`` with
``named_modules``, ``fuse_conv_bn_eval`` and ``replace_node_module``) and the ``Interpreter``-based
shape propagation of the FX docs.

Each program is written once against ``lib`` and run with PyTorch and with corenn from the same
weights: the transformed modules give the same outputs, and (for the fused network) train the same.
"""
from __future__ import annotations

import copy
import operator

import numpy as np
import pytest

import corenn
from _port import assert_same_run, assert_same_state, numpy_state, same_weights

pytestmark = pytest.mark.torch


# --- replace_op.py: turn every addition into a multiplication ---------------------------------------------

def build_adder(lib):
    class M(lib.nn.Module):
        def forward(self, x, y):
            return x + y, lib.add(x, y), x.add(y)

    return M()


def replace_adds_with_muls(lib, module):
    traced = lib.fx.symbolic_trace(module)
    patterns = {operator.add, lib.add, "add"}
    for n in traced.graph.nodes:
        if any(n.target == pattern for pattern in patterns):
            with traced.graph.inserting_after(n):
                new_node = traced.graph.call_function(lib.mul, n.args, n.kwargs)
                n.replace_all_uses_with(new_node)
            traced.graph.erase_node(n)
    traced.recompile()
    return traced


def test_replace_op_turns_every_add_into_a_mul(torch):
    x, y = np.random.default_rng(0).standard_normal((2, 3, 4)).astype(np.float32)
    results = {}
    for lib in (torch, corenn):
        transformed = replace_adds_with_muls(lib, build_adder(lib))
        ops = [n.target for n in transformed.graph.nodes if n.op in ("call_function", "call_method")]
        assert ops == [lib.mul] * 3
        results[lib.__name__] = transformed(lib.from_numpy(x), lib.from_numpy(y))
    for ours, theirs in zip(results["corenn"], results["torch"]):
        assert_same_run([ours], [theirs])
        np.testing.assert_allclose(ours.numpy(), x * y, rtol=1e-6)


# --- subgraph_rewriter_basic_use.py -----------------------------------------------------------------------

def build_stacker(lib):
    class M(lib.nn.Module):
        def forward(self, x, w1, w2):
            m1 = lib.cat([w1, w2]).sum()
            m2 = lib.cat([w1, w2]).sum()
            return x + lib.max(m1) + lib.max(m2)

    return M()


def rewrite_stacks(lib, module):
    def pattern(w1, w2):
        return lib.cat([w1, w2]).sum()

    def replacement(w1, w2):
        return lib.stack([w1, w2])

    traced = lib.fx.symbolic_trace(module)
    matches = lib.fx.replace_pattern(traced, pattern, replacement)
    return traced, matches


def test_subgraph_rewriter_replaces_both_matches(torch):
    rng = np.random.default_rng(1)
    x, w1, w2 = (rng.standard_normal((2, 3)).astype(np.float32) for _ in range(3))
    results = {}
    for lib in (torch, corenn):
        traced, matches = rewrite_stacks(lib, build_stacker(lib))
        assert len(matches) == 2
        targets = [n.target for n in traced.graph.nodes if n.op == "call_function"]
        assert lib.cat not in targets and targets.count(lib.stack) == 2
        results[lib.__name__] = traced(*(lib.from_numpy(a) for a in (x, w1, w2)))
    assert_same_run([results["corenn"]], [results["torch"]])


# --- the Conv/BN fuser tutorial, then a few training steps on the fused network ------------------------------

def build_convnet(lib):
    nn = lib.nn

    class ConvNet(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv1 = nn.Conv2d(3, 6, 3, padding=1)
            self.bn1 = nn.BatchNorm2d(6)
            self.conv2 = nn.Conv2d(6, 4, 3, stride=2, bias=False)
            self.bn2 = nn.BatchNorm2d(4)
            self.head = nn.Linear(4 * 3 * 3, 5)

        def forward(self, x):
            x = lib.relu(self.bn1(self.conv1(x)))
            x = lib.relu(self.bn2(self.conv2(x)))
            return self.head(lib.flatten(x, 1))

    return ConvNet()


def fuse_conv_bn_eval(lib, conv, bn):
    assert not (conv.training or bn.training), "Fusion only for eval!"
    fused_conv = copy.deepcopy(conv)
    fused_conv.weight, fused_conv.bias = fuse_conv_bn_weights(
        lib, fused_conv.weight, fused_conv.bias, bn.running_mean, bn.running_var, bn.eps, bn.weight, bn.bias)
    return fused_conv


def fuse_conv_bn_weights(lib, conv_w, conv_b, bn_rm, bn_rv, bn_eps, bn_w, bn_b):
    if conv_b is None:
        conv_b = bn_rm.new_zeros(bn_rm.shape)
    bn_var_rsqrt = lib.rsqrt(bn_rv + bn_eps)
    conv_w = conv_w * (bn_w * bn_var_rsqrt).reshape([-1] + [1] * (len(conv_w.shape) - 1))
    conv_b = (conv_b - bn_rm) * bn_var_rsqrt * bn_w + bn_b
    return lib.nn.Parameter(conv_w), lib.nn.Parameter(conv_b)


def _parent_name(target):
    *parent, name = target.rsplit(".", 1)
    return parent[0] if parent else "", name


def replace_node_module(node, modules, new_module):
    assert isinstance(node.target, str)
    parent_name, name = _parent_name(node.target)
    setattr(modules[parent_name], name, new_module)


def fuse(lib, model):
    model = copy.deepcopy(model)
    fx_model = lib.fx.symbolic_trace(model)
    modules = dict(fx_model.named_modules())
    for node in fx_model.graph.nodes:
        if node.op != "call_module":
            continue
        if type(modules[node.target]) is lib.nn.BatchNorm2d and type(modules[node.args[0].target]) is lib.nn.Conv2d:
            if len(node.args[0].users) > 1:  # Output of conv is used by other nodes
                continue
            conv = modules[node.args[0].target]
            bn = modules[node.target]
            fused_conv = fuse_conv_bn_eval(lib, conv, bn)
            replace_node_module(node.args[0], modules, fused_conv)
            node.replace_all_uses_with(node.args[0])
            fx_model.graph.erase_node(node)
    fx_model.graph.lint()
    fx_model.delete_all_unused_submodules()
    fx_model.recompile()
    return fx_model


def warm_up_and_fuse(lib, model, batches):
    """Collect running statistics in training mode, then fuse for evaluation and fine-tune the fused net."""
    model.train()
    with lib.no_grad():
        for batch in batches:
            model(lib.from_numpy(batch))
    model.eval()
    fused = fuse(lib, model)
    outputs = [fused(lib.from_numpy(batch)).detach() for batch in batches]
    unfused = [model(lib.from_numpy(batch)).detach() for batch in batches]
    optimizer = lib.optim.SGD(fused.parameters(), lr=0.05, momentum=0.9)
    losses = []
    for batch in batches:
        optimizer.zero_grad()
        loss = fused(lib.from_numpy(batch)).pow(2).mean()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    return fused, outputs, unfused, losses


def test_conv_bn_fuser_fuses_and_trains_the_same(torch):
    batches = [np.random.default_rng(i).standard_normal((4, 3, 8, 8)).astype(np.float32) for i in range(4)]
    theirs, ours = same_weights(torch, build_convnet)
    their_fused, their_outputs, their_unfused, their_losses = warm_up_and_fuse(torch, theirs, batches)
    our_fused, our_outputs, our_unfused, our_losses = warm_up_and_fuse(corenn, ours, batches)
    assert [n.target for n in our_fused.graph.nodes if n.op == "call_module"] == ["conv1", "conv2", "head"]
    assert sorted(numpy_state(our_fused)) == sorted(numpy_state(their_fused))
    assert_same_run(our_outputs, their_outputs)
    assert_same_run(our_outputs, our_unfused)  # fusing keeps the function
    assert_same_run(their_outputs, their_unfused)
    assert_same_run(our_losses, their_losses)
    assert_same_state(our_fused, their_fused)


# --- shape propagation with an Interpreter (the ShapeProp of the FX docs) ---------------------------------

def shape_prop(lib, module, *args):
    class ShapeProp(lib.fx.Interpreter):
        def run_node(self, n):
            result = super().run_node(n)
            if isinstance(result, lib.Tensor):
                n.meta["shape"], n.meta["dtype"] = tuple(result.shape), str(result.dtype).split(".")[-1]
            return result

    gm = lib.fx.symbolic_trace(module)
    output = ShapeProp(gm).run(*args)
    return output, [(n.name, n.meta.get("shape"), n.meta.get("dtype")) for n in gm.graph.nodes]


def test_interpreter_shape_propagation_matches(torch):
    x = np.random.default_rng(3).standard_normal((2, 3, 8, 8)).astype(np.float32)
    theirs, ours = same_weights(torch, build_convnet)
    theirs.eval(), ours.eval()
    their_output, their_shapes = shape_prop(torch, theirs, torch.from_numpy(x))
    our_output, our_shapes = shape_prop(corenn, ours, corenn.from_numpy(x))
    assert our_shapes == their_shapes
    assert ("conv2", (2, 4, 3, 3), "float32") in our_shapes
    assert_same_run([our_output], [their_output])
