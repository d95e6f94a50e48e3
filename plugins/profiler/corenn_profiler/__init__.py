"""corenn-profiler: where the time and memory of a corenn program go, by op and by module.

``corenn.profiler`` and ``corenn.autograd.profiler`` are this plugin's modules (registered
through ``corenn_register_import_paths``), so PyTorch code ports by renaming::

    from corenn.profiler import profile, record_function, ProfilerActivity, schedule

The plugin observes nothing until a ``profile()`` records: then it adds an op observer
(``corenn.plugins.observe_ops``) and global module hooks, and removes them when it stops.
Importing this package (done by ``import corenn``) imports only this file.
"""
from __future__ import annotations

import importlib

import corenn

__version__ = "0.1.0"

# Public names, imported on first use: ``import corenn`` loads this module, and must stay cheap.
_LAZY = {name: "corenn_profiler.profiler" for name in (
    "profile", "schedule", "record_function", "ProfilerActivity", "ProfilerAction", "tensorboard_trace_handler",
    "supported_activities")}
_LAZY.update({name: "corenn_profiler.events" for name in ("EventList", "FunctionEvent", "FunctionEventAvg")})
_LAZY.update({name: "corenn_profiler.trace" for name in ("ModuleStats", "ModuleSummary", "MemorySummary")})
__all__ = sorted(_LAZY)


def __getattr__(name):
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'corenn_profiler' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__():
    return sorted(set(globals()) | set(_LAZY))


@corenn.hookimpl
def corenn_register_import_paths():
    return {"corenn.profiler": "corenn_profiler.profiler",
            "corenn.autograd.profiler": "corenn_profiler.autograd_profiler"}


@corenn.hookimpl
def corenn_info_lines():
    recording = "recording" if _is_recording() else "idle (no observer attached)"
    return [f"corenn-profiler {__version__}: {recording}"]


def _is_recording() -> bool:
    import sys
    profiler = sys.modules.get("corenn_profiler.profiler")
    return profiler is not None and profiler.active_recorder() is not None
