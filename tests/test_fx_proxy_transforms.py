"""Graph transforms written with proxies, as PyTorch's FX examples write them: Proxy(node), GraphAppendingTracer,
and corenn.fx.replace_pattern at the package top."""
from __future__ import annotations

import numpy as np

import corenn
import corenn.fx as fx
import corenn.nn.functional as F
from corenn import nn


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = nn.Linear(4, 3)

    def forward(self, x):
        return F.relu(self.linear(x))


def test_a_proxy_made_from_a_node_appends_its_ops_to_that_nodes_graph():
    corenn.manual_seed(0)
    gm = fx.symbolic_trace(Net())
    relu = next(n for n in gm.graph.nodes if n.op == "call_function" and n.target is F.relu)
    with gm.graph.inserting_after(relu):
        doubled = fx.Proxy(relu) * 2          # no tracer given: PyTorch's default, a GraphAppendingTracer
        shifted = (doubled + 1).node
    relu.replace_all_uses_with(shifted)
    doubled.node.args = (relu, 2)             # replace_all_uses_with rewired it too: it reads the relu again
    gm.recompile()
    x = corenn.randn(5, 4)
    expected = F.relu(gm.linear(x)) * 2 + 1
    np.testing.assert_allclose(gm(x).detach().numpy(), expected.detach().numpy())


def test_graph_appending_tracer_is_where_torch_fx_has_it():
    graph = fx.Graph()
    x = graph.placeholder("x")
    tracer = fx.proxy.GraphAppendingTracer(graph)
    assert isinstance(tracer, fx.Tracer) and tracer.graph is graph
    out = fx.Proxy(x, tracer).exp()
    graph.output(out.node)
    gm = fx.GraphModule(nn.Module(), graph)
    t = corenn.tensor([0.0, 1.0])
    np.testing.assert_allclose(gm(t).numpy(), np.exp([0.0, 1.0]), rtol=1e-6)


def test_replace_pattern_is_at_the_package_top():
    assert fx.replace_pattern is fx.subgraph_rewriter.replace_pattern

    def forward(x):
        return corenn.neg(corenn.neg(x)) + 1

    def pattern(x):
        return corenn.neg(corenn.neg(x))

    def replacement(x):
        return x

    gm = fx.symbolic_trace(forward)
    matches = fx.replace_pattern(gm, pattern, replacement)
    assert len(matches) == 1
    assert not any(n.target is corenn.neg for n in gm.graph.nodes)
    np.testing.assert_allclose(gm(corenn.tensor([2.0])).numpy(), [3.0])
