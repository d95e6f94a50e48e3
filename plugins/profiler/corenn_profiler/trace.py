"""One recorded stretch of a profile, interpreted: events, module tree, memory, exports.

A :class:`Trace` is built from a stopped recorder; everything here runs after
profiling, never on the op path.
"""
from __future__ import annotations

import gzip
import json
import os
import threading
import warnings

from corenn_profiler import _recorder as rec
from corenn_profiler.events import EventList, FunctionEvent, format_memory, format_stack_frame, format_time

__all__ = ["Trace", "ModuleStats", "ModuleSummary", "MemorySummary", "DEFAULT_MAX_TRACE_EVENTS"]

#: How many complete events ``export_chrome_trace`` writes at most, unless ``profile(max_trace_events=)`` says otherwise.
DEFAULT_MAX_TRACE_EVENTS = 200_000
#: Runs of consecutive same-name sibling events, each shorter than this, become one event when a trace is too big.
AGGREGATE_BELOW_US = 50.0


class ModuleStats:
    """One row of :meth:`Trace.module_summary`: a module's path, type and what its calls cost.

    Times are microseconds, memory bytes. ``forward_time`` is the time inside the module's
    forward calls (children included); ``backward_time`` is the time of the backward calls
    of every op its forward ran (children included); ``parameter_bytes`` counts its
    parameters and its children's; ``activation_bytes`` is the size of the tensors its
    forward returned, per call (the mean over calls); ``allocated_bytes`` is the memory its
    forward ops allocated (children included; with ``profile_memory=True``).
    """

    def __init__(self, path, type_name, depth, calls, parameter_bytes, activation_bytes):
        self.path, self.type_name, self.depth, self.calls = path, type_name, depth, calls
        self.parameter_bytes, self.activation_bytes = parameter_bytes, activation_bytes
        self.forward_time = self.backward_time = 0.0
        self.allocated_bytes = self.backward_allocated_bytes = 0
        self.children: list[ModuleStats] = []

    @property
    def name(self) -> str:
        return self.path.rsplit(".", 1)[-1]

    def __repr__(self):
        return (f"<ModuleStats {self.path} ({self.type_name}) calls={self.calls} forward={format_time(self.forward_time)}"
                f" backward={format_time(self.backward_time)}>")


class ModuleSummary(str):
    """The module tree as a printed table (a ``str``); ``.rows`` holds the :class:`ModuleStats`, depth first."""

    rows: list


class MemorySummary(str):
    """Peak memory and the top allocation sites as printed text (a ``str``); ``.stats`` and ``.sites`` hold the numbers."""

    stats: dict
    sites: list


def _is_within(path: str, ancestor: str) -> bool:
    return path == ancestor or path.startswith(ancestor + ".")


def tree_prefixes(rows) -> list[str]:
    """``├─ ``/``└─ `` branches with ``│  `` rails for rows in depth-first order (``.depth`` and ``.children`` set)."""
    prefixes = []

    def walk(entry, rails):
        for i, child in enumerate(entry.children):
            last = i == len(entry.children) - 1
            prefixes_by_id[id(child)] = rails + ("└─ " if last else "├─ ")
            walk(child, rails + ("   " if last else "│  "))
    prefixes_by_id = {}
    for entry in rows:
        if entry.depth == 0:
            prefixes_by_id[id(entry)] = ""
            walk(entry, "")
    for entry in rows:
        prefixes.append(prefixes_by_id.get(id(entry), ""))
    return prefixes


