"""Events, their averages and the table, in ``torch.autograd.profiler_util``'s shapes.

Times are in microseconds (floats), as in PyTorch; memory in bytes (ints). Tables print
time as ``us``/``ms``/``s`` like PyTorch and memory as ``B``/``KiB``/``MiB``/``GiB`` -- binary
units named as such, where PyTorch prints powers of 1024 as "KB"/"MB".
"""
from __future__ import annotations

from collections import namedtuple

__all__ = ["FunctionEvent", "FunctionEventAvg", "EventList", "format_time", "format_memory", "Interval"]

Interval = namedtuple("Interval", ["start", "end"])  # microseconds since the profile started

KiB, MiB, GiB = 1024, 1024 ** 2, 1024 ** 3


def format_time(time_us: float) -> str:
    """``'12.345us'``, ``'1.234ms'``, ``'2.000s'``: PyTorch's spelling of a duration."""
    if time_us >= 1e6:
        return f"{time_us / 1e6:.3f}s"
    if time_us >= 1e3:
        return f"{time_us / 1e3:.3f}ms"
    return f"{time_us:.3f}us"


def format_memory(nbytes: int) -> str:
    """``'716 B'``, ``'1.50 KiB'``, ``'3.25 MiB'``, ``'1.00 GiB'``: binary units, always named."""
    size = abs(nbytes)
    if size >= GiB:
        return f"{nbytes / GiB:.2f} GiB"
    if size >= MiB:
        return f"{nbytes / MiB:.2f} MiB"
    if size >= KiB:
        return f"{nbytes / KiB:.2f} KiB"
    return f"{int(nbytes)} B"


def format_stack_frame(frame) -> str:
    filename, line, function = frame
    return f"{filename}({line}): {function}"


class FunctionEvent:
    """One recorded range: an op, a backward call, a ``record_function`` range or a profiler step.

    Attributes as PyTorch's ``FunctionEvent``: ``name``, ``id``, ``time_range`` (start and
    end, microseconds since the profile started), ``cpu_time_total`` and
    ``self_cpu_time_total`` (microseconds), ``input_shapes``, ``stack`` (``"file(line):
    function"`` strings, innermost first), ``sequence_nr`` (the graph node's number; a
    backward event has its forward op's), ``cpu_children``, ``cpu_parent``, ``thread``,
    ``device_type``, ``cpu_memory_usage`` (bytes allocated by it and its children),
    ``self_cpu_memory_usage`` (by it alone). Beyond PyTorch: ``kind`` (``"op"``,
    ``"backward"``, ``"user_annotation"``, ``"step"``), ``module`` (the path of the module
    whose forward ran the op, e.g. ``"Net.encoder.0"``; a backward event has its forward
    op's), ``forward_op`` (for a backward event: the name of the forward op that recorded
    its node), ``allocated_bytes`` / ``freed_bytes`` (what this event's own outputs took,
    and how much of it was freed before the profile stopped; never negative).
    """

    def __init__(self, id, name, kind, start_us, end_us, *, thread=0, input_shapes=None, stack=(),
                 sequence_nr=-1, module="", device_type="cpu", allocated_bytes=0, freed_bytes=0, forward_op=None):
        self.id = id
        self.name = name
        self.kind = kind
        self.time_range = Interval(start_us, end_us)
        self.thread = thread
        self.input_shapes = input_shapes if input_shapes is not None else []
        self.stack = list(stack)
        self.sequence_nr = sequence_nr
        self.module = module
        self.device_type = device_type
        self.allocated_bytes = allocated_bytes
        self.freed_bytes = freed_bytes
        self.forward_op = forward_op
        self.cpu_children: list[FunctionEvent] = []
        self.cpu_parent: FunctionEvent | None = None
        self.count = 1

    @property
    def key(self) -> str:
        return self.name

    @property
    def is_backward(self) -> bool:
        return self.kind == "backward"

    @property
    def cpu_time_total(self) -> float:
        return self.time_range.end - self.time_range.start

    @property
    def cpu_time(self) -> float:
        return self.cpu_time_total

    @property
    def self_cpu_time_total(self) -> float:
        return self.cpu_time_total - sum(child.cpu_time_total for child in self.cpu_children)

    @property
    def self_cpu_memory_usage(self) -> int:
        return self.allocated_bytes

    @property
    def cpu_memory_usage(self) -> int:
        return self.allocated_bytes + sum(child.cpu_memory_usage for child in self.cpu_children)

    @property
    def device_time_total(self) -> float:
        """Synchronised time of an op on an accelerator (``cuda``); 0 for ``cpu`` ops."""
        return self.cpu_time_total if self.device_type != "cpu" else 0.0

    cuda_time_total = device_time_total

    @property
    def self_device_time_total(self) -> float:
        if self.device_type == "cpu":
            return 0.0
        return self.cpu_time_total - sum(c.cpu_time_total for c in self.cpu_children if c.device_type != "cpu")

    self_cuda_time_total = self_device_time_total

    def __repr__(self):
        return (f"<FunctionEvent id={self.id} name={self.name!r} kind={self.kind} "
                f"cpu_time_total={format_time(self.cpu_time_total)} self={format_time(self.self_cpu_time_total)} "
                f"input_shapes={self.input_shapes} sequence_nr={self.sequence_nr}>")


