"""``corenn.compile`` and ``corenn.compiler``: capture a call's kernels once, replay them without the front end.

``corenn.compile(fn_or_module)`` returns a callable that, for each *signature* of a call
(the shapes, dtypes, devices and requires_grad of its tensor arguments, its other arguments'
values, grad mode, autocast, default dtype and, for a module, ``training`` of every submodule),
runs the first call eagerly while recording the kernels it dispatches, and later calls by
replaying that record: no argument checking, no dispatch look-ups, no Tensor wrapping of
intermediates. See docs/jit.md for what is captured, what falls back to eager and why.

    >>> import corenn
    >>> @corenn.compile
    ... def f(x):
    ...     return (x * 2).sin() + 1
    >>> x = corenn.ones(3)
    >>> bool((f(x) == (x * 2).sin() + 1).all())
    True
"""
from __future__ import annotations

import collections
import functools
import os
import warnings

from corenn.autograd import node as _node
from corenn.compiler._capture import KernelStep, Program, SlotInfo, Unsupported, capture, capturing

__all__ = ["compile", "CompiledFunction", "Unsupported", "reset", "is_compiling", "disable", "list_backends",
           "cache_size_limit", "Program", "KernelStep", "SlotInfo"]

#: How many signatures each compiled callable keeps (``torch._dynamo.config.cache_size_limit``).
cache_size_limit = 8

# Backends that first-party plugins are expected to provide, so a missing one can name its plugin.
_KNOWN_PROVIDERS = {"numba": "corenn-numba (plugins/numba_backend)"}
_ALIASES = {"inductor": "replay"}  # torch.compile's default name: ports keep working


def _replay_backend(program):
    """The core backend: replay the captured kernels, each pointwise chain as straight-line numpy code."""
    from corenn.compiler.pointwise import numpy_backend
    return numpy_backend(program)


def _eager_backend(program):
    """Debugging backend: capture (so explain() and guards work) but always run the function eagerly."""
    return None


_CORE_BACKENDS = {"replay": _replay_backend, "eager": _eager_backend}


def _plugin_backends() -> dict:
    from corenn import plugins
    return plugins.compile_backends()


def list_backends() -> list[str]:
    """Names ``corenn.compile(backend=...)`` accepts: the core's and the plugins' (``torch._dynamo.list_backends``)."""
    return sorted({**_CORE_BACKENDS, **_plugin_backends()})


def _lookup_backend(backend):
    if callable(backend):
        return backend, getattr(backend, "__name__", type(backend).__name__)
    if not isinstance(backend, str):
        raise TypeError(f"compile(): argument 'backend' must be a str or a callable, not {type(backend).__name__}")
    name = _ALIASES.get(backend, backend)
    if name in _CORE_BACKENDS:
        return _CORE_BACKENDS[name], name
    plugin_backends = _plugin_backends()
    if name in plugin_backends:
        return plugin_backends[name], name
    available = ", ".join(sorted({**_CORE_BACKENDS, **plugin_backends}))
    provider = _KNOWN_PROVIDERS.get(name)
    if provider:
        raise RuntimeError(f"compile(): backend {backend!r} is provided by the plugin {provider}, which is not "
                           f"installed or does not register it (corenn_register_compile_backends); "
                           f"available backends: {available}")
    raise RuntimeError(f"compile(): unknown backend {backend!r}; available backends: {available}")


def _disabled_by_environment() -> bool:
    return os.environ.get("CORENN_COMPILE_DISABLE", "") not in ("", "0")


class _Fallback:
    """A signature that runs eagerly, and why."""

    __slots__ = ("reasons",)

    def __init__(self, reasons):
        self.reasons = reasons


def _signature_of(value, tensors, key):
    """Append ``value``'s part of the guard key to ``key`` and its tensors to ``tensors``."""
    if isinstance(value, _node._Tensor):
        tensors.append(value)
        data = value._data
        key.append((data.shape, data.dtype.str if data.dtype.names is None else str(data.dtype), value._device,
                    value._requires_grad, value._grad_fn is None))
    elif value.__class__ in (tuple, list):
        key.append((value.__class__, len(value)))
        for item in value:
            _signature_of(item, tensors, key)
    elif value.__class__ is dict:
        key.append((dict, tuple(value)))
        for item in value.values():
            _signature_of(item, tensors, key)
    elif value is None or value.__class__ in (int, float, bool, str, complex):
        key.append((value.__class__, value))
    else:
        # A module or another object, by identity (held by the key, so its id is not reused): the
        # capture read tensors through it. Unhashable: TypeError, and the call runs eagerly.
        key.append(("object", value))


