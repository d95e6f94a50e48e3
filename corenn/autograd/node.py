"""The autograd graph: ops as nodes, how an op runs, and the backward walk.

An op is an :class:`Op` subclass whose ``forward`` and ``backward`` sit side by side
and work on raw arrays of the backend's array module ``ctx.xp``. Running an op
(:func:`run`) finds the kernel registered for (op name, device type), calls its
forward, and -- when grad mode is on and an input requires grad -- keeps the
kernel instance as the output's ``grad_fn``: the instance *is* the graph node and
the ``ctx`` that holds what backward needs.

Edges point from a node to what produced each input: ``(node, output_nr)`` for a
computed tensor, ``(leaf_tensor, 0)`` for a leaf that requires grad (the leaf
itself stands where PyTorch has an ``AccumulateGrad`` node), ``None`` otherwise.
"""
from __future__ import annotations

import itertools
import threading
import weakref
from collections import OrderedDict
from heapq import heappop as _heappop, heappush as _heappush

from corenn import dispatch as _dispatch



class GradMode(threading.local):
    """The calling thread's grad mode: PyTorch keeps it per thread, and so does corenn.

    ``enabled`` says whether ops record a graph (``corenn.is_grad_enabled()``),
    ``inference`` whether ``inference_mode`` is on. The class-level values are what
    every thread starts with, so a thread started inside ``no_grad()`` records.
    Read the flags here; change them only through :mod:`corenn.autograd.grad_mode`
    (``no_grad``, ``set_grad_enabled``, ...), which also keep the hot path's
    shortcut (``_set_grad_enabled``) true.

    Example::

        >>> from corenn.autograd.node import grad_mode
        >>> grad_mode.enabled
        True
    """

    enabled = True
    inference = False
    _off_token = None  # an _OffToken while this thread's grad mode is off


#: The one :class:`GradMode` object (each thread sees its own values).
grad_mode = GradMode()

# The hot path's shortcut: True while no thread has grad mode off. A thread-local attribute
# read costs several times a global one, so ops read ``grad_mode.enabled`` only while some
# thread is in no_grad(); code that never leaves grad mode pays nothing for per-thread state.
_grad_on_in_all_threads = True
_threads_off: set = set()  # id() of the _OffToken of each thread whose grad mode is off
_threads_off_lock = threading.Lock()


class _OffToken:
    """Held by a thread's :data:`grad_mode` while its grad mode is off.

    A thread that ends in that state drops its thread-local values, and with them this
    token, which then removes itself. (Without the lock, so that garbage collection can run
    it anywhere; removing only ever shrinks the set, and the next switch recomputes the flag.)
    """

    __slots__ = ()

    def __del__(self, _discard=_threads_off.discard):  # bound now: may run at interpreter exit
        _discard(id(self))


def _set_grad_enabled(enabled: bool) -> None:
    """Turn graph recording on or off in the calling thread (the grad-mode switches call this).

    Keeps :data:`grad_mode` and the hot path's shortcut in step: a thread's token is
    counted before its flag goes off and uncounted after it comes back on, so
    ``_grad_on_in_all_threads`` is never True while any thread has grad mode off.
    """
    global _grad_on_in_all_threads
    mode = grad_mode
    if enabled:
        mode.enabled = True
        token = mode._off_token
        if token is not None:
            with _threads_off_lock:
                mode._off_token = None
                _threads_off.discard(id(token))
                _grad_on_in_all_threads = not _threads_off
    else:
        if mode._off_token is None:
            token = _OffToken()
            with _threads_off_lock:
                _threads_off.add(id(token))
                _grad_on_in_all_threads = False
            mode._off_token = token
        mode.enabled = False


def __getattr__(name):
    # The flags were module globals before grad mode became per thread; reading the old names
    # still answers for the calling thread. (Assigning them has no effect: use corenn.set_grad_enabled.)
    if name == "GRAD_ENABLED":
        return grad_mode.enabled
    if name == "INFERENCE_MODE":
        return grad_mode.inference
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


_tables = _dispatch.kernels._resolved
_observers = _dispatch.observers
_FREED = object()
_next_sequence_nr = itertools.count(1).__next__  # orders nodes for the backward walk


