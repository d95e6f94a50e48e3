"""Capture a call's kernel sequence through the dispatcher, and replay it on new inputs.

Capture runs the function eagerly once, with a :class:`Recorder` among the dispatcher's op
observers (``corenn.autograd.node._observed_forward`` hands it each kernel, its inputs, params
and result). Every array a kernel reads is traced to where it came from:

- an input tensor of the call (a *slot* filled when a replay starts),
- the output of an earlier kernel (a slot that kernel fills),
- a tensor from outside the call (a parameter, a closure's tensor, an optimizer's state): a
  *load* step reads that tensor's array when the replay reaches it, so updates made between
  calls (``optimizer.step()``) are seen,
- ``p.grad`` of a leaf after a captured ``backward()``: a load of the leaf's ``.grad`` then,
- a constant made inside the call from Python values (``corenn.arange(n)``), kept as it is.

Besides kernels a program has a few other steps, each what eager code does: ``backward()``
(the real engine runs on the replayed graph), ``optimizer.step()`` / ``zero_grad()`` and
``lr_scheduler.step()`` (run eagerly: their Python state, step counts and learning rates,
must advance), dropout's keep-mask draw (drawn again from corenn's RNG, so randomness and RNG
state match eager), and in-place writes made without autograd (``p -= lr * p.grad`` under
``no_grad``).

What cannot be replayed is detected while capturing and makes the call *unsupported*
(:class:`Unsupported`, with the user's file and line): reading values on the host (``.item()``,
``.tolist()``, ``bool(t)``, printing), other random draws, ``autograd.grad``, custom
``autograd.Function``, tensor hooks added inside the call, arrays made outside the dispatcher
and handed to a kernel (a boolean-mask index), and any array changed in place outside the
dispatcher (found by comparing every array the capture saw against a copy taken when it
was seen).
"""
from __future__ import annotations

import builtins
import functools
import sys
import threading
from typing import NamedTuple

from corenn.autograd import node as _node

_ORIGINALS: dict = {}  # (owner, name) -> the original attribute, while a capture has patched it
_active = threading.local()  # .recorder: the capture running in this thread, if any
_patch_lock = threading.Lock()
_patch_depth = 0


class Unsupported(RuntimeError):
    """A call cannot be captured for replay (``torch._dynamo.exc.Unsupported``): the reason names the line.

    With ``fullgraph=False`` (the default) such a call runs eagerly, with one warning; with
    ``fullgraph=True`` this error is raised.
    """


def _user_line() -> str:
    """``file:line`` of the innermost frame outside corenn: where the user's code asked for it."""
    frame = sys._getframe(1)
    while frame is not None:
        filename = frame.f_code.co_filename
        if "/corenn/" not in filename.replace("\\", "/") or "/tests/" in filename.replace("\\", "/"):
            return f"{filename}:{frame.f_lineno}"
        frame = frame.f_back
    return "<unknown>"


def capturing() -> bool:
    """Whether a capture is running in the calling thread (``torch.compiler.is_compiling``)."""
    return getattr(_active, "recorder", None) is not None


def _recorder():
    """The calling thread's recorder when it is recording (not inside an eagerly run step)."""
    recorder = getattr(_active, "recorder", None)
    if recorder is None or recorder.paused:
        return None
    return recorder


# -- patches, in place only while some thread captures --------------------------------------------

def _break_on_call(owner, name, what):
    original = getattr(owner, name)

    # Named as the original: code that checks a builtin is what its module holds (numba, imported for the first
    # time inside a capture, does for print) finds it so.
    @functools.wraps(original)
    def patched(*args, **kwargs):
        recorder = _recorder()
        if recorder is not None:
            recorder.unsupported(what)
        return original(*args, **kwargs)
    return original, patched


def _eager_step_on_call(owner, name):
    """``owner.name(self, ...)`` runs eagerly during capture and again, eagerly, at each replay."""
    original = owner.__dict__[name]

    def patched(self, *args, **kwargs):
        recorder = _recorder()
        if recorder is None:
            return original(self, *args, **kwargs)
        return recorder.eager_step(original, self, args, kwargs, f"{type(self).__name__}.{name}()")
    return original, patched


def _patches():
    from corenn.autograd import function as autograd_function
    import corenn.autograd as autograd
    from corenn.module.module import Module
    from corenn.nn import functional
    from corenn.optim import lr_scheduler, optimizer
    from corenn.tensor import random as random_module
    from corenn.tensor.tensor import Tensor

    patches = []
    for name, what in (("item", "Tensor.item() reads a value on the host"),
                       ("tolist", "Tensor.tolist() reads values on the host"),
                       ("numpy", "Tensor.numpy() reads values on the host"),
                       ("__bool__", "bool(tensor) (an `if` on a tensor's value) reads a value on the host"),
                       ("__float__", "float(tensor) reads a value on the host"),
                       ("__int__", "int(tensor) reads a value on the host"),
                       ("__index__", "using a tensor as a Python index reads a value on the host"),
                       ("__array__", "converting a tensor to a numpy array reads values on the host"),
                       ("__repr__", "printing a tensor reads values on the host"),
                       ("__format__", "formatting a tensor reads values on the host"),
                       ("register_hook", "Tensor.register_hook inside a compiled call"),
                       ("retain_grad", "Tensor.retain_grad inside a compiled call")):
        patches.append((Tensor, name, *_break_on_call(Tensor, name, what)))
    patches.append((builtins, "print", *_break_on_call(builtins, "print", "print() is a Python side effect")))
    patches.append((random_module, "_generator", *_break_on_call(
        random_module, "_generator", "random numbers drawn from corenn's RNG (rand, randn, normal_, ...) other "
                                     "than dropout's")))
    patches.append((autograd, "grad", *_break_on_call(autograd, "grad", "corenn.autograd.grad inside a compiled "
                                                                         "call")))
    patches.append((autograd_function.Function, "apply", *_break_on_call(
        autograd_function.Function, "apply", "a custom autograd.Function (its forward runs outside the dispatcher)")))
    if "apply" in autograd_function.Function.__dict__:
        patches[-1] = (autograd_function.Function, "apply", autograd_function.Function.__dict__["apply"],
                       _classmethod_breaking(autograd_function.Function.__dict__["apply"]))
    patches.append((autograd, "backward", autograd.backward, _backward_step(autograd.backward)))
    patches.append((Tensor, "_write", Tensor._write, _write_step(Tensor._write)))
    patches.append((functional, "_keep_mask", functional._keep_mask, _keep_mask_step(functional._keep_mask)))
    # Methods whose Python state must advance at each call: run eagerly at replay.
    classes = [(optimizer.Optimizer, ("step", "zero_grad")), (Module, ("zero_grad",))]
    stack = list(optimizer.Optimizer.__subclasses__()) + [lr_scheduler.LRScheduler] \
        if hasattr(lr_scheduler, "LRScheduler") else list(optimizer.Optimizer.__subclasses__())
    seen = set()
    while stack:
        cls = stack.pop()
        if cls in seen:
            continue
        seen.add(cls)
        classes.append((cls, ("step", "zero_grad")))
        stack.extend(cls.__subclasses__())
    for cls, names in classes:
        for name in names:
            if name in cls.__dict__:
                patches.append((cls, name, *_eager_step_on_call(cls, name)))
    return patches


