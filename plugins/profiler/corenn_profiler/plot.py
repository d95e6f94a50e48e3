"""``prof.plot(path)``: a per-module stacked bar chart (forward and backward time), or the top ops by self time."""
from __future__ import annotations

import os

from corenn_profiler.events import format_time

__all__ = ["plot_trace"]


def _figure(**kwargs):
    # A bare Figure, not pyplot: no global backend or figure state is touched, no display needed.
    try:
        from matplotlib.figure import Figure
    except ImportError:
        raise ImportError("profile.plot() needs matplotlib: pip install 'corenn-profiler[plot]' "
                          "(or pip install matplotlib)") from None
    return Figure(**kwargs)


def plot_trace(trace, path, *, kind=None, top=20) -> None:
    path = os.fspath(path)
    extension = os.path.splitext(path)[1].lower()
    if extension not in (".png", ".svg", ".pdf"):
        raise ValueError(f"plot(): argument 'path' must end in .png, .svg or .pdf, got {path!r}")
    if kind is None:
        kind = "modules" if trace.with_modules and any(r[0] == "module" for r in trace.records) else "ops"
    if kind not in ("modules", "ops"):
        raise ValueError(f"plot(): argument 'kind' must be 'modules' or 'ops', got {kind!r}")
    if kind == "modules":
        labels, forward, backward = _module_bars(trace, top)
        title = "Time per module (forward and backward, children included)"
        series = [("forward", forward, "#4C72B0"), ("backward", backward, "#DD8452")]
    else:
        labels, values = _op_bars(trace, top)
        title = f"Top {len(labels)} ops by self time"
        series = [("self time", values, "#4C72B0")]
    height = max(2.5, 0.35 * len(labels) + 1.2)
    figure = _figure(figsize=(10, height))
    axes = figure.subplots()
    positions = range(len(labels))
    left = [0.0] * len(labels)
    for name, values, color in series:
        axes.barh(positions, [v / 1000.0 for v in values], left=left, label=name, color=color)
        left = [a + b / 1000.0 for a, b in zip(left, values)]
    for y, (total, value) in enumerate(zip(left, [sum(v) for v in zip(*[s[1] for s in series])])):
        axes.text(total, y, " " + format_time(value), va="center", fontsize=8)
    axes.set_yticks(list(positions))
    axes.set_yticklabels(labels, fontsize=8)
    axes.invert_yaxis()  # the first (outermost or longest) on top
    axes.set_xlabel("time (ms)")
    axes.set_title(title)
    axes.set_xlim(0, max(left + [1e-9]) * 1.18)
    if len(series) > 1:
        axes.legend(loc="lower right")
    figure.tight_layout()
    figure.savefig(path)


def _module_bars(trace, top):
    rows = trace.module_stats()
    if len(rows) > top:  # the most expensive modules, kept in tree order
        keep = set(id(r) for r in sorted(rows, key=lambda r: -(r.forward_time + r.backward_time))[:top])
        rows = [r for r in rows if id(r) in keep]
    labels = [f"{r.path} ({r.type_name})" if r.depth else r.path for r in rows]
    return labels, [r.forward_time for r in rows], [r.backward_time for r in rows]


def _op_bars(trace, top):
    averages = sorted(trace.events().key_averages(), key=lambda a: -a.self_cpu_time_total)[:top]
    return [f"{a.key} (x{a.count})" for a in averages], [a.self_cpu_time_total for a in averages]