class Node:
    """A recorded op: its edges to the inputs' producers and its saved state (``grad_fn``).

    Nodes are created once per recorded op, so they have no ``__init__``: every field
    has a class-level default and instances only store what they set.
    """

    #: Name shown as ``grad_fn=<AddBackward0>``; subclasses set it.
    grad_fn_name = "Backward"
    num_outputs = 1
    next_edges = ()
    saved = ()
    _tensor_hooks = None
    _pre_hooks = None
    _post_hooks = None
    has_hooks = False  # one test on the backward hot path instead of three
    sequence_nr = 0  # creation order; recorded nodes get theirs in run()

    # -- the ctx side ---------------------------------------------------------------
    def save_for_backward(self, *arrays):
        """Keep arrays for backward, where they are ``ctx.saved``; freed after use unless retain_graph.

        The engine checks that they are still there before it calls ``backward``, so
        kernels read ``ctx.saved`` directly; ``saved_arrays`` is the checked accessor
        for anyone else.
        """
        self.saved = arrays

    @property
    def saved_arrays(self):
        saved = self.saved
        if saved is _FREED:
            raise RuntimeError(
                "Trying to backward through the graph a second time (or directly access saved tensors after "
                "they have already been freed). Saved intermediate values of the graph are freed when you call "
                ".backward() or autograd.grad(). Specify retain_graph=True if you need to backward through the "
                "graph a second time or if you need to access saved tensors after calling backward.")
        return saved

    @property
    def needs_input_grad(self) -> tuple:
        """One bool per positional input of ``forward``: True when that input's gradient is wanted.

        PyTorch's name, read in ``backward`` to skip gradients nobody asked for; computed
        from ``next_edges`` when read, so recording a node costs nothing extra::

            @staticmethod
            def backward(ctx, grad):
                grad_a = grad * 2 if ctx.needs_input_grad[0] else None
                grad_b = grad * 3 if ctx.needs_input_grad[1] else None
                return grad_a, grad_b
        """
        edges = self.next_edges
        # Most ops have one to three inputs: spelled out, reading this costs backward about as much
        # as reading next_edges itself.
        n = len(edges)
        if n == 2:
            return (edges[0] is not None, edges[1] is not None)
        if n == 1:
            return (edges[0] is not None,)
        if n == 3:
            return (edges[0] is not None, edges[1] is not None, edges[2] is not None)
        return tuple([edge is not None for edge in edges])

    # -- the graph side -------------------------------------------------------------
    def name(self) -> str:
        return self.grad_fn_name

    @property
    def next_functions(self):
        """``((node_or_AccumulateGrad, output_nr), ...)`` per input, as PyTorch shows it."""
        result = []
        for edge in self.next_edges:
            if edge is None:
                result.append((None, 0))
            elif edge[1] >= 0:
                result.append(edge)
            else:
                result.append((AccumulateGrad(edge[0]), 0))
        return tuple(result)

    def register_hook(self, hook):
        """``hook(grad_inputs, grad_outputs) -> new grad_inputs or None``, run after this node's backward."""
        return self._add_hook("_post_hooks", hook)

    def register_prehook(self, hook):
        """``hook(grad_outputs) -> new grad_outputs or None``, run before this node's backward."""
        return self._add_hook("_pre_hooks", hook)

    def _add_hook(self, attribute, hook):
        from corenn.utils.hooks import RemovableHandle
        self.has_hooks = True
        hooks = getattr(self, attribute)
        if hooks is None:
            hooks = OrderedDict()
            setattr(self, attribute, hooks)
        handle = RemovableHandle(hooks)
        hooks[handle.id] = hook
        return handle

    def __repr__(self):
        return f"<{self.grad_fn_name} object at {id(self):#x}>"


class AccumulateGrad:
    """What PyTorch shows as the node that accumulates into a leaf's ``.grad`` (display only)."""

    def __init__(self, variable):
        self.variable = variable
        self.next_functions = ()

    def name(self):
        return "torch::autograd::AccumulateGrad"

    def __repr__(self):
        return f"<AccumulateGrad object at {id(self):#x}>"