class FunctionEventAvg:
    """Events of one key (name, and input shapes / stack when grouped by them), summed: PyTorch's ``FunctionEventAvg``."""

    def __init__(self, key, input_shapes=None, stack=()):
        self.key = key
        self.input_shapes = input_shapes if input_shapes is not None else ""
        self.stack = list(stack)
        self.count = 0
        self.cpu_time_total = 0.0
        self.self_cpu_time_total = 0.0
        self.device_time_total = 0.0
        self.self_device_time_total = 0.0
        self.cpu_memory_usage = 0
        self.self_cpu_memory_usage = 0
        self.allocated_bytes = 0
        self.freed_bytes = 0
        self.is_backward = False

    def add(self, event: FunctionEvent) -> "FunctionEventAvg":
        self.count += 1
        self.cpu_time_total += event.cpu_time_total
        self.self_cpu_time_total += event.self_cpu_time_total
        self.device_time_total += event.device_time_total
        self.self_device_time_total += event.self_device_time_total
        self.cpu_memory_usage += event.cpu_memory_usage
        self.self_cpu_memory_usage += event.self_cpu_memory_usage
        self.allocated_bytes += event.allocated_bytes
        self.freed_bytes += event.freed_bytes
        self.is_backward = event.is_backward
        return self

    name = property(lambda self: self.key)
    cuda_time_total = property(lambda self: self.device_time_total)
    self_cuda_time_total = property(lambda self: self.self_device_time_total)

    @property
    def cpu_time(self) -> float:
        """Average time per call (microseconds)."""
        return self.cpu_time_total / self.count if self.count else 0.0

    @property
    def device_time(self) -> float:
        return self.device_time_total / self.count if self.count else 0.0

    cuda_time = device_time

    def __repr__(self):
        return (f"<FunctionEventAvg key={self.key!r} count={self.count} cpu_time_total="
                f"{format_time(self.cpu_time_total)} self_cpu_time_total={format_time(self.self_cpu_time_total)} "
                f"input_shapes={self.input_shapes}>")


_SORT_KEYS = ("cpu_time", "cpu_time_total", "self_cpu_time_total", "device_time", "device_time_total",
              "self_device_time_total", "cuda_time", "cuda_time_total", "self_cuda_time_total", "cpu_memory_usage",
              "self_cpu_memory_usage", "count")


class EventList(list):
    """A list of events (or averages) with PyTorch's ``key_averages()``, ``table()`` and ``total_average()``."""

    def __init__(self, events=(), *, show_device=False):
        super().__init__(events)
        self.show_device = show_device

    @property
    def self_cpu_time_total(self) -> float:
        return sum(event.self_cpu_time_total for event in self)

    def key_averages(self, group_by_input_shape: bool = False, group_by_stack_n: int = 0) -> "EventList":
        """Sum events by name (and by input shapes, and by the ``group_by_stack_n`` innermost frames).

        Profiler steps (``ProfilerStep#3``) are summed under ``ProfilerStep*``, as PyTorch does.
        """
        if not isinstance(group_by_stack_n, int) or group_by_stack_n < 0:
            raise ValueError(f"key_averages(): argument 'group_by_stack_n' must be a non-negative int, "
                             f"got {group_by_stack_n!r}")
        groups: dict = {}
        for event in self:
            if isinstance(event, FunctionEventAvg):
                raise TypeError("key_averages(): these are averages already; call it on the events")
            key = "ProfilerStep*" if event.kind == "step" else event.key
            shapes = str(event.input_shapes) if group_by_input_shape else ""
            stack = tuple(event.stack[:group_by_stack_n]) if group_by_stack_n else ()
            average = groups.get((key, shapes, stack))
            if average is None:
                average = groups[(key, shapes, stack)] = FunctionEventAvg(key, shapes, stack)
            average.add(event)
        return EventList(groups.values(), show_device=self.show_device)

    def total_average(self) -> FunctionEventAvg:
        total = FunctionEventAvg("Total")
        for event in self:
            total.count += event.count
            total.cpu_time_total += event.cpu_time_total
            total.self_cpu_time_total += event.self_cpu_time_total
            total.cpu_memory_usage += event.cpu_memory_usage
            total.self_cpu_memory_usage += event.self_cpu_memory_usage
        return total

    def table(self, sort_by: str | None = None, row_limit: int = 100, max_src_column_width: int = 75,
              max_name_column_width: int = 55, max_shapes_column_width: int = 80, header: str | None = None,
              top_level_events_only: bool = False) -> str:
        """The events as PyTorch's table: one row per event (per key, after ``key_averages()``).

        Columns: Name, Self CPU %, Self CPU, CPU total %, CPU total, CPU time avg, then CPU Mem
        and Self CPU Mem when memory was profiled, # of Calls, then Input Shapes when grouped
        by shape and Source Location when grouped by stack. ``sort_by`` is an attribute such
        as ``"cpu_time_total"`` or ``"self_cpu_memory_usage"`` (descending); ``row_limit`` caps
        the rows (-1: all). Percentages are of the sum of every event's self time, which is
        the last line.
        """
        if sort_by is not None and sort_by not in _SORT_KEYS:
            raise ValueError(f"table(): argument 'sort_by' must be one of {', '.join(_SORT_KEYS)}; got {sort_by!r}")
        if not isinstance(row_limit, int):
            raise TypeError(f"table(): argument 'row_limit' must be int, got {type(row_limit).__name__}")
        return build_table(self, sort_by=sort_by, row_limit=row_limit, max_src_column_width=max_src_column_width,
                           max_name_column_width=max_name_column_width,
                           max_shapes_column_width=max_shapes_column_width, header=header,
                           top_level_events_only=top_level_events_only, show_device=self.show_device)


