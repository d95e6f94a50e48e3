"""The FX graph: an ordered list of :class:`~corenn.fx.Node` s, and the Python code generated from it.

Example::

    >>> import corenn, operator
    >>> g = corenn.fx.Graph()
    >>> x = g.placeholder("x")
    >>> s = g.call_function(corenn.sum, (x,), {"dim": -1})
    >>> _ = g.output(s)
    >>> print(g)
    graph():
        %x : [num_users=1] = placeholder[target=x]
        %sum_1 : [num_users=1] = call_function[target=corenn.sum](args = (%x,), kwargs = {dim: -1})
        return sum_1
"""
from __future__ import annotations

import builtins
import copy
import inspect
import keyword
import math
import operator
import re
import sys
import types
from collections import defaultdict
from typing import Any, Callable

from corenn.fx.node import Node, _format_arg, map_arg

__all__ = ["Graph", "PythonCode"]

# -------------------------------------------------------------------------------------------------
# Public names of functions: ``corenn.sum``, ``corenn.nn.functional.relu``, ``operator.add``
# -------------------------------------------------------------------------------------------------

_public_name_cache: dict = {}
_namespace_sizes: tuple = ()


def _public_namespaces():
    """(prefix, namespace dict) pairs searched for a function's public name, most public first."""
    import corenn
    spaces = [("corenn", vars(corenn))]
    functional = sys.modules.get("corenn.nn.functional")
    if functional is None:
        try:
            import corenn.nn.functional as functional
        except ImportError:  # corenn.nn not available: functions print under their defining module
            functional = None
    if functional is not None:
        spaces.append(("corenn.nn.functional", vars(functional)))
    return spaces


def _rebuild_public_names():
    global _namespace_sizes
    spaces = _public_namespaces()
    _public_name_cache.clear()
    for prefix, namespace in reversed(spaces):  # earlier (more public) namespaces overwrite later ones
        for name, value in list(namespace.items()):
            if name.startswith("_") or not callable(value) or isinstance(value, (type, types.ModuleType)):
                continue
            key = id(value)
            existing = _public_name_cache.get(key)
            # Within one namespace prefer the name the function was defined with (``abs`` over ``absolute``).
            if existing is not None and existing[0] == value and existing[1].startswith(prefix + ".") \
                    and getattr(value, "__name__", None) != name:
                continue
            _public_name_cache[key] = (value, f"{prefix}.{name}")
    _namespace_sizes = tuple(len(ns) for _, ns in spaces)


def _qualified_name(func) -> str:
    """The name a function is printed and called by in generated code.

    Example::

        >>> import corenn, operator
        >>> _qualified_name(corenn.sum), _qualified_name(operator.add)
        ('corenn.sum', 'operator.add')
    """
    if getattr(builtins, getattr(func, "__name__", ""), None) is func:
        return func.__name__
    module = getattr(func, "__module__", None)
    if module in ("_operator", "operator") and getattr(operator, func.__name__, None) is func:
        return f"operator.{func.__name__}"
    if module is not None and (module == "corenn" or module.startswith("corenn.")):
        entry = _public_name_cache.get(id(func))
        if entry is None or entry[0] is not func:
            sizes = tuple(len(ns) for _, ns in _public_namespaces())
            if sizes != _namespace_sizes or not _public_name_cache:
                _rebuild_public_names()
            entry = _public_name_cache.get(id(func))
        if entry is not None and entry[0] is func:
            return entry[1]
    if getattr(math, getattr(func, "__name__", ""), None) is func:
        return f"math.{func.__name__}"
    qualname = getattr(func, "__qualname__", None) or getattr(func, "__name__", None) or repr(func)
    return f"{module}.{qualname}" if module else qualname


def _importable(module_name: str, qualname: str, obj) -> bool:
    """Whether ``import module_name`` then ``module_name.qualname`` gives back ``obj``."""
    if "<" in qualname or module_name is None:
        return False
    module = sys.modules.get(module_name)
    if module is None:
        return False
    value = module
    for part in qualname.split("."):
        value = getattr(value, part, None)
    return value is obj