class Op(Node):
    """Base of every kernel: ``forward(ctx, *arrays, **params)`` and ``backward(ctx, grad_output)``.

    ``forward`` returns an array (or a tuple of arrays when ``num_outputs > 1``);
    ``backward`` returns one gradient array (or ``None``) per positional input.
    ``differentiable = False`` marks ops whose outputs never require grad
    (comparisons, argmax, ...). Non-array state for backward (shapes, dims) goes on
    ``ctx`` as attributes; arrays go through ``ctx.save_for_backward``.
    """

    differentiable = True
    #: for multi-output ops: which outputs carry gradients
    differentiable_outputs = None
    #: True for kernels that write into their inputs (batch_norm's running statistics, the
    #: optimizer updates): the first-call check of a plugin kernel then runs the core kernel on copies
    mutates_inputs = False

    @staticmethod
    def forward(ctx, *arrays, **params):
        raise NotImplementedError

    @staticmethod
    def backward(ctx, grad_output):
        raise NotImplementedError


def _not_a_tensor(op_name, value):
    from corenn._argcheck import not_a_tensor  # off the hot path: only once a call has failed
    return not_a_tensor("input", value, op_name)


def _device_mismatch(op_name, first, other):
    return RuntimeError(f"Expected all tensors to be on the same device, but found at least two devices, "
                        f"{first} and {other}! (when calling {op_name})")


def run(op_name: str, *inputs, **params):
    """Run op ``op_name`` on ``inputs`` (tensors and plain values) and wrap the result.

    This is the per-op hot path: keep it lean. The kernel comes from the resolved
    table for the first tensor input's device type.
    """
    device = None
    needs_grad = False
    arrays = []
    edges = []  # where each input's gradient goes (see module docstring)
    for x in inputs:
        if isinstance(x, _Tensor):
            if device is None:
                device = x._device
            elif x._device is not device:
                return _run_mixed_devices(op_name, inputs, params)
            arrays.append(x._data)
            if x._requires_grad:
                needs_grad = True
                fn = x._grad_fn
                edges.append((x, -1) if fn is None else (fn, x._output_nr))
            else:
                edges.append(None)
        else:
            arrays.append(x)
            edges.append(None)
    if device is None:
        raise _not_a_tensor(op_name, inputs[0] if inputs else None)
    try:
        kernel = _tables[device.type][op_name]
    except KeyError:
        kernel = _dispatch.kernels.resolve(op_name, device.type)
    ctx = kernel()
    ctx.xp = device._xp
    try:
        if _observers:
            out = _observed_forward(op_name, kernel, ctx, device, arrays, params, inputs)
        else:
            out = kernel.forward(ctx, *arrays, **params)
    except Exception as error:
        _restate(op_name, inputs, error)
        raise
    records = needs_grad and (_grad_on_in_all_threads or grad_mode.enabled) and kernel.differentiable
    if kernel.num_outputs != 1:
        if not records:
            return tuple([_make(o, device, None, 0) for o in out])
        ctx.next_edges = tuple(edges)
        ctx.sequence_nr = _next_sequence_nr()
        mask = kernel.differentiable_outputs
        return tuple([_make(o, device, ctx if mask is None or mask[i] else None, i) for i, o in enumerate(out)])
    # Single output: _make inlined, this runs once per op.
    if out.__class__ in _SCALAR_TYPES:
        out = _asarray(out)
    t = _new_tensor(_Tensor)
    t._data = out
    t._device = device
    t._output_nr = 0
    if records:
        ctx.next_edges = tuple(edges)
        ctx.sequence_nr = _next_sequence_nr()
        t._grad_fn = ctx
        t._requires_grad = True
    else:
        t._grad_fn = None
        t._requires_grad = False
    return t


# ``run`` unrolled for the two commonest shapes of call, a tensor with an optional second
# operand (a tensor or a Python scalar). Elementwise chains are dominated by Python
# bookkeeping, and skipping the generic loop and its lists saves ~0.35 us of ~1.4 us per op.
# Several outputs go through ``run``. With op observers a single-output op stays here and
# only its kernel call goes through ``_observed_forward``: the idle path tests as much as
# before (the observers, then the outputs, at two places instead of one).

