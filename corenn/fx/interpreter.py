"""Run a graph node by node (:class:`Interpreter`), or rewrite it while running (:class:`Transformer`).

Example: count how often each function runs::

    >>> import collections, corenn
    >>> class Counter(corenn.fx.Interpreter):
    ...     def __init__(self, gm):
    ...         super().__init__(gm)
    ...         self.counts = collections.Counter()
    ...     def call_function(self, target, args, kwargs):
    ...         self.counts[target.__name__] += 1
    ...         return super().call_function(target, args, kwargs)
    >>> gm = corenn.fx.symbolic_trace(lambda x: (x + 1) * 2)
    >>> c = Counter(gm); _ = c.run(corenn.ones(2)); sorted(c.counts.items())
    [('add', 1), ('mul', 1)]
"""
from __future__ import annotations

import inspect
from typing import Any

from corenn.fx.graph import Graph
from corenn.fx.graph_module import GraphModule
from corenn.fx.node import Node, map_aggregate, map_arg
from corenn.fx.proxy import Proxy
from corenn.fx.tracer import Tracer, _Patcher

__all__ = ["Interpreter", "Transformer"]


class Interpreter:
    """Executes ``module.graph`` one node at a time; override a method per opcode to change what happens.

    ``run(*args)`` feeds ``args`` to the placeholders in order and returns the output.
    Each opcode is handled by the method of the same name, called with
    ``(target, args, kwargs)`` where node inputs are already replaced by their values;
    ``run_node(n)`` wraps that for the whole node. Values are dropped after their last
    use (``garbage_collect_values``) so memory stays as low as in eager mode.

    Example::

        >>> class NegateRelu(corenn.fx.Interpreter):
        ...     def call_method(self, target, args, kwargs):
        ...         if target == "relu":
        ...             return -super().call_method(target, args, kwargs)
        ...         return super().call_method(target, args, kwargs)
        >>> NegateRelu(gm).run(x)   # doctest: +SKIP
    """

    def __init__(self, module, garbage_collect_values: bool = True, graph: Graph | None = None):
        self.module = module
        self.submodules = dict(module.named_modules())
        if graph is None:
            graph = getattr(module, "graph", None)
            if not isinstance(graph, Graph):
                raise TypeError(f"Interpreter(): {type(module).__name__} has no FX graph; pass a GraphModule or "
                                "graph=")
        self.graph = graph
        self.env: dict[Node, Any] = {}
        self.garbage_collect_values = garbage_collect_values
        if garbage_collect_values:
            # After which node each value is dead: freeing it there keeps peak memory low.
            last_use: dict[Node, Node] = {}
            for node in reversed(self.graph.nodes):
                for inp in node.all_input_nodes:
                    last_use.setdefault(inp, node)
            self.user_to_last_uses: dict[Node, list] = {}
            for value, user in last_use.items():
                self.user_to_last_uses.setdefault(user, []).append(value)

    def run(self, *args, initial_env: dict | None = None, enable_io_processing: bool = True):
        """Run the graph on ``args``; ``initial_env`` pre-sets values of some nodes (they are not run)."""
        self.env = dict(initial_env) if initial_env else {}
        self.args_iter = iter(args)
        result = None
        for node in self.graph.nodes:
            if node in self.env:
                continue
            try:
                self.env[node] = self.run_node(node)
            except Exception as error:
                note = f"While executing {node.format_node()}"
                if "stack_trace" in node.meta:
                    note += f"\nOriginal code: {node.meta['stack_trace']}"
                if hasattr(error, "add_note") and note not in getattr(error, "__notes__", ()):
                    error.add_note(note)
                raise
            if self.garbage_collect_values:
                for dead in self.user_to_last_uses.get(node, ()):
                    self.env.pop(dead, None)
            if node.op == "output":
                result = self.env[node]
                break
        return result

    def run_node(self, n: Node):
        """Run one node: fetch its inputs from the environment and call the opcode's method."""
        args, kwargs = self.fetch_args_kwargs_from_env(n)
        return getattr(self, n.op)(n.target, args, kwargs)

    # -- one method per opcode -----------------------------------------------------------------------
    def placeholder(self, target: str, args: tuple, kwargs: dict):
        """The next positional input (``*args`` takes the rest); a default in ``args`` if none is left."""
        if target.startswith("**"):
            return {}
        if target.startswith("*"):
            return list(self.args_iter)
        try:
            return next(self.args_iter)
        except StopIteration:
            if args:
                return args[0]
            raise RuntimeError(f"Expected positional argument for parameter {target}, but one was not "
                               "passed in!") from None

    def get_attr(self, target: str, args: tuple, kwargs: dict):
        """The attribute ``target`` of the module."""
        return self.fetch_attr(target)

    def call_function(self, target, args: tuple, kwargs: dict):
        """``target(*args, **kwargs)``."""
        return target(*args, **kwargs)

    def call_method(self, target: str, args: tuple, kwargs: dict):
        """``args[0].target(*args[1:], **kwargs)``."""
        self_obj, *rest = args
        return getattr(self_obj, target)(*rest, **kwargs)

    def call_module(self, target: str, args: tuple, kwargs: dict):
        """Call the submodule ``target``."""
        return self.fetch_attr(target)(*args, **kwargs)

    def output(self, target, args: tuple, kwargs: dict):
        """The value returned by the graph."""
        return args[0]

    # -- helpers ------------------------------------------------------------------------------------------
    def fetch_attr(self, target: str):
        """Follow the dotted path ``target`` from the module; RuntimeError naming the missing part."""
        attr = self.module
        parts = target.split(".")
        for i, part in enumerate(parts):
            if not hasattr(attr, part):
                raise RuntimeError(f"Node referenced nonexistent target {'.'.join(parts[:i + 1])}")
            attr = getattr(attr, part)
        return attr

    def fetch_args_kwargs_from_env(self, n: Node):
        """``n``'s args and kwargs with every input node replaced by its value."""
        return self.map_nodes_to_values(n.args, n), self.map_nodes_to_values(n.kwargs, n)

    def map_nodes_to_values(self, args, n: Node):
        """Replace the nodes in ``args`` by their values in the environment."""
        def load(node):
            if node not in self.env:
                raise RuntimeError(f"Node {n.name} referenced nonexistent value {node.name}! Run Graph.lint() to "
                                   "diagnose such issues")
            return self.env[node]
        return map_arg(args, load)