# -------------------------------------------------------------------------------------------------
# Unique, valid Python names
# -------------------------------------------------------------------------------------------------

_ILLEGAL_CHAR = re.compile("[^0-9a-zA-Z_]+")
_NAME_SUFFIX = re.compile(r"(.*)_(\d+)$")
_RESERVED = {"self", "corenn", "operator", "math", "inf", "nan", "getattr", "NoneType"}


def _snake_case(name: str) -> str:
    # CamelCase module names become snake_case node names (``BatchNorm2d`` -> ``batch_norm2d``).
    return re.sub(r"(?<=[a-z0-9])([A-Z])", r"_\1", name).lower()


class _Namespace:
    """Hands out unique, valid identifiers: ``sum`` becomes ``sum_1`` (shadows a builtin), ``add`` ``add_1``..."""

    def __init__(self):
        self._used: set = set()
        self._base_count: dict = defaultdict(int)

    def create_name(self, candidate: str) -> str:
        candidate = _ILLEGAL_CHAR.sub("_", candidate) or "_unnamed"
        if candidate[0].isdigit():
            candidate = f"_{candidate}"
        match = _NAME_SUFFIX.match(candidate)
        if match is None:
            base, num = candidate, None
        else:
            base, num = match.group(1), int(match.group(2))
        candidate = base if num is None else f"{base}_{num}"
        if not num:
            num = self._base_count[base]
        while candidate in self._used or self._illegal(candidate):
            num += 1
            candidate = f"{base}_{num}"
        self._used.add(candidate)
        self._base_count[base] = num
        return candidate

    @staticmethod
    def _illegal(name: str) -> bool:
        return keyword.iskeyword(name) or name in builtins.__dict__ or name in _RESERVED

    def rename(self, old: str, new: str) -> str:
        self._used.discard(old)
        return self.create_name(new)

    def copy(self) -> "_Namespace":
        other = _Namespace()
        other._used = set(self._used)
        other._base_count = defaultdict(int, self._base_count)
        return other


# -------------------------------------------------------------------------------------------------
# The node list
# -------------------------------------------------------------------------------------------------

class _NodeList:
    """A live view of a graph's nodes; iterating is safe while nodes are erased or inserted."""

    def __init__(self, graph: "Graph", direction: str = "_next"):
        self._graph = graph
        self._direction = direction

    def __len__(self):
        return self._graph._len

    def __iter__(self):
        root = self._graph._root
        direction = self._direction
        cur = getattr(root, direction)
        while cur is not root:
            if not cur._erased:
                yield cur
            cur = getattr(cur, direction)

    def __reversed__(self):
        return iter(_NodeList(self._graph, "_prev" if self._direction == "_next" else "_next"))

    def __repr__(self):
        return f"[{', '.join(n.name for n in self)}]"


class _InsertPoint:
    def __init__(self, graph: "Graph", insert: Callable[[Node], None]):
        self.graph = graph
        self.insert = insert

    def __enter__(self):
        self.previous = self.graph._insert
        self.graph._insert = self.insert
        return self

    def __exit__(self, *exc):
        self.graph._insert = self.previous


# Python operators that generated code writes inline (``a + b`` rather than ``operator.add(a, b)``).
_BINARY_OPS = {
    "add": "+", "sub": "-", "mul": "*", "truediv": "/", "floordiv": "//", "mod": "%", "pow": "**",
    "matmul": "@", "lshift": "<<", "rshift": ">>", "and_": "&", "or_": "|", "xor": "^",
    "eq": "==", "ne": "!=", "lt": "<", "le": "<=", "gt": ">", "ge": ">=",
}
_UNARY_OPS = {"neg": "-", "pos": "+", "invert": "~", "not_": "not "}
_INPLACE_OPS = {"iadd": "+=", "isub": "-=", "imul": "*=", "itruediv": "/=", "ifloordiv": "//=", "imod": "%=",
                "ipow": "**=", "imatmul": "@=", "ilshift": "<<=", "irshift": ">>=", "iand": "&=", "ior": "|=",
                "ixor": "^="}


