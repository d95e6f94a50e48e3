"""Symbolic tracing: run a module's ``forward`` on :class:`Proxy` values and record what happens as a Graph.

Example::

    >>> import corenn
    >>> from corenn import nn
    >>> class M(nn.Module):
    ...     def __init__(self):
    ...         super().__init__()
    ...         self.linear = nn.Linear(4, 5)
    ...     def forward(self, x):
    ...         return corenn.relu(self.linear(x)) + 1
    >>> gm = corenn.fx.symbolic_trace(M())
    >>> [n.op for n in gm.graph.nodes]
    ['placeholder', 'call_module', 'call_function', 'call_function', 'output']
"""
from __future__ import annotations

import builtins
import functools
import inspect
import math
import sys
import types
from typing import Any, Callable

from corenn.fx.graph import Graph
from corenn.fx.node import Node, _SIDE_EFFECTFUL_FUNCTIONS, map_aggregate
from corenn.fx.proxy import Proxy, TraceError, describe_user_frame, user_frame

__all__ = ["Tracer", "symbolic_trace", "wrap", "TraceError"]

# Python's built-in containers of layers: traced through, never leaves.
_CONTAINERS = {"Sequential", "ModuleList", "ModuleDict", "ParameterList", "ParameterDict"}

# (globals dict, name) pairs registered by ``corenn.fx.wrap``: patched for the duration of each trace.
_wrapped_fns_to_patch: list[tuple[dict, str]] = []


def wrap(fn_or_name):
    """Record calls to a function as one ``call_function`` node instead of tracing through it.

    Call it at module scope, with the function or its name (``wrap("len")`` also works
    for builtins). Use it for functions with control flow on their inputs, or that
    should stay opaque in the graph.

    Example::

        # my_model.py
        import corenn.fx

        def clamp_rows(x, limit):          # data-dependent: cannot be traced through
            return x if x.shape[0] < limit else x[:limit]

        corenn.fx.wrap("clamp_rows")       # calls now become call_function[target=my_model.clamp_rows]
    """
    if not (callable(fn_or_name) or isinstance(fn_or_name, str)):
        raise TypeError(f"wrap(): expected a function or the name of one, got {type(fn_or_name).__name__}")
    name = fn_or_name if isinstance(fn_or_name, str) else fn_or_name.__name__
    caller = sys._getframe(1)
    if caller.f_code.co_name != "<module>":
        raise NotImplementedError("wrap() must be called at the top level of a module (it patches that module's "
                                  "global name during tracing)")
    _wrapped_fns_to_patch.append((caller.f_globals, name))
    return fn_or_name


def _find_proxy(args, kwargs):
    found = []

    def visit(value):
        if isinstance(value, Proxy) and not found:
            found.append(value)
        return value
    map_aggregate((args, kwargs), visit)
    return found[0] if found else None


def _assert_specialized(value, expected, name: str):
    """Guard that a ``concrete_args`` input still has the value the graph was traced with."""
    if not (value is expected or value == expected):
        raise ValueError(f"{name} has been specialized to have value {expected!r} but got {value!r}; trace again "
                         "with that value in concrete_args")
    return None


_assert_specialized._fx_impure = True
_SIDE_EFFECTFUL_FUNCTIONS.add(_assert_specialized)


class _Patcher:
    """Temporarily replaces attributes and global names; everything is restored on exit, even on error."""

    def __init__(self):
        self._undo: list[Callable[[], None]] = []
        self._seen: set = set()

    def patch_attr(self, owner, name: str, new):
        key = (id(owner), name)
        if key in self._seen:
            return
        self._seen.add(key)
        had = name in vars(owner)
        old = vars(owner).get(name)
        setattr(owner, name, new)
        self._undo.append(lambda: setattr(owner, name, old) if had else delattr(owner, name))

    def patch_global(self, globals_: dict, name: str, new):
        key = (id(globals_), name)
        if key in self._seen:
            return
        self._seen.add(key)
        had = name in globals_
        old = globals_.get(name)
        globals_[name] = new

        def undo():
            if had:
                globals_[name] = old
            else:
                globals_.pop(name, None)
        self._undo.append(undo)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        while self._undo:
            self._undo.pop()()