class _TransformerTracer(Tracer):
    def __init__(self, graph: Graph, root):
        super().__init__()
        self.graph = graph
        self.root = root
        self.submodule_paths = None
        self._state_name_cache = None
        self.tensor_attrs = {}
        self._function_wrappers = {}

    def is_leaf_module(self, m, module_qualified_name: str) -> bool:
        return True


class Transformer(Interpreter):
    """An Interpreter that builds a new graph: each method returns Proxies, and ``transform()`` the new module.

    Override a method to replace what a node becomes; calling ``super()`` copies the
    node unchanged. ``corenn`` functions and tensor operators applied to the proxies
    are recorded.

    Example::

        >>> class ReluToSigmoid(corenn.fx.Transformer):
        ...     def call_method(self, target, args, kwargs):
        ...         if target == "relu":
        ...             return corenn.sigmoid(args[0])
        ...         return super().call_method(target, args, kwargs)
        >>> new_gm = ReluToSigmoid(gm).transform()   # doctest: +SKIP
    """

    def __init__(self, module):
        super().__init__(module)
        self.new_graph = Graph()
        self.tracer = _TransformerTracer(self.new_graph, module)

    def placeholder(self, target: str, args: tuple, kwargs: dict) -> Proxy:
        default = args[0] if args else inspect.Signature.empty
        return Proxy(self.new_graph.placeholder(target, default_value=default), self.tracer)

    def get_attr(self, target: str, args: tuple, kwargs: dict) -> Proxy:
        return self.tracer.create_proxy("get_attr", target, args, kwargs)

    def call_function(self, target, args: tuple, kwargs: dict) -> Proxy:
        return self.tracer.create_proxy("call_function", target, args, kwargs)

    def call_method(self, target: str, args: tuple, kwargs: dict) -> Proxy:
        return self.tracer.create_proxy("call_method", target, args, kwargs)

    def call_module(self, target: str, args: tuple, kwargs: dict) -> Proxy:
        return self.tracer.create_proxy("call_module", target, args, kwargs)

    def run_node(self, n: Node):
        result = super().run_node(n)
        # The new node carries what passes learned about the old one (shapes, stack trace).
        if isinstance(result, Proxy) and n.op != "output":
            for key, value in n.meta.items():
                result.node.meta.setdefault(key, value)
        return result

    def transform(self) -> GraphModule:
        """Run the transformation and return the new GraphModule (sharing the original's submodules)."""
        with _Patcher() as self.tracer._patcher:
            self.tracer._install_patches(None, autowrap_module_attributes=False)
            result = super().run(enable_io_processing=False)
        if result is not None:
            self.new_graph.output(map_aggregate(result, lambda a: a.node if isinstance(a, Proxy) else a))
        return GraphModule(self.module, self.new_graph, type(self.module).__name__)