def _classmethod_breaking(descriptor):
    function = descriptor.__func__

    def apply(cls, *args, **kwargs):
        recorder = _recorder()
        if recorder is not None:
            recorder.unsupported("a custom autograd.Function (its forward runs outside the dispatcher)")
        return function(cls, *args, **kwargs)
    return classmethod(apply)


def _backward_step(original):
    def backward(tensors, grad_tensors=None, retain_graph=None, create_graph=False, inputs=None):
        recorder = _recorder()
        if recorder is None:
            return original(tensors, grad_tensors, retain_graph=retain_graph, create_graph=create_graph,
                            inputs=inputs)
        return recorder.backward_step(original, tensors, grad_tensors, retain_graph, create_graph, inputs)
    return backward


def _write_step(original):
    def _write(self, array):
        recorder = _recorder()
        if recorder is None:
            return original(self, array)
        return recorder.write_step(original, self, array)
    return _write


def _keep_mask_step(original):
    def _keep_mask(like, p, shape=None):
        recorder = _recorder()
        if recorder is None:
            return original(like, p, shape)
        return recorder.keep_mask_step(original, like, p, shape)
    return _keep_mask


def _install_patches():
    global _patch_depth
    with _patch_lock:
        _patch_depth += 1
        if _patch_depth > 1:
            return
        for owner, name, original, patched in _patches():
            _ORIGINALS[(owner, name)] = original
            setattr(owner, name, patched)


def _remove_patches():
    global _patch_depth
    with _patch_lock:
        _patch_depth -= 1
        if _patch_depth:
            return
        for (owner, name), original in _ORIGINALS.items():
            setattr(owner, name, original)
        _ORIGINALS.clear()


# -- the program ----------------------------------------------------------------------------------

KERNEL, LOAD, LOAD_GRAD, BACKWARD, EAGER, WRITE, KEEP_MASK = range(7)


class _SlotRef:
    """A marker in a params structure: "the array in slot ``index``" (an advanced index, a mask)."""

    __slots__ = ("index",)

    def __init__(self, index):
        self.index = index


def _is_array(value) -> bool:
    """A device array (not a numpy scalar, a dtype or a tensor): what kernels read as data."""
    return (value.__class__ not in _node._SCALAR_TYPES and hasattr(value, "strides") and hasattr(value, "dtype")
            and not isinstance(value, _node._Tensor))


def _has_slot_refs(value) -> bool:
    if value.__class__ is _SlotRef:
        return True
    if value.__class__ in (tuple, list):
        return any(_has_slot_refs(v) for v in value)
    return False


def _fill(value, env):
    if value.__class__ is _SlotRef:
        return env[value.index]
    if value.__class__ in (tuple, list):
        return value.__class__(_fill(v, env) for v in value)
    return value


