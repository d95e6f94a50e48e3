"""``python -m corenn_profiler script.py [args...]``: profile a whole script, write the table, the trace and the picture.

The script runs as ``__main__`` (as with ``python script.py``) inside one
``profile(record_shapes=True, profile_memory=True, with_stack=True, with_modules=True)``.
Then, in ``--output-dir`` (default ``./corenn-profile``):

- ``profile.txt``: the op table (``key_averages().table()``), the module summary and the memory summary;
- ``trace.json``: the Chrome trace (https://ui.perfetto.dev, chrome://tracing);
- ``stacks.txt``: folded stacks for flame-graph tools;
- ``profile.png``: the picture, when matplotlib is installed.

The op table is also printed to stderr, so the script's own stdout stays its own.
"""
from __future__ import annotations

import argparse
import os
import runpy
import sys


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m corenn_profiler",
                                     description="Profile a corenn script: op table, module summary, memory, "
                                                 "Chrome trace and a picture.")
    parser.add_argument("-o", "--output-dir", default="corenn-profile", help="where to write (default: %(default)s)")
    parser.add_argument("--sort-by", default="self_cpu_time_total", help="table column to sort by (default: %(default)s)")
    parser.add_argument("--row-limit", type=int, default=25, help="rows in the op table (default: %(default)s)")
    parser.add_argument("--max-trace-events", type=int, default=None,
                        help="bound on the events written to trace.json (default: the profiler's)")
    parser.add_argument("--no-stack", action="store_true", help="don't record Python call stacks (less overhead)")
    parser.add_argument("script", help="the Python script to run")
    parser.add_argument("args", nargs=argparse.REMAINDER, help="arguments for the script")
    options = parser.parse_args(argv)
    if not os.path.isfile(options.script):
        parser.error(f"script not found: {options.script}")

    from corenn_profiler.profiler import profile
    from corenn_profiler.trace import DEFAULT_MAX_TRACE_EVENTS

    sys.argv = [options.script, *options.args]
    sys.path.insert(0, os.path.dirname(os.path.abspath(options.script)))
    prof = profile(record_shapes=True, profile_memory=True, with_stack=not options.no_stack, with_modules=True,
                   max_trace_events=options.max_trace_events or DEFAULT_MAX_TRACE_EVENTS)
    exit_code = 0
    try:
        with prof:
            runpy.run_path(options.script, run_name="__main__")
    except SystemExit as stop:
        exit_code = stop.code if isinstance(stop.code, int) else (0 if stop.code is None else 1)
    written = write_reports(prof, options.output_dir, options.sort_by, options.row_limit)
    print(f"corenn_profiler: wrote {', '.join(written)}", file=sys.stderr)
    return exit_code


def write_reports(prof, directory, sort_by, row_limit) -> list[str]:
    os.makedirs(directory, exist_ok=True)
    table = prof.key_averages().table(sort_by=sort_by, row_limit=row_limit)
    parts = [table]
    trace = prof.trace
    if any(r[0] == "module" for r in trace.records):
        parts.append(prof.module_summary())
    parts.append(prof.memory_summary())
    print(table, file=sys.stderr)
    written = []
    path = os.path.join(directory, "profile.txt")
    with open(path, "w", encoding="utf-8") as handle:
        handle.write("\n".join(parts))
    written.append(path)
    path = os.path.join(directory, "trace.json")
    prof.export_chrome_trace(path)
    written.append(path)
    if trace.with_stack:
        path = os.path.join(directory, "stacks.txt")
        prof.export_stacks(path)
        written.append(path)
    try:
        path = os.path.join(directory, "profile.png")
        prof.plot(path)
        written.append(path)
    except ImportError as missing:
        print(f"corenn_profiler: no picture ({missing})", file=sys.stderr)
    return written


if __name__ == "__main__":
    sys.exit(main())
