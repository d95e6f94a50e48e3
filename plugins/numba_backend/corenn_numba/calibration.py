"""Which runs faster here, the compiled kernel or the core's numpy/BLAS path: measured, kept, reported.

Whether a compiled loop beats numpy depends on the machine: on an AVX-512 CPU whose
OpenBLAS runs its AVX2 kernels the microkernel wins the dense layers; on an AVX2-only CPU
OpenBLAS's own AVX2 kernels win them. A fixed list of CPU features can't tell, so every
override decides by measurement, per *shape class*: the op, the inputs' dtypes and ranks,
each dimension rounded to a power of two, and the op's integer/string parameters.

The first time a shape class is seen (mode ``measure``, the default):

1. that call runs the core kernel, and a background thread compiles the override on a
   copy of the inputs (numba's compile, seconds on a fresh install, never blocks the
   program: the first training step runs at the core's speed);
2. the next call of that class, once compiled, times both paths on copies of its
   inputs -- forward, and forward + backward -- taking turns, and keeps the faster by the
   medians, for training (grad mode on) and for inference, the kernel only when it is at
   least ``MARGIN`` faster: ties go to the core, so the plugin never makes things slower;
3. the choice is saved in a JSON file per machine (:func:`machine`: CPU model and
   features, thread counts, ``OPENBLAS_*`` settings and library versions), under
   :func:`cache_dir`; another machine, thread count or numba version starts afresh.

Modes (``CORENN_NUMBA_CHOOSE``, or :func:`set_mode` / :func:`choosing`):

- ``measure``: as above;
- ``cached``: choices saved by an earlier ``measure`` run or by
  ``python -m corenn_numba calibrate``, the core for anything else; nothing is timed
  or compiled while the program runs -- for latency-sensitive services;
- ``kernel``: the compiled kernel wherever it handles the inputs (the tests' mode: they
  must exercise the compiled code whatever the timings say);
- ``core``: never the compiled kernel (the plugin's kernels stay registered).

``python -m corenn info`` and ``python -m corenn_numba show`` print what was chosen and the
times behind it.
"""
from __future__ import annotations

import atexit
import contextlib
import hashlib
import json
import os
import platform
import queue
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Iterator

import numpy as np

import corenn
from corenn.kernels import detached_context

from corenn_numba import _blas

__all__ = ["MODES", "ENV_MODE", "ENV_CACHE_DIR", "MARGIN", "Choice", "mode", "set_mode", "choosing", "calibrated",
           "cache_dir", "machine", "fingerprint", "cache_file", "choices", "forget", "wait_for_compiles",
           "summary_lines"]

MODES = ("measure", "cached", "kernel", "core")
ENV_MODE = "CORENN_NUMBA_CHOOSE"
ENV_CACHE_DIR = "CORENN_NUMBA_CACHE_DIR"
#: The kernel is kept only when it takes at most ``1 - MARGIN`` of the core's time: a tie is the core's.
MARGIN = 0.05
#: Timing a shape class takes at least ``MIN_REPEATS`` turns of each path, and more while under this many
#: seconds (at most ``MAX_REPEATS``): paid once per shape class and machine.
TIME_BUDGET_S = 0.25
MIN_REPEATS, MAX_REPEATS = 5, 20
#: Before timing a kernel that holds OpenBLAS to one thread: how long a worker thread that OpenBLAS left spinning
#: after its last multithreaded call takes to go to sleep (about 2**28 clock ticks).
BLAS_QUIET_S = 0.15
#: How choices are measured and keyed; part of the machine's fingerprint, so that choices measured
#: another way are measured again rather than trusted.
METHOD = 2
#: The per-call dictionary of exact shapes seen; cleared when it grows past this (shape classes stay).
MAX_EXACT_KEYS = 4096


class Choice:
    """The decision for one shape class: kernel or core, for training and for inference, and why."""

    __slots__ = ("train", "infer", "why", "times", "saved")

    def __init__(self, train: bool, infer: bool, why: str, times: dict | None = None, saved: bool = False):
        self.train, self.infer, self.why, self.times, self.saved = train, infer, why, times or {}, saved

    def as_json(self) -> dict:
        return {"train": self.train, "infer": self.infer, "why": self.why, "times": self.times}

    def __repr__(self):
        side = lambda kernel: "kernel" if kernel else "core"  # noqa: E731
        return f"Choice(train={side(self.train)}, infer={side(self.infer)}, {self.why})"


# -- modes ---------------------------------------------------------------------------------------------------