class Recorder:
    """Records one eager call as a :class:`Program` (see the module docstring)."""

    def __init__(self, input_tensors, *, fullgraph: bool):
        self.thread = threading.get_ident()
        self.fullgraph = fullgraph
        self.paused = False
        self.reasons: list[str] = []
        self.steps: list = []
        self.env_size = 0
        self.constants: dict[int, object] = {}
        self.slot_of_array: dict[int, int] = {}
        self.keep_alive: list = []  # every array and tensor seen: their ids must not be reused meanwhile
        self.snapshots: dict[int, tuple] = {}  # id(array) -> (array, bytes when seen or last legitimately changed)
        self.slot_meta: dict[int, tuple] = {}  # array slot -> (shape, dtype) when captured: what backends specialise on
        self.step_of_node: dict[int, int] = {}
        self.nodes: list = []  # the captured ctx of each kernel step (None for other steps)
        self.inputs = list(input_tensors)
        self.input_index = {id(t): i for i, t in enumerate(self.inputs)}
        # Non-leaf inputs: edges into their nodes must point at the node of each replay's input.
        self.input_node = {id(t._grad_fn): i for i, t in enumerate(self.inputs) if t._grad_fn is not None}
        self.externals: dict[int, object] = {}  # id -> tensor from outside the call that a kernel read
        self.first_arrays: dict[int, object] = {}  # id(tensor) -> its array when first seen
        for t in self.inputs:
            self._new_slot(t._data)
            self.first_arrays[id(t)] = t._data
        self.num_inputs = len(self.inputs)

    # observer protocol: the recorder sits in the dispatcher's observer list while capturing
    def op_start(self, op_name, device, arrays):
        pass

    def op_end(self, op_name, device, out):
        pass

    def unsupported(self, what: str) -> None:
        reason = f"{what} (at {_user_line()})"
        if reason not in self.reasons:
            self.reasons.append(reason)
        if self.fullgraph:
            raise Unsupported(f"corenn.compile(fullgraph=True): cannot capture {reason}")

    # -- slots ------------------------------------------------------------------------------------
    def _new_slot(self, array) -> int:
        slot = self.env_size
        self.env_size += 1
        self.slot_of_array[id(array)] = slot
        self.slot_meta[slot] = (array.shape, array.dtype)
        self.keep_alive.append(array)
        self._snapshot(array)
        return slot

    def _snapshot(self, array) -> None:
        try:
            self.snapshots[id(array)] = (array, array.tobytes())
        except Exception:  # an array without tobytes: no check possible, capture refuses it
            self.unsupported(f"an array of type {type(array).__name__} cannot be checked for in-place changes")

    def _resnapshot_all(self) -> None:
        for key, (array, _) in list(self.snapshots.items()):
            self.snapshots[key] = (array, array.tobytes())

    def _leaf_ref(self, t):
        """('input', i) or ('tensor', t) for a tensor the graph treats as a leaf."""
        i = self.input_index.get(id(t))
        return ("input", i) if i is not None else ("tensor", t)

    def _known_leaves(self):
        leaves = {id(t): t for t in self.inputs if t._requires_grad}
        leaves.update({key: t for key, t in self.externals.items() if t._requires_grad})
        for ctx in self.nodes:
            for edge in (ctx.__dict__.get("next_edges", ()) if ctx is not None else ()):
                if edge is not None and edge[1] < 0:
                    leaves[id(edge[0])] = edge[0]
        return leaves.values()

    def slot_for_tensor(self, t) -> int:
        """The slot holding ``t``'s array, adding a load step for a tensor from outside the call."""
        array = t._data
        slot = self.slot_of_array.get(id(array))
        if slot is not None:
            return slot
        self.keep_alive.append(t)
        self.first_arrays.setdefault(id(t), array)
        for leaf in self._known_leaves():
            if leaf._grad is t:  # p.grad after a captured backward: read it again at replay
                slot = self._new_slot(array)
                self.steps.append((LOAD_GRAD, self._leaf_ref(leaf), slot))
                self.nodes.append(None)
                return slot
        self.externals[id(t)] = t
        slot = self._new_slot(array)
        self.steps.append((LOAD, t, slot, array.shape, array.dtype, t._requires_grad))
        self.nodes.append(None)
        return slot

    def _param_value(self, value, op_name):
        if _is_array(value):
            slot = self.slot_of_array.get(id(value))
            if slot is None:
                self.unsupported(f"op {op_name!r} received an array computed outside the dispatcher (a boolean "
                                 f"mask or a list as an index?)")
                return value
            return _SlotRef(slot)
        if value.__class__ in (tuple, list):
            return value.__class__(self._param_value(v, op_name) for v in value)
        return value

    # -- what the dispatcher and the patched functions report -------------------------------------
    def op_dispatched(self, op_name, kernel, ctx, device, inputs, arrays, params, out):
        if self.paused or threading.get_ident() != self.thread:
            return
        args = []
        for x, array in zip(inputs, arrays):
            if isinstance(x, _node._Tensor):
                args.append(self.slot_for_tensor(x))
            else:
                args.append(self._constant_or_slot(array, op_name))
        frozen = {key: self._param_value(value, op_name) for key, value in params.items()}
        params_spec = (frozen, _has_slot_refs(tuple(frozen.values())))
        if getattr(getattr(kernel, "kernel", kernel), "mutates_inputs", False):  # a plugin's FirstCallCheck wraps it
            self._resnapshot_all()
        outputs = out if isinstance(out, (tuple, list)) else (out,)
        out_slots = tuple(self._new_slot(o) for o in outputs)
        self.step_of_node[id(ctx)] = len(self.steps)
        self.keep_alive.append(ctx)
        self.steps.append([KERNEL, op_name, device, tuple(args), params_spec, out_slots, None, op_name])
        self.nodes.append(ctx)

    def _constant_or_slot(self, value, op_name):
        if _is_array(value):
            slot = self.slot_of_array.get(id(value))
            if slot is None:
                self.unsupported(f"op {op_name!r} received an array computed outside the dispatcher")
                return self._constant(value)
            return slot
        return self._constant(value)

    def _constant(self, value) -> int:
        slot = self.env_size
        self.env_size += 1
        self.constants[slot] = value
        return slot

    def eager_step(self, original, owner, args, kwargs, what):
        for value in list(args) + list(kwargs.values()):
            if callable(value) or isinstance(value, _node._Tensor):
                self.unsupported(f"{what} with a closure or tensor argument")
        self.paused = True
        try:
            result = original(owner, *args, **kwargs)
        finally:
            self.paused = False
        self._resnapshot_all()  # it may change parameters and gradients in place: that is replayed too
        for key in self.first_arrays:  # and rebind their arrays: replay runs it again, so that is no effect
            t = self.inputs[self.input_index[key]] if key in self.input_index else self.externals.get(key)
            if t is not None:
                self.first_arrays[key] = t._data
        self.steps.append((EAGER, original, owner, args, kwargs))
        self.nodes.append(None)
        return result

    def _tensor_spec(self, t):
        """How a replay rebuilds tensor ``t`` of this call: its slot, node, output number and requires_grad."""
        slot = self.slot_for_tensor(t)
        fn = t._grad_fn
        if fn is None:
            node = None
        elif id(fn) in self.step_of_node:
            node = ("step", self.step_of_node[id(fn)])
        elif id(fn) in self.input_node:
            node = ("input", self.input_node[id(fn)])
        else:
            node = ("fixed", fn)
        return (slot, node, t._output_nr, t._requires_grad, t._device)

    def backward_step(self, original, tensors, grad_tensors, retain_graph, create_graph, inputs):
        from corenn.tensor.tensor import Tensor
        if create_graph or inputs is not None:
            self.unsupported("backward(create_graph=True) or backward(inputs=...)")
        roots = [tensors] if isinstance(tensors, Tensor) else list(tensors)
        grads = grad_tensors
        if isinstance(grads, Tensor) or grads is None:
            grads = [grads] * (1 if grads is not None or len(roots) == 1 else len(roots))
        grads = list(grads)
        root_specs = [self._tensor_spec(t) for t in roots]
        grad_specs = [None if g is None else self._tensor_spec(g) if isinstance(g, Tensor) else ("value", g)
                      for g in grads]
        self.paused = True
        try:
            original(tensors, grad_tensors, retain_graph=retain_graph, create_graph=create_graph, inputs=inputs)
        finally:
            self.paused = False
        self._resnapshot_all()
        self.steps.append((BACKWARD, original, root_specs, grad_specs, retain_graph,
                           isinstance(tensors, Tensor), isinstance(grad_tensors, Tensor)))
        self.nodes.append(None)

    def write_step(self, original, target, array):
        target_slot = self.slot_for_tensor(target)
        source = self._constant_or_slot(array, "copy_")
        original(target, array)
        self._resnapshot_all()  # views of the target change with it
        self.steps.append((WRITE, target_slot, source, target._device))
        self.nodes.append(None)

    def keep_mask_step(self, original, like, p, shape):
        like_slot = self.slot_for_tensor(like)
        self.paused = True  # its own draw is the one random draw replay repeats
        try:
            mask = original(like, p, shape)
        finally:
            self.paused = False
        slot = self._new_slot(mask)
        self.steps.append((KEEP_MASK, original, like_slot, like._device, p, shape, slot))
        self.nodes.append(None)
        return mask

    # -- the end of a capture -----------------------------------------------------------------------
    def finish(self, result) -> "Program":
        for key, (array, seen) in self.snapshots.items():
            if array.tobytes() != seen:
                self.unsupported("an array was changed in place outside the dispatcher (e.g. setitem or fill_ "
                                 "without autograd)")
                break
        tables = _node._tables
        for index, step in enumerate(self.steps):
            if step[0] != KERNEL:
                continue
            ctx = self.nodes[index]
            step[1] = _resolve_kernel(step[1], step[2])
            edges = ctx.__dict__.get("next_edges")
            if edges is not None:
                step[6] = (tuple(self._edge_spec(edge) for edge in edges), ctx.__dict__.get("grad_fn_name"))
        effects = []
        for key, first in self.first_arrays.items():
            t = self.inputs[self.input_index[key]] if key in self.input_index else self.externals.get(key)
            if t is None or t._data is first:
                continue
            if id(t._data) not in self.slot_of_array:
                self.unsupported("a tensor's data was replaced outside the dispatcher (`t.data = ...`)")
                continue
            effects.append((self._leaf_ref(t), self._tensor_spec(t)))
        output = self._output_spec(result)
        tables_now = {device_type: tables.get(device_type) for device_type in
                      {s[2].type for s in self.steps if s[0] == KERNEL}}
        return Program.from_recorder(self, output, effects, tables_now)

    def _edge_spec(self, edge):
        if edge is None:
            return None
        target, nr = edge
        if nr < 0:
            i = self.input_index.get(id(target))
            return ("input", i) if i is not None else ("fixed", edge)
        step = self.step_of_node.get(id(target))
        if step is not None:
            return ("step", step, nr)
        i = self.input_node.get(id(target))
        if i is not None and nr == self.inputs[i]._output_nr:
            return ("input_node", i)
        return ("fixed", edge)

    def _output_spec(self, value):
        if isinstance(value, _node._Tensor):
            i = self.input_index.get(id(value))
            if i is not None:
                return ("input", i)
            if id(value) in self.externals:
                return ("object", value)
            return ("tensor", self._tensor_spec(value))
        if isinstance(value, (tuple, list)) and type(value) in (tuple, list):
            return ("seq", type(value), tuple(self._output_spec(v) for v in value))
        if isinstance(value, dict) and type(value) is dict:
            return ("dict", tuple((k, self._output_spec(v)) for k, v in value.items()))
        if value is None or isinstance(value, (bool, int, float, str)):
            return ("object", value)
        if isinstance(value, tuple) and hasattr(value, "_fields"):  # named tuples (return_types)
            return ("named", type(value), tuple(self._output_spec(v) for v in value))
        self.unsupported(f"a return value of type {type(value).__name__}")
        return ("object", value)