class PythonCode:
    """Generated source of ``forward`` and the globals it runs with.

    ``src`` is valid Python that imports every module it uses; ``globals`` also binds
    objects that cannot be imported (functions defined inside other functions).
    """

    def __init__(self, src: str, globals_: dict):
        self.src = src
        self.globals = globals_


class _CodeGen:
    def __init__(self, graph: "Graph", root_module: str):
        self.graph = graph
        self.root = root_module
        self.imports: dict[str, None] = {}
        self.globals: dict[str, Any] = {}
        self.unimportable: dict[str, str] = {}
        self._global_names = _Namespace()
        for node in graph.nodes:  # generated names must not shadow node names
            self._global_names._used.add(node.name)

    # -- naming objects that the code refers to -------------------------------------------------------
    def function_expr(self, func) -> str:
        name = _qualified_name(func)
        if name in builtins.__dict__ and builtins.__dict__[name] is func:
            return name
        head, _, _ = name.partition(".")
        if name.startswith("corenn.nn.functional."):
            self.imports["import corenn.nn.functional"] = None
            self.globals["corenn"] = sys.modules["corenn"]
            return name
        if head in ("corenn", "operator", "math") and "." in name:
            self.imports[f"import {head}"] = None
            self.globals[head] = sys.modules[head] if head != "operator" else operator
            return name
        module = getattr(func, "__module__", None)
        qualname = getattr(func, "__qualname__", None) or getattr(func, "__name__", "fn")
        if module and _importable(module, qualname, func):
            alias = self._alias_for_module(module)
            return f"{alias}.{qualname}"
        return self.bind_global(getattr(func, "__name__", "fn"), func, why=f"{module}.{qualname}")

    def _alias_for_module(self, module: str) -> str:
        if module.isidentifier() and "." not in module and module not in self._global_names._used:
            self.imports[f"import {module}"] = None
            self.globals[module] = sys.modules[module]
            return module
        for statement in self.imports:
            if statement.startswith(f"import {module} as "):
                return statement.rsplit(" ", 1)[1]
        alias = self._global_names.create_name(module.replace(".", "_"))
        self.imports[f"import {module} as {alias}"] = None
        self.globals[alias] = sys.modules[module]
        return alias

    def bind_global(self, hint: str, obj, why: str) -> str:
        for name, value in self.globals.items():
            if value is obj and name in self.unimportable:
                return name
        name = self._global_names.create_name(hint)
        self.globals[name] = obj
        self.unimportable[name] = why
        return name

    # -- values ----------------------------------------------------------------------------------
    def repr_arg(self, arg) -> str:
        if isinstance(arg, Node):
            return arg.name
        if isinstance(arg, tuple):
            if hasattr(arg, "_fields"):  # a named tuple is rebuilt as its own type
                inner = ", ".join(self.repr_arg(a) for a in arg)
                return f"{self.repr_arg(type(arg))}({inner})"
            inner = ", ".join(self.repr_arg(a) for a in arg)
            return f"({inner},)" if len(arg) == 1 else f"({inner})"
        if isinstance(arg, list):
            return "[" + ", ".join(self.repr_arg(a) for a in arg) + "]"
        if isinstance(arg, dict):
            return "{" + ", ".join(f"{k!r}: {self.repr_arg(v)}" for k, v in arg.items()) + "}"
        if isinstance(arg, slice):
            return f"slice({self.repr_arg(arg.start)}, {self.repr_arg(arg.stop)}, {self.repr_arg(arg.step)})"
        if isinstance(arg, float):
            if math.isnan(arg):
                return "float('nan')"
            if math.isinf(arg):
                return "float('inf')" if arg > 0 else "-float('inf')"
            return repr(arg)
        if arg is None or arg is Ellipsis or isinstance(arg, (bool, int, str, bytes, complex)):
            return repr(arg)
        from corenn import _dtype
        from corenn.dispatch import device
        if isinstance(arg, _dtype.dtype):
            self.imports["import corenn"] = None
            self.globals["corenn"] = sys.modules["corenn"]
            return repr(arg)
        if isinstance(arg, device):
            self.imports["import corenn"] = None
            self.globals["corenn"] = sys.modules["corenn"]
            return f"corenn.device({str(arg)!r})"
        if isinstance(arg, (types.FunctionType, types.BuiltinFunctionType)):
            return self.function_expr(arg)
        if isinstance(arg, type):
            module, qualname = arg.__module__, arg.__qualname__
            if _importable(module, qualname, arg):
                if module == "builtins":
                    return qualname
                return f"{self._alias_for_module(module)}.{qualname}"
        return self.bind_global("_const", arg, why=type(arg).__name__)

    def attr_path(self, target: str) -> str:
        expr = self.root
        for part in target.split("."):
            expr = f"{expr}.{part}" if part.isidentifier() and not keyword.iskeyword(part) \
                else f"getattr({expr}, {part!r})"
        return expr

    def call_args(self, args, kwargs) -> str:
        parts = [self.repr_arg(a) for a in args]
        parts += [f"{k} = {self.repr_arg(v)}" for k, v in kwargs.items()]
        return ", ".join(parts)

    # -- statements -------------------------------------------------------------------------------
    def expression(self, node: Node) -> str:
        op, target, args, kwargs = node.op, node.target, node.args, node.kwargs
        if op == "get_attr":
            return self.attr_path(target)
        if op == "call_module":
            return f"{self.attr_path(target)}({self.call_args(args, kwargs)})"
        if op == "call_method":
            if not args:
                raise RuntimeError(f"call_method node {node.name!r} has no object to call {target!r} on")
            return f"{self.repr_arg(args[0])}.{target}({self.call_args(args[1:], kwargs)})"
        # call_function
        name = getattr(target, "__name__", "")
        is_operator = getattr(operator, name, None) is target
        if is_operator and not kwargs:
            if name in _BINARY_OPS and len(args) == 2:
                return f"{self.repr_arg(args[0])} {_BINARY_OPS[name]} {self.repr_arg(args[1])}"
            if name in _UNARY_OPS and len(args) == 1:
                return f"{_UNARY_OPS[name]}{self.repr_arg(args[0])}"
            if name == "getitem" and len(args) == 2:
                return f"{self.repr_arg(args[0])}[{self._index_repr(args[1])}]"
        if target is getattr and len(args) == 2 and not kwargs and isinstance(args[1], str) \
                and args[1].isidentifier() and not keyword.iskeyword(args[1]):
            return f"{self.repr_arg(args[0])}.{args[1]}"
        return f"{self.function_expr(target)}({self.call_args(args, kwargs)})"

    def _index_repr(self, index) -> str:
        # ``x[0, 1:3]`` reads better than ``x[(0, slice(1, 3, None))]``; both are the same index.
        def one(i):
            if isinstance(i, slice):
                parts = ["" if v is None else self.repr_arg(v) for v in (i.start, i.stop, i.step)]
                return ":".join(parts if i.step is not None else parts[:2])
            if i is Ellipsis:
                return "..."
            return self.repr_arg(i)
        if isinstance(index, tuple) and index and type(index) is tuple:
            return ", ".join(one(i) for i in index) + ("," if len(index) == 1 else "")
        return one(index)

    def generate(self) -> PythonCode:
        nodes = list(self.graph.nodes)
        # The last statement that reads each value: after it, the name is cleared to free memory early.
        last_use: dict[Node, Node] = {}
        for node in reversed(nodes):
            for inp in node.all_input_nodes:
                last_use.setdefault(inp, node)
        to_free: dict[Node, list] = defaultdict(list)
        for value, user in last_use.items():
            if user.op != "output":
                to_free[user].append(value)

        params, body = [], []
        saw_output = False
        for node in nodes:
            if node.op == "placeholder":
                target = node.target
                if target.startswith("**") or target.startswith("*"):
                    params.append(target)
                    if target.lstrip("*") != node.name:
                        body.append(f"{node.name} = {target.lstrip('*')}")
                    continue
                default = f" = {self.repr_arg(node.args[0])}" if node.args else ""
                annotation = ""
                params.append(f"{target}{annotation}{default}")
                if target != node.name:
                    body.append(f"{node.name} = {target}")
                continue
            if node.op == "output":
                saw_output = True
                body.append(f"return {self.repr_arg(node.args[0]) if node.args else 'None'}")
                break
            statement = f"{node.name} = {self.expression(node)}"
            if not node.users and node.op != "get_attr":
                statement = self.expression(node)  # the value is unused: don't bind it
            freed = [v.name for v in to_free.get(node, ())]
            if freed:
                statement += ";  " + " = ".join(freed) + " = None"
            body.append(statement)
        if not saw_output:
            body.append("return None")
        # ``*args`` must come after plain parameters and ``**kwargs`` last, as Python requires.
        plain = [p for p in params if not p.startswith("*")]
        star = [p for p in params if p.startswith("*") and not p.startswith("**")]
        double = [p for p in params if p.startswith("**")]
        signature = ", ".join([self.root] + plain + star + double)
        lines = sorted(self.imports)
        for name, why in self.unimportable.items():
            lines.append(f"# {name}: {why} (not importable; bound in the globals of the generated code)")
        header = "\n".join(lines)
        src = (header + "\n\n\n" if header else "\n\n\n") + f"def forward({signature}):\n"
        src += "".join(f"    {line}\n" for line in body)
        return PythonCode(src, dict(self.globals))


