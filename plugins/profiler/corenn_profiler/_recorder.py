"""What runs while a profile records: the op observer, the module hooks and the range stack.

Everything here is on the hot path of a profiled program, so a record is a plain list
(the cheapest object to build per op) and all interpretation -- self times, nesting,
module attribution -- waits until the profile stops (:mod:`corenn_profiler.trace`).

A record that has ended becomes a tuple of plain values (shapes as tuples too): the garbage
collector stops tracking such tuples, so a long profile does not make every collection walk
all its records, which was most of the cost of ``record_shapes`` and ``profile_memory``.
What changes after an op has ended (its autograd sequence number, bytes freed later) is
kept aside and merged when the profile stops.

Memory (``profile_memory``) is counted the same way: while recording, an op's new output
gets a weakref whose callback is ``list.append`` (C code, no Python frame), so a free only
appends the weakref to a list; each op notes how long that list was at its start and at its
end. When the profile stops, those marks put every free between the right two op boundaries,
which gives each op's freed bytes, the live-bytes timeline and the peak exactly as counting
each free as it happened would (:meth:`Recorder.account_memory`).

The recorder is attached only while a profile records: ``corenn.plugins.observe_ops``
and the global module hooks are added at start and removed at stop, so a program that
has the plugin installed but profiles nothing runs exactly the code it ran without it.
"""
from __future__ import annotations

import gc
import os
import sys
import weakref
from threading import get_ident
from time import perf_counter_ns

import corenn
from corenn import Tensor
from corenn.nn.modules import module as module_api

# Kinds of record.
OP = "op"                      # a forward op, seen through the op observer
BACKWARD = "backward"          # one node's backward in the backward walk
USER = "user_annotation"       # record_function(...)
MODULE = "module"              # a module's forward call (with_modules)
STEP = "step"                  # ProfilerStep#N, between profile.step() calls

# Fields of a record (a list). INPUTS holds an op's input arrays while it runs, so that an
# output which is an input (an in-place op) is not counted as an allocation. With profile_memory,
# DIED_AT_START and DIED_AT_END of an op or backward call are how many watched arrays had been
# freed when it started and when it ended (before its outputs were counted); -1 when not noted.
(KIND, NAME, START, END, PARENT, SHAPES, STACK, MODULE_AT, SEQ, ALLOC, FREED, DEVICE, TID, INPUTS,
 DIED_AT_START, DIED_AT_END) = range(16)
RECORD_SIZE = 16

# Frames inside corenn or this plugin are not "the calling Python frame" of an op.
_SKIPPED_DIRS = tuple(os.path.dirname(os.path.abspath(m.__file__)) + os.sep for m in (corenn, sys.modules[__package__]))
MAX_STACK_DEPTH = 32
_NOT_AN_ARRAY = object()


class Watch(weakref.ref):
    """A weakref to an array that a recorded op allocated: the op's record index and the bytes."""

    __slots__ = ("index", "nbytes")


def array_root(array):
    """The array that owns ``array``'s memory (numpy and cupy views keep it as ``.base``)."""
    while True:
        base = getattr(array, "base", None)
        if base is None or not hasattr(base, "nbytes"):
            return array
        array = base


