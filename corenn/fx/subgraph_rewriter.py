"""``replace_pattern``: find every occurrence of a small traced function in a graph and swap in another.

Example::

    >>> import corenn
    >>> def f(x, w):
    ...     return corenn.relu(x + w) * 2
    >>> gm = corenn.fx.symbolic_trace(f)
    >>> def pattern(a, b):
    ...     return corenn.relu(a + b)
    >>> def replacement(a, b):
    ...     return corenn.sigmoid(a - b)
    >>> matches = corenn.fx.subgraph_rewriter.replace_pattern(gm, pattern, replacement)
    >>> len(matches), [n.target.__name__ for n in gm.graph.nodes if n.op == "call_function"]
    (1, ['sub', 'sigmoid', 'mul'])
"""
from __future__ import annotations

from typing import Callable, NamedTuple

from corenn.fx.graph import Graph
from corenn.fx.node import Node

__all__ = ["Match", "replace_pattern"]


class Match(NamedTuple):
    """One replaced occurrence: ``anchor`` (the pattern's output node) and ``nodes_map`` (pattern node -> graph node)."""

    anchor: Node
    nodes_map: dict


def _as_graph(fn_or_module, role: str) -> tuple[Graph, object]:
    from corenn.fx.graph_module import GraphModule
    from corenn.fx.tracer import symbolic_trace
    if isinstance(fn_or_module, GraphModule):
        return fn_or_module.graph, fn_or_module
    if isinstance(fn_or_module, Graph):
        return fn_or_module, None
    if not callable(fn_or_module):
        raise TypeError(f"replace_pattern(): {role} must be a function, Module, GraphModule or Graph, got "
                        f"{type(fn_or_module).__name__}")
    gm = symbolic_trace(fn_or_module)
    return gm.graph, gm


class _Matcher:
    def __init__(self, pattern: Graph):
        self.pattern = pattern
        outputs = [n for n in pattern.nodes if n.op == "output"]
        result = outputs[0].args[0]
        if not isinstance(result, Node):
            raise NotImplementedError("replace_pattern(): the pattern must return a single value (a pattern "
                                      f"returning {type(result).__name__} is not supported)")
        if result.op == "placeholder":
            raise ValueError("replace_pattern(): the pattern returns one of its inputs unchanged; it would match "
                             "every value")
        self.anchor = result
        self.placeholders = [n for n in pattern.nodes if n.op == "placeholder"]

    def match(self, candidate: Node) -> dict | None:
        mapping: dict = {}
        if not self._match_node(self.anchor, candidate, mapping):
            return None
        matched = {g for p, g in mapping.items() if p.op != "placeholder"}
        # Interior values must not escape: a graph node replaced away may not feed anything outside the match.
        for p, g in mapping.items():
            if p.op == "placeholder" or p is self.anchor:
                continue
            if any(user not in matched for user in g.users):
                return None
        return mapping

    def _match_node(self, p: Node, g, mapping: dict) -> bool:
        if p in mapping:
            bound = mapping[p]
            return bound is g if isinstance(bound, Node) or isinstance(g, Node) else bound == g
        if p.op == "placeholder":
            mapping[p] = g
            return True
        if not isinstance(g, Node) or g.op != p.op or g.target != p.target:
            return False
        if len(g.args) != len(p.args) or set(g.kwargs) != set(p.kwargs):
            return False
        if g in mapping.values() and any(v is g for k, v in mapping.items() if k.op != "placeholder"):
            return False
        mapping[p] = g
        ok = all(self._match_arg(pa, ga, mapping) for pa, ga in zip(p.args, g.args)) and \
            all(self._match_arg(p.kwargs[k], g.kwargs[k], mapping) for k in p.kwargs)
        if not ok:
            del mapping[p]
        return ok

    def _match_arg(self, pa, ga, mapping: dict) -> bool:
        if isinstance(pa, Node):
            return self._match_node(pa, ga, mapping)
        if isinstance(pa, (tuple, list)):
            return type(pa) is type(ga) and len(pa) == len(ga) and \
                all(self._match_arg(x, y, mapping) for x, y in zip(pa, ga))
        if isinstance(pa, dict):
            return isinstance(ga, dict) and set(pa) == set(ga) and all(self._match_arg(pa[k], ga[k], mapping)
                                                                      for k in pa)
        if isinstance(ga, Node):
            return False
        return type(pa) is type(ga) and pa == ga


