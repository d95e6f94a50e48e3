"""``GraphModule``: a Module whose ``forward`` is Python code generated from a Graph.

Example::

    >>> import corenn
    >>> from corenn import nn
    >>> gm = corenn.fx.symbolic_trace(nn.Sequential(nn.Linear(3, 4), nn.ReLU()))
    >>> print(gm.code.strip())
    def forward(self, input):
        input_1 = input
        _0 = getattr(self, '0')(input_1);  input_1 = None
        _1 = getattr(self, '1')(_0);  _0 = None
        return _1
"""
from __future__ import annotations

import copy
import itertools
import linecache

from corenn.fx.graph import Graph
from corenn.module.module import Module
from corenn.module.parameter import Parameter
from corenn.tensor.tensor import Tensor

__all__ = ["GraphModule"]

_source_counter = itertools.count()


def _forward_from_src(src: str, globals_: dict, class_name: str):
    # The source is registered with linecache so tracebacks through generated code show its lines.
    key = f"<eval_with_key>.{next(_source_counter)} ({class_name})"
    linecache.cache[key] = (len(src), None, src.splitlines(True), key)
    namespace = dict(globals_)
    exec(compile(src, key, "exec"), namespace)
    return namespace["forward"]


def _copy_attr(from_module, to_module, target: str) -> None:
    """Make ``to_module.<target>`` the same object as ``from_module.<target>``, creating parent modules."""
    *prefix, field = target.split(".")
    for item in prefix:
        source = getattr(from_module, item)
        existing = getattr(to_module, item, None)
        if source is existing:
            return
        if existing is None:
            existing = Module()
            setattr(to_module, item, existing)
        from_module, to_module = source, existing
    original = getattr(from_module, field)
    buffers = getattr(from_module, "_buffers", {})
    if field in buffers:
        persistent = field not in getattr(from_module, "_non_persistent_buffers_set", set())
        to_module.register_buffer(field, original, persistent=persistent)
    elif isinstance(original, Tensor) and not isinstance(original, Parameter):
        # A tensor constant (``_tensor_constant0``): a non-persistent buffer, so ``to()`` moves it.
        to_module.register_buffer(field, original, persistent=False)
    else:
        setattr(to_module, field, original)


def _assign_attr(value, to_module, target: str) -> None:
    *prefix, field = target.split(".")
    for item in prefix:
        nxt = getattr(to_module, item, None)
        if nxt is None:
            nxt = Module()
            setattr(to_module, item, nxt)
        to_module = nxt
    if isinstance(value, Tensor) and not isinstance(value, (Parameter, Module)):
        to_module.register_buffer(field, value)
    else:
        setattr(to_module, field, value)


