"""``corenn.fx``: capture a module's forward as a graph, edit it, and turn it back into a module.

Mirrors ``torch.fx``: :func:`symbolic_trace` records a :class:`Graph` of
:class:`Node` s (opcodes ``placeholder``, ``get_attr``, ``call_function``,
``call_module``, ``call_method``, ``output``); :class:`GraphModule` generates Python
code from it; :class:`Interpreter` and :class:`Transformer` run or rewrite it node
by node; ``subgraph_rewriter.replace_pattern`` swaps patterns; ``passes`` holds
shape propagation, conv + batch-norm fusion and a graph drawer.

Example::

    >>> import corenn
    >>> from corenn import nn
    >>> class M(nn.Module):
    ...     def __init__(self):
    ...         super().__init__()
    ...         self.linear = nn.Linear(4, 5)
    ...     def forward(self, x):
    ...         return corenn.topk(corenn.sum(self.linear(x + self.linear.weight).relu(), dim=-1), 3)
    >>> gm = corenn.fx.symbolic_trace(M())
    >>> [n.op for n in gm.graph.nodes]
    ['placeholder', 'get_attr', 'call_function', 'call_module', 'call_method', 'call_function', 'call_function', 'output']
"""
from corenn.fx.graph import Graph, PythonCode
from corenn.fx.graph_module import GraphModule
from corenn.fx.interpreter import Interpreter, Transformer
from corenn.fx.node import Node, map_arg, map_aggregate
from corenn.fx.proxy import Attribute, Proxy, TraceError
from corenn.fx.tracer import GraphAppendingTracer, Tracer, symbolic_trace, wrap
from corenn.fx import passes, subgraph_rewriter  # noqa: E402
from corenn.fx.subgraph_rewriter import replace_pattern  # noqa: E402  (torch.fx has it at the top)

__all__ = ["Graph", "GraphModule", "Interpreter", "Node", "Proxy", "PythonCode", "TraceError", "Tracer",
           "Transformer", "map_arg", "map_aggregate", "passes", "subgraph_rewriter", "symbolic_trace", "wrap",
           "Attribute", "GraphAppendingTracer", "replace_pattern"]