def _resolve_kernel(op_name, device):
    return _node._tables[device.type][op_name] if op_name in _node._tables.get(device.type, {}) else \
        _node._dispatch.kernels.resolve(op_name, device.type)


class KernelStep(NamedTuple):
    """One kernel step of a :class:`Program`, as a compile backend reads it (``Program.kernel_steps()``)."""

    index: int                 # position among the program's steps
    op: str                    # the op's name, as in docs/kernels.md ("add", "tanh", "sum", ...)
    kernel: type               # the kernel class that ran (a core kernel or a plugin's override)
    device: object             # the device it ran on
    inputs: tuple              # the slot of each positional input (see Program.slot_info)
    params: dict               # its keyword parameters (axes, alpha, ...)
    params_read_slots: bool    # True when a parameter holds an array from a slot (an index): such a step moves as it is
    outputs: tuple             # the slots it fills
    needs_input_grad: tuple | None  # per input, whether its gradient is wanted; None: the step records no node


class SlotInfo(NamedTuple):
    """What a slot holds (``Program.slot_info(slot)``): an array's shape and dtype, or a constant."""

    shape: tuple | None        # the array's shape when captured (None for a Python constant)
    dtype: object              # the array's dtype when captured (None for a Python constant)
    is_constant: bool          # a value made at capture (a Python number, ``corenn.arange(n)``), not recomputed
    value: object              # the constant itself; None for other slots