def run1(op_name: str, a, **params):
    """``run(op_name, a, **params)`` for one tensor input."""
    try:
        device = a._device
    except AttributeError:
        raise _not_a_tensor(op_name, a) from None
    try:
        kernel = _tables[device.type][op_name]
    except KeyError:
        kernel = _dispatch.kernels.resolve(op_name, device.type)
    if kernel.num_outputs != 1:
        return run(op_name, a, **params)
    ctx = kernel()
    ctx.xp = device._xp
    try:
        if _observers:
            out = _observed_forward(op_name, kernel, ctx, device, [a._data], params, (a,))
        else:
            out = kernel.forward(ctx, a._data, **params)
    except Exception as error:
        _restate(op_name, (a,), error)
        raise
    if out.__class__ in _SCALAR_TYPES:
        out = _asarray(out)
    t = _new_tensor(_Tensor)
    t._data = out
    t._device = device
    t._output_nr = 0
    if a._requires_grad and (_grad_on_in_all_threads or grad_mode.enabled) and kernel.differentiable:
        fn = a._grad_fn
        ctx.next_edges = ((a, -1) if fn is None else (fn, a._output_nr),)
        ctx.sequence_nr = _next_sequence_nr()
        t._grad_fn = ctx
        t._requires_grad = True
    else:
        t._grad_fn = None
        t._requires_grad = False
    return t


def run2(op_name: str, a, b, **params):
    """``run(op_name, a, b, **params)`` for a tensor ``a`` and a tensor or plain value ``b``."""
    try:
        device = a._device
    except AttributeError:
        raise _not_a_tensor(op_name, a) from None
    b_is_tensor = isinstance(b, _Tensor)
    if b_is_tensor and b._device is not device:
        return _run_mixed_devices(op_name, (a, b), params)
    try:
        kernel = _tables[device.type][op_name]
    except KeyError:
        kernel = _dispatch.kernels.resolve(op_name, device.type)
    if kernel.num_outputs != 1:
        return run(op_name, a, b, **params)
    ctx = kernel()
    ctx.xp = device._xp
    try:
        if _observers:
            out = _observed_forward(op_name, kernel, ctx, device, [a._data, b._data if b_is_tensor else b], params,
                                    (a, b))
        else:
            out = kernel.forward(ctx, a._data, b._data if b_is_tensor else b, **params)
    except Exception as error:
        _restate(op_name, (a, b), error)
        raise
    if out.__class__ in _SCALAR_TYPES:
        out = _asarray(out)
    t = _new_tensor(_Tensor)
    t._data = out
    t._device = device
    t._output_nr = 0
    b_grad = b_is_tensor and b._requires_grad
    if (a._requires_grad or b_grad) and (_grad_on_in_all_threads or grad_mode.enabled) \
            and kernel.differentiable:
        edge_a = edge_b = None
        if a._requires_grad:
            fn = a._grad_fn
            edge_a = (a, -1) if fn is None else (fn, a._output_nr)
        if b_grad:
            fn = b._grad_fn
            edge_b = (b, -1) if fn is None else (fn, b._output_nr)
        ctx.next_edges = (edge_a, edge_b)
        ctx.sequence_nr = _next_sequence_nr()
        t._grad_fn = ctx
        t._requires_grad = True
    else:
        t._grad_fn = None
        t._requires_grad = False
    return t


def _run_mixed_devices(op_name, inputs, params):
    """Inputs on several devices: 0-dim cpu tensors act as scalars, as in PyTorch.

    They are moved to the other inputs' device (a recorded copy, so their gradient comes
    back to the cpu); any other mix of devices is an error. Off the hot path: only
    reached once the devices differ.
    """
    devices = []
    for x in inputs:
        if isinstance(x, _Tensor) and x._device not in devices and not (x._device.type == "cpu" and x._data.ndim == 0):
            devices.append(x._device)
    if len(devices) > 1:
        raise _device_mismatch(op_name, devices[0], devices[1])
    target = devices[0]
    moved = [x.to(target) if isinstance(x, _Tensor) and x._device is not target else x for x in inputs]
    return run(op_name, *moved, **params)


def attach(node: "Node", inputs) -> "Node":
    """Connect a hand-built node to the producers of ``inputs`` (for nodes made outside ``run``).

    Every recorded node needs its edges and a sequence number: the backward walk
    orders nodes by it.
    """
    node.next_edges = tuple([_edge(x) for x in inputs])
    node.sequence_nr = _next_sequence_nr()
    return node


