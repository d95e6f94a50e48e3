"""One instruction of an FX graph: :class:`Node`, and helpers that walk node arguments.

A node's ``op`` is one of six opcodes:

``placeholder``    a function input; ``target`` is the parameter name.
``get_attr``       fetch a parameter, buffer or attribute of the module; ``target`` is its dotted path.
``call_function``  call a free function ``target`` (``operator.add``, ``corenn.sum``) on ``args``/``kwargs``.
``call_module``    call submodule ``target`` (a dotted path) with ``args``/``kwargs``.
``call_method``    call method ``target`` (a string) on ``args[0]`` with the rest of ``args``/``kwargs``.
``output``         the return value, ``args[0]``.

Nodes are linked in a doubly linked list owned by their :class:`~corenn.fx.Graph`;
``users`` and ``all_input_nodes`` are the def-use edges, kept up to date by every
mutation made through the Node/Graph API.
"""
from __future__ import annotations

import builtins
import types
from typing import Any, Callable

__all__ = ["Node", "map_arg", "map_aggregate", "Argument", "OPCODES"]

OPCODES = ("placeholder", "get_attr", "call_function", "call_module", "call_method", "output", "root")

#: What may appear in ``args``/``kwargs``: nodes, plain values, and tuples/lists/dicts/slices of them.
Argument = Any

# Functions whose calls have side effects, so dead-code elimination must keep them.
_SIDE_EFFECTFUL_FUNCTIONS: set = {builtins.print}


def map_aggregate(a: Argument, fn: Callable[[Argument], Argument]) -> Argument:
    """Apply ``fn`` to every leaf of ``a`` (recursing into tuples, lists, dicts and slices).

    Example::

        >>> map_aggregate((1, [2, {"k": 3}]), lambda v: v * 10)
        (10, [20, {'k': 30}])
    """
    if isinstance(a, tuple):
        mapped = tuple(map_aggregate(elem, fn) for elem in a)
        # A named tuple (e.g. return_types.topk) is rebuilt as its own type.
        return mapped if type(a) is tuple or not hasattr(a, "_fields") else type(a)(*mapped)
    if isinstance(a, list):
        return [map_aggregate(elem, fn) for elem in a]
    if isinstance(a, dict):
        return {k: map_aggregate(v, fn) for k, v in a.items()}
    if isinstance(a, slice):
        return slice(map_aggregate(a.start, fn), map_aggregate(a.stop, fn), map_aggregate(a.step, fn))
    return fn(a)


def map_arg(a: Argument, fn: Callable[["Node"], Argument]) -> Argument:
    """Apply ``fn`` to every :class:`Node` inside ``a``; other values are kept as they are.

    Example::

        >>> # replace every node by its name
        >>> map_arg((node_x, 3), lambda n: n.name)   # doctest: +SKIP
        ('x', 3)
    """
    if not callable(fn):
        raise TypeError("map_arg(): fn must be callable")
    return map_aggregate(a, lambda x: fn(x) if isinstance(x, Node) else x)


def _check_argument(value, where):
    """Refuse values a graph cannot hold (e.g. a live Proxy) with a message naming them."""
    from corenn.fx.proxy import Proxy
    if isinstance(value, Proxy):
        raise TypeError(f"{where}: got a Proxy ({value!r}); pass proxy.node, or use the Tracer to record calls")
    return value