class Trace:
    """What one active stretch of a profile recorded (the last one is ``profile``'s results)."""

    def __init__(self, recorder, *, max_trace_events=DEFAULT_MAX_TRACE_EVENTS, show_device=False, options=None):
        self.records = recorder.records
        self.start_ns = recorder.start_ns
        self.stop_ns = recorder.stop_ns
        self.main_thread = recorder.main_thread
        self.module_info = recorder.module_info
        self.profile_memory = recorder.profile_memory
        self.with_modules = recorder.with_modules
        self.with_stack = recorder.with_stack
        self.peak_bytes = recorder.peak_bytes
        self.peak_at = recorder.peak_at
        self.memory_samples = recorder.memory_samples
        self.max_trace_events = max_trace_events
        self.show_device = show_device
        self.options = options or {}
        self._events = None

    # -- events --------------------------------------------------------------------------------------------
    def us(self, ns: int) -> float:
        return (ns - self.start_ns) / 1000.0

    def events(self) -> EventList:
        """Every op, backward call, ``record_function`` range and step, in start order, with parents and children."""
        if self._events is not None:
            return self._events
        records = self.records
        by_index: dict[int, FunctionEvent] = {}
        events = []
        for index, r in enumerate(records):
            kind = r[rec.KIND]
            if kind == rec.MODULE:
                continue
            module_index = r[rec.MODULE_AT]
            forward_op = None
            if kind == rec.BACKWARD and r[rec.SEQ]:
                forward = self.forward_record(r[rec.SEQ])
                forward_op = forward[rec.NAME] if forward is not None else None
            stack = [format_stack_frame(frame) for frame in r[rec.STACK]] if r[rec.STACK] else ()
            event = FunctionEvent(len(events), r[rec.NAME], kind, self.us(r[rec.START]), self.us(r[rec.END]),
                                  thread=r[rec.TID], input_shapes=shape_lists(r[rec.SHAPES]), stack=stack,
                                  sequence_nr=r[rec.SEQ] if r[rec.SEQ] else -1,
                                  module=records[module_index][rec.NAME] if module_index >= 0 else "",
                                  device_type=r[rec.DEVICE] or "cpu", allocated_bytes=r[rec.ALLOC],
                                  freed_bytes=r[rec.FREED], forward_op=forward_op)
            # The parent is the nearest enclosing record that is an event: module ranges are transparent.
            parent = r[rec.PARENT]
            while parent >= 0 and records[parent][rec.KIND] == rec.MODULE:
                parent = records[parent][rec.PARENT]
            if parent >= 0:
                event.cpu_parent = by_index[parent]
                event.cpu_parent.cpu_children.append(event)
            by_index[index] = event
            events.append(event)
        self._events = EventList(events, show_device=self.show_device)
        return self._events

    def forward_record(self, sequence_nr):
        if not hasattr(self, "_forward_by_seq"):
            self._forward_by_seq = {r[rec.SEQ]: r for r in self.records if r[rec.KIND] == rec.OP and r[rec.SEQ]}
        return self._forward_by_seq.get(sequence_nr)

    # -- modules -------------------------------------------------------------------------------------------
    def module_stats(self) -> list[ModuleStats]:
        """The module tree, depth first in order of first call (roots in the order they ran)."""
        if not self.with_modules:
            raise RuntimeError("module_summary(): the profile did not record modules; use "
                               "profile(with_modules=True)")
        stats: dict[str, ModuleStats] = {}
        roots = []
        for r in self.records:
            if r[rec.KIND] != rec.MODULE:
                continue
            path = r[rec.NAME]
            entry = stats.get(path)
            if entry is None:
                info = self.module_info[path]
                entry = stats[path] = ModuleStats(path, info["type"], path.count("."), info["calls"],
                                                  info["parameter_bytes"],
                                                  info["output_bytes"] // max(info["calls"], 1))
                parent_path = path.rsplit(".", 1)[0] if "." in path else None
                if parent_path in stats:
                    stats[parent_path].children.append(entry)
                else:
                    entry.depth = 0
                    roots.append(entry)
            entry.forward_time += (r[rec.END] - r[rec.START]) / 1000.0
        # Ops and backward calls count towards their module and every module above it.
        records = self.records
        ancestors_of: dict[int, list[ModuleStats]] = {}
        for r in records:
            kind = r[rec.KIND]
            if kind not in (rec.OP, rec.BACKWARD) or r[rec.MODULE_AT] < 0:
                continue
            module_index = r[rec.MODULE_AT]
            chain = ancestors_of.get(module_index)
            if chain is None:
                path = records[module_index][rec.NAME]
                chain = ancestors_of[module_index] = [s for p, s in stats.items() if _is_within(path, p)]
            if kind == rec.OP:
                for entry in chain:
                    entry.allocated_bytes += r[rec.ALLOC]
            else:
                duration = (r[rec.END] - r[rec.START]) / 1000.0
                for entry in chain:
                    entry.backward_time += duration
                    entry.backward_allocated_bytes += r[rec.ALLOC]
        ordered = []

        def walk(entry, depth):
            entry.depth = depth
            ordered.append(entry)
            for child in entry.children:
                walk(child, depth + 1)
        for root in roots:
            walk(root, 0)
        return ordered

    def module_summary(self, max_name_column_width: int = 60) -> ModuleSummary:
        rows = self.module_stats()
        memory = self.profile_memory
        headers = ["Module", "Type", "Calls", "Forward", "Backward", "Parameters", "Activations"]
        if memory:
            headers += ["Fwd Alloc", "Bwd Alloc"]
        names = [(prefix + entry.name)[:max_name_column_width] for prefix, entry in zip(tree_prefixes(rows), rows)]
        table = []
        for name, entry in zip(names, rows):
            cells = [name, entry.type_name, str(entry.calls), format_time(entry.forward_time),
                     format_time(entry.backward_time), format_memory(entry.parameter_bytes),
                     format_memory(entry.activation_bytes)]
            if memory:
                cells += [format_memory(entry.allocated_bytes), format_memory(entry.backward_allocated_bytes)]
            table.append(cells)
        widths = [max([len(headers[i])] + [len(row[i]) for row in table]) for i in range(len(headers))]

        def line(cells):
            first = f"{cells[0]:<{widths[0]}}  {cells[1]:<{widths[1]}}"
            rest = "".join(f"  {cell:>{width}}" for cell, width in zip(cells[2:], widths[2:]))
            return (first + rest).rstrip() + "\n"
        separator = "  ".join("-" * w for w in widths) + "\n"
        text = separator + line(headers) + separator + "".join(line(row) for row in table) + separator
        roots = [entry for entry in rows if entry.depth == 0]
        text += (f"Forward total: {format_time(sum(r.forward_time for r in roots))}  "
                 f"Backward total: {format_time(sum(r.backward_time for r in roots))}  "
                 f"Parameters: {format_memory(sum(r.parameter_bytes for r in roots))}\n")
        summary = ModuleSummary(text)
        summary.rows = rows
        return summary

    # -- memory --------------------------------------------------------------------------------------------
    def memory_stats(self) -> dict:
        """Bytes: ``allocated`` by recorded ops, ``freed`` of those before the profile stopped, ``live`` at the
        end (allocated - freed), ``peak`` (the most live at once); ``peak_op`` names the op that reached it."""
        if not self.profile_memory:
            raise RuntimeError("memory_stats(): the profile did not record memory; use profile(profile_memory=True)")
        allocated = sum(r[rec.ALLOC] for r in self.records)
        freed = sum(r[rec.FREED] for r in self.records)
        peak_time, peak_index = self.peak_at
        return {"allocated": allocated, "freed": freed, "live": allocated - freed, "peak": self.peak_bytes,
                "peak_op": self.records[peak_index][rec.NAME] if peak_index >= 0 else None,
                "peak_time_us": self.us(peak_time) if peak_index >= 0 else None}

    def allocation_sites(self) -> list[dict]:
        """Where memory was allocated, most first: one entry per (calling frame or module, op name)."""
        records = self.records
        sites: dict = {}
        for r in records:
            if not r[rec.ALLOC]:
                continue
            if r[rec.KIND] == rec.BACKWARD:
                where = f"backward of {records[r[rec.MODULE_AT]][rec.NAME]}" if r[rec.MODULE_AT] >= 0 else "backward"
            elif r[rec.STACK]:
                where = format_stack_frame(r[rec.STACK][0])
            elif r[rec.MODULE_AT] >= 0:
                where = records[r[rec.MODULE_AT]][rec.NAME]
            else:
                where = "(no module)"
            key = (where, r[rec.NAME])
            site = sites.get(key)
            if site is None:
                site = sites[key] = {"site": where, "op": r[rec.NAME], "allocated": 0, "freed": 0, "calls": 0}
            site["allocated"] += r[rec.ALLOC]
            site["freed"] += r[rec.FREED]
            site["calls"] += 1
        return sorted(sites.values(), key=lambda s: -s["allocated"])

    def memory_summary(self, top: int = 10) -> MemorySummary:
        stats = self.memory_stats()
        sites = self.allocation_sites()
        lines = [f"Peak memory: {format_memory(stats['peak'])}"
                 + (f" (reached in {stats['peak_op']} at {format_time(stats['peak_time_us'])})"
                    if stats["peak_op"] else ""),
                 f"Allocated: {format_memory(stats['allocated'])}  Freed: {format_memory(stats['freed'])}  "
                 f"Live at end: {format_memory(stats['live'])}",
                 f"Top allocation sites (of {len(sites)}):"]
        shown = sites[:top]
        headers = ["Site", "Op", "Allocated", "Freed", "Calls"]
        table = [[s["site"], s["op"], format_memory(s["allocated"]), format_memory(s["freed"]), str(s["calls"])]
                 for s in shown]
        widths = [max([len(headers[i])] + [len(row[i]) for row in table]) for i in range(len(headers))]

        def line(cells):
            return (f"{cells[0]:<{widths[0]}}  {cells[1]:<{widths[1]}}"
                    + "".join(f"  {c:>{w}}" for c, w in zip(cells[2:], widths[2:]))).rstrip()
        separator = "  ".join("-" * w for w in widths)
        lines += [separator, line(headers), separator] + [line(row) for row in table] + [separator]
        summary = MemorySummary("\n".join(lines) + "\n")
        summary.stats, summary.sites = stats, sites
        return summary

    # -- Chrome trace --------------------------------------------------------------------------------------
    def chrome_trace(self) -> dict:
        """The trace as a trace-event-format dict (what ``export_chrome_trace`` writes)."""
        records = self.records
        pid = os.getpid()
        limit = self.max_trace_events
        kept = list(range(len(records)))
        hidden_children: dict[int, int] = {}
        aggregated: dict = {}  # first record of a run -> (run length, summed duration in us, end of the run)
        notes = {"events_recorded": len(records)}
        if limit is not None and len(kept) > limit:
            kept, aggregated = self.aggregate_runs()
            notes["events_after_aggregating"] = len(kept)
            if len(kept) > limit:
                kept, hidden_children = self.keep_longest(kept, aggregated, limit)
                warnings.warn(f"export_chrome_trace(): {len(records)} events recorded; wrote the {len(kept)} "
                              f"longest (max_trace_events={limit}); each parent's args count the events left out. "
                              "Record fewer steps with schedule=, or raise max_trace_events", stacklevel=3)
        notes["events_written"] = len(kept)
        events = [{"ph": "M", "name": "process_name", "pid": pid, "tid": 0, "ts": 0, "args": {"name": "python"}},
                  {"ph": "M", "name": "process_labels", "pid": pid, "tid": 0, "ts": 0, "args": {"labels": "CPU"}}]
        # Small thread numbers, the profiling thread first (Python's thread idents are long and unreadable).
        threads = sorted({records[i][rec.TID] for i in kept}, key=lambda t: (t != self.main_thread, t))
        tids = {ident: number for number, ident in enumerate(threads, start=1)}
        for ident, tid in tids.items():
            label = "main thread" if ident == self.main_thread else f"thread {tid}"
            events.append({"ph": "M", "name": "thread_name", "pid": pid, "tid": tid, "ts": 0,
                           "args": {"name": f"{label} (python)"}})
        categories = {rec.OP: "cpu_op", rec.BACKWARD: "cpu_op", rec.USER: "user_annotation",
                      rec.STEP: "user_annotation", rec.MODULE: "python_function"}
        forward_starts = {}
        for index in kept:
            r = records[index]
            start, end = r[rec.START], r[rec.END]
            name = r[rec.NAME] if r[rec.KIND] != rec.MODULE else f"nn.Module: {r[rec.NAME]}"
            args = {}
            run = aggregated.get(index)
            if run is not None:
                count, summed_us, end = run
                name = f"{name} (x{count})"
                args["Aggregated events"] = count
                args["Summed duration (us)"] = round(summed_us, 3)
            if r[rec.SHAPES] is not None:
                args["Input Dims"] = shape_lists(r[rec.SHAPES])
            if r[rec.SEQ]:
                args["Sequence number"] = r[rec.SEQ]
            if r[rec.KIND] == rec.BACKWARD:
                forward = self.forward_record(r[rec.SEQ]) if r[rec.SEQ] else None
                if forward is not None:
                    args["Fwd op"] = forward[rec.NAME]
            if r[rec.MODULE_AT] >= 0 and r[rec.KIND] in (rec.OP, rec.BACKWARD):
                args["Module"] = records[r[rec.MODULE_AT]][rec.NAME]
            if self.profile_memory and r[rec.KIND] in (rec.OP, rec.BACKWARD):
                args["Allocated bytes"] = r[rec.ALLOC]
                args["Freed bytes"] = r[rec.FREED]
            if r[rec.STACK]:
                args["Call stack"] = [format_stack_frame(f) for f in r[rec.STACK]]
            if index in hidden_children:
                args["Events left out below"] = hidden_children[index]
            event = {"ph": "X", "cat": categories[r[rec.KIND]], "name": name, "pid": pid, "tid": tids[r[rec.TID]],
                     "ts": self.ts(start), "dur": round((end - start) / 1000.0, 3), "args": args}
            events.append(event)
            if r[rec.KIND] == rec.OP and r[rec.SEQ]:
                forward_starts[r[rec.SEQ]] = event
        # Flow arrows from each forward op to the backward calls of its node (Perfetto and Chrome draw them).
        for index in kept:
            r = records[index]
            if r[rec.KIND] == rec.BACKWARD and r[rec.SEQ] in forward_starts:
                forward = forward_starts[r[rec.SEQ]]
                flow = {"cat": "fwdbwd", "name": "fwdbwd", "id": r[rec.SEQ], "pid": pid}
                events.append({**flow, "ph": "s", "tid": forward["tid"], "ts": forward["ts"]})
                events.append({**flow, "ph": "f", "bp": "e", "tid": tids[r[rec.TID]], "ts": self.ts(r[rec.START])})
        if self.profile_memory:
            samples = self.memory_samples
            budget = max(1000, (limit or len(samples)) // 10)
            if len(samples) > budget:  # keep every step-th sample and the peak
                step = -(-len(samples) // budget)
                peak = max(range(len(samples)), key=lambda i: samples[i][1])
                samples = sorted(set(samples[::step]) | {samples[peak]})
            for time_ns, live in samples:
                events.append({"ph": "C", "name": "Memory", "cat": "memory", "pid": pid, "tid": 0,
                               "ts": self.ts(time_ns), "args": {"Live bytes": live}})
        return {"schemaVersion": 1, "displayTimeUnit": "ms", "traceEvents": events,
                "otherData": {"profiler": "corenn-profiler", **self.options, **notes}}

    def ts(self, ns: int) -> float:
        return round((ns - self.start_ns) / 1000.0, 3)

    def aggregate_runs(self):
        """Merge runs of consecutive same-name leaf siblings shorter than ``AGGREGATE_BELOW_US`` each into one event.

        The merged event spans the run (first start to last end) and says how many events it
        stands for and their summed duration. Only leaves are merged, so nesting holds.
        """
        records = self.records
        has_children = {r[rec.PARENT] for r in records}
        limit_ns = AGGREGATE_BELOW_US * 1000
        kept, aggregated = [], {}
        last_sibling: dict[int, int] = {}  # parent -> the previous child kept (or run head)
        run_length: dict[int, tuple[int, float]] = {}
        for index, r in enumerate(records):
            parent = r[rec.PARENT]
            duration = r[rec.END] - r[rec.START]
            tiny_leaf = index not in has_children and duration < limit_ns
            head = last_sibling.get(parent)
            if tiny_leaf and head is not None and head in run_length and records[head][rec.NAME] == r[rec.NAME]:
                count, summed, _ = run_length[head]
                run_length[head] = (count + 1, summed + duration / 1000.0, r[rec.END])
                continue
            kept.append(index)
            last_sibling[parent] = index
            if tiny_leaf:
                run_length[index] = (1, duration / 1000.0, r[rec.END])
        aggregated = {index: run for index, run in run_length.items() if run[0] > 1}
        return kept, aggregated

    def keep_longest(self, kept, aggregated, limit):
        """The ``limit`` longest events, with every ancestor of each (so nesting holds), and per kept parent the count left out."""
        records = self.records

        def duration(index):
            if index in aggregated:
                return aggregated[index][2] - records[index][rec.START]
            return records[index][rec.END] - records[index][rec.START]
        chosen = set(sorted(kept, key=duration, reverse=True)[:limit])
        for index in list(chosen):
            parent = records[index][rec.PARENT]
            while parent >= 0 and parent not in chosen:
                chosen.add(parent)
                parent = records[parent][rec.PARENT]
        hidden: dict[int, int] = {}
        for index in kept:
            if index not in chosen:
                parent = records[index][rec.PARENT]
                while parent >= 0 and parent not in chosen:
                    parent = records[parent][rec.PARENT]
                if parent >= 0:
                    hidden[parent] = hidden.get(parent, 0) + 1
        return sorted(chosen), hidden

    def export_chrome_trace(self, path) -> None:
        trace = self.chrome_trace()
        path = os.fspath(path)
        opener = gzip.open if path.endswith(".gz") else open
        with opener(path, "wt", encoding="utf-8") as handle:
            json.dump(trace, handle, separators=(",", ":"))

    # -- stacks (flame graphs) -----------------------------------------------------------------------------
    def export_stacks(self, path, metric: str = "self_cpu_time_total") -> None:
        """Write ``frame;frame;...;op value`` lines (outermost frame first, value in microseconds) for flamegraph.pl
        and speedscope. Needs ``with_stack=True``."""
        if metric not in ("self_cpu_time_total", "self_cuda_time_total", "self_device_time_total"):
            raise ValueError(f"export_stacks(): argument 'metric' must be 'self_cpu_time_total' or "
                             f"'self_device_time_total', got {metric!r}")
        if not self.with_stack:
            raise RuntimeError("export_stacks(): the profile did not record stacks; use profile(with_stack=True)")
        with open(os.fspath(path), "w", encoding="utf-8") as handle:
            for event in self.events():
                if not event.stack:
                    continue
                value = int(getattr(event, metric))
                if value <= 0:
                    continue
                frames = ";".join(frame.replace(";", ":").replace(" ", "_") for frame in reversed(event.stack))
                handle.write(f"{frames};{event.name} {value}\n")


def shape_lists(shapes):
    """Recorded shapes (tuples, which the garbage collector need not track) as PyTorch's lists of lists."""
    return None if shapes is None else [list(shape) for shape in shapes]