class Program:
    """A captured call: steps over a list of array slots, replayed by :meth:`replay`.

    Compile backends (``corenn_register_compile_backends``) receive one. Its public surface:
    :meth:`replay` (the core's runner), :meth:`kernel_steps` and :meth:`slot_info` (what was
    captured: ops, the slots they read and fill, the shapes and dtypes there), and
    :meth:`fuse` (a new program where a group of kernel steps runs as one kernel of the
    backend's making, forward and backward). ``kernel_count`` counts kernel steps.
    """

    def __init__(self, *, num_inputs, env_template, steps, output, effects, tables, slot_meta):
        self.num_inputs = num_inputs
        self.env_template = env_template
        self.captured_steps = steps  # kernel steps with their edge specs: what fuse() rewrites
        self.steps = steps
        self.output = output
        self.effects = effects
        self.tables = tables
        self.slot_meta = slot_meta
        self.kernel_count = sum(1 for step in steps if step[0] == KERNEL)
        # The plain kernel steps, compiled once into the tuples the replay loop unpacks.
        self.guards = [(step[1], step[3], step[4], step[5]) for step in steps if step[0] == LOAD]
        self.fused = _FusedBackwardPlan.build(steps, output, effects)
        if self.fused is not None:
            # Kernel steps carry their needs_input_grad markers instead of edge specs: see replay.
            self.steps = [step[:6] + (self.fused.markers[index],) + step[7:] if step[0] is KERNEL else step
                          for index, step in enumerate(steps)]

    @classmethod
    def from_recorder(cls, recorder: Recorder, output, effects, tables) -> "Program":
        env_template = [None] * recorder.env_size
        for slot, value in recorder.constants.items():
            env_template[slot] = value
        return cls(num_inputs=recorder.num_inputs, env_template=env_template,
                   steps=[tuple(step) for step in recorder.steps], output=output, effects=effects, tables=tables,
                   slot_meta=dict(recorder.slot_meta))

    # -- what a backend reads -----------------------------------------------------------------------
    def kernel_steps(self) -> list:
        """Every kernel step, in order, as :class:`KernelStep`."""
        found = []
        for index, step in enumerate(self.captured_steps):
            if step[0] != KERNEL:
                continue
            _, kernel, device, args, (params, has_refs), out_slots, edges, name = step
            needs = None if edges is None else tuple(spec is not None for spec in edges[0])
            found.append(KernelStep(index, name, kernel, device, args, dict(params),
                                    has_refs, out_slots, needs))
        return found

    def slot_info(self, slot: int) -> SlotInfo:
        """What ``slot`` holds: an input's, a load's or a kernel output's shape and dtype, or a constant."""
        if not 0 <= slot < len(self.env_template):
            raise IndexError(f"Program.slot_info(): slot {slot} out of range (the program has "
                             f"{len(self.env_template)} slots)")
        value = self.env_template[slot]
        if slot >= self.num_inputs and slot not in self.slot_meta:
            return SlotInfo(None, None, True, value)
        shape, dtype = self.slot_meta[slot]
        return SlotInfo(shape, dtype, slot >= self.num_inputs and value is not None, value)

    def barriers(self) -> list:
        """Indices of the steps a fused group cannot span: ``backward()``, optimizer steps, writes, masks, grad loads."""
        return [index for index, step in enumerate(self.captured_steps) if step[0] not in (KERNEL, LOAD)]

    def _slots_read_outside(self, indices) -> set:
        """Slots that steps other than ``indices``, the outputs and the side effects read (what a group must keep)."""
        group = set(indices)
        read = set()
        for index, step in enumerate(self.captured_steps):
            if index not in group:
                read.update(_slots_read(step))
        for spec in _tensor_specs_of_output(self.output):
            read.add(spec[0])
        for _, spec in self.effects:
            read.add(spec[0])
        return read

    def fuse(self, indices, make_kernel, name: str | None = None) -> "Program":
        """A new program where the kernel steps ``indices`` run as one kernel, ``make_kernel(inputs, outputs)``.

        ``inputs`` are the slots the group reads and does not fill (in order of first use),
        ``outputs`` the slots it fills that anything outside the group reads, or whose node a
        later step's gradient flows into. ``make_kernel`` returns a :class:`corenn.kernels.Op`
        subclass whose ``forward(ctx, *input_arrays)`` returns those outputs (one array, or a
        tuple with ``num_outputs`` set) and whose ``backward`` returns one gradient per input
        (None where ``ctx.needs_input_grad`` is False). The fused step runs where the group's
        last step ran; every step between the group's first and last must be a kernel or a load
        that reads none of the group's outputs (ValueError otherwise). The program itself is
        not changed. ``name`` is what ``graph`` calls the step (default: the kernel class's name).
        """
        steps = self.captured_steps
        group = sorted(set(indices))
        if not group:
            raise ValueError("Program.fuse(): argument 'indices' is empty")
        for index in group:
            if not 0 <= index < len(steps) or steps[index][0] != KERNEL:
                raise ValueError(f"Program.fuse(): step {index} is not a kernel step")
            if steps[index][4][1]:
                raise ValueError(f"Program.fuse(): step {index} reads a slot through a parameter; it cannot move")
        device = steps[group[0]][2]
        if any(steps[index][2] != device for index in group):
            raise ValueError("Program.fuse(): the steps run on different devices")
        produced = {}  # slot -> (step, output_nr) of the group's step that fills it
        for index in group:
            for nr, slot in enumerate(steps[index][5]):
                produced[slot] = (index, nr)
        members = set(group)
        for index in range(group[0], group[-1]):
            if index in members:
                continue
            step = steps[index]
            if step[0] not in (KERNEL, LOAD) or any(slot in produced for slot in _slots_read(step)) or \
                    any(_edge_into(spec, members) for spec in _edge_specs(step)):
                raise ValueError(f"Program.fuse(): step {index}, between the group's steps, is not a kernel or load "
                                 f"independent of the group")
        inputs, input_edges = [], []
        for index in group:
            _, _, _, args, _, _, edges, _ = steps[index]
            for position, slot in enumerate(args):
                if slot in produced:
                    continue
                spec = edges[0][position] if edges is not None else None
                if slot not in inputs:
                    inputs.append(slot)
                    input_edges.append(spec)
                elif spec is not None and input_edges[inputs.index(slot)] is None:
                    input_edges[inputs.index(slot)] = spec
        wanted = self._slots_read_outside(group)
        for index, step in enumerate(steps):
            if index not in members:
                for spec in _edge_specs(step):
                    if _edge_into(spec, members):
                        wanted.add(steps[spec[1]][5][spec[2]])
        for spec in _tensor_specs_everywhere(self):
            node = spec[1]
            if node is not None and node[0] == "step" and node[1] in members:
                wanted.add(spec[0])
        outputs = [slot for slot in produced if slot in wanted]
        kernel = make_kernel(tuple(inputs), tuple(outputs))
        name = name or kernel.__name__
        records = any(steps[index][6] is not None for index in group)
        renumber = {}  # old step index -> new, with the group's steps gone but its last one's place
        position = 0
        for index in range(len(steps)):
            if index in members and index != group[-1]:
                continue
            renumber[index] = position
            position += 1
        fused_index = renumber[group[-1]]
        output_nr = {produced[slot]: nr for nr, slot in enumerate(outputs)}

        def edge(spec):
            if spec is None or spec[0] != "step":
                return spec
            if spec[1] in members:
                return ("step", fused_index, output_nr[(spec[1], spec[2])])
            return ("step", renumber[spec[1]], spec[2])

        def tensor_spec(spec):
            slot, node, nr, requires_grad, dev = spec
            if node is None or node[0] != "step":
                return spec
            if node[1] in members:
                return (slot, ("step", fused_index), output_nr[(node[1], nr)], requires_grad, dev)
            return (slot, ("step", renumber[node[1]]), nr, requires_grad, dev)

        new_steps = []
        for index, step in enumerate(steps):
            if index == group[-1]:
                edges = (tuple(edge(spec) for spec in input_edges), None) if records else None
                new_steps.append((KERNEL, kernel, device, tuple(inputs), ({}, False), tuple(outputs), edges, name))
            elif index in members:
                continue
            elif step[0] == KERNEL and step[6] is not None:
                specs, grad_name = step[6]
                new_steps.append(step[:6] + ((tuple(edge(spec) for spec in specs), grad_name),) + step[7:])
            elif step[0] == BACKWARD:
                _, original, roots, grads, retain_graph, single_root, single_grad = step
                grads = tuple(g if g is None or g[0] == "value" else tensor_spec(g) for g in grads)
                new_steps.append((BACKWARD, original, [tensor_spec(r) for r in roots], list(grads), retain_graph,
                                  single_root, single_grad))
            else:
                new_steps.append(step)
        slot_meta = dict(self.slot_meta)
        return Program(num_inputs=self.num_inputs, env_template=self.env_template, steps=new_steps,
                       output=_map_output(self.output, tensor_spec),
                       effects=[(ref, tensor_spec(spec)) for ref, spec in self.effects], tables=self.tables,
                       slot_meta=slot_meta)

    def still_valid(self) -> str | None:
        """Why this program cannot replay now (a kernel table or an outside tensor changed), or None."""
        for device_type, table in self.tables.items():
            if _node._tables.get(device_type) is not table:
                return "the kernel registry changed (a plugin was enabled or disabled)"
        for t, shape, dtype, requires_grad in self.guards:
            data = t._data
            if data.shape != shape or data.dtype != dtype or t._requires_grad is not requires_grad:
                return "a tensor from outside the call changed shape, dtype or requires_grad"
        return None

    def replay(self, input_tensors):
        fused = self.fused
        env = self.env_template[:]
        for i, t in enumerate(input_tensors):
            env[i] = t._data
        ctxs = [None] * len(self.steps)
        next_nr = _node._next_sequence_nr
        scalar_types = _node._SCALAR_TYPES
        asarray = _node._asarray
        index = -1
        for step in self.steps:
            index += 1
            kind = step[0]
            if kind is KERNEL:
                _, kernel, device, args, (params, has_refs), out_slots, edges, _ = step
                ctx = kernel()
                ctx.xp = device._xp
                if has_refs:
                    params = {key: _fill(value, env) for key, value in params.items()}
                out = kernel.forward(ctx, *[env[i] for i in args], **params)
                if len(out_slots) == 1:
                    if out.__class__ in scalar_types:
                        out = asarray(out)
                    env[out_slots[0]] = out
                else:
                    for slot, o in zip(out_slots, out):
                        env[slot] = asarray(o) if o.__class__ in scalar_types else o
                if edges is not None and fused is not None:
                    ctx.next_edges = edges  # markers for needs_input_grad: the fused node walks these nodes
                    ctxs[index] = ctx
                elif edges is not None:
                    specs, name = edges
                    # Inlined for the commonest edges (none, or an earlier step's node): one call less per input.
                    ctx.next_edges = tuple([None if spec is None else (ctxs[spec[1]], spec[2]) if spec[0] == "step"
                                            else _replay_edge(spec, ctxs, input_tensors) for spec in specs])
                    ctx.sequence_nr = next_nr()
                    if name is not None:
                        ctx.grad_fn_name = name
                    ctxs[index] = ctx
            elif kind == LOAD:
                env[step[2]] = step[1]._data
            elif kind == LOAD_GRAD:
                leaf = _resolve_leaf(step[1], input_tensors)
                env[step[2]] = leaf._grad._data
            elif kind == BACKWARD:
                _, original, root_specs, grad_specs, retain_graph, single_root, single_grad = step
                roots = [_rebuild(spec, env, ctxs, input_tensors) for spec in root_specs]
                grads = [None if spec is None else spec[1] if spec[0] == "value" else _rebuild(spec, env, ctxs, input_tensors)
                         for spec in grad_specs]
                original(roots[0] if single_root else roots,
                         (grads[0] if single_grad else grads) if any(g is not None for g in grads) else None,
                         retain_graph=retain_graph)
            elif kind == EAGER:
                _, original, owner, args, kwargs = step
                original(owner, *args, **kwargs)
            elif kind == WRITE:
                _, target, source, device = step
                _write_into(env[target], env[source], device)
            elif kind == KEEP_MASK:
                _, original, like_slot, device, p, shape, slot = step
                env[slot] = original(_node._make(env[like_slot], device, None, 0), p, shape)
        if fused is not None:
            node = CompiledFunctionBackward()
            node.ctxs = ctxs
            node.plan = fused
            node.num_outputs = fused.num_outputs
            node.next_edges = tuple([_replay_edge(spec, ctxs, input_tensors) for spec in fused.outer_specs])
            node.sequence_nr = next_nr()
            return _build_fused_output(fused.output, env, node, input_tensors)
        for ref, spec in self.effects:
            t = _resolve_leaf(ref, input_tensors)
            slot, node, output_nr, requires_grad, device = spec
            t._data = env[slot]
            t._grad_fn = _replay_node(node, ctxs, input_tensors)
            t._output_nr = output_nr
            t._requires_grad = requires_grad
        return _build_output(self.output, env, ctxs, input_tensors)