class Node:
    """An instruction in a :class:`~corenn.fx.Graph`: opcode, target, arguments and def-use edges.

    Create nodes through the graph (``graph.call_function(operator.add, (x, y))``),
    not directly. ``meta`` is a free dict that passes write into (``ShapeProp`` puts
    ``tensor_meta`` there).

    Example::

        >>> import corenn, operator
        >>> g = corenn.fx.Graph()
        >>> x = g.placeholder("x")
        >>> y = g.call_function(operator.mul, (x, 2))
        >>> _ = g.output(y)
        >>> y.op, y.target, y.args, list(x.users)
        ('call_function', <built-in function mul>, (x, 2), [mul])
    """

    def __init__(self, graph, name: str, op: str, target, args: tuple, kwargs: dict, return_type=None):
        if op not in OPCODES:
            raise ValueError(f"unknown node opcode {op!r}; expected one of {OPCODES[:-1]}")
        if op == "call_function" and not callable(target):
            raise ValueError(f"call_function node {name!r}: target must be callable, got {target!r} "
                             f"({type(target).__name__})")
        if op in ("placeholder", "get_attr", "call_module", "call_method") and not isinstance(target, str):
            raise ValueError(f"{op} node {name!r}: target must be a string, got {type(target).__name__}")
        self.graph = graph
        self.name = name
        self.op = op
        self.target = target
        #: the annotated type of the value (placeholders from annotations), or None
        self.type = return_type
        self.users: dict[Node, None] = {}
        self._input_nodes: dict[Node, None] = {}
        self._args: tuple = ()
        self._kwargs: dict = {}
        self._prev = self
        self._next = self
        self._erased = False
        self.meta: dict[str, Any] = {}
        self._update_args_kwargs(args, kwargs)

    # -- position in the graph ----------------------------------------------------------------------
    @property
    def next(self) -> "Node":
        """The node after this one (the graph's root sentinel after the last node)."""
        return self._next

    @property
    def prev(self) -> "Node":
        """The node before this one."""
        return self._prev

    def prepend(self, x: "Node") -> None:
        """Move (or insert) ``x`` to sit right before this node.

        Example::

            >>> b.prepend(a)   # a now runs just before b   # doctest: +SKIP
        """
        if x is self:  # ``a.append(b)`` when b already follows a lands here: nothing to move
            return
        if self.graph is not x.graph:
            raise RuntimeError(f"cannot move node {x.name!r} between different graphs")
        x._remove_from_list()
        p = self._prev
        p._next, x._prev = x, p
        x._next, self._prev = self, x

    def append(self, x: "Node") -> None:
        """Move (or insert) ``x`` to sit right after this node.

        Example::

            >>> a.append(b)   # b now runs just after a   # doctest: +SKIP
        """
        self._next.prepend(x)

    def _remove_from_list(self):
        p, n = self._prev, self._next
        p._next, n._prev = n, p
        self._prev = self._next = self

    # -- arguments and def-use edges ------------------------------------------------------------------
    @property
    def args(self) -> tuple:
        """Positional arguments: nodes and plain values. Assigning updates the def-use edges."""
        return self._args

    @args.setter
    def args(self, value):
        self._update_args_kwargs(map_arg(value, lambda n: n), self._kwargs)

    @property
    def kwargs(self) -> dict:
        """Keyword arguments. Assigning updates the def-use edges."""
        return self._kwargs

    @kwargs.setter
    def kwargs(self, value):
        self._update_args_kwargs(self._args, map_arg(value, lambda n: n))

    @property
    def all_input_nodes(self) -> list:
        """Every node this node reads, in order of first appearance in ``args`` then ``kwargs``."""
        return list(self._input_nodes)

    def update_arg(self, idx: int, arg: Argument) -> None:
        """Set ``args[idx]`` to ``arg``."""
        args = list(self._args)
        args[idx] = arg
        self.args = tuple(args)

    def update_kwarg(self, key: str, arg: Argument) -> None:
        """Set ``kwargs[key]`` to ``arg``."""
        kwargs = dict(self._kwargs)
        kwargs[key] = arg
        self.kwargs = kwargs

    def _update_args_kwargs(self, new_args, new_kwargs):
        if not isinstance(new_args, tuple):
            new_args = tuple(new_args) if isinstance(new_args, list) else (new_args,)
        if not isinstance(new_kwargs, dict):
            raise TypeError(f"node {self.name!r}: kwargs must be a dict, got {type(new_kwargs).__name__}")
        map_aggregate((new_args, new_kwargs), lambda v: _check_argument(v, f"node {self.name!r}"))
        for old in self._input_nodes:
            old.users.pop(self, None)
        self._args = new_args
        self._kwargs = new_kwargs
        self._input_nodes = {}
        map_arg(new_args, self._input_nodes.setdefault)
        map_arg(new_kwargs, self._input_nodes.setdefault)
        for new in self._input_nodes:
            if self.graph is not None and new.graph is not self.graph:
                raise RuntimeError(f"node {self.name!r} uses {new.name!r}, which belongs to a different graph")
            new.users.setdefault(self)

    def replace_all_uses_with(self, replace_with: "Node", delete_user_cb: Callable[["Node"], bool] = lambda u: True,
                              *, propagate_meta: bool = False) -> list:
        """Make every user of this node read ``replace_with`` instead; returns the users changed.

        ``delete_user_cb(user)`` may return False to leave a user alone.

        Example::

            >>> relu_node.replace_all_uses_with(gelu_node)   # doctest: +SKIP
        """
        if propagate_meta:
            if replace_with.meta:
                raise RuntimeError("propagate_meta=True needs a replacement node with empty meta")
            replace_with.meta.update(self.meta)
        changed = []
        for user in list(self.users):
            if user is replace_with or not delete_user_cb(user):
                continue
            user.replace_input_with(self, replace_with)
            changed.append(user)
        return changed

    def replace_input_with(self, old_input: "Node", new_input: Argument) -> None:
        """Replace every occurrence of ``old_input`` in this node's args and kwargs by ``new_input``.

        Example::

            >>> add_node.replace_input_with(x, y)   # add(x, 1) becomes add(y, 1)   # doctest: +SKIP
        """
        def swap(n):
            return new_input if n is old_input else n
        self._update_args_kwargs(map_arg(self._args, swap), map_arg(self._kwargs, swap))

    # -- semantics ------------------------------------------------------------------------------------
    def is_impure(self) -> bool:
        """Whether removing this node could change behaviour even if nothing uses its value."""
        if self.op in ("placeholder", "output"):
            return True
        if self.op == "call_function":
            return self.target in _SIDE_EFFECTFUL_FUNCTIONS or getattr(self.target, "_fx_impure", False)
        if self.op == "call_method":
            # In-place tensor methods (add_, copy_, ...) mutate their input.
            return isinstance(self.target, str) and self.target.endswith("_") and not self.target.endswith("__")
        if self.op == "call_module" and self.graph is not None and self.graph.owning_module is not None:
            try:
                module = self.graph.owning_module.get_submodule(self.target)
            except (AttributeError, KeyError):
                return False
            return bool(getattr(module, "_is_impure", False))
        return False

    # -- printing -------------------------------------------------------------------------------------
    def format_node(self, placeholder_names: list | None = None, maybe_return_typename: list | None = None) -> str:
        """One line as ``print(graph)`` shows it: ``%name : [num_users=N] = op[target=...](args = ..., kwargs = ...)``."""
        if self.op == "output":
            return f"return {_format_arg(self.args[0]).replace('%', '')}"
        head = f"%{self.name} : [num_users={len(self.users)}] = {self.op}[target={_format_target(self)}]"
        if self.op in ("placeholder", "get_attr"):
            if self.op == "placeholder" and self.args:
                return f"{head}(default={_format_arg(self.args[0])})"
            return head
        return f"{head}(args = {_format_arg(self.args)}, kwargs = {_format_arg(self.kwargs)})"

    def __repr__(self):
        return self.name

    def __setattr__(self, key, value):
        if key == "name" and "name" in self.__dict__ and self.graph is not None:
            # Renaming keeps names unique and valid: the graph's namespace decides.
            old = self.__dict__["name"]
            if value != old:
                value = self.graph._graph_namespace.rename(old, value)
        object.__setattr__(self, key, value)


def _format_target(node: Node) -> str:
    if node.op == "call_function":
        from corenn.fx.graph import _qualified_name
        return _qualified_name(node.target)
    return str(node.target)


def _format_arg(arg, max_list_len: int = 1_000_000) -> str:
    if isinstance(arg, Node):
        return "%" + arg.name
    if isinstance(arg, tuple):
        items = ", ".join(_format_arg(a) for a in arg)
        return f"({items},)" if len(arg) == 1 else f"({items})"
    if isinstance(arg, list):
        return "[" + ", ".join(_format_arg(a) for a in arg) + "]"
    if isinstance(arg, dict):
        return "{" + ", ".join(f"{k}: {_format_arg(v)}" for k, v in arg.items()) + "}"
    if isinstance(arg, slice):
        return f"slice({_format_arg(arg.start)}, {_format_arg(arg.stop)}, {_format_arg(arg.step)})"
    if isinstance(arg, (types.FunctionType, types.BuiltinFunctionType)):
        from corenn.fx.graph import _qualified_name
        return _qualified_name(arg)
    return str(arg)