def replace_pattern(gm, pattern: Callable, replacement: Callable) -> list:
    """Replace every non-overlapping occurrence of ``pattern`` in ``gm.graph`` by ``replacement``.

    ``pattern`` and ``replacement`` are functions (traced here), Modules or
    GraphModules with the same number of inputs; the pattern's inputs match any
    value and are passed positionally to the replacement. A match whose interior
    values are used outside it is skipped (replacing it would change those users).
    ``gm`` is recompiled; the returned :class:`Match` es say what was replaced.

    Example::

        >>> def pattern(x):
        ...     return x.relu().neg()
        >>> def replacement(x):
        ...     return corenn.nn.functional.gelu(x).neg()
        >>> replace_pattern(gm, pattern, replacement)   # doctest: +SKIP
        [Match(anchor=neg, nodes_map={...})]
    """
    from corenn.fx.graph_module import GraphModule
    if not isinstance(gm, GraphModule):
        raise TypeError(f"replace_pattern(): gm must be a GraphModule, got {type(gm).__name__}")
    pattern_graph, _ = _as_graph(pattern, "pattern")
    replacement_graph, replacement_module = _as_graph(replacement, "replacement")
    matcher = _Matcher(pattern_graph)
    replacement_inputs = [n for n in replacement_graph.nodes if n.op == "placeholder"]
    if len(replacement_inputs) != len(matcher.placeholders):
        raise ValueError(f"replace_pattern(): the pattern takes {len(matcher.placeholders)} inputs but the "
                         f"replacement takes {len(replacement_inputs)}")

    graph = gm.graph
    taken: set = set()
    matches: list[Match] = []
    for node in list(graph.nodes):
        if node in taken or node.op in ("placeholder", "output"):
            continue
        mapping = matcher.match(node)
        if mapping is None:
            continue
        interior = {g for p, g in mapping.items() if p.op != "placeholder"}
        if interior & taken:
            continue
        taken |= interior
        matches.append(Match(anchor=matcher.anchor, nodes_map=mapping))

    for match in matches:
        anchor = match.nodes_map[matcher.anchor]
        val_map = {rep: match.nodes_map[pat] for rep, pat in zip(replacement_inputs, matcher.placeholders)}
        with graph.inserting_before(anchor):
            for rep_node in replacement_graph.nodes:
                if rep_node.op == "get_attr" and replacement_module is not None:
                    _copy_replacement_attr(gm, replacement_module, rep_node.target)
            new_value = graph.graph_copy(replacement_graph, val_map)
        if isinstance(new_value, Node):
            anchor.replace_all_uses_with(new_value)
        elif anchor.users:
            raise NotImplementedError("replace_pattern(): the replacement must return a single value")
        # Erase the replaced nodes, users before what they use.
        order = {n: i for i, n in enumerate(graph.nodes)}
        replaced = [g for p, g in match.nodes_map.items() if p.op != "placeholder"]
        for g in sorted(replaced, key=order.__getitem__, reverse=True):
            if not g.users:
                graph.erase_node(g)
    gm.recompile()
    return matches


def _copy_replacement_attr(gm, source, target: str) -> None:
    # A replacement that reads a parameter or constant brings it along (same name, unless already taken).
    if _has_path(gm, target):
        return
    value = source
    for part in target.split("."):
        value = getattr(value, part)
    from corenn.fx.graph_module import _assign_attr
    _assign_attr(value, gm, target)


def _has_path(module, target: str) -> bool:
    for part in target.split("."):
        if not hasattr(module, part):
            return False
        module = getattr(module, part)
    return True