def _slots_read(step):
    """The slots a step reads."""
    kind = step[0]
    if kind == KERNEL:
        yield from step[3]
        if step[4][1]:
            yield from _slot_refs(tuple(step[4][0].values()))
    elif kind == BACKWARD:
        for spec in step[2]:
            yield spec[0]
        for spec in step[3]:
            if spec is not None and spec[0] != "value":
                yield spec[0]
    elif kind == WRITE:
        yield step[1]
        yield step[2]
    elif kind == KEEP_MASK:
        yield step[2]


def _slot_refs(value):
    if value.__class__ is _SlotRef:
        yield value.index
    elif value.__class__ in (tuple, list):
        for item in value:
            yield from _slot_refs(item)


def _edge_specs(step):
    return step[6][0] if step[0] == KERNEL and step[6] is not None else ()


def _edge_into(spec, members) -> bool:
    return spec is not None and spec[0] == "step" and spec[1] in members


def _tensor_specs_of_output(spec):
    kind = spec[0]
    if kind == "tensor":
        yield spec[1]
    elif kind in ("seq", "named"):
        for part in spec[2]:
            yield from _tensor_specs_of_output(part)
    elif kind == "dict":
        for _, part in spec[1]:
            yield from _tensor_specs_of_output(part)


def _tensor_specs_everywhere(program):
    yield from _tensor_specs_of_output(program.output)
    for _, spec in program.effects:
        yield spec
    for step in program.captured_steps:
        if step[0] == BACKWARD:
            yield from step[2]
            yield from (g for g in step[3] if g is not None and g[0] != "value")