def build_table(events, *, sort_by, row_limit, max_src_column_width, max_name_column_width, max_shapes_column_width,
                header, top_level_events_only, show_device) -> str:
    if len(events) == 0:
        return ""
    rows = list(events)
    if top_level_events_only:
        rows = [e for e in rows if getattr(e, "cpu_parent", None) is None]
    if sort_by is not None:
        rows.sort(key=lambda e: getattr(e, sort_by), reverse=True)
    if row_limit is not None and row_limit >= 0:
        rows = rows[:row_limit]
    has_memory = any(e.cpu_memory_usage > 0 for e in events)
    has_shapes = any(len(str(e.input_shapes)) > 0 and e.input_shapes not in ("", []) for e in events)
    has_stack = any(len(e.stack) > 0 for e in events) and all(isinstance(e, FunctionEventAvg) for e in events)
    has_device = show_device

    name_width = min(max(len(e.key) for e in rows) + 4 if rows else 4, max_name_column_width)
    headers = ["Name", "Self CPU %", "Self CPU", "CPU total %", "CPU total", "CPU time avg"]
    if has_device:
        headers += ["Self CUDA", "Self CUDA %", "CUDA total", "CUDA time avg"]
    if has_memory:
        headers += ["CPU Mem", "Self CPU Mem"]
    headers.append("# of Calls")
    widths = [name_width] + [12] * (len(headers) - 1)
    shapes_width = src_width = 0
    if has_shapes:
        shapes_width = min(max(len(str(e.input_shapes)) for e in rows) + 4 if rows else 4, max_shapes_column_width)
        headers.append("Input Shapes")
        widths.append(shapes_width)
    if has_stack:
        src_width = min(max(len(frame) for e in rows for frame in e.stack) + 4 if rows else 4, max_src_column_width)
        headers.append("Source Location")
        widths.append(src_width)

    def line(cells):
        return "".join(f"{cell:>{width}}  " for cell, width in zip(cells, widths)).rstrip() + "\n"

    separator = "".join("-" * width + "  " for width in widths) + "\n"
    total_self = sum(e.self_cpu_time_total for e in events)
    total_device = sum(e.self_device_time_total for e in events) if has_device else 0.0

    def percent(part, whole):
        return f"{100.0 * part / whole:.2f}%" if whole > 0 else "0.00%"

    def clip(text, width):
        text = str(text)
        return text[: width - 3] + "..." if len(text) >= width - 3 and width > 3 else text

    out = []
    if header:
        out.append("=" * len(separator.rstrip()) + "\n" + header + "\n")
    out.append(separator)
    out.append(line(headers))
    out.append(separator)
    for event in rows:
        cells = [clip(event.key, max_name_column_width), percent(event.self_cpu_time_total, total_self),
                 format_time(event.self_cpu_time_total), percent(event.cpu_time_total, total_self),
                 format_time(event.cpu_time_total), format_time(event.cpu_time_total / max(event.count, 1))]
        if has_device:
            cells += [format_time(event.self_device_time_total), percent(event.self_device_time_total, total_device),
                      format_time(event.device_time_total),
                      format_time(event.device_time_total / max(event.count, 1))]
        if has_memory:
            cells += [format_memory(event.cpu_memory_usage), format_memory(event.self_cpu_memory_usage)]
        cells.append(str(event.count))
        if has_shapes:
            cells.append(clip(event.input_shapes, shapes_width))
        if has_stack:
            cells.append(clip(event.stack[0] if event.stack else "", src_width))
        out.append(line(cells))
        if has_stack:
            for frame in event.stack[1:]:
                out.append(line([""] * (len(cells) - 1) + [clip(frame, src_width)]))
    out.append(separator)
    out.append(f"Self CPU time total: {format_time(total_self)}\n")
    if has_device:
        out.append(f"Self CUDA time total: {format_time(total_device)}\n")
    return "".join(out)
