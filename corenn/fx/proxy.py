"""``Proxy``: the stand-in value that records, as graph nodes, everything done to it during tracing.

Example::

    >>> import corenn
    >>> def f(x):
    ...     return (x + 1).relu().sum(dim=-1)
    >>> print(corenn.fx.symbolic_trace(f).code.strip().splitlines()[-1])
        return sum_1
"""
from __future__ import annotations

import dis
import operator
import os
import sys

__all__ = ["Proxy", "Attribute", "TraceError", "user_frame", "describe_user_frame"]

_FX_DIR = os.path.dirname(os.path.abspath(__file__))
_CORENN_DIR = os.path.dirname(_FX_DIR)


class TraceError(ValueError):
    """Symbolic tracing met something it cannot record (a Proxy deciding control flow, ``len(proxy)``, ...).

    The message names the offending source line and how to get around it:
    ``concrete_args`` to fix the deciding input, or making the module a leaf.
    ``ValueError`` subclass, as PyTorch's ``torch.fx.proxy.TraceError``.

    Example::

        >>> def f(x):
        ...     return x if x.sum() > 0 else -x
        >>> corenn.fx.symbolic_trace(f)   # doctest: +SKIP
        Traceback (most recent call last):
        corenn.fx.proxy.TraceError: symbolically traced variables cannot be used as inputs to control flow ...
    """


def user_frame():
    """The innermost stack frame outside corenn's own code (where the user's forward is running)."""
    frame = sys._getframe(1)
    while frame is not None:
        filename = os.path.abspath(frame.f_code.co_filename)
        if not filename.startswith(_CORENN_DIR + os.sep):
            return frame
        frame = frame.f_back
    return None


def describe_user_frame(frame=None) -> str:
    """``File "f.py", line 12, in forward: <source line>`` for a frame (the user frame by default)."""
    frame = frame or user_frame()
    if frame is None:
        return "<unknown location>"
    import linecache
    code = frame.f_code
    line = linecache.getline(code.co_filename, frame.f_lineno).strip()
    where = f'File "{code.co_filename}", line {frame.f_lineno}, in {code.co_name}'
    return f"{where}: {line}" if line else where


def _control_flow_error(what: str) -> TraceError:
    return TraceError(
        f"symbolically traced variables cannot be used as inputs to control flow ({what}) at "
        f"{describe_user_frame()}. The value is only known when the model runs, so one traced graph cannot "
        "record the branch. Pass the input that decides it through concrete_args "
        "(corenn.fx.symbolic_trace(module, concrete_args={'flag': True})), or make the module that contains "
        "this code a leaf (override Tracer.is_leaf_module) so it is called rather than traced through.")


class Proxy:
    """A value being traced: operators, tensor methods and ``corenn`` functions applied to it become nodes.

    ``proxy.node`` is the :class:`~corenn.fx.Node` that produces it.

    Example::

        >>> import corenn, operator
        >>> tracer = corenn.fx.Tracer()
        >>> tracer.graph = corenn.fx.Graph()
        >>> x = tracer.create_proxy("placeholder", "x", (), {})
        >>> y = (x * 2).exp()
        >>> y.node.op, y.node.target
        ('call_method', 'exp')
    """

    def __init__(self, node, tracer=None):
        if tracer is None:  # a proxy made by hand in a graph transform: its ops go into the node's graph
            from corenn.fx.tracer import GraphAppendingTracer
            tracer = GraphAppendingTracer(node.graph)
        self.tracer = tracer
        self.node = node

    def __repr__(self):
        return f"Proxy({self.node.name})"

    def __getattr__(self, name):
        # Called only for names not found normally: ``x.relu`` (a method to call) or ``x.shape`` (a value).
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)
        return Attribute(self, name)

    def __call__(self, *args, **kwargs):
        return self.tracer.create_proxy("call_method", "__call__", (self,) + args, kwargs)

    def __iter__(self):
        # ``a, b = proxy`` unpacks a known number of values: read it from the caller's bytecode.
        frame = sys._getframe(1)
        count = _unpack_count(frame)
        if count is not None:
            return iter([self[i] for i in range(count)])
        raise TraceError(f"Proxy object cannot be iterated (at {describe_user_frame()}): its length is only known "
                         "when the model runs. Unpack a fixed number of values (a, b = x) or index it (x[0]); "
                         "or pass the input through concrete_args.")

    def __bool__(self):
        raise _control_flow_error("the truth value of a traced value was asked for")

    def __len__(self):
        raise TraceError(f"'len' is not supported in symbolic tracing by default (at {describe_user_frame()}). "
                         "If you want this call to be recorded, call corenn.fx.wrap('len') at module scope, or use "
                         "x.size(0) / x.shape[0].")

    def _no_conversion(self, kind):
        raise TraceError(f"a traced value cannot be converted to {kind} (at {describe_user_frame()}): its value is "
                         "only known when the model runs. Pass the input through concrete_args or make the "
                         "module a leaf.")

    def __int__(self):
        self._no_conversion("int")

    def __float__(self):
        self._no_conversion("float")

    def __index__(self):
        self._no_conversion("an index")

    def __complex__(self):
        self._no_conversion("complex")

    def keys(self):
        return self.tracer.create_proxy("call_method", "keys", (self,), {})

    def __hash__(self):
        return id(self)

    def __deepcopy__(self, memo):
        # A proxy stands for a value not computed yet; copying it copies the reference, as PyTorch does.
        return self

    def __setitem__(self, key, value):
        self.tracer.create_proxy("call_function", operator.setitem, (self, key, value), {})


