"""Seed 003 (``torch.fx.Graph``) with ``corenn`` in place of ``torch``: the module, its graph printout
compared node by node with the seed's, and the related Graph methods the seed lists."""
from __future__ import annotations

import operator
import re

import numpy as np

import corenn
import corenn.fx
from corenn import nn

# The seed's printout, verbatim (PyTorch of that era: ``[#users=N]``, ``add_1``-style names, get_attr
# shown as ``self.linear.weight``, placeholders in the ``graph(x):`` header).
SEED_PRINTOUT = (
    "graph(x): %linear_weight : [#users=1] = self.linear.weight %add_1 : [#users=1] = "
    "call_function[target=operator.add](args = (%x, %linear_weight), kwargs = {}) %linear_1 : [#users=1] = "
    "call_module[target=linear](args = (%add_1,), kwargs = {}) %relu_1 : [#users=1] = "
    "call_method[target=relu](args = (%linear_1,), kwargs = {}) %sum_1 : [#users=1] = "
    "call_function[target=torch.sum](args = (%relu_1,), kwargs = {dim: -1}) %topk_1 : [#users=1] = "
    "call_function[target=torch.topk](args = (%sum_1, 3), kwargs = {}) return topk_1"
)


class MyModule(nn.Module):
    def __init__(self):
        super().__init__()
        self.param = nn.Parameter(corenn.rand(3, 4))
        self.linear = nn.Linear(4, 5)

    def forward(self, x):
        return corenn.topk(corenn.sum(self.linear(x + self.linear.weight).relu(), dim=-1), 3)


def _base(name):
    # ``add_1`` (old PyTorch) and ``add`` (current) name the same value; ``sum_1`` is ``sum_1`` in both.
    return re.sub(r"_\d+$", "", name)


def _parse_seed(text):
    """[(name, users, opcode, target, args, kwargs)] for the seed's eight nodes."""
    header, body = re.match(r"graph\((.*?)\): (.*)", text).groups()
    nodes = [(name, None, "placeholder", name, "", "") for name in header.split(", ")]
    body, result = body.rsplit(" return ", 1)
    for chunk in re.split(r" (?=%\w+ : \[)", body):
        m = re.match(r"%(\w+) : \[#users=(\d+)\] = (.*)", chunk)
        name, users, rest = m.group(1), int(m.group(2)), m.group(3)
        call = re.match(r"(\w+)\[target=([^\]]+)\]\(args = (.*), kwargs = (.*)\)$", rest)
        if call is None:  # get_attr printed as self.<path>
            nodes.append((name, users, "get_attr", rest[len("self."):], "", ""))
        else:
            nodes.append((name, users, call.group(1), call.group(2), call.group(3), call.group(4)))
    nodes.append(("output", None, "output", "output", result, ""))
    return nodes


def _ours(graph):
    rows = []
    for line in str(graph).splitlines()[1:]:
        line = line.strip()
        if line.startswith("return "):
            rows.append(("output", None, "output", "output", line[len("return "):], ""))
            continue
        m = re.match(r"%(\w+) : \[num_users=(\d+)\] = (\w+)\[target=([^\]]+)\](?:\(args = (.*), kwargs = (.*)\))?$",
                     line)
        rows.append((m.group(1), int(m.group(2)), m.group(3), m.group(4), m.group(5) or "", m.group(6) or ""))
    return rows


def _normalise(row):
    name, users, op, target, args, kwargs = row
    target = target.replace("torch.", "corenn.")
    args = re.sub(r"%(\w+)", lambda m: "%" + _base(m.group(1)), args)
    if op == "output":
        args = _base(args)
    return _base(name), users, op, target, args, kwargs


def test_seed003_graph_printout_node_by_node():
    m = MyModule()
    gm = corenn.fx.symbolic_trace(m)
    seed = _parse_seed(SEED_PRINTOUT)
    ours = _ours(gm.graph)
    assert len(seed) == len(ours) == 8
    for theirs, mine in zip(seed, ours):
        t, o = _normalise(theirs), _normalise(mine)
        if t[1] is None:  # the seed's header placeholder prints no user count
            o = (o[0], None) + o[2:]
        assert o == t
    # the targets the issue names, as corenn prints them
    assert [row[3] for row in ours[1:7]] == ["linear.weight", "operator.add", "linear", "relu", "corenn.sum",
                                            "corenn.topk"]


def test_seed003_module_runs_the_same_traced():
    m = MyModule()
    gm = corenn.fx.symbolic_trace(m)
    x = corenn.randn(5, 4)  # x + linear.weight: the input has the weight's shape
    got, want = gm(x), m(x)
    np.testing.assert_allclose(got.values.detach().numpy(), want.values.detach().numpy())
    np.testing.assert_array_equal(got.indices.numpy(), want.indices.numpy())
    assert got.values.shape == (3,)


# -- the related Graph methods the seed lists ---------------------------------------------------------

def test_graph_eliminate_dead_code_example():
    class TestModule(nn.Module):
        def __init__(self):
            super().__init__()
            self.attr = nn.Parameter(corenn.randn(5, 4))

        def forward(self, x):
            a = x + 1  # noqa: F841 - dead on purpose
            return x + self.attr

    traced = corenn.fx.symbolic_trace(TestModule())
    graph = traced.graph
    assert [n.name for n in graph.nodes] == ["x", "add", "attr", "add_1", "output"]
    assert graph.eliminate_dead_code() is True
    assert [n.name for n in graph.nodes] == ["x", "attr", "add_1", "output"]


def test_graph_inserting_before_and_after_examples():
    gm = corenn.fx.symbolic_trace(MyModule())
    g = gm.graph
    relu = g.find_nodes(op="call_method", target="relu")[0]
    with g.inserting_before(relu):
        doubled = g.call_function(operator.mul, (relu.args[0], 2))
    relu.replace_input_with(relu.args[0], doubled)
    with g.inserting_after(relu):
        neg = g.call_function(operator.neg, (relu,))
    relu.replace_all_uses_with(neg, delete_user_cb=lambda user: user is not neg)
    g.lint()
    gm.recompile()
    x = corenn.randn(5, 4)
    want = corenn.topk(corenn.sum(-(gm.linear(x + gm.linear.weight) * 2).relu(), dim=-1), 3)
    np.testing.assert_allclose(gm(x).values.detach().numpy(), want.values.detach().numpy(), rtol=1e-6)


def test_graph_node_copy_example():
    gm = corenn.fx.symbolic_trace(MyModule())
    new_graph = corenn.fx.Graph()
    value_remap = {}
    for node in gm.graph.nodes:
        if node.op == "output":
            new_graph.output(corenn.fx.map_arg(node.args[0], lambda n: value_remap[n]))
            continue
        value_remap[node] = new_graph.node_copy(node, lambda n: value_remap[n])
    assert str(new_graph) == str(gm.graph)
    copy_gm = corenn.fx.GraphModule(gm, new_graph)
    x = corenn.randn(5, 4)
    np.testing.assert_allclose(copy_gm(x).values.detach().numpy(), gm(x).values.detach().numpy())
