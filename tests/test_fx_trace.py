"""corenn.fx on modules: tracing, leaf modules (incl. plugin rules), GraphModule round trips with gradients,
state, copies, fusion, drawing, and the torch.fx oracle (same opcodes and targets)."""
from __future__ import annotations

import copy
import math
import operator
import shutil

import numpy as np
import pytest

import corenn
import corenn.fx as fx
import corenn.nn.functional as F
from corenn import nn
from corenn.fx.passes import FxGraphDrawer, ShapeProp, fuse_conv_bn


# -- models shared by the round-trip and oracle tests --------------------------------------------------------

def define_models(lib):
    """The test models written once against ``lib`` (corenn, or torch for the torch.fx oracle)."""
    nn, F = lib.nn, lib.nn.functional

    class MLP(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc1 = nn.Linear(6, 16)
            self.fc2 = nn.Linear(16, 3)

        def forward(self, x):
            return F.log_softmax(self.fc2(lib.relu(self.fc1(x))), dim=-1)

    class CNN(nn.Module):
        def __init__(self):
            super().__init__()
            self.features = nn.Sequential(nn.Conv2d(2, 4, 3, padding=1), nn.BatchNorm2d(4), nn.ReLU(),
                                          nn.Conv2d(4, 4, 3), nn.BatchNorm2d(4))
            self.head = nn.Linear(4, 5)

        def forward(self, x):
            y = self.features(x).relu()
            return self.head(y.mean(dim=(2, 3)))

    class EncoderLayer(nn.Module):
        """A transformer encoder layer written out from primitives (so tracing goes through attention)."""

        def __init__(self, d=8, heads=2, ff=16):
            super().__init__()
            self.heads = heads
            self.qkv = nn.Linear(d, 3 * d)
            self.proj = nn.Linear(d, d)
            self.ff1 = nn.Linear(d, ff)
            self.ff2 = nn.Linear(ff, d)
            self.norm1 = nn.LayerNorm(d)
            self.norm2 = nn.LayerNorm(d)

        def forward(self, x):
            b, t, d = x.shape
            q, k, v = self.qkv(x).chunk(3, dim=-1)
            q = q.reshape(b, t, self.heads, d // self.heads).transpose(1, 2)
            k = k.reshape(b, t, self.heads, d // self.heads).transpose(1, 2)
            v = v.reshape(b, t, self.heads, d // self.heads).transpose(1, 2)
            att = F.softmax(q @ k.transpose(-2, -1) / math.sqrt(d // self.heads), dim=-1)
            y = (att @ v).transpose(1, 2).reshape(b, t, d)
            x = self.norm1(x + self.proj(y))
            return self.norm2(x + self.ff2(F.gelu(self.ff1(x))))

    class Branchy(nn.Module):
        def __init__(self):
            super().__init__()
            self.a = nn.Linear(4, 4)
            self.b = nn.Linear(4, 4)

        def forward(self, x, use_b=False, times=1):
            for _ in range(times):  # Python loop over a plain int: unrolled
                x = self.a(x).tanh()
            if use_b:
                x = self.b(x)
            return x

    class Seed003(nn.Module):
        def __init__(self):
            super().__init__()
            self.param = nn.Parameter(lib.rand(3, 4))
            self.linear = nn.Linear(4, 5)

        def forward(self, x):
            return lib.topk(lib.sum(self.linear(x + self.linear.weight).relu(), dim=-1), 3)

    return {"mlp": MLP, "cnn_bn": CNN, "encoder_layer": EncoderLayer, "control_flow": Branchy,
            "seed003": Seed003}


_MODELS = define_models(corenn)
MLP, CNN, EncoderLayer, Branchy, Seed003 = (_MODELS[name] for name in
                                             ("mlp", "cnn_bn", "encoder_layer", "control_flow", "seed003"))


def _inputs(model):
    corenn.manual_seed(1)
    if isinstance(model, CNN):
        return (corenn.randn(2, 2, 6, 6, dtype=corenn.float64),)
    if isinstance(model, EncoderLayer):
        return (corenn.randn(2, 3, 8, dtype=corenn.float64),)
    if isinstance(model, MLP):
        return (corenn.randn(5, 6, dtype=corenn.float64),)
    return (corenn.randn(3, 4, dtype=corenn.float64),)


def _randomize_bn(model):
    for m in model.modules():
        if isinstance(m, nn.BatchNorm2d):
            with corenn.no_grad():
                m.running_mean.copy_(corenn.randn(m.num_features))
                m.running_var.copy_(corenn.rand(m.num_features) + 0.5)
                m.weight.copy_(corenn.randn(m.num_features))
                m.bias.copy_(corenn.randn(m.num_features))


ROUND_TRIP = [
    ("mlp", MLP, {}),
    ("cnn_bn", CNN, {}),
    ("encoder_layer", EncoderLayer, {}),
    ("control_flow", Branchy, {"use_b": True, "times": 2}),
]


@pytest.mark.parametrize("name,make,concrete", ROUND_TRIP, ids=[r[0] for r in ROUND_TRIP])
@pytest.mark.parametrize("mode", ["train", "eval"])
def test_round_trip_same_outputs_and_gradients(name, make, concrete, mode):
    corenn.manual_seed(0)
    model = make().double()
    _randomize_bn(model)
    getattr(model, mode)()
    gm = fx.symbolic_trace(model, concrete_args=concrete or None)
    gm.graph.lint()
    (x,) = _inputs(model)
    x1 = x.clone().requires_grad_(True)
    x2 = x.clone().requires_grad_(True)
    want = model(x1, **concrete)
    got = gm(x2)
    np.testing.assert_allclose(got.detach().numpy(), want.detach().numpy(), rtol=1e-12, atol=1e-12)
    want.sum().backward()
    got.sum().backward()  # the GraphModule shares the model's parameters: grads accumulate twice
    np.testing.assert_allclose(x2.grad.numpy(), x1.grad.numpy(), rtol=1e-12, atol=1e-12)
    for p in model.parameters():
        assert p.grad is not None


@pytest.mark.parametrize("name,make,concrete", ROUND_TRIP, ids=[r[0] for r in ROUND_TRIP])
def test_round_trip_gradcheck(name, make, concrete):
    corenn.manual_seed(0)
    model = make().double().eval()
    gm = fx.symbolic_trace(model, concrete_args=concrete or None)
    (x,) = _inputs(model)
    x = x.requires_grad_(True)
    assert corenn.autograd.gradcheck(lambda t: gm(t).sum(), (x,))


def test_concrete_args_control_flow_graph_has_no_branch():
    model = Branchy()
    gm = fx.symbolic_trace(model, concrete_args={"use_b": False, "times": 3})
    assert [n.target for n in gm.graph.nodes if n.op == "call_module"] == ["a", "a", "a"]
    assert "b" not in dict(gm.named_children())
    x = corenn.randn(2, 4)
    np.testing.assert_allclose(gm(x).detach().numpy(), model(x, False, 3).detach().numpy())
    with pytest.raises(ValueError, match="times has been specialized to have value 3"):
        gm(x, False, 2)


def test_control_flow_in_module_raises_trace_error():
    class Bad(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(3, 3)

        def forward(self, x):
            y = self.fc(x)
            if y.mean() > 0:
                return y
            return -y

    with pytest.raises(fx.TraceError, match=r"if y.mean\(\) > 0:.*concrete_args.*leaf"):
        fx.symbolic_trace(Bad())


# -- the seed-003 module: graph structure ---------------------------------------------------------------------

def test_parameters_become_get_attr_and_layers_call_module():
    gm = fx.symbolic_trace(Seed003())
    nodes = list(gm.graph.nodes)
    assert [(n.op, n.target if isinstance(n.target, str) else n.target) for n in nodes[:2]] == \
        [("placeholder", "x"), ("get_attr", "linear.weight")]
    assert gm.graph.find_nodes(op="call_module")[0].target == "linear"
    assert gm.linear.weight is gm.graph.owning_module.linear.weight


def test_leaf_module_rules_tracer_override_and_plugin_rule():
    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(3, 3)

        def forward(self, x):
            return self.fc(x).relu()

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.block = Block()
            self.seq = nn.Sequential(nn.Linear(3, 3), nn.Tanh())

        def forward(self, x):
            return self.seq(self.block(x))

    net = Net()
    default = fx.symbolic_trace(net)
    assert [n.target for n in default.graph.find_nodes(op="call_module")] == ["block.fc", "seq.0", "seq.1"]

    class KeepBlocks(fx.Tracer):
        def is_leaf_module(self, m, qualified_name):
            return isinstance(m, Block) or super().is_leaf_module(m, qualified_name)

    graph = KeepBlocks().trace(net)
    assert [n.target for n in graph.find_nodes(op="call_module")] == ["block", "seq.0", "seq.1"]
    gm = fx.GraphModule(net, graph)
    x = corenn.randn(2, 3)
    np.testing.assert_allclose(gm(x).detach().numpy(), net(x).detach().numpy())

    class BlockRule:
        @corenn.hookimpl
        def corenn_fx_leaf_modules(self):
            return [lambda module, name: True if name == "block" else None]

    corenn.plugins.register(BlockRule(), name="test-fx-leaf-rule")
    try:
        traced = fx.symbolic_trace(net)
        assert [n.target for n in traced.graph.find_nodes(op="call_module")] == ["block", "seq.0", "seq.1"]
    finally:
        corenn.plugins.unregister("test-fx-leaf-rule")
    assert [n.target for n in fx.symbolic_trace(net).graph.find_nodes(op="call_module")][0] == "block.fc"


def test_create_proxy_override_sees_every_node():
    kinds = []

    class Recording(fx.Tracer):
        def create_proxy(self, kind, target, args, kwargs, name=None, type_expr=None, proxy_factory_fn=None):
            kinds.append(kind)
            return super().create_proxy(kind, target, args, kwargs, name, type_expr, proxy_factory_fn)

    Recording().trace(Seed003())
    assert kinds == ["placeholder", "get_attr", "call_function", "call_module", "call_method", "call_function",
                     "call_function"]


def test_functions_imported_by_name_and_functional_are_recorded():
    from corenn import relu as imported_relu

    class M(nn.Module):
        def forward(self, x):
            return imported_relu(F.dropout(x, 0.0, training=False)) + F.softmax(x, dim=1)

    gm = fx.symbolic_trace(M())
    targets = [n.target for n in gm.graph.find_nodes(op="call_function")]
    assert imported_relu in targets and F.dropout in targets and F.softmax in targets
    assert "corenn.nn.functional.dropout" in gm.code or "corenn.dropout" in gm.code
    # after tracing, functions are their own selves again (no leftover patch)
    assert corenn.relu.__code__.co_name == "relu" and "__corenn_fx_dispatch__" not in corenn.relu.__code__.co_names


def test_module_not_installed_raises_name_error():
    stray = nn.Linear(2, 2)

    class M(nn.Module):
        def forward(self, x):
            return stray(x)

    with pytest.raises(NameError, match="not installed as a submodule"):
        fx.symbolic_trace(M())


def test_patches_are_undone_after_a_failed_trace():
    class Bad(nn.Module):
        def forward(self, x):
            return x if x.sum() > 0 else x

    call, getattr_ = nn.Module.__call__, nn.Module.__getattr__
    with pytest.raises(fx.TraceError):
        fx.symbolic_trace(Bad())
    assert nn.Module.__call__ is call and nn.Module.__getattr__ is getattr_
    assert corenn.Tensor.__add__(corenn.ones(1), corenn.ones(1)).item() == 2.0


# -- GraphModule state ---------------------------------------------------------------------------------

def test_graph_module_state_dict_to_save_load_and_deepcopy(tmp_path):
    corenn.manual_seed(0)
    model = CNN().eval()
    _randomize_bn(model)
    gm = fx.symbolic_trace(model)
    assert set(gm.state_dict()) == set(model.state_dict())
    x = corenn.randn(2, 2, 6, 6)
    expected = model(x).detach().numpy()

    path = tmp_path / "gm.safetensors"
    corenn.save(gm.state_dict(), path)
    fresh = fx.symbolic_trace(CNN().eval())
    assert not np.allclose(fresh(x).detach().numpy(), expected)
    fresh.load_state_dict(corenn.load(path))
    np.testing.assert_allclose(fresh(x).detach().numpy(), expected, rtol=1e-6)

    clone = copy.deepcopy(gm)
    assert clone.code == gm.code and type(clone) is not type(gm)
    with corenn.no_grad():
        clone.head.weight.mul_(0)
    np.testing.assert_allclose(gm(x).detach().numpy(), expected, rtol=1e-6)  # the original is untouched
    assert not np.allclose(clone(x).detach().numpy(), expected)

    as64 = gm.to(corenn.float64)
    assert as64.head.weight.dtype == corenn.float64
    assert as64(x.double()).dtype == corenn.float64


def test_graph_module_from_dict_root_and_submodule_management():
    g = fx.Graph()
    x = g.placeholder("x")
    w = g.get_attr("scale")
    h = g.call_module("block.fc", (x,))
    g.output(g.call_function(operator.mul, (h, w)))
    fc = nn.Linear(3, 3)
    gm = fx.GraphModule({"scale": corenn.tensor(2.0), "block.fc": fc}, g)
    assert gm.block.fc is fc and "scale" in dict(gm.named_buffers())
    inp = corenn.randn(2, 3)
    np.testing.assert_allclose(gm(inp).detach().numpy(), (fc(inp) * 2).detach().numpy(), rtol=1e-6)
    assert gm.add_submodule("extra.act", nn.ReLU())
    gm.delete_all_unused_submodules()
    assert not hasattr(gm, "extra") and gm.block.fc is fc
    assert gm.delete_submodule("block.fc") and not gm.delete_submodule("block.fc")


def test_print_readable_and_repr():
    gm = fx.symbolic_trace(Seed003())
    text = gm.print_readable(print_output=False)
    assert text.splitlines()[0] == "class Seed003(corenn.nn.Module):"
    assert "        topk = corenn.topk(sum_1, 3);  sum_1 = None" in text
    assert "(linear): Linear(in_features=4, out_features=5, bias=True)" in repr(gm)


def test_edit_graph_then_recompile_changes_behaviour():
    gm = fx.symbolic_trace(MLP())
    for node in gm.graph.nodes:
        if node.op == "call_function" and node.target is corenn.relu:
            node.target = corenn.sigmoid
    gm.recompile()
    x = corenn.randn(2, 6)
    want = F.log_softmax(gm.fc2(corenn.sigmoid(gm.fc1(x))), dim=-1)
    np.testing.assert_allclose(gm(x).detach().numpy(), want.detach().numpy(), rtol=1e-6)


def test_shape_prop_on_module():
    gm = fx.symbolic_trace(Seed003())
    ShapeProp(gm).propagate(corenn.randn(5, 4))
    linear = gm.graph.find_nodes(op="call_module")[0]
    assert tuple(linear.meta["tensor_meta"].shape) == (5, 5)
    assert tuple(gm.graph.find_nodes(op="get_attr")[0].meta["tensor_meta"].shape) == (5, 4)


# -- conv + batch-norm fusion ------------------------------------------------------------------------------

def _check_fused(model, x, expect_bn_left=0):
    model.eval()
    want = model(x).detach().numpy()
    state_before = {k: v.clone() for k, v in model.state_dict().items()}
    fused = fuse_conv_bn(model)
    fused.graph.lint()
    np.testing.assert_allclose(fused(x).detach().numpy(), want, rtol=1e-4, atol=1e-5)
    bns = [m for m in fused.modules() if isinstance(m, nn.BatchNorm2d)]
    assert len(bns) == expect_bn_left
    for k, v in model.state_dict().items():  # the original model is never modified
        np.testing.assert_array_equal(v.numpy(), state_before[k].numpy())
    np.testing.assert_allclose(model(x).detach().numpy(), want)
    return fused


def test_fuse_sequential_cnn():
    corenn.manual_seed(0)
    model = CNN()
    _randomize_bn(model)
    fused = _check_fused(model, corenn.randn(2, 2, 6, 6))
    assert sum(isinstance(m, nn.Conv2d) for m in fused.modules()) == 2
    assert "features.0.weight" in fused.state_dict()  # single-use convs keep their names


def test_fuse_conv_feeding_two_batch_norms_and_reused_conv():
    class Tricky(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = nn.Conv2d(3, 4, 3, bias=False)
            self.bn1 = nn.BatchNorm2d(4)
            self.bn2 = nn.BatchNorm2d(4)

        def forward(self, x):
            y = self.conv(x)
            z = self.conv(x * 2)  # the same conv module called again, without batch norm
            return self.bn1(y) + self.bn2(y) + z.relu()

    corenn.manual_seed(0)
    model = Tricky()
    _randomize_bn(model)
    fused = _check_fused(model, corenn.randn(2, 3, 7, 7))
    calls = [n.target for n in fused.graph.find_nodes(op="call_module")]
    assert calls.count("conv") == 1 and len(calls) == 3


def test_fuse_keeps_conv_output_used_elsewhere_and_skips_training_bn():
    class Shared(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = nn.Conv2d(2, 3, 1)
            self.bn = nn.BatchNorm2d(3)

        def forward(self, x):
            y = self.conv(x)
            return self.bn(y) * y

    corenn.manual_seed(0)
    model = Shared()
    _randomize_bn(model)
    _check_fused(model, corenn.randn(1, 2, 4, 4))
    model.train()
    gm = fuse_conv_bn(fx.symbolic_trace(model))
    assert any(isinstance(m, nn.BatchNorm2d) for m in gm.modules())  # training mode: not fused


def test_fuse_functional_batch_norm():
    class Functional(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = nn.Conv2d(2, 3, 3, padding=1)
            self.register_buffer("mean", corenn.randn(3))
            self.register_buffer("var", corenn.rand(3) + 0.5)
            self.gamma = nn.Parameter(corenn.randn(3))
            self.beta = nn.Parameter(corenn.randn(3))

        def forward(self, x):
            return F.batch_norm(self.conv(x), self.mean, self.var, self.gamma, self.beta, training=False, eps=1e-3)

    corenn.manual_seed(0)
    fused = _check_fused(Functional(), corenn.randn(2, 2, 5, 5))
    assert not [n for n in fused.graph.nodes if n.op == "call_function"]


# -- drawing -------------------------------------------------------------------------------------------------

def test_graph_drawer_writes_dot(tmp_path):
    gm = fx.symbolic_trace(Seed003())
    ShapeProp(gm).propagate(corenn.randn(5, 4))
    drawer = FxGraphDrawer(gm, "seed003")
    dot = drawer.to_dot()
    assert dot.startswith('digraph "seed003" {') and dot.rstrip().endswith("}")
    assert '"add" -> "linear";' in dot and "target=corenn.topk" in dot and "shape=(5, 5)" in dot
    drawer.write_dot(tmp_path / "g.dot")
    assert (tmp_path / "g.dot").read_text() == dot


def test_graph_drawer_png_svg_need_graphviz(tmp_path, monkeypatch):
    gm = fx.symbolic_trace(Seed003())
    if shutil.which("dot") is None:
        with pytest.raises(RuntimeError, match="Graphviz"):
            FxGraphDrawer(gm, "g").write_svg(tmp_path / "g.svg")
    else:
        FxGraphDrawer(gm, "g").write_svg(tmp_path / "g.svg")
        assert "<svg" in (tmp_path / "g.svg").read_text()
        FxGraphDrawer(gm, "g").write_png(tmp_path / "g.png")
        assert (tmp_path / "g.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    monkeypatch.setenv("PATH", "")
    with pytest.raises(RuntimeError, match="apt-get install graphviz"):
        FxGraphDrawer(gm, "g").write_png(tmp_path / "g.png")


# -- torch.fx oracle --------------------------------------------------------------------------------------

def _normalise_target(node_op, target):
    if node_op == "call_function":
        name = getattr(target, "__name__", str(target))
        return name
    if node_op == "output":
        return "output"
    if node_op == "placeholder":  # torch.fx renames concrete-arg placeholders flag -> flag_1
        return target[:-2] if target.endswith("_1") else target
    return target


def _signature(graph):
    return [(n.op, _normalise_target(n.op, n.target)) for n in graph.nodes]


def _torch_models(torch):
    return define_models(torch)


ORACLE = ROUND_TRIP + [("seed003", Seed003, {})]


@pytest.mark.torch
@pytest.mark.parametrize("name,make,concrete", ORACLE, ids=[r[0] for r in ORACLE])
def test_same_graph_as_torch_fx(name, make, concrete):
    torch = pytest.importorskip("torch")
    import torch.fx
    ours = fx.symbolic_trace(make(), concrete_args=concrete or None).graph
    theirs = torch.fx.symbolic_trace(_torch_models(torch)[name](), concrete_args=concrete or None).graph
    # torch.fx guards concrete values with torch._assert on `flag == value`; corenn with one guard call
    theirs_sig = [s for s in _signature(theirs) if s[1] not in ("eq", "_assert")]
    ours_sig = [s for s in _signature(ours) if s[1] != "_assert_specialized"]
    assert ours_sig == theirs_sig
    ours_names = [n.name for n in ours.nodes if n.op != "call_function" or n.target is not None]
    theirs_names = [n.name for n in theirs.nodes]
    if not concrete:
        assert ours_names == theirs_names  # same naming scheme (sum_1, getitem_2, ...)


@pytest.mark.torch
def test_same_outputs_as_torch_on_shared_weights():
    torch = pytest.importorskip("torch")
    import torch.fx
    model = EncoderLayer().double()
    tmodel = _torch_models(torch)["encoder_layer"]().double()
    with torch.no_grad():
        for (name, p) in model.named_parameters():
            dict(tmodel.named_parameters())[name].copy_(torch.from_numpy(p.detach().numpy()))
    x = corenn.randn(2, 3, 8, dtype=corenn.float64)
    ours = fx.symbolic_trace(model)(x).detach().numpy()
    theirs = torch.fx.symbolic_trace(tmodel)(torch.from_numpy(x.numpy())).detach().numpy()
    np.testing.assert_allclose(ours, theirs, rtol=1e-10, atol=1e-12)