# -------------------------------------------------------------------------------------------------
# The graph
# -------------------------------------------------------------------------------------------------

class Graph:
    """An ordered list of :class:`Node` s that together form a Python function.

    Build one by tracing (``corenn.fx.symbolic_trace``) or by hand with the
    per-opcode helpers; edit it with ``inserting_before``/``inserting_after``,
    ``node_copy``, ``erase_node``; turn it into a module with ``GraphModule``.

    Example::

        >>> import corenn, operator
        >>> g = corenn.fx.Graph()
        >>> x = g.placeholder("x")
        >>> y = g.call_method("relu", (x,))
        >>> _ = g.output(y)
        >>> [n.op for n in g.nodes]
        ['placeholder', 'call_method', 'output']
    """

    def __init__(self, owning_module=None, tracer_cls=None):
        self._root = Node(None, "", "root", "", (), {})
        self._root.graph = self
        self._len = 0
        self._graph_namespace = _Namespace()
        self._insert = self._root.prepend
        self.owning_module = owning_module
        self._tracer_cls = tracer_cls

    # -- the node list ------------------------------------------------------------------------------
    @property
    def nodes(self) -> _NodeList:
        """The nodes in program order (a live view; ``len``, iteration, ``reversed``)."""
        return _NodeList(self)

    def find_nodes(self, *, op: str, target=None) -> list:
        """Nodes with opcode ``op`` (and ``target``, if given).

        Example::

            >>> g.find_nodes(op="call_module", target="linear")   # doctest: +SKIP
            [linear]
        """
        return [n for n in self.nodes if n.op == op and (target is None or n.target == target)]

    # -- creating nodes --------------------------------------------------------------------------------
    def create_node(self, op: str, target, args: tuple | None = None, kwargs: dict | None = None,
                    name: str | None = None, type_expr=None) -> Node:
        """Create a node and insert it at the current insert point (the end, by default).

        Example::

            >>> n = g.create_node("call_function", operator.add, (x, 1))   # doctest: +SKIP
        """
        args = () if args is None else args
        kwargs = {} if kwargs is None else kwargs
        if not isinstance(args, tuple):
            raise TypeError(f"create_node(): args must be a tuple, got {type(args).__name__}")
        if not isinstance(kwargs, dict):
            raise TypeError(f"create_node(): kwargs must be a dict, got {type(kwargs).__name__}")
        candidate = name if name is not None else self._target_to_str(target)
        unique = self._graph_namespace.create_name(candidate)
        node = Node(self, unique, op, target, args, kwargs, type_expr)
        self._insert(node)
        self._len += 1
        return node

    @staticmethod
    def _target_to_str(target) -> str:
        if callable(target) and not isinstance(target, str):
            name = getattr(target, "__name__", None) or type(target).__name__
        else:
            name = str(target)
        if name.startswith("__") and name.endswith("__") and len(name) > 4:
            name = name[2:-2]
        return _snake_case(name)

    def placeholder(self, name: str, type_expr=None, default_value=inspect.Signature.empty) -> Node:
        """An input of the function, named ``name``; ``default_value`` makes it optional.

        Example::

            >>> x = g.placeholder("x")   # doctest: +SKIP
        """
        args = () if default_value is inspect.Signature.empty else (default_value,)
        return self.create_node("placeholder", name, args, {}, name=name.lstrip("*"), type_expr=type_expr)

    def get_attr(self, qualified_name: str, type_expr=None) -> Node:
        """Read attribute ``qualified_name`` (``"linear.weight"``) of the owning module.

        Example::

            >>> w = g.get_attr("linear.weight")   # doctest: +SKIP
        """
        return self.create_node("get_attr", qualified_name, type_expr=type_expr)

    def call_module(self, module_name: str, args: tuple | None = None, kwargs: dict | None = None,
                    type_expr=None) -> Node:
        """Call submodule ``module_name`` (``"layer1.conv"``).

        Example::

            >>> y = g.call_module("linear", (x,))   # doctest: +SKIP
        """
        return self.create_node("call_module", module_name, args, kwargs, type_expr=type_expr)

    def call_method(self, method_name: str, args: tuple | None = None, kwargs: dict | None = None,
                    type_expr=None) -> Node:
        """Call method ``method_name`` on ``args[0]``.

        Example::

            >>> y = g.call_method("relu", (x,))   # doctest: +SKIP
        """
        return self.create_node("call_method", method_name, args, kwargs, type_expr=type_expr)

    def call_function(self, the_function: Callable, args: tuple | None = None, kwargs: dict | None = None,
                      type_expr=None) -> Node:
        """Call free function ``the_function``.

        Example::

            >>> y = g.call_function(corenn.sum, (x,), {"dim": -1})   # doctest: +SKIP
        """
        return self.create_node("call_function", the_function, args, kwargs, type_expr=type_expr)

    def output(self, result, type_expr=None) -> Node:
        """The function's return value ``result`` (a node, or a structure of nodes).

        Example::

            >>> g.output((y, z))   # doctest: +SKIP
        """
        return self.create_node("output", "output", (result,), type_expr=type_expr)

    def node_copy(self, node: Node, arg_transform: Callable[[Node], Any] = lambda x: x) -> Node:
        """Copy ``node`` (from this or another graph) into this graph, remapping its inputs.

        ``arg_transform(input_node)`` gives what each input becomes here; ``meta`` is copied.

        Example::

            >>> env = {}
            >>> for n in old.nodes:                                                   # doctest: +SKIP
            ...     env[n] = new.node_copy(n, lambda x: env[x])
        """
        args = map_arg(node.args, arg_transform)
        kwargs = map_arg(node.kwargs, arg_transform)
        if not isinstance(args, tuple) or not isinstance(kwargs, dict):
            raise TypeError("node_copy(): arg_transform changed the structure of args/kwargs")
        result = self.create_node(node.op, node.target, args, kwargs, node.name, node.type)
        result.meta = copy.copy(node.meta)
        return result

    def graph_copy(self, g: "Graph", val_map: dict, return_output_node: bool = False):
        """Copy every node of ``g`` except its output into this graph; returns what the output returned.

        ``val_map`` maps nodes of ``g`` to their copies (pre-fill it to bind inputs).

        Example::

            >>> val_map = {}
            >>> out = new_graph.graph_copy(old_graph, val_map)   # doctest: +SKIP
            >>> _ = new_graph.output(out)                          # doctest: +SKIP
        """
        for node in g.nodes:
            if node in val_map:
                continue
            if node.op == "output":
                result = map_arg(node.args[0], lambda n: val_map[n])
                return (result, node) if return_output_node else result
            val_map[node] = self.node_copy(node, lambda n: val_map[n])
        return None

    def __deepcopy__(self, memo):
        memo = memo if memo else {}
        g = Graph(tracer_cls=self._tracer_cls)
        out = g.graph_copy(self, val_map=memo, return_output_node=True)
        if out is not None:
            value, old_output = out
            new_output = g.output(value, type_expr=getattr(old_output, "type", None))
            new_output.meta = copy.copy(old_output.meta)
        return g

    # -- insert points -----------------------------------------------------------------------------------
    def inserting_before(self, n: Node | None = None) -> _InsertPoint:
        """Context manager: nodes created inside go right before ``n`` (the graph start if None).

        Example::

            >>> with g.inserting_before(relu_node):                           # doctest: +SKIP
            ...     neg = g.call_function(operator.neg, (x,))
        """
        if n is None:
            return self.inserting_after(self._root)
        self._check_owned(n, "inserting_before")
        return _InsertPoint(self, n.prepend)

    def inserting_after(self, n: Node | None = None) -> _InsertPoint:
        """Context manager: nodes created inside go after ``n`` (the graph end if None), in creation order.

        Unlike PyTorch, several nodes created in one ``inserting_after`` block keep
        the order they were created in (PyTorch places each right after ``n``, so they
        end up reversed).

        Example::

            >>> with g.inserting_after(linear_node):                          # doctest: +SKIP
            ...     act = g.call_function(corenn.relu, (linear_node,))
        """
        if n is None:
            return self.inserting_before(self._root)
        if n is not self._root:
            self._check_owned(n, "inserting_after")
        anchor = [n]

        def insert(new_node):
            anchor[0].append(new_node)
            anchor[0] = new_node
        return _InsertPoint(self, insert)

    def _check_owned(self, n: Node, where: str):
        if n.graph is not self:
            raise RuntimeError(f"{where}(): node {n.name!r} does not belong to this graph")
        if n._erased:
            raise RuntimeError(f"{where}(): node {n.name!r} has been erased")

    # -- removing nodes -----------------------------------------------------------------------------------
    def erase_node(self, to_erase: Node) -> None:
        """Remove ``to_erase``; it must have no users (replace its uses first).

        Example::

            >>> relu.replace_all_uses_with(relu.args[0])   # doctest: +SKIP
            >>> g.erase_node(relu)                         # doctest: +SKIP
        """
        if to_erase.graph is not self:
            raise RuntimeError(f"erase_node(): node {to_erase.name!r} does not belong to this graph")
        if to_erase._erased:
            raise RuntimeError(f"erase_node(): node {to_erase.name!r} was already erased")
        if to_erase.users:
            users = ", ".join(u.name for u in to_erase.users)
            raise RuntimeError(f"Tried to erase Node {to_erase.name} but it still had {len(to_erase.users)} users "
                               f"in the graph: {users}! Replace its uses first (node.replace_all_uses_with).")
        p, n = to_erase._prev, to_erase._next
        p._next, n._prev = n, p  # the erased node keeps its links, so a running iteration goes on from it
        to_erase._erased = True
        self._len -= 1
        to_erase._update_args_kwargs(map_arg(to_erase._args, lambda n: None),
                                     map_arg(to_erase._kwargs, lambda n: None))

    def eliminate_dead_code(self, is_impure_node: Callable[[Node], bool] | None = None) -> bool:
        """Erase nodes whose values are never used and that have no side effects; True if any were.

        Example::

            >>> g.eliminate_dead_code()   # doctest: +SKIP
            True
        """
        self.lint()
        changed = False
        impure = is_impure_node or (lambda n: n.is_impure())
        for node in reversed(self.nodes):
            if not node.users and not impure(node):
                self.erase_node(node)
                changed = True
        return changed

    # -- checking ---------------------------------------------------------------------------------------
    def lint(self) -> None:
        """Check the graph is well formed; raises RuntimeError naming the first problem found.

        Checks: links, unique valid names, every input defined earlier in this graph,
        users in sync with inputs, one ``output`` and it comes last, and (with an
        owning module) that ``call_module``/``get_attr`` targets exist.

        Example::

            >>> g.lint()   # doctest: +SKIP
        """
        seen: set = set()
        names: set = set()
        count = 0
        prev = self._root
        nodes = list(self.nodes)
        output_seen = None
        for node in nodes:
            count += 1
            if node.graph is not self:
                raise RuntimeError(f"Node {node.name!r} does not belong to this Graph")
            if node._prev is not prev:
                raise RuntimeError(f"Node {node.name!r}: broken link to the previous node")
            prev = node
            if output_seen is not None:
                raise RuntimeError(f"Node {node.name!r} comes after the output node {output_seen.name!r}")
            if node.op not in ("placeholder", "get_attr", "call_function", "call_module", "call_method",
                               "output"):
                raise RuntimeError(f"Node {node.name!r} has unknown opcode {node.op!r}")
            if not node.name.isidentifier() or keyword.iskeyword(node.name):
                raise RuntimeError(f"Node name {node.name!r} is not a valid Python identifier")
            if node.name in names:
                raise RuntimeError(f"Node name {node.name!r} is used twice")
            names.add(node.name)
            for inp in node.all_input_nodes:
                if inp.graph is not self:
                    raise RuntimeError(f"Argument {inp.name!r} of Node {node.name!r} does not belong to this Graph")
                if inp._erased:
                    raise RuntimeError(f"Argument {inp.name!r} of Node {node.name!r} was erased from the graph")
                if inp not in seen:
                    raise RuntimeError(f"Argument {inp.name!r} of Node {node.name!r} was used before it has been "
                                       "defined! Please check that Nodes in the graph are topologically ordered")
                if node not in inp.users:
                    raise RuntimeError(f"Node {node.name!r} reads {inp.name!r} but is missing from its users")
            for user in node.users:
                if user._erased or user.graph is not self:
                    raise RuntimeError(f"Node {node.name!r} lists {user.name!r} as a user, which is not in this graph")
                if node not in user._input_nodes:
                    raise RuntimeError(f"Node {node.name!r} lists {user.name!r} as a user, but it does not read it")
            if node.op == "output":
                output_seen = node
            seen.add(node)
        if self._root._prev is not prev:
            raise RuntimeError("The graph's last link is broken")
        if count != self._len:
            raise RuntimeError(f"The graph counts {self._len} nodes but links {count}")
        if nodes and output_seen is None:
            raise RuntimeError("The graph has no output node (add one with graph.output(value))")
        module = self.owning_module
        if module is not None:
            for node in nodes:
                if node.op == "call_module":
                    try:
                        module.get_submodule(node.target)
                    except AttributeError as error:
                        raise RuntimeError(f"Node {node.name!r} target {node.target!r} is not a submodule of the "
                                           f"owning module: {error}") from None
                elif node.op == "get_attr":
                    owner = module
                    for part in node.target.split("."):
                        if not hasattr(owner, part):
                            raise RuntimeError(f"Node {node.name!r} target {node.target!r} does not exist in the "
                                               f"owning module ({part!r} missing)")
                        owner = getattr(owner, part)

    # -- code and printing -------------------------------------------------------------------------------------
    def python_code(self, root_module: str = "self") -> PythonCode:
        """The Python source of the function this graph computes (see :class:`PythonCode`).

        Example::

            >>> print(g.python_code("self").src)   # doctest: +SKIP
        """
        return _CodeGen(self, root_module).generate()

    def __str__(self):
        lines = ["graph():"]
        for node in self.nodes:
            lines.append("    " + node.format_node())
        return "\n".join(lines)

    __repr__ = object.__repr__

    def print_tabular(self) -> None:
        """Print one row per node: opcode, name, target, args, kwargs.

        Example::

            >>> g.print_tabular()   # doctest: +SKIP
            opcode         name           target                   args                kwargs
            ...
        """
        from corenn.fx.node import _format_target
        rows = [["opcode", "name", "target", "args", "kwargs"]]
        for n in self.nodes:
            rows.append([n.op, n.name, _format_target(n), _format_arg(n.args), _format_arg(n.kwargs)])
        widths = [max(len(r[i]) for r in rows) for i in range(5)]
        for i, row in enumerate(rows):
            print("  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip())
            if i == 0:
                print("  ".join("-" * w for w in widths))