class GraphModule(Module):
    """A Module built from a :class:`~corenn.fx.Graph`; ``forward`` is generated from the graph.

    ``root`` supplies what the graph reads: a Module (the submodules and attributes
    named by ``call_module``/``get_attr`` targets are carried over, the same objects,
    not copies) or a dict from target to object. After editing ``gm.graph`` call
    ``gm.recompile()``.

    Example::

        >>> gm = corenn.fx.symbolic_trace(model)       # doctest: +SKIP
        >>> for node in gm.graph.nodes:                 # doctest: +SKIP
        ...     if node.target is corenn.relu:
        ...         node.target = corenn.sigmoid
        >>> gm.recompile()                              # doctest: +SKIP
    """

    def __new__(cls, *args, **kwargs):
        # Each instance gets its own class: ``forward`` is installed on the class (so hooks,
        # ``type(gm).forward`` and pickling-by-class behave as for any module) without
        # one GraphModule's code replacing another's.
        while "_fx_per_instance" in vars(cls):
            cls = cls.__bases__[0]

        class GraphModuleImpl(cls):  # noqa: N801 - renamed to class_name in __init__
            _fx_per_instance = True
        return super().__new__(GraphModuleImpl)

    def __init__(self, root, graph: Graph, class_name: str = "GraphModule"):
        super().__init__()
        type(self).__name__ = class_name
        type(self).__qualname__ = class_name
        if not isinstance(graph, Graph):
            raise TypeError(f"GraphModule(): graph must be a corenn.fx.Graph, got {type(graph).__name__}")
        if isinstance(root, Module):
            if hasattr(root, "training"):
                self.training = root.training
            for node in graph.nodes:
                if node.op in ("get_attr", "call_module"):
                    try:
                        _copy_attr(root, self, node.target)
                    except AttributeError as error:
                        raise RuntimeError(f"node {node.name!r} ({node.op}) refers to {node.target!r}, which "
                                           f"{type(root).__name__} does not have: {error}") from None
        elif isinstance(root, dict):
            targets = [n.target for n in graph.nodes if n.op in ("get_attr", "call_module")]
            for target in sorted(set(targets), key=lambda t: t.count(".")):
                if target not in root:
                    raise RuntimeError(f"Node target {target!r} (referenced by the graph) is missing from the "
                                       "root dict passed to GraphModule")
                _assign_attr(root[target], self, target)
        else:
            raise TypeError(f"GraphModule(): root must be a Module or a dict, got {type(root).__name__}")
        object.__setattr__(self, "meta", {})
        self.graph = graph

    # -- the graph and its code --------------------------------------------------------------------------
    @property
    def graph(self) -> Graph:
        """The graph this module runs; assigning a new one recompiles."""
        return self.__dict__["_graph"]

    @graph.setter
    def graph(self, g: Graph) -> None:
        if not isinstance(g, Graph):
            raise TypeError(f"expected a corenn.fx.Graph, got {type(g).__name__}")
        object.__setattr__(self, "_graph", g)
        g.owning_module = self
        self.recompile()

    @property
    def code(self) -> str:
        """The Python source of ``forward`` generated from the graph (valid Python, with its imports)."""
        if "_code" not in self.__dict__:
            raise RuntimeError("code is not available: this GraphModule has not been compiled yet")
        return self.__dict__["_code"]

    def recompile(self):
        """Regenerate ``forward`` from ``self.graph``; call after editing the graph. Returns the PythonCode."""
        python_code = self.graph.python_code(root_module="self")
        object.__setattr__(self, "_code", python_code.src)
        type(self).forward = _forward_from_src(python_code.src, python_code.globals, type(self).__name__)
        return python_code

    def print_readable(self, print_output: bool = True) -> str:
        """The module as a readable class definition: ``class Name(corenn.nn.Module): def forward...``.

        Example::

            >>> gm.print_readable()   # doctest: +SKIP
            class MyModule(corenn.nn.Module):
                def forward(self, x):
                    ...
        """
        body = self.code.split("def forward", 1)[1]
        lines = [f"class {type(self).__name__}(corenn.nn.Module):", "    def forward" + body.splitlines()[0]]
        for line in body.splitlines()[1:]:
            lines.append("    " + line if line.strip() else "")
        text = "\n".join(lines).rstrip() + "\n"
        if print_output:
            print(text)
        return text

    def __str__(self):
        return super().__repr__() + "\n\n\n" + self.code.split("def forward", 1)[1].join(["def forward", ""])

    def __repr__(self):
        return self.__str__()

    # -- submodules ----------------------------------------------------------------------------------------
    def add_submodule(self, target: str, m: Module) -> bool:
        """Install ``m`` at dotted path ``target``, creating empty parent modules as needed.

        Example::

            >>> gm.add_submodule("extra.act", nn.ReLU())   # doctest: +SKIP
            True
        """
        *prefix, field = target.split(".")
        mod = self
        for item in prefix:
            submod = getattr(mod, item, None)
            if submod is None:
                submod = Module()
                setattr(mod, item, submod)
            if not isinstance(submod, Module):
                return False
            mod = submod
        setattr(mod, field, m)
        return True

    def delete_submodule(self, target: str) -> bool:
        """Remove the submodule at ``target``; False if there is none. Nodes using it are not changed."""
        *prefix, field = target.split(".")
        mod = self
        for item in prefix:
            if not hasattr(mod, item):
                return False
            mod = getattr(mod, item)
            if not isinstance(mod, Module):
                return False
        if not hasattr(mod, field) or not isinstance(getattr(mod, field), Module):
            return False
        delattr(mod, field)
        return True

    def delete_all_unused_submodules(self) -> None:
        """Remove submodules that no ``call_module`` or ``get_attr`` node uses (directly or as a parent)."""
        used = set()
        for node in self.graph.nodes:
            if node.op in ("call_module", "get_attr"):
                parts = node.target.split(".")
                for i in range(1, len(parts) + 1):
                    used.add(".".join(parts[:i]))
                if node.op == "call_module":
                    for name, _ in self.get_submodule(node.target).named_modules(prefix=node.target):
                        used.add(name)
        for name, _ in list(self.named_modules()):
            if name and name not in used:
                self.delete_submodule(name)

    # -- copying --------------------------------------------------------------------------------------------
    def __deepcopy__(self, memo):
        fake = Module()
        memo[id(self)] = fake
        state = {k: v for k, v in self.__dict__.items() if k not in ("_code",)}
        fake.__dict__.update(copy.deepcopy(state, memo))
        result = GraphModule(fake, fake.__dict__["_graph"], type(self).__name__)
        memo[id(self)] = result
        object.__setattr__(result, "meta", copy.deepcopy(self.meta, memo))
        for key in ("_forward_hooks", "_forward_pre_hooks", "_state_dict_hooks", "_load_state_dict_pre_hooks"):
            if key in fake.__dict__:
                object.__setattr__(result, key, fake.__dict__[key])
        return result

    def __copy__(self):
        result = GraphModule(self, self.graph, type(self).__name__)
        object.__setattr__(result, "meta", getattr(self, "meta", {}))
        return result

    def __reduce__(self):
        raise TypeError("a GraphModule is not pickled (corenn checkpoints are not pickles): save its state with "
                        "corenn.save(gm.state_dict(), path) and trace the model again to rebuild it")