# -- proxy-aware corenn functions ------------------------------------------------------------------------
# During tracing each public corenn function gets a different code object that checks its arguments for
# proxies: the function object stays the same, so ``node.target is corenn.relu`` holds, and calls reach
# it whichever way it was imported (``corenn.relu``, ``from corenn import relu``, ``F.relu``).

_DISPATCH = "__corenn_fx_dispatch__"
_patched_functions: dict[int, tuple] = {}


def __corenn_fx_dispatch__(key, args, kwargs):
    func, original = _patched_functions[key]
    proxy = _find_proxy(args, kwargs)
    if proxy is not None:
        return proxy.tracer.create_proxy("call_function", func, args, kwargs)
    return original(*args, **kwargs)


def _patch_code(patcher: "_Patcher", func) -> bool:
    if not isinstance(func, types.FunctionType) or func.__closure__:
        return False
    code = func.__code__
    if _DISPATCH in code.co_names:  # already proxy-aware (a trace inside a trace)
        return True
    key = id(func)
    if (id(func), "__code__") in patcher._seen:
        return True
    original = types.FunctionType(code, func.__globals__, func.__name__, func.__defaults__, func.__closure__)
    original.__kwdefaults__ = func.__kwdefaults__
    new_code = _keyed_code(key, func.__name__, getattr(code, "co_qualname", func.__name__))
    _patched_functions[key] = (func, original)
    patcher.patch_global(func.__globals__, _DISPATCH, __corenn_fx_dispatch__)
    patcher._seen.add((id(func), "__code__"))
    func.__code__ = new_code

    def undo():
        func.__code__ = code
        _patched_functions.pop(key, None)
    patcher._undo.append(undo)
    return True


@functools.lru_cache(maxsize=None)
def _keyed_code(key: int, name: str, qualname: str):
    namespace: dict = {}
    exec(compile(f"def {name}(*args, **kwargs):\n    return {_DISPATCH}({key}, args, kwargs)\n",
                 f"<corenn.fx proxy-aware {qualname}>", "exec"), namespace)
    return namespace[name].__code__


def _leaf_rules():
    import corenn.plugins
    return corenn.plugins._contained_fx_leaf_rules()  # a rule that raises is detached, with a warning