# numpy's own exception types, as the builtin type PyTorch raises for the same failure
_RESTATED_TYPES = {"AxisError": IndexError, "DTypePromotionError": TypeError, "UFuncTypeError": RuntimeError,
                   "_UFuncNoLoopError": RuntimeError, "_UFuncOutputCastingError": RuntimeError,
                   "_UFuncInputCastingError": RuntimeError, "_UFuncBinaryResolutionError": RuntimeError}
_PLAIN_TYPES = (TypeError, ValueError, IndexError, RuntimeError)


def _restate(op_name, inputs, error):
    """Raise a clearer error for ``error``, raised by a kernel, or return to let it propagate as it is.

    numpy's broadcasting ValueError becomes PyTorch's RuntimeError naming the shapes; numpy's
    own exception types become the builtin type PyTorch raises; and the message of a plain
    TypeError, ValueError, IndexError or RuntimeError is led by the public function's name.
    Other errors (a plugin's own types, AttributeError) pass unchanged. Only reached once
    a kernel has failed.
    """
    kind = type(error)
    if kind in _PLAIN_TYPES or kind.__module__.startswith("numpy"):
        if isinstance(error, ValueError) and "broadcast" in str(error):
            shapes = [x._data.shape for x in inputs if isinstance(x, _Tensor)]
            if len(set(shapes)) > 1:
                from corenn.ops._kernel import broadcast_shapes
                broadcast_shapes(*shapes)  # PyTorch's RuntimeError, when the inputs' shapes don't broadcast
        kind = _RESTATED_TYPES.get(kind.__name__, kind)
        if kind in _PLAIN_TYPES:
            from corenn._argcheck import named
            message = named(str(error), op_name)
            if message != str(error) or kind is not type(error):
                raise kind(message) from error


def _observed_forward(op_name, kernel, ctx, device, arrays, params, inputs=()):
    # Over a copy: a plugin's observer that raises is detached from the list while the op runs.
    # One whose op_start raised gets no op_end, so the others' calls stay paired.
    # An observer with ``op_dispatched`` (corenn.compiler's capture) also sees the kernel, its
    # inputs and params and the forward result, normalised here as ``run`` would (0-d numpy
    # scalars become arrays), so that the arrays it sees are the ones the output tensors hold.
    observers = _observers[:]
    failed = ()
    for observer in observers:
        try:
            observer.op_start(op_name, device, arrays)
            op_node = getattr(observer, "op_node", None)  # optional: the node, to match backward calls to this op
            if op_node is not None:
                op_node(op_name, ctx)
        except BaseException as error:
            if not _contain_observer_error(observer, "op_start", op_name, error):
                raise
            failed += (id(observer),)
    out = kernel.forward(ctx, *arrays, **params)
    if out.__class__ in _SCALAR_TYPES:
        out = _asarray(out)
    elif out.__class__ is tuple:
        out = tuple([_asarray(o) if o.__class__ in _SCALAR_TYPES else o for o in out])
    for observer in observers:
        dispatched = getattr(observer, "op_dispatched", None)
        if dispatched is not None:
            dispatched(op_name, kernel, ctx, device, inputs, arrays, params, out)
    for observer in reversed(observers):
        if failed and id(observer) in failed:
            continue
        try:
            observer.op_end(op_name, device, out)
        except BaseException as error:
            if not _contain_observer_error(observer, "op_end", op_name, error):
                raise
    return out


def _observed_backward(observers, fn, grad_outputs):
    """``fn.backward`` between the ``backward_start(node, grad_outputs)`` / ``backward_end(node, grad_inputs)``
    of the observers that define them.

    ``observers`` was taken when the walk began; one detached since (a plugin's that raised)
    is skipped. As for forward, one whose ``backward_start`` raised gets no ``backward_end``.
    """
    live = [id(current) for current in _observers]  # by identity: observers may define __eq__
    active = [o for o in observers if id(o) in live]
    failed = ()
    for observer in active:
        try:
            observer.backward_start(fn, grad_outputs)
        except BaseException as error:
            if not _contain_observer_error(observer, "backward_start", fn.grad_fn_name, error):
                raise
            failed += (id(observer),)
    grad_inputs = fn.backward(fn, grad_outputs)
    for observer in reversed(active):
        if failed and id(observer) in failed:
            continue
        try:
            observer.backward_end(fn, grad_inputs)
        except BaseException as error:
            if not _contain_observer_error(observer, "backward_end", fn.grad_fn_name, error):
                raise
    return grad_inputs