def _mode_from_env() -> str:
    value = os.environ.get(ENV_MODE, "").strip().lower() or "measure"
    if value not in MODES:
        raise ValueError(f"{ENV_MODE}={value!r}: expected one of {', '.join(MODES)}")
    return value


_mode = _mode_from_env()


def mode() -> str:
    """The current mode: ``measure``, ``cached``, ``kernel`` or ``core``."""
    return _mode


def set_mode(new_mode: str) -> None:
    """Switch how kernels are chosen from now on (see the module docstring); ValueError for an unknown mode."""
    global _mode
    if new_mode not in MODES:
        raise ValueError(f"corenn_numba.calibration.set_mode(): mode must be one of {', '.join(MODES)}, "
                         f"got {new_mode!r}")
    _mode = new_mode
    _clear_exact()  # decided under another mode


@contextlib.contextmanager
def choosing(new_mode: str) -> Iterator[None]:
    """``set_mode(new_mode)`` inside the block, the previous mode after it::

        with corenn_numba.calibration.choosing("kernel"):
            y = model(x)          # compiled kernels wherever they handle the inputs
    """
    previous = _mode
    set_mode(new_mode)
    try:
        yield
    finally:
        set_mode(previous)


# -- the machine and the cache file ------------------------------------------------------------------------------

def cache_dir() -> Path:
    """Where choices (and numba's compiled code) are kept: ``CORENN_NUMBA_CACHE_DIR``, else the user's cache folder.

    ``$XDG_CACHE_HOME/corenn-numba`` or ``~/.cache/corenn-numba`` (``%LOCALAPPDATA%`` on
    Windows): outside the installed package, so upgrading or reinstalling other packages
    keeps it, and it is writable where site-packages is not.
    """
    configured = os.environ.get(ENV_CACHE_DIR)
    if configured:
        return Path(configured).expanduser()
    if sys.platform == "win32" and os.environ.get("LOCALAPPDATA"):
        return Path(os.environ["LOCALAPPDATA"]) / "corenn-numba"
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "corenn-numba"


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as cpuinfo:
            for line in cpuinfo:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


_machine: dict | None = None


def machine() -> dict:
    """What a choice depends on: CPU model and features, thread counts, BLAS settings, library versions.

    A choice saved under one of these is never used under another (a new CPU, ``NUMBA_NUM_THREADS=1``,
    an upgraded numba or numpy, a changed kernel of this plugin each get their own cache file).
    """
    global _machine
    if _machine is None:
        import llvmlite
        import llvmlite.binding as llvm
        import numba

        import corenn_numba
        features = sorted(f[1:] for f in llvm.get_host_cpu_features().flatten().split(",") if f.startswith("+"))
        _machine = {
            "method": METHOD,
            "cpu": _cpu_model(),
            "cpu_name": llvm.get_host_cpu_name(),
            "cpu_features": features,
            # numba told to compile for another CPU (portable caches, or an AVX2 build on an AVX-512 host)
            "numba_target": [numba.config.CPU_NAME or "", numba.config.CPU_FEATURES or ""],
            "cpus": os.cpu_count(),
            "numba_threads": numba.get_num_threads(),
            "blas_env": {name: os.environ[name] for name in sorted(os.environ)
                         if name.startswith(("OPENBLAS_", "OMP_", "MKL_", "GOTO_")) or name == "BLIS_NUM_THREADS"},
            "versions": {"python": platform.python_version(), "numpy": np.__version__, "numba": numba.__version__,
                         "llvmlite": llvmlite.__version__, "corenn": corenn.__version__,
                         "corenn-numba": corenn_numba.__version__},
            "kernel_sources": _kernel_sources_hash(),
        }
    return _machine