def _map_output(spec, tensor_spec):
    """The output spec with each tensor spec passed through ``tensor_spec``."""
    kind = spec[0]
    if kind == "tensor":
        return ("tensor", tensor_spec(spec[1]))
    if kind in ("seq", "named"):
        return (kind, spec[1], tuple(_map_output(part, tensor_spec) for part in spec[2]))
    if kind == "dict":
        return (kind, tuple((key, _map_output(part, tensor_spec)) for key, part in spec[1]))
    return spec


class _FusedBackwardPlan:
    """How one node runs the backward of a whole replayed call, as AOTAutograd's compiled backward does.

    Replaying a call that only computes (kernels, loads of outside tensors, dropout masks) gives
    its outputs a single ``CompiledFunctionBackward`` node instead of one node per kernel. Its
    backward runs the captured kernels' backwards in reverse capture order (a node only feeds
    nodes created before it), summing gradients in a list indexed by step, and returns the
    gradients for the edges that leave the call: its input tensors, parameters and other outside
    tensors. The engine's per-node work -- the heap, the hook and saved-state checks, the
    buffers keyed by node -- is paid once per call instead of once per kernel.
    """

    def __init__(self, markers, actions, order, outer_specs, output, outputs_of_steps):
        self.markers = markers          # step -> next_edges stand-in: True where the input wants a gradient
        self.actions = actions          # step -> per input: None, ("inner", step, output_nr) or ("outer", edge)
        self.order = order              # kernel steps with a node, latest first
        self.outer_specs = outer_specs  # edge specs of the fused node (each once)
        self.output = output            # the output spec, tensors numbered as the fused node's outputs
        self.outputs_of_steps = outputs_of_steps  # fused output -> (step, output_nr) of the kernel that made it
        self.num_outputs = len(outputs_of_steps)

    @classmethod
    def build(cls, steps, output, effects):
        """The plan, or None where the call does more than compute (backward, optimizer steps, writes)."""
        if effects or any(step[0] not in (KERNEL, LOAD, KEEP_MASK) for step in steps):
            return None
        outputs: list = []  # (step, output_nr) of each fused output
        fused_output = cls._number_outputs(output, outputs)
        if fused_output is None or not outputs:
            return None
        markers: dict = {}
        actions: dict = {}
        outer_specs: list = []
        outer_index: dict = {}
        for index, step in enumerate(steps):
            if step[0] is not KERNEL or step[6] is None:
                continue
            specs, _ = step[6]
            markers[index] = tuple(None if spec is None else True for spec in specs)
            per_input = []
            for spec in specs:
                if spec is None:
                    per_input.append(None)
                elif spec[0] == "step":
                    per_input.append(("inner", spec[1], spec[2]))
                else:
                    key = (spec[0], spec[1]) if spec[0] != "fixed" else ("fixed", id(spec[1][0]), spec[1][1])
                    if key not in outer_index:
                        outer_index[key] = len(outer_specs)
                        outer_specs.append(spec)
                    per_input.append(("outer", outer_index[key]))
            actions[index] = tuple(per_input)
        order = sorted(actions, reverse=True)
        return cls([markers.get(index) for index in range(len(steps))], actions, order, tuple(outer_specs),
                   fused_output, tuple(outputs))

    @classmethod
    def _number_outputs(cls, spec, outputs):
        """``spec`` with each tensor made by a kernel step numbered as a fused output; None if not fusable."""
        kind = spec[0]
        if kind == "tensor":
            slot, node, output_nr, requires_grad, device = spec[1]
            if node is None:
                return ("fused", (slot, None, requires_grad, device))
            if node[0] != "step":
                return None
            outputs.append((node[1], output_nr))
            return ("fused", (slot, len(outputs) - 1, requires_grad, device))
        if kind in ("seq", "named"):
            parts = tuple(cls._number_outputs(s, outputs) for s in spec[2])
            return None if any(p is None for p in parts) else (kind, spec[1], parts)
        if kind == "dict":
            parts = tuple((key, cls._number_outputs(s, outputs)) for key, s in spec[1])
            return None if any(p is None for _, p in parts) else (kind, parts)
        return spec