class CompiledFunction:
    """What ``corenn.compile(fn)`` returns: call it like ``fn``; ``explain()`` says what happened.

    Attributes: ``graph`` (a ``corenn.fx.Graph`` of the last captured program's kernels),
    ``backend`` (its name), ``fullgraph``, ``dynamic`` (accepted; shapes are always specialised).
    """

    def __init__(self, function, *, backend="replay", fullgraph=False, dynamic=False, mode=None, options=None,
                 disable=False, module=None):
        if not callable(function):
            raise TypeError(f"compile(): argument 'model' must be callable, got {type(function).__name__}")
        if mode is not None and mode not in ("default", "reduce-overhead", "max-autotune",
                                             "max-autotune-no-cudagraphs"):
            raise RuntimeError(f"compile(): unknown mode {mode!r}; expected one of 'default', 'reduce-overhead', "
                               f"'max-autotune', 'max-autotune-no-cudagraphs'")
        self._function = function
        self._module = module
        self._backend, self.backend = _lookup_backend(backend)
        self.fullgraph = bool(fullgraph)
        self.dynamic = dynamic
        self.mode = mode
        self.options = options
        self._disabled = bool(disable) or _disabled_by_environment()
        self._cache: collections.OrderedDict = collections.OrderedDict()
        self._last_program = None
        self._warned = False
        self.stats = {"calls": 0, "captures": 0, "replays": 0, "eager_calls": 0, "evictions": 0,
                      "recaptures": 0}
        self._events: list[str] = []
        functools.update_wrapper(self, function, updated=())

    def _key(self, args, kwargs):
        tensors, key = [], []
        for value in args:
            _signature_of(value, tensors, key)
        if kwargs:
            key.append(tuple(kwargs))
            for value in kwargs.values():
                _signature_of(value, tensors, key)
        mode = _node.grad_mode
        from corenn import _autocast, _dtype
        key.append((mode.enabled, mode.inference, _dtype.get_default_dtype(),
                    tuple(sorted(_autocast.regions().items()))))
        if self._module is not None:
            key.append(tuple([m.training for m in self._module.modules()]))
        if len({id(t._data) for t in tensors}) != len(tensors):
            key.append(("aliased", tuple(id(t._data) for t in tensors)))
        return tuple(key), tensors

    def __call__(self, *args, **kwargs):
        self.stats["calls"] += 1
        if self._disabled or capturing() or _node._observers:
            # Disabled, inside another capture (its kernels belong to that one), or observed (a profiler
            # must see every op): plain eager.
            self.stats["eager_calls"] += 1
            return self._function(*args, **kwargs)
        try:
            key, tensors = self._key(args, kwargs)
            hash(key)
        except TypeError:
            self.stats["eager_calls"] += 1
            return self._function(*args, **kwargs)
        entry = self._cache.get(key)
        if entry is not None:
            if entry.__class__ is _Fallback:
                self.stats["eager_calls"] += 1
                return self._function(*args, **kwargs)
            program, runner = entry
            if runner is not None:
                invalid = program.still_valid()
                if invalid is None:
                    self.stats["replays"] += 1
                    return runner(tensors)
                self._events.append(f"recapture: {invalid}")
                self.stats["recaptures"] += 1
                del self._cache[key]
            else:
                self.stats["eager_calls"] += 1
                return self._function(*args, **kwargs)
        return self._capture(key, tensors, args, kwargs)

    def _capture(self, key, tensors, args, kwargs):
        self.stats["captures"] += 1
        result, program, reasons = capture(self._function, args, kwargs, tensors, fullgraph=self.fullgraph)
        if program is None:
            entry = _Fallback(reasons)
            self._events.append("fallback to eager: " + "; ".join(reasons))
            if not self._warned:
                self._warned = True
                warnings.warn(f"corenn.compile: {getattr(self._function, '__name__', 'the function')} runs eagerly "
                              f"for these inputs: cannot capture " + "; ".join(reasons), stacklevel=3)
        else:
            runner = self._backend(program)
            self._events.append(f"captured {program.kernel_count} kernels in {len(program.steps)} steps for "
                                f"{len(tensors)} tensor inputs")
            ran = getattr(runner, "__self__", None)
            if isinstance(ran, Program) and ran is not program:
                # The backend rewrote the program (fused kernels): what runs is what `graph` shows.
                self._events.append(f"backend {self.backend!r} runs it as {ran.kernel_count} kernels")
                program = ran
            entry = (program, runner)
            self._last_program = program
        self._cache[key] = entry
        if len(self._cache) > cache_size_limit:
            self._cache.popitem(last=False)
            self.stats["evictions"] += 1
            self._events.append(f"cache full ({cache_size_limit} signatures): dropped the oldest")
        return result

    @property
    def graph(self):
        """A ``corenn.fx.Graph`` of the last captured program: one ``call_function`` node per kernel."""
        if self._last_program is None:
            raise RuntimeError("compile(): nothing captured yet; call the compiled function first")
        from corenn.compiler._graph import program_graph
        return program_graph(self._last_program)

    def explain(self) -> "ExplainOutput":
        """What happened so far (``torch._dynamo.explain``): captures, guards, fallbacks and why."""
        programs = [entry[0] for entry in self._cache.values() if entry.__class__ is not _Fallback]
        fallbacks = [entry.reasons for entry in self._cache.values() if entry.__class__ is _Fallback]
        return ExplainOutput(backend=self.backend, disabled=self._disabled, stats=dict(self.stats),
                             signatures=len(self._cache), kernels=[p.kernel_count for p in programs],
                             fallback_reasons=[r for reasons in fallbacks for r in reasons],
                             events=list(self._events))

    def reset(self) -> None:
        """Forget every captured program (``torch._dynamo.reset`` for this callable)."""
        self._cache.clear()
        self._last_program = None


