"""``corenn.profiler``: PyTorch's ``torch.profiler`` for corenn.

Example::

    from corenn.profiler import profile, record_function, ProfilerActivity

    with profile(activities=[ProfilerActivity.CPU], record_shapes=True, with_modules=True) as prof:
        with record_function("forward"):
            loss = model(x).sum()
        loss.backward()
    print(prof.key_averages().table(sort_by="cpu_time_total", row_limit=10))
    print(prof.module_summary())
    prof.export_chrome_trace("trace.json")      # open in https://ui.perfetto.dev or chrome://tracing

The recorder attaches itself (an op observer and global module hooks) only while a
profile records, so with nothing profiled the plugin costs nothing.
"""
from __future__ import annotations

import contextlib
import enum
import functools
import os
import socket
import threading
import time
import warnings
from typing import Any, Callable, Iterable

import corenn

from corenn_profiler._recorder import START, STEP, USER, Recorder
from corenn_profiler.trace import DEFAULT_MAX_TRACE_EVENTS, Trace

__all__ = ["profile", "schedule", "record_function", "ProfilerActivity", "ProfilerAction",
           "tensorboard_trace_handler", "supported_activities", "DEFAULT_MAX_TRACE_EVENTS"]


class ProfilerActivity(enum.Enum):
    """What to profile: ``CPU`` (host time of every op), ``CUDA`` (ops on the ``cuda`` device, synchronised)."""

    CPU = 0
    CUDA = 2

    def __repr__(self):
        return f"<ProfilerActivity.{self.name}: {self.value}>"


class ProfilerAction(enum.Enum):
    """What a ``schedule`` says a step does: nothing, warm up, record, or record and then hand the trace over."""

    NONE = 0
    WARMUP = 1
    RECORD = 2
    RECORD_AND_SAVE = 3


def supported_activities() -> set:
    """The activities that can be profiled here: ``CPU``, plus ``CUDA`` when corenn-cuda sees a GPU."""
    found = {ProfilerActivity.CPU}
    if corenn.cuda.is_available():
        found.add(ProfilerActivity.CUDA)
    return found


def schedule(*, wait: int, warmup: int, active: int, repeat: int = 0, skip_first: int = 0,
             skip_first_wait: int = 0) -> Callable[[int], ProfilerAction]:
    """The action of each step: skip ``skip_first`` steps, then cycles of ``wait``, ``warmup``, ``active`` steps.

    The last active step of a cycle is ``RECORD_AND_SAVE``: the trace is handed to
    ``on_trace_ready`` when it ends. ``repeat=0`` repeats the cycle until the profile ends.
    ``skip_first_wait=1`` skips the first cycle's wait. As in PyTorch; corenn needs no
    warm-up (its recorder starts instantly), so warm-up steps just aren't recorded.

    Example::

        >>> s = schedule(wait=1, warmup=1, active=2, repeat=1)
        >>> [s(step).name for step in range(5)]
        ['NONE', 'WARMUP', 'RECORD', 'RECORD_AND_SAVE', 'NONE']
    """
    for name, value in (("wait", wait), ("warmup", warmup), ("active", active), ("repeat", repeat),
                        ("skip_first", skip_first), ("skip_first_wait", skip_first_wait)):
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
            raise ValueError(f"schedule(): argument '{name}' must be a non-negative int, got {value!r}")
    if active == 0:
        raise ValueError("schedule(): argument 'active' must be at least 1 (nothing would ever be recorded)")

    def schedule_fn(step: int) -> ProfilerAction:
        if step < 0:
            raise ValueError(f"schedule: step must be non-negative, got {step}")
        if step < skip_first:
            return ProfilerAction.NONE
        step -= skip_first
        if skip_first_wait:  # the first cycle has no wait
            step += wait
        cycle = wait + warmup + active
        if repeat > 0 and step // cycle >= repeat:
            return ProfilerAction.NONE
        position = step % cycle
        if position < wait:
            return ProfilerAction.NONE
        if position < wait + warmup:
            return ProfilerAction.WARMUP
        return ProfilerAction.RECORD if position < cycle - 1 else ProfilerAction.RECORD_AND_SAVE

    return schedule_fn