def _kernel_sources_hash() -> str:
    """A hash of this plugin's source files: a choice measured on one version of a kernel says nothing of the
    next (an edited checkout, or an upgrade that kept the version number)."""
    digest = hashlib.sha256()
    for path in sorted(Path(__file__).parent.glob("*.py")):
        digest.update(path.name.encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()[:16]


def fingerprint(fields: dict | None = None) -> str:
    """A short hash of :func:`machine` (or of ``fields``): the name of this machine's cache file."""
    text = json.dumps(machine() if fields is None else fields, sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def cache_file() -> Path:
    """This machine's file of choices: ``cache_dir()/choices-<fingerprint>.json``."""
    return cache_dir() / f"choices-{fingerprint()}.json"


_saved: dict[str, Choice] | None = None  # shape class (its repr) -> choice, as read from and written to the file
_file_lock = threading.Lock()


def _saved_choices() -> dict[str, Choice]:
    global _saved
    if _saved is None:
        loaded = {}
        try:
            content = json.loads(cache_file().read_text(encoding="utf-8"))
            if content.get("machine") == json.loads(json.dumps(machine())):  # a hash collision is not a match
                for key, value in content.get("choices", {}).items():
                    loaded[key] = Choice(bool(value["train"]), bool(value["infer"]), str(value["why"]),
                                         dict(value.get("times", {})), saved=True)
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            pass  # no file yet, or one this version can't read: measure again
        _saved = loaded
    return _saved


def _save(class_name: str, choice: Choice) -> None:
    """Add one choice to this machine's file: written to a temporary file and renamed, so readers never see half."""
    with _file_lock:
        saved = _saved_choices()
        saved[class_name] = choice
        choice.saved = True
        path = cache_file()
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            content = {"machine": machine(), "choices": {key: c.as_json() for key, c in sorted(saved.items())}}
            handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=".choices-", suffix=".json")
            with os.fdopen(handle, "w", encoding="utf-8") as file:
                json.dump(content, file, indent=1)
            os.replace(temporary, path)
        except OSError as error:  # a read-only home: the choice still holds for this process
            choice.saved = False
            choice.why += f" (not saved: {error.strerror or error})"


# -- shape classes -------------------------------------------------------------------------------------------------

def _bucket(n: int) -> int:
    """Sizes within a factor of two share a class: 0, 1, 2, 3-4, 5-8, ... -> 0, 1, 2, 3, 4, ..."""
    return (n - 1).bit_length() + 1 if n > 0 else 0


def _describe(value, exact: bool):
    """A hashable summary of one argument: arrays by dtype and shape (bucketed unless ``exact``), floats dropped."""
    if isinstance(value, np.ndarray):
        return (value.dtype.char, value.shape if exact else tuple(_bucket(n) for n in value.shape),
                value.flags.c_contiguous)
    if isinstance(value, (list, tuple)):
        if any(isinstance(v, np.ndarray) for v in value):
            # a list of parameters (the fused optimizer updates): how many, how big, which dtype
            arrays = [v for v in value if isinstance(v, np.ndarray)]
            size = sum(a.size for a in arrays)
            return ("arrays", arrays[0].dtype.char, len(value), size if exact else _bucket(size))
        return tuple(_describe(v, exact) for v in value)
    if value is None or isinstance(value, (bool, int, str, np.integer)):
        return value
    if isinstance(value, (float, np.floating)):
        return "float"  # learning rates, eps, momentum: they change the values, not the time
    return type(value).__name__


def _class_key(op: str, args: tuple, params: dict) -> tuple:
    """The shape class of a call: what its choice is saved under."""
    return (op, tuple(_describe(a, False) for a in args),
            tuple((name, _describe(value, False)) for name, value in sorted(params.items())))


_PLAIN = frozenset({int, bool, str, type(None)})


def _exact_key(args: tuple, params: dict) -> tuple:
    """The per-call key: every array's shape, strides and dtype, and the other arguments (cheap: no bucketing).

    This runs on every call of an override, tiny ones included, so arrays, plain values, floats
    (learning rates: ``"float"``, as in the shape class) and the optimizer updates' lists of
    arrays are spelled out in comprehensions; the rest (index tuples) is left to ``_describe``.
    """
    key = [(value.shape, value.strides, value.dtype) if type(value) is np.ndarray
           else value if type(value) in _PLAIN else "float" if type(value) is float
           else _arrays_key(value) if type(value) is list else _describe(value, True) for value in args]
    if params:
        key += [(name, (value.shape, value.dtype) if type(value) is np.ndarray
                 else value if type(value) in _PLAIN else "float" if type(value) is float
                 else _describe(value, True)) for name, value in params.items()]
    return tuple(key)


def _arrays_key(values: list) -> tuple:
    """A list of arrays (or Nones: momentum buffers not made yet) by each one's shape and dtype."""
    return tuple([(value.shape, value.dtype) if type(value) is np.ndarray else _describe(value, True)
                  for value in values])


# -- timing ----------------------------------------------------------------------------------------------------------

def _clone(value):
    if isinstance(value, np.ndarray):
        return value.copy()
    if isinstance(value, list):
        return [_clone(v) for v in value]
    if isinstance(value, tuple):
        return tuple(_clone(v) for v in value)
    return value


def _gradients(out, num_outputs: int):
    """Gradients of ones for the float outputs (None for integer ones: max_pool's indices)."""
    def one(o):
        o = np.asarray(o)
        return np.ones_like(o) if o.dtype.kind in "fc" else None
    return one(out) if num_outputs == 1 else [one(o) for o in out]


def _run(kernel_cls, forward, args, params, with_backward: bool) -> tuple[float, float]:
    """One forward (and backward) of ``kernel_cls`` on copies of the inputs: (forward seconds, backward seconds)."""
    args, params = _clone(args), _clone(params)
    ctx = detached_context(kernel_cls, np, tuple(isinstance(a, np.ndarray) for a in args))
    start = time.perf_counter()
    out = forward(ctx, *args, **params)
    middle = time.perf_counter()
    if not with_backward:
        return middle - start, 0.0
    grads = _gradients(out, kernel_cls.num_outputs)
    middle = time.perf_counter()
    ctx.backward(ctx, grads)
    return middle - start, time.perf_counter() - middle


def _has_backward(kernel_cls, args) -> bool:
    """Whether timing and compiling run backward too: a differentiable op with a float array input."""
    return bool(kernel_cls.core_kernel.differentiable) and any(
        isinstance(a, np.ndarray) and a.dtype.kind in "fc" for a in args)


def _time_both(kernel_cls, args, params) -> dict:
    """Median forward and forward+backward seconds of the compiled path and of the core's, taken in turns.

    Each turn runs its side twice and times the second run: the first pays for switching from
    the other side (OpenBLAS's threads waking up, the compiled kernels' helper threads), which is
    not the op's own cost. The median of the turns, not the minimum: on a busy machine numpy's
    multithreaded BLAS often waits for a thread that another process holds (seen on the 2-core
    machine: a conv's im2col product at 0.5 ms at best but 8-15 ms in most runs, while the
    compiled kernel, which hands out work as threads come free, took 1.6 ms every time); the
    median is what the program will see, and on a quiet machine it is the minimum anyway.

    A kernel that holds numpy's OpenBLAS to one thread while it runs (``holds_blas``: the
    convolutions, see ``corenn_numba._blas``) is timed in its own block first, after
    ``BLAS_QUIET_S`` for a worker the core's last product left spinning to go to sleep, and the
    core in a block after it with OpenBLAS given back: turns taken in alternation put the
    core's spinning worker on the kernel's helper core, and made the kernel look up to twice
    as slow as it runs. Each side is timed as a program that chose it would run it.
    """
    core = kernel_cls.core_kernel
    backward = _has_backward(kernel_cls, args)
    sides = {"kernel": (kernel_cls, kernel_cls.fast_forward), "core": (core, core.forward)}
    samples = {name: ([], []) for name in sides}

    def take_turns(names):
        started, repeats = time.perf_counter(), 0
        while repeats < MIN_REPEATS or (time.perf_counter() - started < TIME_BUDGET_S and repeats < MAX_REPEATS):
            for name in names:
                cls, forward = sides[name]
                _run(cls, forward, args, params, backward)  # untimed: the switch from the other side
                forward_s, backward_s = _run(cls, forward, args, params, backward)
                samples[name][0].append(forward_s)
                samples[name][1].append(forward_s + backward_s)
            repeats += 1
        return repeats

    if getattr(kernel_cls, "holds_blas", False) and _blas.wanted():
        time.sleep(BLAS_QUIET_S)
        repeats = take_turns(["kernel"])
        _blas.give_back()
        take_turns(["core"])
    else:
        repeats = take_turns(["kernel", "core"])
    median = statistics.median
    return {"kernel_forward_s": median(samples["kernel"][0]), "core_forward_s": median(samples["core"][0]),
            "kernel_step_s": median(samples["kernel"][1]), "core_step_s": median(samples["core"][1]),
            "repeats": repeats, "backward": backward}


def _decide(times: dict) -> Choice:
    def faster(kernel_s, core_s):
        return kernel_s <= (1 - MARGIN) * core_s
    train = faster(times["kernel_step_s"], times["core_step_s"])
    infer = faster(times["kernel_forward_s"], times["core_forward_s"])
    ratio = times["kernel_step_s"] / times["core_step_s"] if times["core_step_s"] > 0 else float("inf")
    what = "forward+backward" if times["backward"] else "forward"
    return Choice(train, infer, f"measured: kernel/core {ratio:.2f}x ({what})", times)


# -- compiling in the background ------------------------------------------------------------------------------------

_jobs: "queue.Queue | None" = None
_worker: threading.Thread | None = None
_worker_pid = None
_compiling: dict[tuple, str] = {}  # shape class -> "queued" | "done" | "failed: <error>"
_stopping = threading.Event()
_idle = threading.Condition()


def _compile_now(kernel_cls, args, params) -> None:
    """Run the compiled path once (forward and backward) on copies: numba compiles what these inputs need."""
    _run(kernel_cls, kernel_cls.fast_forward, args, params, _has_backward(kernel_cls, args))


def _work() -> None:
    while not _stopping.is_set():
        item = _jobs.get()
        if item is None:
            return
        class_key, kernel_cls, args, params = item
        try:
            _compile_now(kernel_cls, args, params)
            _compiling[class_key] = "done"
        except Exception as error:  # the compiled path refuses these inputs: the core keeps them
            _compiling[class_key] = f"failed: {type(error).__name__}: {error}"
        finally:
            with _idle:
                _idle.notify_all()


def _stop_worker() -> None:
    # At exit: no new compile starts; one under way finishes (killing a thread inside LLVM is not safe).
    _stopping.set()
    if _jobs is not None and _worker is not None and _worker.is_alive():
        _jobs.put(None)
        _worker.join()


atexit.register(_stop_worker)


_compiles_forbidden = False  # in a process forked while a compile thread existed (see _after_fork)
_compile_thread_at_fork = False


def _before_fork() -> None:
    global _compile_thread_at_fork
    _compile_thread_at_fork = _worker is not None and _worker.is_alive()


def _after_fork() -> None:
    # A child forked while the parent's compile thread ran may hold numba's compiler lock as the
    # thread left it (locked, with no thread to release it): compiling in the child could hang.
    # Such a child (a DataLoader worker, say) uses the choices it inherited, and the core otherwise.
    global _compiles_forbidden
    _compiles_forbidden = _compiles_forbidden or _compile_thread_at_fork


if hasattr(os, "register_at_fork"):
    os.register_at_fork(before=_before_fork, after_in_child=_after_fork)


def _queue_compile(class_key, kernel_cls, args, params) -> None:
    global _jobs, _worker, _worker_pid
    if _worker_pid != os.getpid():  # first use, or a forked child: the parent's thread isn't here
        _jobs, _worker_pid = queue.Queue(), os.getpid()
        _compiling.clear()
        _worker = threading.Thread(target=_work, name="corenn-numba-compile", daemon=True)
        _worker.start()
    _compiling[class_key] = "queued"
    _jobs.put((class_key, kernel_cls, _clone(args), _clone(params)))


def wait_for_compiles(timeout: float | None = None) -> bool:
    """Block until every queued background compile has finished; False on timeout (for tests and benchmarks)."""
    deadline = None if timeout is None else time.monotonic() + timeout
    with _idle:
        while any(state == "queued" for state in _compiling.values()):
            remaining = None if deadline is None else deadline - time.monotonic()
            if remaining is not None and remaining <= 0:
                return False
            _idle.wait(remaining if remaining is not None else 1.0)
    return True


# -- the choice, per call --------------------------------------------------------------------------------------------

_exact: dict[str, dict[tuple, Choice]] = {}  # op -> exact shapes -> the choice of their class (per-call lookup)
_choices: dict[tuple, Choice] = {}  # shape class -> choice, this process
#: Compile in the calling thread instead of the background (``python -m corenn_numba calibrate``).
foreground = False
_CONSERVATIVE = Choice(False, False, "no saved choice (mode 'cached'): the core")
_NOT_HANDLED = Choice(False, False, "inputs the override does not handle")


def _choose(op: str, kernel_cls, args: tuple, params: dict, exact_key: tuple) -> Choice | None:
    """The slow path: the choice of a shape class seen for the first time in this process (None: not yet)."""
    class_key = _class_key(op, args, params)
    choice = _choices.get(class_key)
    if choice is None:
        choice = _saved_choices().get(repr(class_key))
    if choice is None:
        if _mode == "cached":
            choice = _CONSERVATIVE
        elif _compiles_forbidden:
            choice = Choice(False, False, "forked while compiling: the core in this process")
        else:
            state = _compiling.get(class_key) if _worker_pid == os.getpid() else None
            if foreground and state is None:
                try:
                    _compile_now(kernel_cls, args, params)
                    state = "done"
                except Exception as error:
                    state = f"failed: {type(error).__name__}: {error}"
            if state is None:
                _queue_compile(class_key, kernel_cls, args, params)
                return None
            if state == "queued":
                return None
            if state == "done" and "queued" in _compiling.values():
                return None  # time it once the other compiles are done: numba compiling on a core skews timings
            if state == "done":
                try:
                    times = _time_both(kernel_cls, args, params)
                except Exception as error:  # timing must never break the call: the core runs it
                    choice = Choice(False, False, f"not timed ({type(error).__name__}: {error}): the core")
                else:
                    choice = _decide(times)
                    _save(repr(class_key), choice)
            else:  # not saved: a failure is this input's, maybe not the next one's
                choice = Choice(False, False, f"the compiled path {state}")
    _choices[class_key] = choice
    _remember(_exact[op], exact_key, choice)
    return choice


def _remember(exact_choices: dict, exact_key: tuple, choice: Choice) -> None:
    if len(exact_choices) >= MAX_EXACT_KEYS:
        exact_choices.clear()
    exact_choices[exact_key] = choice


def calibrated(op: str, kernel_cls: type) -> type:
    """``kernel_cls`` (a :class:`corenn.kernels.KernelOverride`) that runs only where it was measured faster.

    The subclass's ``handles`` is the override's own predicate, then the choice for the
    inputs' shape class (:func:`mode`); when it says no, the core kernel runs, forward and
    backward. Name, module and docstring stay the override's.
    """
    own_handles = kernel_cls.handles
    grad_enabled = corenn.is_grad_enabled
    exact_choices = _exact.setdefault(op, {})  # one per op: the per-call key need not name the op

    def handles(*args, **params):
        current = _mode
        if current == "kernel":
            return own_handles is None or own_handles(*args, **params)
        if current == "core":
            return False
        # The override's own predicate reads only what the exact key holds (dtypes, shapes, strides, types,
        # parameters), so its answer is kept with the choice and a repeated call skips it.
        exact_key = _exact_key(args, params)
        choice = exact_choices.get(exact_key)
        if choice is None:
            if own_handles is not None and not own_handles(*args, **params):
                _remember(exact_choices, exact_key, _NOT_HANDLED)
                return False
            choice = _choose(op, kernel_cls, args, params, exact_key)
            if choice is None:
                return False  # compiling in the background: the core runs meanwhile
        return choice.train if grad_enabled() else choice.infer

    namespace = {"handles": staticmethod(handles), "__module__": kernel_cls.__module__,
                 "__qualname__": kernel_cls.__qualname__, "__doc__": kernel_cls.__doc__, "calibration_op": op}
    return type(kernel_cls.__name__, (kernel_cls,), namespace)


# -- reporting -------------------------------------------------------------------------------------------------------

def choices() -> dict[str, Choice]:
    """Every choice known to this process: saved ones from this machine's file, then this process's (by class)."""
    known = dict(_saved_choices())
    known.update({repr(key): choice for key, choice in _choices.items()})
    return known


def _clear_exact() -> None:
    for exact_choices in _exact.values():
        exact_choices.clear()  # emptied, not replaced: each op's handles holds its own dict


def forget(saved: bool = False) -> None:
    """Drop this process's choices (and with ``saved=True`` this machine's file too): everything is measured again."""
    global _saved
    _clear_exact()
    _choices.clear()
    with _file_lock:
        if saved:
            with contextlib.suppress(FileNotFoundError):
                cache_file().unlink()
        _saved = None


def summary_lines() -> list[str]:
    """What ``python -m corenn plugins`` shows: the mode, the cache file, and per op how many classes went which way."""
    lines = [f"kernel choice: {_mode} ({ENV_MODE}); choices file {cache_file()}"]
    per_op: dict[str, list[int]] = {}
    for key, choice in choices().items():
        op = key.split("'")[1] if "'" in key else key
        counts = per_op.setdefault(op, [0, 0])
        counts[0 if choice.train else 1] += 1
    if per_op:
        lines.append("measured (training): " + ", ".join(
            f"{op} kernel {k}/core {c}" for op, (k, c) in sorted(per_op.items())))
    else:
        lines.append("no shape class measured yet on this machine (python -m corenn_numba calibrate measures now)")
    return lines


def describe(key: str, choice: Choice) -> str:
    """One line for ``python -m corenn_numba show``."""
    side = lambda kernel: "kernel" if kernel else "core"  # noqa: E731
    return f"{key}\n    training: {side(choice.train)}, inference: {side(choice.infer)}; {choice.why}"