class ExplainOutput:
    """The answer of ``explain()``: counts, and the reasons for each fallback, printed readably."""

    def __init__(self, **fields):
        self.__dict__.update(fields)

    @property
    def graph_count(self) -> int:
        return len(self.kernels)

    @property
    def graph_break_count(self) -> int:
        return len(self.fallback_reasons)

    def __str__(self):
        lines = [f"backend: {self.backend}" + (" (disabled: every call runs eagerly)" if self.disabled else ""),
                 f"signatures cached: {self.signatures}; captured programs: {self.graph_count} "
                 f"(kernels: {self.kernels})",
                 "calls: " + ", ".join(f"{k} {v}" for k, v in self.stats.items())]
        if self.fallback_reasons:
            lines.append("fallbacks to eager:")
            lines += [f"  - {reason}" for reason in self.fallback_reasons]
        lines.append("events:")
        lines += [f"  - {event}" for event in self.events]
        return "\n".join(lines)

    __repr__ = __str__


class CompiledModule:
    """What ``corenn.compile(module)`` returns: calls go through the capture; everything else to the module.

    ``_orig_mod`` is the module, as on PyTorch's ``OptimizedModule``.
    """

    def __init__(self, module, **options):
        object.__setattr__(self, "_orig_mod", module)
        object.__setattr__(self, "_compiled", CompiledFunction(module, module=module, **options))

    def __call__(self, *args, **kwargs):
        return self._compiled(*args, **kwargs)

    def __getattr__(self, name):
        return getattr(self._orig_mod, name)

    def __setattr__(self, name, value):
        setattr(self._orig_mod, name, value)

    def explain(self):
        return self._compiled.explain()

    @property
    def graph(self):
        return self._compiled.graph

    def __repr__(self):
        return f"CompiledModule({self._orig_mod!r})"


def compile(model=None, *, fullgraph: bool = False, dynamic=None, backend="replay", mode=None, options=None,
            disable: bool = False):
    """Capture ``model`` (a function or a module) once per input signature and replay it (``torch.compile``).

    Usable as ``corenn.compile(fn)``, ``@corenn.compile`` and ``@corenn.compile(backend=...)``.
    ``backend``: ``"replay"`` (the core's, the default; ``"inductor"`` names it too), ``"eager"``
    (capture for explain() only), a plugin's name (``corenn_register_compile_backends``), or a
    callable ``backend(program) -> runner``. ``fullgraph=True`` raises :class:`Unsupported` where a
    call cannot be captured instead of running it eagerly. ``dynamic`` is accepted but shapes are
    always specialised (a new shape is a new capture). ``CORENN_COMPILE_DISABLE=1`` makes every
    call eager.

    Example::

        >>> step = corenn.compile(train_step)        # doctest: +SKIP
        >>> loss = step(x, y)                        # first call: eager, recorded   # doctest: +SKIP
        >>> loss = step(x, y)                        # replayed                       # doctest: +SKIP
    """
    options_ = dict(fullgraph=fullgraph, dynamic=dynamic, backend=backend, mode=mode, options=options,
                    disable=disable)
    if model is None:
        return lambda target: compile(target, **options_)
    from corenn.module.module import Module
    if isinstance(model, Module):
        return CompiledModule(model, **options_)
    return CompiledFunction(model, **options_)


def reset() -> None:
    """Kept for ``torch.compiler.reset()`` ports: programs live on each compiled callable (see ``.reset()``)."""


def is_compiling() -> bool:
    """True while a compiled call is being captured in this thread (``torch.compiler.is_compiling``)."""
    return capturing()


def disable(fn=None, recursive: bool = True):
    """``torch.compiler.disable``: ``fn`` (or a decorator) whose calls are never compiled: returned as it is."""
    if fn is None:
        return lambda f: f
    return fn