class Tracer:
    """Turns a module or function into a :class:`~corenn.fx.Graph` by running it on proxies.

    Override ``is_leaf_module`` to choose which submodules appear as one
    ``call_module`` node; ``create_proxy`` / ``create_arg`` to customise nodes.
    ``autowrap_modules`` / ``autowrap_functions``: functions recorded as one
    ``call_function`` when the traced code calls them on a proxy by a global name
    (``from math import sqrt``).

    Example::

        >>> class KeepAll(corenn.fx.Tracer):
        ...     def is_leaf_module(self, m, qualified_name):
        ...         return True                       # every submodule stays a call_module
        >>> graph = KeepAll().trace(model)            # doctest: +SKIP
        >>> gm = corenn.fx.GraphModule(model, graph)  # doctest: +SKIP
    """

    def __init__(self, autowrap_modules: tuple = (math,), autowrap_functions: tuple = ()):
        self._autowrap_functions = {}
        self._autowrap_modules = tuple(autowrap_modules)
        for module in autowrap_modules:
            for name, value in vars(module).items():
                if not name.startswith("_") and callable(value) and not isinstance(value, type):
                    self._autowrap_functions[id(value)] = value
        for fn in autowrap_functions:
            self._autowrap_functions[id(fn)] = fn
        self.graph: Graph | None = None
        self.root = None
        self.submodule_paths: dict | None = None
        self.tensor_attrs: dict = {}

    # -- node and argument creation ------------------------------------------------------------------------
    def create_node(self, kind: str, target, args: tuple, kwargs: dict, name: str | None = None,
                    type_expr=None) -> Node:
        """Insert a node into the graph being built (hook point for subclasses)."""
        return self.graph.create_node(kind, target, args, kwargs, name, type_expr)

    def proxy(self, node: Node) -> Proxy:
        """Wrap a new node in a Proxy (override to use a Proxy subclass)."""
        return Proxy(node, self)

    def create_proxy(self, kind: str, target, args: tuple, kwargs: dict, name: str | None = None,
                     type_expr=None, proxy_factory_fn: Callable[[Node], Proxy] | None = None) -> Proxy:
        """Record one operation: convert ``args``/``kwargs`` with ``create_arg``, add the node, return its proxy.

        Example::

            >>> class Counting(corenn.fx.Tracer):
            ...     calls = 0
            ...     def create_proxy(self, kind, target, args, kwargs, *rest, **more):
            ...         Counting.calls += kind == "call_function"
            ...         return super().create_proxy(kind, target, args, kwargs, *rest, **more)
        """
        args_ = self.create_arg(args)
        kwargs_ = self.create_arg(kwargs)
        if not isinstance(args_, tuple) or not isinstance(kwargs_, dict):
            raise TypeError("create_proxy(): args must be a tuple and kwargs a dict")
        node = self.create_node(kind, target, args_, kwargs_, name, type_expr)
        if kind not in ("placeholder", "output"):
            frame = user_frame()
            if frame is not None:
                node.meta["stack_trace"] = describe_user_frame(frame)
        return proxy_factory_fn(node) if proxy_factory_fn is not None else self.proxy(node)

    def create_arg(self, a: Any):
        """Turn a value used in a traced call into something a node can hold.

        Proxies become their nodes; parameters and buffers of the root become
        ``get_attr`` nodes; other tensors are stored on the root as
        ``_tensor_constant<N>`` and read with ``get_attr``; containers are converted
        element by element; plain values stay as they are.
        """
        from corenn.tensor.tensor import Tensor
        if isinstance(a, Proxy):
            return a.node
        if isinstance(a, Node):
            return a
        if isinstance(a, tuple):
            converted = tuple(self.create_arg(e) for e in a)
            return type(a)(*converted) if hasattr(a, "_fields") else converted
        if isinstance(a, list):
            return [self.create_arg(e) for e in a]
        if isinstance(a, dict):
            result = {}
            for k, v in a.items():
                if not isinstance(k, str):
                    k = self.create_arg(k)
                    if isinstance(k, Node):
                        raise TypeError(f"keys may not be traced values: {k!r}")
                result[k] = self.create_arg(v)
            return result
        if isinstance(a, slice):
            return slice(self.create_arg(a.start), self.create_arg(a.stop), self.create_arg(a.step))
        if isinstance(a, range):
            return range(self.create_arg(a.start), self.create_arg(a.stop), self.create_arg(a.step))
        if isinstance(a, Tensor):
            name = self._tensor_name(a)
            if name is None:
                name = self._new_constant_name()
                object.__setattr__(self.root, name, a) if not hasattr(self.root, "register_buffer") \
                    else setattr(self.root, name, a)
                self.tensor_attrs[id(a)] = (a, name)
            return self.create_node("get_attr", name, (), {})
        from corenn.module.module import Module
        if isinstance(a, Module):
            raise TypeError(f"a module ({type(a).__name__}) cannot be an argument of a traced call; call it instead")
        if a is None or isinstance(a, (bool, int, float, complex, str, bytes, type(Ellipsis))):
            return a
        from corenn import _dtype
        from corenn.dispatch import device
        if isinstance(a, (_dtype.dtype, device, types.FunctionType, types.BuiltinFunctionType, type)):
            return a
        if isinstance(a, (set, frozenset)):
            raise TypeError(f"a {type(a).__name__} cannot be a node argument (unordered); use a tuple")
        # Anything else (enums, user objects) is kept by reference; generated code binds it as a global.
        return a

    def _tensor_name(self, t) -> str | None:
        entry = self.tensor_attrs.get(id(t))
        if entry is not None and entry[0] is t:
            return entry[1]
        return None

    def _new_constant_name(self) -> str:
        i = 0
        while hasattr(self.root, f"_tensor_constant{i}"):
            i += 1
        return f"_tensor_constant{i}"

    # -- modules --------------------------------------------------------------------------------------------
    def is_leaf_module(self, m, module_qualified_name: str) -> bool:
        """Whether submodule ``m`` is recorded as one ``call_module`` node rather than traced through.

        Rules contributed by plugins (``corenn.plugins.fx_leaf_module_rules()``) are
        asked first: any True makes a leaf, else any False traces through. Otherwise the
        standard corenn layers are leaves (containers such as ``Sequential`` are not)
        and user-defined modules are traced through.

        Example::

            >>> class KeepBlocks(corenn.fx.Tracer):
            ...     def is_leaf_module(self, m, name):
            ...         return isinstance(m, MyBlock) or super().is_leaf_module(m, name)
        """
        answers = {rule(m, module_qualified_name) for rule in _leaf_rules()}
        if True in answers:  # a plugin needs this module whole (e.g. a quantized layer): that wins
            return True
        if False in answers:
            return False
        module_name = type(m).__module__ or ""
        standard = module_name.startswith("corenn.nn") or module_name.startswith("corenn.module")
        return standard and type(m).__name__ not in _CONTAINERS

    def path_of_module(self, mod) -> str:
        """The dotted name of submodule ``mod`` in the root (``"layer1.0.conv"``).

        Raises NameError for a module that is not part of the root.
        """
        if self.submodule_paths is None:
            self.submodule_paths = {}
            for name, sub in self.root.named_modules(remove_duplicate=False):
                self.submodule_paths.setdefault(id(sub), name)
        path = self.submodule_paths.get(id(mod))
        if path is None:
            raise NameError(f"module {type(mod).__name__} is not installed as a submodule of the traced module; "
                            "assign it as an attribute in __init__ so it can be found")
        return path

    def call_module(self, m, forward: Callable, args: tuple, kwargs: dict):
        """Handle a call to submodule ``m``: a ``call_module`` node for a leaf, else trace into ``forward``."""
        module_qualified_name = self.path_of_module(m)
        if not self.is_leaf_module(m, module_qualified_name):
            fn = getattr(type(m).forward, "__globals__", None)
            if fn is not None:
                self._patch_globals(fn)
            return forward(*args, **kwargs)
        return self.create_proxy("call_module", module_qualified_name, args, kwargs)

    def getattr(self, attr: str, attr_val, parameter_proxy_cache: dict):
        """Attribute ``attr`` of a module was read during tracing: parameters and buffers become ``get_attr``."""
        from corenn.tensor.tensor import Tensor
        if not isinstance(attr_val, Tensor) or isinstance(attr_val, Proxy):
            return attr_val
        cached = parameter_proxy_cache.get(id(attr_val))
        if cached is not None:
            return cached
        name = self._state_names().get(id(attr_val))
        if name is None:
            return attr_val
        proxy = self.create_proxy("get_attr", name, (), {})
        parameter_proxy_cache[id(attr_val)] = proxy
        return proxy

    def _state_names(self) -> dict:
        if self._state_name_cache is None:
            names = {}
            for name, p in self.root.named_parameters(remove_duplicate=False):
                names.setdefault(id(p), name)
            for name, b in self.root.named_buffers(remove_duplicate=False):
                names.setdefault(id(b), name)
            self._state_name_cache = names
        return self._state_name_cache

    # -- tracing -------------------------------------------------------------------------------------------
    def create_args_for_root(self, root_fn: Callable, is_module: bool, concrete_args: dict | None):
        """Placeholders for ``root_fn``'s parameters (concrete values for those in ``concrete_args``)."""
        signature = inspect.signature(root_fn)
        parameters = list(signature.parameters.values())
        if is_module:
            parameters = parameters[1:]  # self
        concrete_args = dict(concrete_args or {})
        unknown = set(concrete_args) - {p.name for p in parameters}
        if unknown:
            raise TypeError(f"concrete_args names {sorted(unknown)}, which are not parameters of "
                            f"{getattr(root_fn, '__qualname__', root_fn)}{signature}")
        args, kwargs = [], {}
        for p in parameters:
            if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
                star = "*" if p.kind == p.VAR_POSITIONAL else "**"
                raise TraceError(f"cannot trace {getattr(root_fn, '__qualname__', root_fn)}{signature}: the number "
                                 f"of inputs behind {star}{p.name} is only known at call time. Give the inputs "
                                 "names, or wrap the function in one with a fixed signature")
            annotation = None if p.annotation is p.empty else p.annotation
            if p.name in concrete_args:
                value = concrete_args[p.name]
                # The traced value is the default, so ``gm(x)`` runs the specialised graph as traced.
                default = (value,) if value is None or isinstance(value, (bool, int, float, str)) else ()
                placeholder = self.create_proxy("placeholder", p.name, default, {}, type_expr=annotation)
                if value is None or isinstance(value, (bool, int, float, str)):
                    self.create_proxy("call_function", _assert_specialized,
                                      (placeholder, value, p.name), {})
                else:
                    placeholder.node.meta["concrete_value"] = value
                wrapped = value
            else:
                default = () if p.default is p.empty else (p.default,)
                wrapped = self.create_proxy("placeholder", p.name, default, {}, type_expr=annotation)
            if p.kind == p.KEYWORD_ONLY:
                kwargs[p.name] = wrapped
            else:
                args.append(wrapped)
        return args, kwargs

    def _patch_globals(self, globals_: dict):
        patcher = self._patcher
        for name, value in list(globals_.items()):
            wrapper = self._function_wrappers.get(id(value))
            if wrapper is not None and wrapper[0] is value:
                patcher.patch_global(globals_, name, wrapper[1])
            elif id(value) in self._autowrap_functions and self._autowrap_functions[id(value)] is value:
                patcher.patch_global(globals_, name, self._make_wrapper(value))

    def _make_wrapper(self, original):
        tracer = self

        @functools.wraps(original)
        def wrapper(*args, **kwargs):
            proxy = _find_proxy(args, kwargs)
            if proxy is not None:
                return proxy.tracer.create_proxy("call_function", original, args, kwargs)
            return original(*args, **kwargs)
        wrapper._fx_original = original
        wrapper._fx_tracer = tracer
        return wrapper

    def _install_patches(self, root_fn, autowrap_module_attributes: bool = True):
        """Patch Module.__call__/__getattr__, the corenn and nn.functional functions, and wrapped globals."""
        import corenn
        from corenn.module.module import Module
        from corenn.tensor.tensor import Tensor
        patcher = self._patcher
        tracer = self
        original_call = Module.__call__
        original_getattr = Module.__getattr__
        parameter_proxy_cache: dict = {}

        def module_call_wrapper(mod, *args, **kwargs):
            def forward(*a, **k):
                return original_call(mod, *a, **k)
            return tracer.call_module(mod, forward, args, kwargs)

        def module_getattr_wrapper(mod, attr):
            return tracer.getattr(attr, original_getattr(mod, attr), parameter_proxy_cache)

        patcher.patch_attr(Module, "__call__", module_call_wrapper)
        patcher.patch_attr(Module, "__getattr__", module_getattr_wrapper)

        # corenn.X and corenn.nn.functional.X record a call_function when given a proxy.
        namespaces = [corenn]
        try:
            import corenn.nn.functional as functional
            namespaces.append(functional)
        except ImportError:
            pass
        for namespace in namespaces:
            for name, value in list(vars(namespace).items()):
                if name.startswith("_") or not isinstance(value, (types.FunctionType, types.BuiltinFunctionType)):
                    continue
                if not _patch_code(patcher, value):
                    # A builtin or a closure cannot change its code: patch the namespace name instead.
                    entry = self._function_wrappers.get(id(value))
                    if entry is None:
                        entry = self._function_wrappers[id(value)] = (value, self._make_wrapper(value))
                    patcher.patch_attr(namespace, name, entry[1])

        # ``tensor + proxy``: a Tensor operator must step aside so Python asks the proxy's reflected one.
        for dunder in ("__add__", "__radd__", "__sub__", "__rsub__", "__mul__", "__rmul__", "__truediv__",
                       "__rtruediv__", "__floordiv__", "__rfloordiv__", "__mod__", "__rmod__", "__pow__",
                       "__rpow__", "__matmul__", "__rmatmul__", "__and__", "__rand__", "__or__", "__ror__",
                       "__xor__", "__rxor__", "__lshift__", "__rshift__", "__eq__", "__ne__", "__lt__", "__le__",
                       "__gt__", "__ge__"):
            method = getattr(Tensor, dunder, None)
            if method is None:
                continue
            patcher.patch_attr(Tensor, dunder, _defer_to_proxy(method))

        # Functions registered with corenn.fx.wrap.
        for globals_, name in _wrapped_fns_to_patch:
            original = globals_.get(name, getattr(builtins, name, None))
            if original is None:
                continue
            patcher.patch_global(globals_, name, self._make_wrapper(original))
        fn_globals = getattr(root_fn, "__globals__", None)
        if fn_globals is not None:
            self._patch_globals(fn_globals)
        # ``math.sqrt(d)`` with ``d`` from ``x.shape``: record it too (PyTorch only catches ``sqrt(d)``).
        if autowrap_module_attributes:
            for module in self._autowrap_modules:
                for name, value in list(vars(module).items()):
                    if id(value) in self._autowrap_functions and self._autowrap_functions[id(value)] is value:
                        patcher.patch_attr(module, name, self._make_wrapper(value))

    def trace(self, root, concrete_args: dict | None = None) -> Graph:
        """Trace ``root`` (a Module or a function) and return the recorded Graph.

        Example::

            >>> graph = corenn.fx.Tracer().trace(model)    # doctest: +SKIP
            >>> gm = corenn.fx.GraphModule(model, graph)   # doctest: +SKIP
        """
        from corenn.module.module import Module
        if isinstance(root, Module):
            self.root = root
            fn = type(root).forward
            if fn is getattr(Module, "forward", None):
                raise NotImplementedError(f"Module [{type(root).__name__}] is missing the required \"forward\" "
                                          "function, so it cannot be traced")
            is_module = True
        elif callable(root):
            self.root = Module()
            fn = root
            is_module = False
        else:
            raise TypeError(f"symbolic_trace() expects a Module or a function, got {type(root).__name__}")
        self.graph = Graph(tracer_cls=type(self))
        self.submodule_paths = None
        self._state_name_cache = None
        self.tensor_attrs = {}
        self._function_wrappers: dict = {}
        with _Patcher() as self._patcher:
            args, kwargs = self.create_args_for_root(fn, is_module, concrete_args)
            self._install_patches(fn)
            result = fn(root, *args, **kwargs) if is_module else fn(*args, **kwargs)
            return_type = getattr(fn, "__annotations__", {}).get("return")
            self.create_node("output", "output", (self.create_arg(result),), {}, type_expr=return_type)
        self._patcher = None
        return self.graph