def _contain_observer_error(observer, method, op_name, error) -> bool:
    """True when ``observer`` is a plugin's: detached with a warning (strict mode raises PluginError here).

    False for an observer added with ``observe_ops`` and for KeyboardInterrupt: the caller re-raises.
    """
    from corenn.plugins import _observer_failed
    return _observer_failed(observer, method, op_name, error)


def _edge(x):
    """Where the gradient for input ``x`` goes: ``(node, output_nr)``, ``(leaf, -1)`` or None."""
    if not isinstance(x, _Tensor) or not x._requires_grad:
        return None
    fn = x._grad_fn
    if fn is None:
        return (x, -1)
    return (fn, x._output_nr)


def _make(array, device, grad_fn, output_nr):
    # The one boundary where raw forward results become tensors: numpy reductions
    # return numpy scalars, which are normalised to 0-d arrays here.
    if array.__class__ in _SCALAR_TYPES:
        array = _asarray(array)
    t = _new_tensor(_Tensor)
    t._data = array
    t._device = device
    t._grad_fn = grad_fn
    t._requires_grad = grad_fn is not None
    t._output_nr = output_nr
    return t


# Bound by corenn.tensor.tensor once Tensor exists (avoids an import cycle).
_Tensor = None
_new_tensor = object.__new__
_SCALAR_TYPES = frozenset()
_asarray = None


# ---------------------------------------------------------------------------------------
# The backward walk
# ---------------------------------------------------------------------------------------