class Attribute(Proxy):
    """``proxy.name``: becomes ``call_method name`` when called, or ``getattr(proxy, name)`` when used as a value."""

    def __init__(self, root: Proxy, attr: str):
        self.root = root
        self.attr = attr
        self.tracer = root.tracer
        self._node = None

    @property
    def node(self):
        # Created only when the attribute is used as a value: ``x.relu()`` needs no getattr node.
        if self._node is None:
            self._node = self.tracer.create_proxy("call_function", getattr, (self.root, self.attr), {}).node
        return self._node

    def __call__(self, *args, **kwargs):
        return self.tracer.create_proxy("call_method", self.attr, (self.root,) + args, kwargs)


def _unpack_count(frame):
    """If ``frame`` is executing ``UNPACK_SEQUENCE n`` (``a, b = proxy``), return n."""
    for inst in dis.get_instructions(frame.f_code):
        if inst.offset == frame.f_lasti:
            return inst.argval if inst.opname == "UNPACK_SEQUENCE" else None
    return None


# -- operators: ``x + y`` records ``call_function operator.add`` ---------------------------------------

_BINARY = ["add", "sub", "mul", "truediv", "floordiv", "mod", "pow", "matmul", "lshift", "rshift", "and_",
           "or_", "xor", "getitem"]
_COMPARE = ["eq", "ne", "lt", "le", "gt", "ge"]
_UNARY = ["neg", "pos", "invert", "abs"]


def _dunder(name):
    return f"__{name.rstrip('_')}__"


def _make_binary(target):
    def method(self, other):
        return self.tracer.create_proxy("call_function", target, (self, other), {})
    return method


def _make_reflected(target):
    def method(self, other):
        return self.tracer.create_proxy("call_function", target, (other, self), {})
    return method


def _make_unary(target):
    def method(self):
        return self.tracer.create_proxy("call_function", target, (self,), {})
    return method


for _name in _BINARY + _COMPARE:
    _target = getattr(operator, _name)
    _method = _make_binary(_target)
    _method.__name__ = _dunder(_name)
    setattr(Proxy, _dunder(_name), _method)
for _name in _BINARY:
    if _name == "getitem":
        continue
    _method = _make_reflected(getattr(operator, _name))
    _method.__name__ = "__r" + _dunder(_name)[2:]
    setattr(Proxy, _method.__name__, _method)
for _name in _UNARY:
    _method = _make_unary(getattr(operator, _name))
    _method.__name__ = _dunder(_name)
    setattr(Proxy, _dunder(_name), _method)
Proxy.__hash__ = lambda self: id(self)  # defining __eq__ removed it; proxies are keyed by identity
del _name, _target, _method


def __getattr__(name):
    # GraphAppendingTracer subclasses Tracer, whose module imports this one: defined there, found here too,
    # where torch.fx.proxy has it.
    if name == "GraphAppendingTracer":
        from corenn.fx.tracer import GraphAppendingTracer
        return GraphAppendingTracer
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