class CompiledFunctionBackward(_node.Node):
    """The one node of a replayed call's outputs (see :class:`_FusedBackwardPlan`)."""

    grad_fn_name = "CompiledFunctionBackward"
    _saved_state = (True,)  # truthy: the engine marks it freed after a backward without retain_graph

    @property
    def saved(self):
        return self._saved_state

    @saved.setter
    def saved(self, value):
        if value is _node._FREED:
            self.ctxs = None  # the captured nodes and the arrays they saved go now, as eager's would
        self._saved_state = value

    @staticmethod
    def backward(self, grad_outputs):
        plan = self.plan
        ctxs = self.ctxs
        buffers: dict = {}  # captured node -> the gradient(s) it has received, summed as the engine sums them
        seeds = (grad_outputs,) if plan.num_outputs == 1 else grad_outputs
        for (step, output_nr), grad in zip(plan.outputs_of_steps, seeds):
            if grad is not None:
                _node._add_to_buffer(buffers, ctxs[step], output_nr, grad)
        outer = [None] * len(self.next_edges)
        actions = plan.actions
        for step in plan.order:
            ctx = ctxs[step]
            grad_outputs = buffers.pop(ctx, None)
            if grad_outputs is None:
                continue
            grad_inputs = ctx.backward(ctx, grad_outputs)
            if grad_inputs.__class__ is not tuple:
                grad_inputs = (grad_inputs,)
            for action, grad in zip(actions[step], grad_inputs):
                if grad is None or action is None:
                    continue
                if action[0] == "outer":
                    e = action[1]
                    outer[e] = grad if outer[e] is None else outer[e] + grad
                else:
                    _node._add_to_buffer(buffers, ctxs[action[1]], action[2], grad)
        return tuple(outer)


def _build_fused_output(spec, env, node, input_tensors):
    kind = spec[0]
    if kind == "fused":
        slot, output_nr, requires_grad, device = spec[1]
        t = _node._make(env[slot], device, None if output_nr is None else node, output_nr or 0)
        t._requires_grad = requires_grad
        return t
    if kind == "input":
        return input_tensors[spec[1]]
    if kind == "object":
        return spec[1]
    if kind == "seq":
        return spec[1](_build_fused_output(s, env, node, input_tensors) for s in spec[2])
    if kind == "named":
        return spec[1](*[_build_fused_output(s, env, node, input_tensors) for s in spec[2]])
    return {key: _build_fused_output(s, env, node, input_tensors) for key, s in spec[1]}


def _write_into(target, source, device):
    xp = device._xp
    if getattr(source, "shape", None) != target.shape:
        source = xp.broadcast_to(source, target.shape)
    xp.copyto(target, source, casting="unsafe")


def _resolve_leaf(ref, input_tensors):
    return input_tensors[ref[1]] if ref[0] == "input" else ref[1]


def _replay_edge(spec, ctxs, input_tensors):
    if spec is None:
        return None
    kind = spec[0]
    if kind == "step":
        return (ctxs[spec[1]], spec[2])
    if kind == "input":
        return (input_tensors[spec[1]], -1)
    if kind == "input_node":
        t = input_tensors[spec[1]]
        return (t._grad_fn, t._output_nr)
    return spec[1]


def _replay_node(node, ctxs, input_tensors=None):
    if node is None:
        return None
    kind = node[0]
    if kind == "step":
        return ctxs[node[1]]
    if kind == "input":
        return input_tensors[node[1]]._grad_fn
    return node[1]


def _rebuild(spec, env, ctxs, input_tensors):
    slot, node, output_nr, requires_grad, device = spec
    t = _node._make(env[slot], device, _replay_node(node, ctxs, input_tensors), output_nr)
    t._requires_grad = requires_grad
    return t


def _build_output(spec, env, ctxs, input_tensors):
    kind = spec[0]
    if kind == "tensor":
        return _rebuild(spec[1], env, ctxs, input_tensors)
    if kind == "input":
        return input_tensors[spec[1]]
    if kind == "object":
        return spec[1]
    if kind == "seq":
        return spec[1](_build_output(s, env, ctxs, input_tensors) for s in spec[2])
    if kind == "named":
        return spec[1](*[_build_output(s, env, ctxs, input_tensors) for s in spec[2]])
    return {key: _build_output(s, env, ctxs, input_tensors) for key, s in spec[1]}


def capture(function, args, kwargs, input_tensors, *, fullgraph: bool):
    """Run ``function(*args, **kwargs)`` eagerly while recording it: ``(result, program, reasons)``.

    ``program`` is None when the call cannot be replayed; ``reasons`` says why (each with its line).
    """
    recorder = Recorder(input_tensors, fullgraph=fullgraph)
    _install_patches()
    _active.recorder = recorder
    _node._observers.append(recorder)
    try:
        result = function(*args, **kwargs)
        program = recorder.finish(result)
    finally:
        try:
            _node._observers.remove(recorder)
        except ValueError:
            pass
        _active.recorder = None
        _remove_patches()
    if recorder.reasons:
        return result, None, recorder.reasons
    return result, program, []