def run_backward(roots, root_grads, *, retain_graph=False, inputs=None, allow_unused=False,
                 accumulate=True):
    """Propagate ``root_grads`` (arrays) from ``roots`` (tensors) through the graph.

    With ``accumulate=True`` leaf gradients are added into ``.grad`` (``backward``);
    otherwise the gradients of ``inputs`` are returned (``autograd.grad``).

    Order: a node can only feed nodes created after it, so taking pending nodes
    latest-created first (a heap on the creation sequence number, as PyTorch does)
    runs each node once, after every gradient flowing into it has arrived -- no
    separate dependency-counting pass, no recursion. Edges into leaves carry
    output_nr -1.
    """
    # What autograd.grad captures: leaves by identity, non-leaves by (node, output_nr).
    captured = None
    capture_keys = None
    if inputs is not None:
        captured = {}
        capture_keys = {}
        for i, t in enumerate(inputs):
            key = (t._grad_fn, t._output_nr) if t._grad_fn is not None else id(t)
            capture_keys.setdefault(key, []).append(i)

    # Observers that see backward (a profiler): taken once per walk, so with none a node pays one local test.
    observed = [o for o in _observers if hasattr(o, "backward_start") and hasattr(o, "backward_end")] \
        if _observers else None
    # Leaves with post-accumulate hooks (DDP's gradient-ready signal): how many deliveries each still
    # awaits in this walk. None -- and no counting pass -- while no leaf anywhere has such a hook.
    awaited = _count_awaited_deliveries(roots) if accumulate and post_accumulate_hooked else None
    buffers: dict = {}  # node -> gradient(s) received so far; a node is pending iff it is here
    pending = []  # heap of (-sequence_nr, node)
    for root, grad in zip(roots, root_grads):
        fn = root._grad_fn
        if fn is None:
            _deliver_to_leaf(root, grad, accumulate, capture_keys, captured)
            if awaited is not None:
                _delivered(awaited, root, True)
            continue
        if fn not in buffers:
            _heappush(pending, (-fn.sequence_nr, fn))
        _add_to_buffer(buffers, fn, root._output_nr, grad)

    # ``fn`` is the node to run next. When a node hands its gradient to a single new node
    # and nothing else is pending, that node is complete (every node that could still feed
    # it would be pending) and runs next without a trip through the heap: chains stay cheap.
    fn = _heappop(pending)[1] if pending else None
    while fn is not None:
        grad_outputs = buffers.pop(fn)
        has_hooks = fn.has_hooks
        if has_hooks and fn._tensor_hooks is not None:
            grad_outputs = _run_tensor_hooks(fn, grad_outputs)
        if capture_keys is not None:
            for nr in range(fn.num_outputs):
                indices = capture_keys.get((fn, nr))
                if indices:
                    g = grad_outputs if fn.num_outputs == 1 else grad_outputs[nr]
                    for i in indices:
                        captured[i] = g
        if has_hooks and fn._pre_hooks is not None:
            grad_outputs = _run_pre_hooks(fn, grad_outputs)
        saved = fn.saved
        if saved is _FREED:
            fn.saved_arrays  # raises the "backward through the graph a second time" error
        if observed:
            grad_inputs = _observed_backward(observed, fn, grad_outputs)
        else:
            grad_inputs = fn.backward(fn, grad_outputs)
        if saved and not retain_graph:
            fn.saved = _FREED
        if grad_inputs.__class__ is not tuple:
            grad_inputs = (grad_inputs,)
        if has_hooks and fn._post_hooks is not None:
            grad_inputs = _run_post_hooks(fn, grad_inputs, grad_outputs)
        edges = fn.next_edges
        if len(grad_inputs) != len(edges):
            raise RuntimeError(f"function {fn.grad_fn_name} returned an incorrect number of gradients "
                               f"(expected {len(edges)}, got {len(grad_inputs)})")
        newcomer = None  # the first node this one made pending, held back from the heap
        for edge, grad in zip(edges, grad_inputs):
            if grad is None:
                if awaited is not None and edge is not None and edge[1] < 0:
                    _delivered(awaited, edge[0], False)  # no gradient this way: one fewer to wait for
                continue
            if edge is None:
                continue
            target, nr = edge
            if nr < 0:
                _deliver_to_leaf(target, grad, accumulate, capture_keys, captured)
                if awaited is not None:
                    _delivered(awaited, target, True)
                continue
            if target not in buffers:
                if newcomer is None:
                    newcomer = target
                else:
                    _heappush(pending, (-target.sequence_nr, target))
            if nr == 0 and target.num_outputs == 1:
                existing = buffers.get(target)
                buffers[target] = grad if existing is None else existing + grad
            else:
                _add_to_buffer(buffers, target, nr, grad)
        if newcomer is not None and pending:
            _heappush(pending, (-newcomer.sequence_nr, newcomer))
            newcomer = None
        fn = newcomer if newcomer is not None else (_heappop(pending)[1] if pending else None)

    if awaited:
        # Leaves fed by nodes that never ran (no gradient reached them): complete now the walk is over.
        for leaf, _, received in list(awaited.values()):
            if received:
                _run_post_accumulate_hooks(leaf)
    if inputs is None:
        return None
    results = []
    for i, t in enumerate(inputs):
        g = captured.get(i)
        if g is None and not allow_unused:
            raise RuntimeError(f"One of the differentiated Tensors (input {i}) appears to not have been used in "
                               "the graph. Set allow_unused=True if this is the desired behavior.")
        results.append(g)
    return results


# Leaves that have post-accumulate-grad hooks (Tensor.register_post_accumulate_grad_hook), by id;
# weak, so a hook never keeps its tensor alive. Empty: backward does no counting pass.
post_accumulate_hooked = weakref.WeakValueDictionary()


def _count_awaited_deliveries(roots) -> dict:
    """``{id(leaf): [leaf, deliveries still to come, received one]}`` for the hooked leaves the graph reaches.

    A leaf has no node of its own here (PyTorch's AccumulateGrad): each edge into it delivers
    a part of its gradient. Its post-accumulate hooks must run once, after the last part, so
    this pass counts the edges into each hooked leaf from the nodes reachable from ``roots``.
    """
    awaited: dict = {}
    seen = set()
    stack = []
    for root in roots:
        fn = root._grad_fn
        if fn is None:
            if id(root) in post_accumulate_hooked:
                awaited.setdefault(id(root), [root, 0, False])[1] += 1
        elif fn not in seen:
            seen.add(fn)
            stack.append(fn)
    while stack:
        for edge in stack.pop().next_edges:
            if edge is None:
                continue
            target, nr = edge
            if nr < 0:
                if id(target) in post_accumulate_hooked:
                    awaited.setdefault(id(target), [target, 0, False])[1] += 1
            elif target not in seen:
                seen.add(target)
                stack.append(target)
    return awaited