def _defer_to_proxy(method):
    @functools.wraps(method)
    def wrapper(self, other):
        if isinstance(other, Proxy):
            return NotImplemented
        return method(self, other)
    return wrapper


class GraphAppendingTracer(Tracer):
    """A tracer that appends to an existing graph, at its current insertion point (``torch.fx.proxy``'s).

    For graph transforms written with proxies: wrap a node in ``Proxy(node)`` (which uses this
    tracer on ``node.graph``) and call ops on it; each op becomes a node inserted where the graph
    inserts now.

    Example::

        >>> gm = corenn.fx.symbolic_trace(model)                          # doctest: +SKIP
        >>> node = next(n for n in gm.graph.nodes if n.op == "call_module")   # doctest: +SKIP
        >>> with gm.graph.inserting_after(node):                          # doctest: +SKIP
        ...     doubled = corenn.fx.Proxy(node, GraphAppendingTracer(gm.graph)) * 2
    """

    def __init__(self, graph: Graph):
        super().__init__()
        self.graph = graph


def symbolic_trace(root, concrete_args: dict | None = None):
    """Trace a module or function into a :class:`~corenn.fx.GraphModule`.

    ``concrete_args`` fixes some inputs to values (e.g. a flag that picks a branch);
    the graph is specialised to them and checks them when it runs.

    Example::

        >>> import corenn
        >>> def f(x, y):
        ...     return corenn.relu(x) + y.sum(dim=0)
        >>> gm = corenn.fx.symbolic_trace(f)
        >>> print(gm.code)   # doctest: +SKIP
        import corenn
        <BLANKLINE>
        <BLANKLINE>
        def forward(self, x, y):
            relu = corenn.relu(x);  x = None
            sum_1 = y.sum(dim = 0);  y = None
            add = relu + sum_1;  relu = sum_1 = None
            return add
    """
    from corenn.fx.graph_module import GraphModule
    tracer = Tracer()
    graph = tracer.trace(root, concrete_args)
    from corenn.module.module import Module
    name = type(root).__name__ if isinstance(root, Module) else getattr(root, "__name__", "GraphModule")
    if not name.isidentifier():  # a lambda's "<lambda>"
        name = "GraphModule"
    return GraphModule(tracer.root, graph, name)