def _always_record(step: int) -> ProfilerAction:
    return ProfilerAction.RECORD


_RECORDING = (ProfilerAction.RECORD, ProfilerAction.RECORD_AND_SAVE)

# The recorder of the profile that records now (one at a time, as in PyTorch).
_active_recorder: Recorder | None = None
_active_lock = threading.Lock()


def active_recorder() -> Recorder | None:
    """The recorder of the profile recording now, or None (``record_function`` asks this)."""
    return _active_recorder


class record_function(contextlib.ContextDecorator):
    """Label a stretch of code: a range in the trace and a row in the table. Context manager and decorator.

    Costs one test when no profile records.

    Example::

        with profile() as prof:
            with record_function("data"):
                batch = next(loader)

        @record_function("train_step")
        def train_step(batch): ...
    """

    def __init__(self, name: str, args: str | None = None):
        if not isinstance(name, str):
            raise TypeError(f"record_function(): argument 'name' must be str, got {type(name).__name__}")
        self.name = name
        self.args = args
        self.recorder = None

    def __enter__(self):
        recorder = _active_recorder
        if recorder is not None:
            self.recorder = recorder
            record = recorder.open_record(USER, self.name)
            record[START] = time.perf_counter_ns()  # set last: the recorder's own work is not timed
        return self

    def __exit__(self, *exc):
        recorder, self.recorder = self.recorder, None
        if recorder is not None and recorder.active:
            recorder.close_record(USER)
        return False