def _delivered(awaited: dict, leaf, received: bool) -> None:
    entry = awaited.get(id(leaf))
    if entry is None:
        return
    entry[1] -= 1
    entry[2] = entry[2] or received
    if entry[1] == 0:
        del awaited[id(leaf)]
        if entry[2]:
            _run_post_accumulate_hooks(leaf)


def _run_post_accumulate_hooks(leaf) -> None:
    hooks = leaf._post_accumulate_grad_hooks
    if hooks:
        for hook in list(hooks.values()):
            if hook(leaf) is not None:
                raise RuntimeError("hooks registered with register_post_accumulate_grad_hook must return None")


def _add_to_buffer(buffers, fn, nr, grad):
    if fn.num_outputs == 1:
        existing = buffers.get(fn)
        buffers[fn] = grad if existing is None else existing + grad
        return
    slots = buffers.get(fn)
    if slots is None:
        slots = buffers[fn] = [None] * fn.num_outputs
    slots[nr] = grad if slots[nr] is None else slots[nr] + grad


def _deliver_to_leaf(leaf, grad, accumulate, capture_keys, captured):
    if leaf._hooks is not None:
        grad = _call_tensor_hooks(leaf._hooks.values(), grad, leaf._device)
    if capture_keys is not None:
        for i in capture_keys.get(id(leaf), ()):
            previous = captured.get(i)
            captured[i] = grad if previous is None else previous + grad
        return
    if not accumulate:
        return
    if leaf._grad is None:
        # Own the array: the gradient buffer may be shared with other nodes' outputs.
        if grad.shape != leaf._data.shape:
            grad = leaf._device._xp.broadcast_to(grad, leaf._data.shape)
        if grad.dtype != leaf._data.dtype:
            grad = grad.astype(leaf._data.dtype)
        leaf._grad = _make(grad.copy(), leaf._device, None, 0)  # known good: skips the setter's checks
    else:
        existing = leaf._grad
        existing._data = existing._data + grad


def _call_tensor_hooks(hooks, grad, device):
    for hook in list(hooks):
        result = hook(_make(grad, device, None, 0))
        if result is not None:
            grad = result._data
    return grad


def _run_tensor_hooks(fn, grad_outputs):
    if fn.num_outputs == 1:
        hooks = fn._tensor_hooks.get(0)
        if hooks and grad_outputs is not None:
            grad_outputs = _call_tensor_hooks(hooks.values(), grad_outputs, _device_of(grad_outputs))
        return grad_outputs
    grad_outputs = list(grad_outputs)
    for nr, hooks in fn._tensor_hooks.items():
        if hooks and grad_outputs[nr] is not None:
            grad_outputs[nr] = _call_tensor_hooks(hooks.values(), grad_outputs[nr], _device_of(grad_outputs[nr]))
    return grad_outputs


def _device_of(array):
    from corenn.tensor.tensor import device_of_array
    return device_of_array(array)


def _wrap_grads(grads):
    if grads is None:
        return None
    if isinstance(grads, (tuple, list)):
        return tuple(None if g is None else _make(g, _device_of(g), None, 0) for g in grads)
    return (_make(grads, _device_of(grads), None, 0),)


def _unwrap_grads(tensors, like):
    arrays = tuple(None if t is None else t._data for t in tensors)
    return arrays if isinstance(like, (tuple, list)) else arrays[0]


def _run_pre_hooks(fn, grad_outputs):
    for hook in list(fn._pre_hooks.values()):
        result = hook(_wrap_grads(grad_outputs))
        if result is not None:
            grad_outputs = _unwrap_grads(result, grad_outputs if fn.num_outputs > 1 else None)
    return grad_outputs


def _run_post_hooks(fn, grad_inputs, grad_outputs):
    for hook in list(fn._post_hooks.values()):
        result = hook(_wrap_grads(grad_inputs), _wrap_grads(grad_outputs))
        if result is not None:
            grad_inputs = tuple(None if t is None else t._data for t in result)
    return grad_inputs