class Recorder:
    """Collects records for one active stretch of a profile (one ``Trace`` once stopped)."""

    def __init__(self, *, record_shapes=False, profile_memory=False, with_stack=False, with_modules=False,
                 synchronize=None):
        self.record_shapes = record_shapes
        self.profile_memory = profile_memory
        self.with_stack = with_stack
        self.with_modules = with_modules
        self.synchronize = synchronize  # device type -> callable, for devices whose ops run asynchronously
        self.records: list[list] = []
        self.main_thread = get_ident()
        self.open: list[int] = []                  # the main thread's open records, innermost last
        self.other_threads: dict[int, list[int]] = {}
        self.module_stack: list[tuple] = []        # (module, path, record index), innermost last
        self.child_paths: dict[tuple[str, int], str] = {}  # (parent's path, id(child)) -> the child's path
        self.module_info: dict[str, dict] = {}     # path -> type, parameter bytes, calls, output bytes
        # Autograd sequence number -> its forward op's record index; written into the records at stop.
        self.forward_by_sequence_nr: dict[int, int] = {}
        # The last op's node, until it has returned (its sequence_nr is set then), and the op's record index.
        self.pending_node = None
        self.pending_index = -1
        # Memory: a Watch per array allocated by a recorded op, kept here so that it calls back when
        # the array is freed; the callback appends it to ``died``, in the order of the frees.
        self.watching: list[Watch] = []
        self.died: list[Watch] = []
        self.died_append = self.died.append        # every Watch's callback: one bound method
        # Worked out from the above when the profile stops.
        self.peak_bytes = 0
        self.peak_at = (0, -1)                     # (time, record index) when the peak was reached
        self.memory_samples: list[tuple[int, int]] = []  # (time, live bytes) at op boundaries where it moved
        # Input shapes, one tuple per distinct signature: the fresh tuples of an op whose shapes were seen
        # before are freed at once, so a long profile holds each signature once and the garbage collector,
        # whose pace follows the objects that stay, runs as often as it would without the profile.
        self.same_shapes = {}.setdefault
        self.handles = []
        self.start_ns = self.stop_ns = 0
        self.active = False
        self.froze_objects = False

    # -- attach / detach ------------------------------------------------------------------------------------
    def start(self) -> None:
        # Recording allocates a few small objects per op, which makes CPython's collector run far more
        # often, and each full collection walked the whole program (model, modules, libraries): that
        # was a sixth of the cost of recording with every option on. What exists now is moved out of
        # its way until the profile stops (gc.freeze, as servers do before forking); a program that
        # froze objects itself is left as it is.
        self.froze_objects = gc.get_freeze_count() == 0
        if self.froze_objects:
            gc.freeze()
        self.start_ns = perf_counter_ns()
        self.active = True
        self.handles.append(corenn.plugins.observe_ops(self))
        if self.with_modules:
            self.handles.append(module_api.register_module_forward_pre_hook(self.module_pre))
            self.handles.append(module_api.register_module_forward_hook(self.module_post, always_call=True))

    def stop(self) -> None:
        if not self.active:
            return
        if self.froze_objects:
            gc.unfreeze()
        self.active = False
        for handle in self.handles:
            handle.remove()
        self.handles.clear()
        if self.pending_node is not None:
            self.resolve_pending_node()
        self.stop_ns = now = perf_counter_ns()
        frees = len(self.died)  # frees after this are after the profile: not counted
        records = self.records
        for index in self.open + [i for stack in self.other_threads.values() for i in stack]:
            if records[index][END] == 0:
                records[index][END] = now  # a range still open at stop ends there
            self.end_record(index)
        self.open.clear()
        self.other_threads.clear()
        self.module_stack.clear()
        freed_by = self.account_memory(now, self.died[:frees]) if self.profile_memory else {}
        if self.with_modules:
            module_info = self.module_info
            for record in records:
                if record[KIND] == MODULE:
                    module_info[record[NAME]]["calls"] += 1
        # Arrays still alive are "live at the end"; forget them: a weakref that dies before its array
        # never calls back, so their later frees cost nothing.
        self.watching.clear()
        self.died.clear()
        self.merge_late_fields(freed_by)

    def end_record(self, index) -> None:
        """Freeze an ended record: a tuple of plain values, which the garbage collector stops tracking."""
        record = self.records[index]
        if record.__class__ is list:
            record[INPUTS] = None
            self.records[index] = tuple(record)

    def merge_late_fields(self, freed_by) -> None:
        """Write the sequence numbers kept aside and ``freed_by`` (record index -> bytes) into the (frozen) records."""
        records = self.records
        for sequence_nr, index in self.forward_by_sequence_nr.items():
            record = list(records[index])
            record[SEQ] = sequence_nr
            records[index] = tuple(record)
        for index, freed in freed_by.items():
            record = list(records[index])
            record[FREED] += freed
            records[index] = tuple(record)
        self.forward_by_sequence_nr.clear()

    # -- the op observer (corenn.plugins.observe_ops) ----------------------------------------------------------
    def stack_of_this_thread(self) -> list[int]:
        tid = get_ident()
        if tid == self.main_thread:
            return self.open
        return self.other_threads.setdefault(tid, [])

    def open_record(self, kind, name) -> list:
        """Start a range record (annotations, modules, steps, backward calls); its START is set last by the caller."""
        if self.pending_node is not None:
            self.resolve_pending_node()
        tid = get_ident()
        stack = self.open if tid == self.main_thread else self.stack_of_this_thread()
        record = [kind, name, 0, 0, stack[-1] if stack else -1, None, None,
                  self.module_stack[-1][2] if self.module_stack else -1, 0, 0, 0, None, tid, None, -1, -1]
        stack.append(len(self.records))
        self.records.append(record)
        return record

    def close_record(self, kind, outputs=None) -> int:
        """End the innermost open record of ``kind`` (and any left open inside it); its index, or -1.

        ``outputs``: the arrays it produced, counted as allocations with ``profile_memory``."""
        now = perf_counter_ns()
        stack = self.open if get_ident() == self.main_thread else self.stack_of_this_thread()
        records = self.records
        while stack:
            index = stack.pop()
            record = records[index]
            record[END] = now
            if record[KIND] == kind:
                if outputs is not None and self.profile_memory:
                    record[DIED_AT_END] = len(self.died)
                    self.count_allocations(index, record, outputs, record[INPUTS] or ())
                self.end_record(index)
                return index
            self.end_record(index)
        return -1

    def op_start(self, op_name, device, arrays):
        # open_record and resolve_pending_node, inlined: this runs for every op while a profile records.
        if self.pending_node is not None:  # not held in a local: the node may be the last owner of arrays
            number = self.pending_node.sequence_nr
            self.pending_node = None
            if number:
                self.forward_by_sequence_nr[number] = self.pending_index
        tid = get_ident()
        stack = self.open if tid == self.main_thread else self.stack_of_this_thread()
        module_stack = self.module_stack
        records = self.records
        shapes = None
        if self.record_shapes:
            shapes = tuple([getattr(a, "shape", ()) for a in arrays])
            try:
                shapes = self.same_shapes(shapes, shapes)
            except TypeError:  # a shape that is not a tuple: kept as it is
                pass
        if self.profile_memory:
            record = [OP, op_name, 0, 0, stack[-1] if stack else -1, shapes,
                      self.python_stack() if self.with_stack else None,
                      module_stack[-1][2] if module_stack else -1, 0, 0, 0, device.type, tid,
                      arrays, len(self.died), -1]
        else:
            record = [OP, op_name, 0, 0, stack[-1] if stack else -1, shapes,
                      self.python_stack() if self.with_stack else None,
                      module_stack[-1][2] if module_stack else -1, 0, 0, 0, device.type, tid, None, -1, -1]
        self.pending_index = index = len(records)  # op_node comes next, with this op's node
        stack.append(index)
        records.append(record)
        if self.synchronize:
            sync = self.synchronize.get(device.type)
            if sync is not None:
                sync()
        record[START] = perf_counter_ns()

    def op_node(self, op_name, node):
        # The node's sequence_nr is set once the op returns: read it at the next event.
        self.pending_node = node

    def op_end(self, op_name, device, out):
        if self.synchronize:
            sync = self.synchronize.get(device.type)
            if sync is not None:
                sync()
        end = perf_counter_ns()
        stack = self.open if get_ident() == self.main_thread else self.stack_of_this_thread()
        index = stack.pop()
        records = self.records
        record = records[index]
        record[END] = end
        if self.profile_memory:
            record[DIED_AT_END] = len(self.died)
            inputs = record[INPUTS]
            record[INPUTS] = None
            # The usual output, one array that owns its memory, counted inline (count_allocations
            # and watch in one): new unless it is an input, as an in-place op's output is.
            if out.__class__ is not tuple and getattr(out, "base", _NOT_AN_ARRAY) is None:
                for x in inputs:
                    if x is out:
                        break
                else:
                    try:
                        ref = Watch(out, self.died_append)
                    except TypeError:  # not watchable (a numpy scalar): not counted
                        ref = None
                    if ref is not None:
                        ref.index = index
                        ref.nbytes = record[ALLOC] = out.nbytes
                        self.watching.append(ref)
            else:
                self.count_allocations(index, record, out if out.__class__ is tuple else (out,), inputs)
        records[index] = tuple(record)  # end_record, inlined

    def resolve_pending_node(self) -> None:
        number = self.pending_node.sequence_nr
        self.pending_node = None
        if number:
            self.forward_by_sequence_nr[number] = self.pending_index

    def backward_start(self, node, grad_outputs):
        record = self.open_record(BACKWARD, node.grad_fn_name)
        number = node.sequence_nr
        record[SEQ] = number
        forward = self.forward_by_sequence_nr.get(number)
        if forward is not None:
            record[MODULE_AT] = self.records[forward][MODULE_AT]  # backward belongs to its forward op's module
            record[DEVICE] = self.records[forward][DEVICE]
        if self.profile_memory or self.record_shapes:
            grads = grad_outputs if grad_outputs.__class__ in (tuple, list) else (grad_outputs,)
            if self.record_shapes:
                shapes = tuple([getattr(g, "shape", ()) for g in grads])
                try:
                    record[SHAPES] = self.same_shapes(shapes, shapes)
                except TypeError:  # a shape that is not a tuple: kept as it is
                    record[SHAPES] = shapes
            if self.profile_memory:
                record[INPUTS] = grads
                record[DIED_AT_START] = len(self.died)
        record[START] = perf_counter_ns()

    def backward_end(self, node, grad_inputs):
        self.close_record(BACKWARD, grad_inputs if grad_inputs.__class__ is tuple else (grad_inputs,))

    # -- memory --------------------------------------------------------------------------------------------
    def count_allocations(self, index, record, outputs, inputs) -> None:
        """Count the memory of ``outputs`` that is new: not an input, not a view of an input, each array once.

        A new array's bytes go to record ``index``; a Watch on the output (which keeps that memory
        alive) tells when it is freed."""
        allocated_roots = []
        for array in outputs:
            base = getattr(array, "base", _NOT_AN_ARRAY)
            if base is _NOT_AN_ARRAY or array is None:
                continue
            if base is None:  # owns its memory: new unless it is an input (an in-place op)
                root = array
                for x in inputs:
                    if x is array:
                        root = None
                        break
            else:  # a view: new only if what it views is not an input's memory
                root = array_root(array)
                for x in inputs:
                    if hasattr(x, "nbytes") and array_root(x) is root:
                        root = None
                        break
            if root is None:
                continue
            for seen in allocated_roots:  # one output twice (or two views of one new array) is one allocation
                if seen is root:
                    break
            else:
                allocated_roots.append(root)
                try:
                    ref = Watch(array, self.died_append)
                except TypeError:  # numpy scalars can't be watched: skipped
                    continue
                ref.index = index
                ref.nbytes = nbytes = root.nbytes
                record[ALLOC] += nbytes
                self.watching.append(ref)

    def account_memory(self, stop_ns, died) -> dict[int, int]:
        """The live-bytes timeline, the peak and the bytes freed per record, from the marks the ops left.

        ``died``: the watched arrays freed while recording, in the order they were freed. Live
        bytes at an op boundary are the bytes allocated at boundaries before it (and at it, for
        an end) less those of the first ``DIED_AT_START`` / ``DIED_AT_END`` frees. Boundaries are
        taken in the order of those marks (time breaks ties): an array's free always comes after
        the mark of the op that allocated it, so no live figure counts a free before its
        allocation, whichever thread ran the ops. Returns record index -> bytes freed.
        """
        freed_by: dict[int, int] = {}
        freed_before = [0]  # freed_before[k]: bytes of the first k frees
        total = 0
        for ref in died:
            freed_by[ref.index] = freed_by.get(ref.index, 0) + ref.nbytes
            total += ref.nbytes
            freed_before.append(total)
        boundaries = []  # (frees before it, time, 0 for a start and 1 for an end, record index)
        for index, record in enumerate(self.records):
            if record[DIED_AT_START] >= 0:
                boundaries.append((record[DIED_AT_START], record[START], 0, index))
            if record[DIED_AT_END] >= 0:
                boundaries.append((record[DIED_AT_END], record[END], 1, index))
        boundaries.sort()
        records = self.records
        allocated = last = 0
        samples = self.memory_samples
        for frees, time_ns, is_end, index in boundaries:
            if is_end:
                allocated += records[index][ALLOC]
            live = allocated - freed_before[frees]
            if is_end and live > self.peak_bytes:
                self.peak_bytes = live
                self.peak_at = (time_ns, index)
            if live != last:
                samples.append((time_ns, live))
                last = live
        live = allocated - total
        if live != last:  # what was freed after the last op
            samples.append((stop_ns, live))
        return freed_by

    # -- the calling Python frame --------------------------------------------------------------------------
    def python_stack(self) -> tuple:
        """(filename, line, function) of the user's frames calling this op, innermost first."""
        frame = sys._getframe(2)
        skipped = _SKIPPED_DIRS
        while frame is not None and frame.f_code.co_filename.startswith(skipped):
            frame = frame.f_back
        frames = []
        while frame is not None and len(frames) < MAX_STACK_DEPTH:
            code = frame.f_code
            if not code.co_filename.startswith(skipped):
                frames.append((code.co_filename, frame.f_lineno, code.co_name))
            frame = frame.f_back
        return tuple(frames)

    # -- modules (global module hooks, with_modules=True) ----------------------------------------------------
    def module_pre(self, module, args):
        # open_record and the module's path, inlined: this runs for every module call.
        if get_ident() != self.main_thread:
            return None
        if self.pending_node is not None:  # resolve_pending_node, inlined
            number = self.pending_node.sequence_nr
            self.pending_node = None
            if number:
                self.forward_by_sequence_nr[number] = self.pending_index
        module_stack = self.module_stack
        if module_stack:
            parent = module_stack[-1]
            path = self.child_paths.get((parent[1], id(module)))
            if path is None:
                path = self.child_path(parent[0], parent[1], module)
            module_at = parent[2]
        else:
            path = type(module).__name__
            module_at = -1
        if path not in self.module_info:  # its calls are counted from the records at stop
            self.module_info[path] = {"type": type(module).__name__, "calls": 0, "output_bytes": 0,
                                      "parameter_bytes": sum(p.numel() * p.element_size() for p in module.parameters())}
        stack = self.open
        records = self.records
        index = len(records)
        record = [MODULE, path, 0, 0, stack[-1] if stack else -1, None, None, module_at, 0, 0, 0, None,
                  self.main_thread, None, -1, -1]
        stack.append(index)
        records.append(record)
        module_stack.append((module, path, index))
        record[START] = perf_counter_ns()
        return None

    def module_post(self, module, args, output):
        end = perf_counter_ns()
        if get_ident() != self.main_thread:
            return None
        module_stack = self.module_stack
        # Pop to this module: a forward that raised in a child leaves the child's entry behind.
        while module_stack:
            entry = module_stack.pop()
            if entry[0] is module:
                index = entry[2]
                stack = self.open
                if stack and stack[-1] == index:  # close_record(MODULE), inlined for the usual case
                    stack.pop()
                    record = self.records[index]
                    record[END] = end
                    self.records[index] = tuple(record)
                else:  # ranges left open inside it (a record_function whose block raised) end with it
                    self.close_record(MODULE)
                self.module_info[entry[1]]["output_bytes"] += (output.nbytes if output.__class__ is Tensor
                                                               else tensor_bytes(output))
                break
        return None

    def child_path(self, parent, parent_path, module) -> str:
        """``module``'s path under ``parent`` (its attribute name there), cached for the next call."""
        name = next((child_name for child_name, child in parent.named_children() if child is module),
                    type(module).__name__)  # called by its parent without being its child
        path = self.child_paths[(parent_path, id(module))] = f"{parent_path}.{name}"
        return path


def tensor_bytes(output) -> int:
    """Bytes of the tensors in a module's output (a tensor, or tuples, lists and dicts of them)."""
    if isinstance(output, corenn.Tensor):
        return output.nbytes
    if isinstance(output, (tuple, list)):
        return sum(tensor_bytes(item) for item in output)
    if isinstance(output, dict):
        return sum(tensor_bytes(item) for item in output.values())
    return 0