class profile:
    """Record ops, backward calls, ``record_function`` ranges and (``with_modules``) modules; PyTorch's ``torch.profiler.profile``.

    Arguments as in PyTorch:

    - ``activities``: ``ProfilerActivity.CPU`` (default) and/or ``CUDA``; CUDA needs an
      active corenn-cuda with a GPU, else it is dropped with a warning, as PyTorch does;
      ops on ``cuda`` are then timed with a device synchronisation around each.
    - ``schedule``: a ``schedule(...)`` callable, step number -> ``ProfilerAction``; without
      one every step records. ``on_trace_ready(prof)`` is called when a recorded cycle ends.
    - ``record_shapes``: the input shapes of every op. ``profile_memory``: bytes each op
      allocates and frees, peak memory (:meth:`memory_stats`, :meth:`memory_summary`).
      ``with_stack``: the calling Python frames of every op. ``with_modules``: module ranges
      in the trace and :meth:`module_summary`.
    - ``with_flops`` is not supported (ValueError if True).

    Beyond PyTorch: ``max_trace_events`` bounds what :meth:`export_chrome_trace` writes
    (default 200,000 events, ``None``: unbounded); see docs/profiler.md.

    After the block: ``events()``, ``key_averages()``, ``export_chrome_trace(path)``,
    ``export_stacks(path)``, ``module_summary()``, ``memory_summary()``, ``plot(path)``.
    """

    def __init__(self, *, activities: Iterable[ProfilerActivity] | None = None,
                 schedule: Callable[[int], ProfilerAction] | None = None,
                 on_trace_ready: Callable[..., Any] | None = None, record_shapes: bool = False,
                 profile_memory: bool = False, with_stack: bool = False, with_flops: bool = False,
                 with_modules: bool = False, experimental_config=None, execution_trace_observer=None,
                 acc_events: bool = False, use_cuda: bool | None = None,
                 max_trace_events: int | None = DEFAULT_MAX_TRACE_EVENTS):
        if activities is None:
            activities = {ProfilerActivity.CPU}
            if use_cuda:
                activities.add(ProfilerActivity.CUDA)
        activities = set(activities)
        for activity in activities:
            if not isinstance(activity, ProfilerActivity):
                raise TypeError(f"profile(): argument 'activities' must hold ProfilerActivity values, "
                                f"got {activity!r}")
        if ProfilerActivity.CUDA in activities and ProfilerActivity.CUDA not in supported_activities():
            warnings.warn("CUDA is not available, disabling CUDA profiling (corenn-cuda is not active or sees no "
                          "GPU: see `python -m corenn plugins`)", UserWarning, stacklevel=2)
            activities.discard(ProfilerActivity.CUDA)
        if not activities:
            raise ValueError("profile(): no activities left to profile (CUDA was requested but is not available); "
                             "add ProfilerActivity.CPU")
        if with_flops:
            raise ValueError("profile(): with_flops=True is not supported by corenn-profiler")
        if schedule is not None and not callable(schedule):
            raise TypeError(f"profile(): argument 'schedule' must be callable, got {type(schedule).__name__}")
        if on_trace_ready is not None and not callable(on_trace_ready):
            raise TypeError(f"profile(): argument 'on_trace_ready' must be callable, "
                            f"got {type(on_trace_ready).__name__}")
        if max_trace_events is not None and (not isinstance(max_trace_events, int) or max_trace_events < 1):
            raise ValueError(f"profile(): argument 'max_trace_events' must be a positive int or None, "
                             f"got {max_trace_events!r}")
        self.activities = activities
        self.record_shapes = record_shapes
        self.profile_memory = profile_memory
        self.with_stack = with_stack
        self.with_modules = with_modules
        self.max_trace_events = max_trace_events
        self.record_steps = schedule is not None
        self.schedule = schedule if schedule is not None else _always_record
        self.on_trace_ready = on_trace_ready
        self.step_num = 0
        self.current_action = ProfilerAction.NONE
        self.recorder: Recorder | None = None
        self.trace: Trace | None = None
        self.started = False

    # -- life cycle -------------------------------------------------------------------------------------------
    def __enter__(self):
        self.start()
        return self

    def __exit__(self, *exc):
        self.stop()
        return False

    def start(self) -> None:
        """Begin profiling (``with profile()`` calls this)."""
        if self.started:
            raise RuntimeError("profile.start(): this profile is already started")
        self.started = True
        self.step_num = 0
        self.current_action = self.schedule(0)
        if self.current_action in _RECORDING:
            self._start_recording()

    def stop(self) -> None:
        """End profiling; a recording cycle still open is handed to ``on_trace_ready``."""
        if not self.started:
            return
        self.started = False
        if self.recorder is not None:
            self._stop_recording(ready=True)
        self.current_action = ProfilerAction.NONE

    def step(self) -> None:
        """Mark the end of a training step: the schedule decides whether the next one records."""
        if not self.started:
            raise RuntimeError("profile.step(): the profile is not started (use `with profile(...) as prof:`)")
        previous = self.current_action
        self.step_num += 1
        self.current_action = self.schedule(self.step_num)
        if not isinstance(self.current_action, ProfilerAction):
            raise TypeError(f"profile.step(): the schedule returned {self.current_action!r}, not a ProfilerAction")
        if self.recorder is not None:
            if previous == ProfilerAction.RECORD_AND_SAVE or self.current_action not in _RECORDING:
                self._stop_recording(ready=True)
            else:
                self._close_step()
                self._open_step()
        if self.recorder is None and self.current_action in _RECORDING:
            self._start_recording()

    def _start_recording(self) -> None:
        global _active_recorder
        synchronize = None
        if ProfilerActivity.CUDA in self.activities:
            synchronize = {"cuda": corenn.cuda.synchronize}
        recorder = Recorder(record_shapes=self.record_shapes, profile_memory=self.profile_memory,
                            with_stack=self.with_stack, with_modules=self.with_modules, synchronize=synchronize)
        with _active_lock:
            if _active_recorder is not None:
                self.started = False
                raise RuntimeError("Profiler is already enabled: another corenn profile() is recording "
                                   "(profiles do not nest)")
            _active_recorder = recorder
        self.recorder = recorder
        recorder.start()
        self._open_step()

    def _open_step(self) -> None:
        if self.record_steps:
            record = self.recorder.open_record(STEP, f"ProfilerStep#{self.step_num}")
            record[START] = time.perf_counter_ns()

    def _close_step(self) -> None:
        if self.record_steps:
            self.recorder.close_record(STEP)

    def _stop_recording(self, ready: bool) -> None:
        global _active_recorder
        recorder, self.recorder = self.recorder, None
        if self.record_steps:
            recorder.close_record(STEP)
        recorder.stop()
        with _active_lock:
            if _active_recorder is recorder:
                _active_recorder = None
        self.trace = Trace(recorder, max_trace_events=self.max_trace_events,
                           show_device=ProfilerActivity.CUDA in self.activities,
                           options={"record_shapes": int(self.record_shapes),
                                    "profile_memory": int(self.profile_memory),
                                    "with_stack": int(self.with_stack), "with_modules": int(self.with_modules)})
        if ready and self.on_trace_ready is not None:
            self.on_trace_ready(self)

    # -- results (of the last recorded cycle) -----------------------------------------------------------------
    def _results(self, what: str) -> Trace:
        if self.trace is None:
            if self.recorder is not None:
                raise RuntimeError(f"profile.{what}(): the profile is still recording; call it after the "
                                   "`with` block (or in on_trace_ready)")
            raise RuntimeError(f"profile.{what}(): nothing was recorded (the schedule never reached an active "
                               "step, or the profile was never entered)")
        return self.trace

    def events(self):
        """Every recorded event of the last recorded cycle (an ``EventList``)."""
        return self._results("events").events()

    def key_averages(self, group_by_input_shape: bool = False, group_by_stack_n: int = 0, group_by_overload_name=False):
        """Events summed by name (and input shapes, and innermost stack frames): call ``.table()`` on it."""
        return self._results("key_averages").events().key_averages(group_by_input_shape, group_by_stack_n)

    def export_chrome_trace(self, path) -> None:
        """Write a trace-event JSON file for https://ui.perfetto.dev and chrome://tracing (``.gz`` compresses)."""
        self._results("export_chrome_trace").export_chrome_trace(path)

    def export_stacks(self, path, metric: str = "self_cpu_time_total") -> None:
        """Write folded stacks (``frame;frame;op value``) for flame-graph tools; needs ``with_stack=True``."""
        self._results("export_stacks").export_stacks(path, metric)

    def module_summary(self):
        """The module tree with calls, forward and backward time, parameter and activation bytes; needs ``with_modules=True``.

        Returns the printed table (a ``str``); its ``.rows`` are ``ModuleStats`` objects.
        """
        return self._results("module_summary").module_summary()

    def memory_stats(self) -> dict:
        """``{"allocated", "freed", "live", "peak"}`` in bytes, and the op where the peak was reached."""
        return self._results("memory_stats").memory_stats()

    def memory_summary(self, top: int = 10):
        """Peak memory, totals and the ``top`` allocation sites, as printed text; needs ``profile_memory=True``."""
        return self._results("memory_summary").memory_summary(top)

    def plot(self, path, *, kind: str | None = None, top: int = 20) -> None:
        """Save a picture (PNG, SVG or PDF, from the file's extension): per-module forward/backward bars or the top ops.

        ``kind="modules"`` (the default when modules were recorded) or ``"ops"``. Needs
        matplotlib (``pip install corenn-profiler[plot]``).
        """
        from corenn_profiler.plot import plot_trace
        plot_trace(self._results("plot"), path, kind=kind, top=top)


def tensorboard_trace_handler(dir_name: str, worker_name: str | None = None, use_gzip: bool = False):
    """An ``on_trace_ready`` that writes ``<dir_name>/<worker>.<time in ns>.pt.trace.json[.gz]``, as PyTorch's.

    TensorBoard's profiler plugin and Perfetto read these files.
    """
    if not isinstance(dir_name, (str, os.PathLike)):
        raise TypeError(f"tensorboard_trace_handler(): argument 'dir_name' must be a path, "
                        f"got {type(dir_name).__name__}")

    def handler(prof) -> None:
        os.makedirs(dir_name, exist_ok=True)
        worker = worker_name or f"{socket.gethostname()}_{os.getpid()}"
        # Nanoseconds, as PyTorch: two cycles a millisecond apart must not overwrite each other.
        stamp = time.time_ns()
        while True:
            path = os.path.join(dir_name, f"{worker}.{stamp}.pt.trace.json" + (".gz" if use_gzip else ""))
            if not os.path.exists(path):
                break
            stamp += 1
        prof.export_chrome_trace(path)

    return handler


@functools.lru_cache(maxsize=None)
def kineto_available() -> bool:
    """False: corenn's profiler is not built on Kineto (PyTorch's name, for code that asks)."""
    return False
