"""Draw an FX graph: Graphviz DOT text always, PNG/SVG when Graphviz's ``dot`` program is installed.

Example::

    >>> import corenn
    >>> from corenn.fx.passes.graph_drawer import FxGraphDrawer
    >>> gm = corenn.fx.symbolic_trace(lambda x: x.relu() + 1)
    >>> print(FxGraphDrawer(gm, "f").to_dot().splitlines()[0])
    digraph "f" {
"""
from __future__ import annotations

import os
import shutil
import subprocess
import tempfile

from corenn.fx.node import _format_arg, _format_target

__all__ = ["FxGraphDrawer"]

# Fill colours per opcode, so inputs, parameters, calls and the output are told apart at a glance.
_COLORS = {
    "placeholder": "#AFEEEE", "get_attr": "#FFE4B5", "call_function": "#E6E6FA", "call_method": "#F0FFF0",
    "call_module": "#FFDAB9", "output": "#D3D3D3",
}


def _quote(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\l") + '"'


def _record_field(text: str) -> str:
    """Escape a field of a record label: backslashes first, then the record syntax characters."""
    text = text.replace("\\", "\\\\")
    for special in '{}|<>"':
        text = text.replace(special, "\\" + special)
    return text


class FxGraphDrawer:
    """Renders a GraphModule's graph: one box per node (name, opcode, target, shape if ShapeProp ran).

    Example::

        >>> drawer = FxGraphDrawer(gm, "resnet")       # doctest: +SKIP
        >>> drawer.write_dot("resnet.dot")             # doctest: +SKIP
        >>> drawer.write_svg("resnet.svg")             # doctest: +SKIP  (needs Graphviz)
    """

    def __init__(self, graph_module, name: str, ignore_getattr: bool = False, dot_program: str | None = None):
        graph = getattr(graph_module, "graph", graph_module)
        if not hasattr(graph, "nodes"):
            raise TypeError(f"FxGraphDrawer(): expected a GraphModule or Graph, got {type(graph_module).__name__}")
        self.graph = graph
        self.name = name
        self.ignore_getattr = ignore_getattr
        self.dot_program = dot_program

    def _label(self, node) -> str:
        lines = [f"name=%{node.name}", f"op_code={node.op}"]
        if node.op != "output":
            lines.append(f"target={_format_target(node)}")
        if node.op not in ("placeholder", "get_attr", "output"):
            if node.args:
                lines.append(f"args={_format_arg(node.args)}")
            if node.kwargs:
                lines.append(f"kwargs={_format_arg(node.kwargs)}")
        meta = node.meta.get("tensor_meta")
        if meta is not None and hasattr(meta, "shape"):
            lines.append(f"shape={tuple(meta.shape)} dtype={meta.dtype}")
        return "{" + "|".join(_record_field(line) for line in lines) + "}"

    def to_dot(self) -> str:
        """The graph as Graphviz DOT source."""
        lines = [f"digraph {_quote(self.name)} {{", "    rankdir=TB;",
                 '    node [shape=record, style=filled, fontname="Helvetica", fontsize=10];']
        shown = set()
        for node in self.graph.nodes:
            if self.ignore_getattr and node.op == "get_attr":
                continue
            shown.add(node)
            # The label is already escaped for a record; only wrap it in quotes.
            lines.append(f"    {_quote(node.name)} [label=\"{self._label(node)}\", "
                         f"fillcolor={_quote(_COLORS.get(node.op, '#FFFFFF'))}];")
        for node in self.graph.nodes:
            if node not in shown:
                continue
            for user in node.users:
                if user in shown:
                    lines.append(f"    {_quote(node.name)} -> {_quote(user.name)};")
        lines.append("}")
        return "\n".join(lines) + "\n"

    def get_dot_graph(self) -> str:
        """Alias of :meth:`to_dot` (PyTorch's drawer returns a pydot object here; corenn returns DOT text)."""
        return self.to_dot()

    def write_dot(self, path) -> None:
        """Write the DOT source to ``path``."""
        with open(path, "w", encoding="utf-8") as file:
            file.write(self.to_dot())

    def _render(self, path, fmt: str) -> None:
        program = self.dot_program or shutil.which("dot")
        if program is None:
            raise RuntimeError(f"writing {fmt.upper()} needs Graphviz's 'dot' program, which was not found on PATH "
                               "(install graphviz, e.g. apt-get install graphviz); write_dot() works without it")
        with tempfile.NamedTemporaryFile("w", suffix=".dot", delete=False, encoding="utf-8") as source:
            source.write(self.to_dot())
        try:
            result = subprocess.run([program, f"-T{fmt}", source.name, "-o", os.fspath(path)], capture_output=True,
                                    text=True, timeout=120)
        finally:
            os.unlink(source.name)
        if result.returncode != 0:
            raise RuntimeError(f"Graphviz 'dot' failed ({result.returncode}) writing {path}: {result.stderr.strip()}")

    def write_png(self, path) -> None:
        """Render a PNG with Graphviz (RuntimeError naming the fix when it is not installed)."""
        self._render(path, "png")

    def write_svg(self, path) -> None:
        """Render an SVG with Graphviz (RuntimeError naming the fix when it is not installed)."""
        self._render(path, "svg")
