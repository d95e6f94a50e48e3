"""Finding, loading and registering plugins (the pluggy host).

Built-in plugins (the ``cpu`` backend and the core kernels) register first, then
the entry points of group ``corenn``, when ``corenn`` is first imported. The
environment steers loading:

- ``CORENN_DISABLE_PLUGIN_AUTOLOAD=1``: load no entry points (built-ins only);
- ``CORENN_PLUGINS=a,b``: load only the named entry points (or distributions);
- ``CORENN_STRICT_PLUGINS=1``: a failing plugin raises :class:`PluginError`
  instead of being skipped with a :class:`PluginWarning` (for plugin authors);
- ``CORENN_TRACE_PLUGINS=1``: print loading steps and every hook call to stderr;
- ``CORENN_CHECK_KERNELS=1``: check every call of a plugin kernel against the core
  kernel's output shapes and dtypes, not only the first (:mod:`corenn._kernel_check`).

A plugin that fails -- its import raises (anything but KeyboardInterrupt, ``sys.exit()``
included), a registration hook raises or returns something malformed, a hookimpl
matches no hookspec -- is reported once as a warning naming the plugin, its
distribution and the cause; it is skipped (nothing of it stays registered) and listed
as ``failed``. What an active plugin handed over and that fails later (an op
observer, a module-state handler, an FX leaf rule, a kernel's output) is detached
the same way and listed in its record's ``detached``. A plugin that raises
:class:`PluginUnavailable` (no GPU, no MPI) is listed as ``unavailable`` with its
reason, without a warning. ``corenn.plugins.register(obj)`` adds a plugin at run
time (tests, notebooks); see also ``corenn.testing.register_plugin``.

Example::

    >>> import corenn
    >>> [r.name for r in corenn.plugins.records.values() if r.builtin]
    ['corenn.backends.cpu', 'corenn.ops']
"""
from __future__ import annotations

import contextlib
import difflib
import inspect
import os
import sys
import traceback
import types
import warnings
from typing import Any, Callable, Iterable

import attrs
import pluggy

from corenn import dispatch, hookspecs, import_paths

__all__ = ["manager", "register", "unregister", "PluginUnavailable", "PluginError", "PluginWarning", "PluginRecord",
           "records", "load_builtins", "ensure_loaded", "finish_pending", "installed_entry_points", "list_plugins", "info_lines",
           "fx_leaf_module_rules", "module_state_handlers",
           "process_group_backends", "observe_ops", "ObserverHandle", "enable_tracing", "disable", "enable",
           "disabled", "registered_names"]

BUILTIN_PLUGINS = ("corenn.backends.cpu", "corenn.ops")
ENTRY_POINT_GROUP = "corenn"
ENV_DISABLE_AUTOLOAD = "CORENN_DISABLE_PLUGIN_AUTOLOAD"
ENV_PLUGINS = "CORENN_PLUGINS"
ENV_STRICT = "CORENN_STRICT_PLUGINS"
ENV_TRACE = "CORENN_TRACE_PLUGINS"


class PluginUnavailable(Exception):
    """Raised by a plugin (at import or in a registration hook) when it cannot run on this machine.

    The plugin is then listed as *unavailable* with the message as its reason,
    without a warning: a missing GPU is not a broken plugin.

    Example::

        @corenn.hookimpl
        def corenn_register_backends():
            if cupy.cuda.runtime.getDeviceCount() == 0:
                raise corenn.plugins.PluginUnavailable("no CUDA device found")
            return [CUDA_BACKEND]
    """


class PluginError(RuntimeError):
    """A plugin failed to load or register (raised only with ``CORENN_STRICT_PLUGINS=1``).

    Example: ``CORENN_STRICT_PLUGINS=1 python -c "import corenn"`` raises it for a broken plugin.
    """


class PluginWarning(UserWarning):
    """Warned once for each plugin that failed and was skipped.

    Example: ``warnings.simplefilter("error", corenn.plugins.PluginWarning)`` turns failures into errors.
    """


@attrs.define
class PluginRecord:
    """What is known about one plugin: where it came from, how loading went and what it contributed.

    ``status`` is ``active``, ``unavailable``, ``failed``, ``disabled`` (installed
    but not loaded because of ``CORENN_DISABLE_PLUGIN_AUTOLOAD`` / ``CORENN_PLUGINS``,
    or loaded and turned off by :func:`disable`) or ``pending`` (its module was still
    being imported, see :func:`finish_pending`); ``reason`` says why for all but ``active``.
    ``detached`` lists what of an active plugin was taken out because it failed at run time
    (an op observer or a module-state handler that raised, a kernel whose output had the
    wrong shape or dtype), one line each, as the warning said.

    Example::

        >>> corenn.plugins.records["corenn.backends.cpu"].devices
        ['cpu']
    """

    name: str
    distribution: str | None = None
    version: str | None = None
    status: str = "active"
    reason: str | None = None
    builtin: bool = False
    entry_point: str | None = None
    plugin: Any = attrs.field(default=None, repr=False)
    hooks: list = attrs.Factory(list)
    devices: list = attrs.Factory(list)
    kernels: list = attrs.field(factory=list, repr=False)
    process_group_backends: list = attrs.Factory(list)
    fx_leaf_rules: list = attrs.field(factory=list, repr=False)
    state_handlers: list = attrs.field(factory=list, repr=False)
    op_observers: list = attrs.field(factory=list, repr=False)
    import_paths: dict = attrs.Factory(dict)
    names: list = attrs.Factory(list)
    detached: list = attrs.Factory(list)

    def to_dict(self) -> dict:
        """A JSON-friendly summary (what ``python -m corenn plugins --json`` prints for this plugin)."""
        return {
            "name": self.name, "distribution": self.distribution, "version": self.version,
            "status": self.status, "reason": self.reason, "builtin": self.builtin,
            "entry_point": self.entry_point, "hooks": list(self.hooks), "devices": list(self.devices),
            "kernels": [_kernel_summary(r, self.status == "active") for r in self.kernels],
            "process_group_backends": list(self.process_group_backends),
            "fx_leaf_rules": len(self.fx_leaf_rules), "module_state_handlers": len(self.state_handlers),
            "op_observers": len(self.op_observers), "import_paths": dict(self.import_paths),
            "names": list(self.names),
            "detached": list(self.detached),
        }


def _kernel_summary(registration, active: bool = True) -> dict:
    """One kernel registration, with the registrations of other plugins it outranks (none while disabled)."""
    overrides = sorted({r.source for r in dispatch.kernels.registrations(registration.op)
                        if r.source != registration.source and r.priority < registration.priority
                        and (registration.device_type in (r.device_type, "*") or r.device_type == "*")}) if active else []
    # Which kernel really runs: another plugin's may win (a higher priority, or an earlier one at the same priority).
    device_type = "cpu" if registration.device_type == "*" else registration.device_type
    shadowed_by = None
    if active and device_type in dispatch.backends:
        runs = dispatch.kernels.source_of(registration.op, device_type)
        if runs != registration.source:
            shadowed_by = runs
    return {"op": registration.op, "device_type": registration.device_type, "priority": registration.priority,
            "overrides": overrides, "shadowed_by": shadowed_by}


class _PluginManager(pluggy.PluginManager):
    """pluggy's manager, finding hookimpls without running a plugin's ``__getattr__``.

    A plugin module that loads its heavy parts lazily (a module ``__getattr__``, as
    corenn-profiler and corenn-quantize do) must stay light when corenn registers it.
    pluggy 1.7 looks attributes up statically; earlier versions call ``getattr`` on
    every name in ``dir(plugin)``, which would import everything. This does what 1.7
    does on every supported version.
    """

    def parse_hookimpl_opts(self, plugin, name: str):
        try:
            value = inspect.getattr_static(plugin, name)
        except AttributeError:
            return None
        if isinstance(value, (staticmethod, classmethod)):
            value = value.__func__
        if not inspect.isroutine(value):
            return None
        opts = getattr(value, self.project_name + "_impl", None)
        return opts if isinstance(opts, dict) else None


manager = _PluginManager("corenn")
manager.add_hookspecs(hookspecs)
# Historic: every plugin registered from now on is asked for hookspecs of its own when it registers.
manager.hook.corenn_add_hookspecs.call_historic(kwargs={"plugin_manager": manager})
records: dict[str, PluginRecord] = {}
_trace = manager.trace.root.get("corenn")
_loaded = False
_loading = False
_builtins_loaded = False

# What active plugins contributed, in registration order, with the name of the plugin that gave it.
_process_group_backends: dict[str, tuple[Callable, str]] = {}
_fx_rules: list[tuple[Callable, str]] = []
_state_handlers: list[tuple[Any, str]] = []
_names: dict[str, tuple[Any, str]] = {}  # corenn.<name> -> (object, plugin), from corenn_register_names


def _env_flag(name: str) -> bool:
    return os.environ.get(name, "").strip().lower() not in ("", "0", "false", "no", "off")


def enable_tracing(writer: Callable[[str], Any] | None = None) -> Callable[[], None]:
    """Print plugin loading steps and every hook call (with arguments and results); returns an undo function.

    ``CORENN_TRACE_PLUGINS=1`` does this at import, writing to stderr.

    Example::

        undo = corenn.plugins.enable_tracing(print)
        corenn.plugins.info_lines()   # prints "corenn_info_lines ... [hook]" lines
        undo()
    """
    manager.trace.root.setwriter(writer or sys.stderr.write)
    undo_monitoring = manager.enable_tracing()

    def undo() -> None:
        undo_monitoring()
        manager.trace.root.setwriter(None)
    return undo


if _env_flag(ENV_TRACE):
    enable_tracing()

import_paths._install()  # registered import paths (corenn_register_import_paths) resolve from now on


# -- failure reporting -----------------------------------------------------------------------------------------------

def _fail(record: PluginRecord, reason: str, status: str = "failed") -> None:
    """Mark ``record`` failed (warn, or raise in strict mode) or unavailable (quietly)."""
    record.status = status
    record.reason = reason
    record.plugin = None
    _trace(f"plugin {record.name} {status}: {reason}")
    if status != "failed":
        return
    message = f"corenn plugin {record.name!r} ({_origin(record)}) failed and was skipped: {reason}"
    if _env_flag(ENV_STRICT):
        raise PluginError(message.replace(" and was skipped", "") + f" [{ENV_STRICT} is set]")
    warnings.warn(message, PluginWarning, stacklevel=4)


def _origin(record: PluginRecord | None) -> str:
    return f"distribution {record.distribution}" if record is not None and record.distribution else \
        "registered at run time"


def _describe(error: BaseException) -> str:
    text = "".join(traceback.format_exception_only(type(error), error)).strip()
    if isinstance(error, SystemExit):  # from a library, "SystemExit: 3" alone reads like corenn's own exit
        text += " (the plugin called sys.exit())"
    return text


# Plugin code runs inside ``try: ... except KeyboardInterrupt: raise / except BaseException``: a plugin
# that calls sys.exit() or raises a BaseException subclass (GeneratorExit included) is contained like
# any other failure -- it must not end the program that merely imported corenn -- while Ctrl-C still
# stops it.


def _interrupted(record: PluginRecord) -> None:
    # Ctrl-C propagates; a program that catches it must not find the plugin listed as active.
    record.status, record.reason, record.plugin = "failed", "loading was interrupted (KeyboardInterrupt)", None


# -- the three loading phases ----------------------------------------------------------------------------------------
# 1. register with pluggy (checks each hookimpl's arguments against its spec),
# 2. check that every hookimpl names a known hook (after all plugins are in, so a plugin may
#    implement a hook that another plugin adds with corenn_add_hookspecs),
# 3. call the registration hooks and keep what they return.

def _phase_register(plugin, record: PluginRecord) -> bool:
    try:  # dir() and getattr() run the plugin's code when it is an object with __dir__ / __getattr__
        unmarked = [name for name in dir(plugin) if name.startswith("corenn_")
                    and callable(getattr(plugin, name, None)) and manager.parse_hookimpl_opts(plugin, name) is None]
    except KeyboardInterrupt:
        raise
    except BaseException as error:
        _fail(record, _describe(error))
        return False
    if unmarked:
        _fail(record, f"{', '.join(unmarked)} not decorated with @corenn.hookimpl, so corenn would never call "
                      f"{'them' if len(unmarked) > 1 else 'it'}")
        return False
    try:
        manager.register(plugin, name=record.name)  # calls the plugin's corenn_add_hookspecs (a historic hook)
    except KeyboardInterrupt:
        if manager.is_registered(plugin):
            manager.unregister(plugin)
        _interrupted(record)
        raise
    except BaseException as error:  # a hookimpl asking for arguments its spec lacks, a duplicate, sys.exit(), ...
        if manager.is_registered(plugin):
            manager.unregister(plugin)
        _fail(record, _describe(error))
        return False
    record.plugin = plugin
    return True


def _unknown_hooks(plugin) -> list[str]:
    unknown = []
    for caller in manager.get_hookcallers(plugin) or ():
        if caller.has_spec():
            continue
        if any(impl.plugin is plugin and not impl.optionalhook for impl in caller.get_hookimpls()):
            unknown.append(caller.name)
    return unknown


def _phase_check(plugin, record: PluginRecord) -> bool:
    unknown = _unknown_hooks(plugin)
    if not unknown:
        return True
    known = [name for name in dir(manager.hook) if name.startswith("corenn_")
             and getattr(manager.hook, name).has_spec()]
    details = []
    for name in unknown:
        # All hook names share "corenn_": a low cutoff would suggest unrelated hooks.
        close = difflib.get_close_matches(name, known, n=1, cutoff=0.75)
        details.append(name + (f" (did you mean {close[0]}?)" if close else ""))
    manager.unregister(plugin)
    _fail(record, f"hookimpl {', '.join(details)} matches no corenn hookspec")
    return False


def _answers(plugin, hook_name: str, **kwargs) -> list:
    """Call one plugin's implementation of a hook (through pluggy, so tracing sees it); [] if it has none."""
    if not any(caller.name == hook_name for caller in manager.get_hookcallers(plugin) or ()):
        return []
    others = [p for p in manager.get_plugins() if p is not plugin]
    return manager.subset_hook_caller(hook_name, others)(**kwargs)


def _items(plugin, hook_name: str, expected: str) -> list:
    """The items a registration hook returned, as a list; TypeError naming the hook if not iterable."""
    items = []
    for answer in _answers(plugin, hook_name):
        if isinstance(answer, (str, bytes)) or not isinstance(answer, Iterable):
            raise TypeError(f"{hook_name} must return an iterable of {expected}, got {type(answer).__name__}")
        items.extend(answer)
    return items


def _phase_activate(plugin, record: PluginRecord) -> None:
    from corenn.autograd.node import Op

    record.hooks = sorted({caller.name for caller in manager.get_hookcallers(plugin) or ()})
    try:
        for backend in _items(plugin, "corenn_register_backends", "corenn.dispatch.Backend"):
            if not isinstance(backend, dispatch.Backend):
                raise TypeError(f"corenn_register_backends returned a {type(backend).__name__}, expected "
                                "corenn.dispatch.Backend")
            if not isinstance(backend.type, str) or not backend.type.isidentifier():
                raise ValueError(f"corenn_register_backends returned a backend with device type {backend.type!r}; "
                                 "a device type must be an identifier such as 'cuda'")
            backend.source = record.name
            dispatch.backends.register(backend)
            record.devices.append(backend.type)

        registrations = _items(plugin, "corenn_register_kernels", "corenn.dispatch.KernelRegistration")
        for registration in registrations:
            if not isinstance(registration, dispatch.KernelRegistration):
                raise TypeError(f"corenn_register_kernels returned a {type(registration).__name__}, expected "
                                "corenn.dispatch.KernelRegistration")
            if not (isinstance(registration.kernel, type) and issubclass(registration.kernel, Op)):
                raise TypeError(f"kernel for op {registration.op!r} is {registration.kernel!r}, expected a subclass "
                                "of corenn.autograd.node.Op (forward and backward as static methods)")
            if not isinstance(registration.priority, int) or isinstance(registration.priority, bool):
                raise TypeError(f"kernel for op {registration.op!r} has priority {registration.priority!r}, "
                                "expected an int")
            if not isinstance(registration.op, str) or not isinstance(registration.device_type, str):
                raise TypeError(f"kernel registration {registration!r} needs string op and device_type")
            _check_op_name(registration.op)
            _check_kernel_attributes(registration)
        if not _deferring_device_checks:
            _check_device_types(registrations)
        for registration in registrations:
            registration = attrs.evolve(registration, source=record.name)
            dispatch.kernels.register(registration)
            record.kernels.append(registration)

        for answer in _answers(plugin, "corenn_register_process_group_backends"):
            if not isinstance(answer, dict) and not hasattr(answer, "items"):
                raise TypeError("corenn_register_process_group_backends must return a mapping of name -> factory, "
                                f"got {type(answer).__name__}")
            for pg_name, factory in answer.items():
                if not isinstance(pg_name, str) or not callable(factory):
                    raise TypeError(f"process-group backend {pg_name!r}: expected a str name and a callable factory, "
                                    f"got {type(factory).__name__}")
                if pg_name in _process_group_backends:
                    raise ValueError(f"process-group backend {pg_name!r} is already provided by "
                                     f"{_process_group_backends[pg_name][1]}")
                _process_group_backends[pg_name] = (factory, record.name)
                record.process_group_backends.append(pg_name)

        for rule in _items(plugin, "corenn_fx_leaf_modules", "callables"):
            if not callable(rule):
                raise TypeError(f"corenn_fx_leaf_modules returned a {type(rule).__name__}, expected a callable "
                                "rule(module, qualified_name) -> bool | None")
            _fx_rules.append((rule, record.name))
            record.fx_leaf_rules.append(rule)

        for handler in _items(plugin, "corenn_module_state_handlers", "handler objects"):
            if not any(callable(getattr(handler, m, None)) for m in ("state_dict_post", "load_state_dict_pre")):
                raise TypeError(f"corenn_module_state_handlers returned a {type(handler).__name__} with neither "
                                "state_dict_post(module, state_dict, prefix) nor load_state_dict_pre(module, "
                                "state_dict, prefix)")
            _state_handlers.append((handler, record.name))
            record.state_handlers.append(handler)

        observers = _items(plugin, "corenn_op_observers", "observers")
        for observer in observers:
            _check_observer(observer, "corenn_op_observers returned")
        for observer in observers:
            dispatch.observers.append(observer)
            record.op_observers.append(observer)

        for answer in _answers(plugin, "corenn_register_import_paths"):
            paths = import_paths._check(answer, record.name)
            import_paths._add(paths, record.name)
            record.import_paths.update(paths)

        for answer in _answers(plugin, "corenn_register_names"):
            for name, value in _checked_names(answer).items():
                _names[name] = (value, record.name)
                record.names.append(name)
    except PluginUnavailable as why:
        _undo(plugin, record)
        _fail(record, str(why) or "unavailable on this machine", status="unavailable")
        return
    except KeyboardInterrupt:
        _undo(plugin, record)
        _interrupted(record)
        raise
    except BaseException as error:
        _undo(plugin, record)
        _fail(record, _describe(error))
        return
    record.status = "active"
    record.reason = None
    _trace(f"plugin {record.name} active: devices={record.devices} kernels={len(record.kernels)}")
    wish = _disable_when_active.pop(id(plugin), None)
    if wish is not None and wish[0] is plugin:  # the plugin asked for it while it was being imported
        _withdraw(record, wish[1] or "disabled when loaded, by corenn.plugins.disable()")


# -- what a kernel registration may name ------------------------------------------------------------------------------
# Ops: only the core's. An op is a front-end function plus its kernels, and a plugin has no hook
# for front ends; a new differentiable operation is a corenn.autograd.Function in the plugin.
# Device types: "*", a registered backend's, or one corenn knows a first-party provider for
# (corenn-cuda's "cuda" kernels must not fail a plugin on a machine without a GPU).

_deferring_device_checks = False  # True while a batch of entry points loads: backends may come later in it


def _check_op_name(op: str) -> None:
    from corenn.ops._kernel import CORE_KERNELS

    if op in CORE_KERNELS:
        return
    close = difflib.get_close_matches(op, list(CORE_KERNELS), n=1)
    raise ValueError(f"corenn_register_kernels: op {op!r} is not a corenn op" + (f" (did you mean {close[0]!r}?)"
                     if close else "") + "; a plugin registers kernels for the core's ops only (docs/kernels.md "
                     "lists them)")


def _check_kernel_attributes(registration) -> None:
    """The dispatcher reads ``num_outputs`` and ``differentiable`` off the kernel: they must be the core's."""
    from corenn.ops._kernel import CORE_KERNELS

    kernel, core = registration.kernel, CORE_KERNELS[registration.op]
    if (kernel.num_outputs, kernel.differentiable) != (core.num_outputs, core.differentiable):
        raise TypeError(f"corenn_register_kernels: kernel {kernel.__name__} for op {registration.op!r} has "
                        f"num_outputs={kernel.num_outputs} and differentiable={kernel.differentiable}; the core's "
                        f"{registration.op} kernel has {core.num_outputs} and {core.differentiable} (subclass "
                        f"corenn.kernels.core_kernel({registration.op!r}) to keep them)")


def _unknown_device_type(registrations) -> str | None:
    """Why a registration's device type is not acceptable, or None when all are."""
    for registration in registrations:
        device_type = registration.device_type
        if (device_type == "*" or device_type in dispatch.backends
                or device_type in dispatch.known_device_providers):
            continue
        known = sorted({backend.type for backend in dispatch.backends} | set(dispatch.known_device_providers))
        close = difflib.get_close_matches(device_type, known, n=1)
        return (f"corenn_register_kernels: kernel for op {registration.op!r} names device type {device_type!r}"
                + (f" (did you mean {close[0]!r}?)" if close else "") + ", which no backend provides; use '*' "
                f"(every numpy-API backend) or a registered device type: {', '.join(known)}")
    return None


def _check_device_types(registrations) -> None:
    message = _unknown_device_type(registrations)
    if message:
        raise ValueError(message)


# -- turning a loaded plugin off and on -------------------------------------------------------------------------------

_disable_when_active: dict[int, tuple[Any, str | None]] = {}  # plugins that asked to start disabled
_parked_process_group_backends: dict[str, dict[str, Callable]] = {}  # what disabled plugins' pg names map to
_disabled_sources: set[str] = set()  # plugins turned off by disable(): their FX rules and state handlers are skipped


def _withdraw(record: PluginRecord, reason: str) -> None:
    """Stop using ``record``'s contributions; kernels, FX rules and state handlers keep their place for :func:`enable`.

    (Keeping their place matters: among equal priorities the earlier registration wins,
    so re-registering on enable would hand a tie to another plugin.)
    """
    dispatch.kernels.set_source_enabled(record.name, False)
    _disabled_sources.add(record.name)
    _parked_process_group_backends[record.name] = {
        pg_name: _process_group_backends.pop(pg_name)[0] for pg_name in record.process_group_backends
        if pg_name in _process_group_backends}
    for observer in record.op_observers:
        _remove_observer(observer)
    record.status, record.reason = "disabled", reason
    _trace(f"plugin {record.name} disabled: {reason}")


def _restore(record: PluginRecord) -> None:
    dispatch.kernels.set_source_enabled(record.name, True)
    _disabled_sources.discard(record.name)
    for pg_name, factory in _parked_process_group_backends.pop(record.name, {}).items():
        _process_group_backends[pg_name] = (factory, record.name)
    dispatch.observers.extend(record.op_observers)
    record.status, record.reason = "active", None
    _trace(f"plugin {record.name} enabled")


def _record_of(plugin) -> PluginRecord | None:
    if isinstance(plugin, str):
        return records.get(plugin)
    return next((record for record in records.values() if record.plugin is plugin), None)


def _no_record(name) -> KeyError:
    if isinstance(name, str):
        for entry_point in installed_entry_points():
            if entry_point.name == name:
                listed = {r.name: r for r in list_plugins()}.get(name)
                why = f" ({listed.reason})" if listed is not None and listed.reason else ""
                return KeyError(f"plugin {name!r} is installed but was not loaded{why}, so it cannot be turned "
                                "on or off at run time")
        return KeyError(f"no plugin named {name!r}; registered: {', '.join(records) or 'none'}")
    return KeyError(f"plugin object {name!r} is not registered")


def disable(plugin, *, reason: str | None = None) -> PluginRecord | None:
    """Turn a loaded plugin off at run time: its kernels, op observers, FX leaf rules, module-state
    handlers and process-group backends stop being used, and its record says ``disabled``.

    ``plugin`` is the plugin's name (as ``python -m corenn plugins`` lists it) or the
    plugin object. :func:`enable` turns it on again. Disabling a disabled plugin does
    nothing; built-in plugins and plugins that provide a device (tensors may live
    there) cannot be disabled (``ValueError``). A plugin may call it on itself while
    it is being imported (``corenn.plugins.disable(sys.modules[__name__])``): it is
    then loaded but starts disabled, and returns None.

    Example::

        corenn.plugins.disable("numba")
        assert corenn.plugins.records["numba"].status == "disabled"   # the core's kernels run
        corenn.plugins.enable("numba")
    """
    record = _record_of(plugin)
    if record is None or record.status == "pending":
        being_loaded = _loading or any(pending is plugin for pending, _ in _pending.values())
        if not isinstance(plugin, str) and being_loaded:
            _disable_when_active[id(plugin)] = (plugin, reason)
            return None
        raise _no_record(plugin)
    if record.builtin:
        raise ValueError(f"{record.name} is built into corenn and cannot be disabled")
    if record.status == "disabled":
        return record
    if record.status != "active":
        raise ValueError(f"plugin {record.name!r} is {record.status} ({record.reason}); only an active plugin can be "
                         "disabled")
    if record.devices:
        raise ValueError(f"plugin {record.name!r} provides the device type(s) {', '.join(record.devices)}, where "
                         "tensors may live; it cannot be disabled (corenn.plugins.unregister removes it)")
    _withdraw(record, reason or f"disabled at run time by corenn.plugins.disable({record.name!r})")
    return record


def enable(plugin) -> PluginRecord:
    """Turn a plugin that :func:`disable` turned off on again; returns its record (status ``active``).

    Enabling an active plugin does nothing. A plugin that failed, is unavailable, was
    never loaded or was unregistered cannot be enabled (``ValueError`` / ``KeyError``
    saying why): nothing comes back behind the loader's back.

    Example::

        corenn.plugins.enable("numba")
        assert corenn.plugins.records["numba"].status == "active"
    """
    record = _record_of(plugin)
    if record is None:
        raise _no_record(plugin)
    if record.status == "active":
        return record
    if record.status != "disabled" or record.plugin is None:
        raise ValueError(f"plugin {record.name!r} is {record.status} ({record.reason}); only a plugin turned off by "
                         "corenn.plugins.disable can be enabled")
    _restore(record)
    return record


@contextlib.contextmanager
def disabled(plugin):
    """A block with ``plugin`` turned off (see :func:`disable`); on again after it, if it was on before.

    Example::

        with corenn.plugins.disabled("numba"):
            expected = model(x)     # the core's kernels
        got = model(x)              # the plugin's again
    """
    record = _record_of(plugin)
    if record is None:
        raise _no_record(plugin)
    was_active = record.status == "active"
    if was_active:
        disable(record.name)
    try:
        yield record
    finally:
        # Unless the block unregistered the plugin: then there is nothing left to turn on.
        if was_active and records.get(record.name) is record and record.status == "disabled":
            enable(record.name)


def _undo(plugin, record: PluginRecord) -> None:
    """Take back everything ``record`` contributed and unregister ``plugin`` from pluggy."""
    for device_type in record.devices:
        dispatch.backends.unregister(device_type)
    dispatch.kernels.unregister_source(record.name)
    for pg_name in record.process_group_backends:
        _process_group_backends.pop(pg_name, None)
    _fx_rules[:] = [(r, source) for r, source in _fx_rules if source != record.name]
    _state_handlers[:] = [(h, source) for h, source in _state_handlers if source != record.name]
    _disabled_sources.discard(record.name)
    for observer in record.op_observers:
        _remove_observer(observer)
    import_paths._remove(record.import_paths, record.name)
    record.import_paths = {}
    for name in record.names:
        if _names.get(name, (None, None))[1] == record.name:
            del _names[name]
    record.names = []
    record.devices, record.kernels, record.process_group_backends = [], [], []
    record.fx_leaf_rules, record.state_handlers, record.op_observers = [], [], []
    if plugin is not None and manager.is_registered(plugin):
        manager.unregister(plugin)


# -- loading -----------------------------------------------------------------------------------------------------------

def _corenn_version() -> str:
    from corenn import __version__
    return __version__


def load_builtins() -> None:
    """Register the built-in plugins (cpu backend, core kernels), once; ``import corenn`` calls it first.

    Installed plugins load later (:func:`ensure_loaded`, at the end of ``import corenn``),
    when corenn's whole API exists for them to import.

    Example::

        >>> corenn.plugins.load_builtins()   # a no-op after import corenn
    """
    global _builtins_loaded
    if _builtins_loaded:
        return
    import importlib
    for module_name in BUILTIN_PLUGINS:
        module = importlib.import_module(module_name)
        record = PluginRecord(name=module_name, distribution="corenn", version=_corenn_version(), builtin=True)
        records[module_name] = record
        if _phase_register(module, record) and _phase_check(module, record):
            _phase_activate(module, record)
        if record.status != "active":  # the core itself is broken: never hide that
            raise RuntimeError(f"built-in plugin {module_name} failed: {record.reason}")
    _builtins_loaded = True


def installed_entry_points() -> list:
    """The ``importlib.metadata.EntryPoint`` objects of group ``corenn`` in this environment.

    Example::

        >>> [ep.name for ep in corenn.plugins.installed_entry_points()]   # doctest: +SKIP
        ['corenn_numba']
    """
    from importlib.metadata import entry_points
    return list(entry_points(group=ENTRY_POINT_GROUP))


def _wanted() -> set[str] | None:
    value = os.environ.get(ENV_PLUGINS)
    if value is None:
        return None
    return {name.strip() for name in value.split(",") if name.strip()}


def _selected(entry_point, wanted: set[str] | None) -> bool:
    if wanted is None:
        return True
    dist = entry_point.dist.name if entry_point.dist is not None else None
    return entry_point.name in wanted or (dist is not None and (dist in wanted or dist.replace("_", "-") in wanted))


def _record_for(entry_point, status: str = "active", reason: str | None = None) -> PluginRecord:
    dist = entry_point.dist
    return PluginRecord(name=entry_point.name, distribution=dist.name if dist is not None else None,
                        version=dist.version if dist is not None else None, status=status, reason=reason,
                        entry_point=entry_point.value)


def _load_entry_points() -> None:
    if _env_flag(ENV_DISABLE_AUTOLOAD):
        _trace(f"{ENV_DISABLE_AUTOLOAD} is set: no entry points loaded")
        return
    wanted = _wanted()
    entry_points = installed_entry_points()
    if wanted is not None:
        found = {ep.name for ep in entry_points} | {ep.dist.name for ep in entry_points if ep.dist is not None}
        found |= {name.replace("_", "-") for name in found}
        missing = sorted(wanted - found)
        if missing:
            message = (f"{ENV_PLUGINS} names {', '.join(map(repr, missing))}, which "
                       f"{'is' if len(missing) == 1 else 'are'} not installed (installed corenn plugins: "
                       f"{', '.join(sorted(ep.name for ep in entry_points)) or 'none'})")
            if _env_flag(ENV_STRICT):
                raise PluginError(message)
            warnings.warn(message, PluginWarning, stacklevel=3)
    loaded = []
    for entry_point in entry_points:
        if not _selected(entry_point, wanted):
            continue
        previous = records.get(entry_point.name)
        if previous is not None:
            if previous.distribution != (entry_point.dist.name if entry_point.dist else None):
                warnings.warn(f"two corenn plugins are named {entry_point.name!r} (distributions "
                              f"{previous.distribution} and {entry_point.dist.name if entry_point.dist else '?'}); "
                              "only the first is loaded", PluginWarning, stacklevel=3)
            continue
        record = records[entry_point.name] = _record_for(entry_point)
        _trace(f"loading entry point {entry_point.name} = {entry_point.value} ({record.distribution})")
        try:
            plugin = entry_point.load()
        except PluginUnavailable as why:
            _fail(record, str(why) or "unavailable on this machine", status="unavailable")
            continue
        except KeyboardInterrupt:
            _interrupted(record)
            raise
        except BaseException as error:
            _fail(record, f"import failed: {_describe(error)}")
            continue
        if _still_importing(plugin):
            # The user imported the plugin first, and it imported corenn before defining its hooks:
            # registering this half-made module would register nothing. Wait for it to finish.
            _defer(plugin, record)
            continue
        if _phase_register(plugin, record):
            loaded.append((plugin, record))
    loaded = [(plugin, record) for plugin, record in loaded if _phase_check(plugin, record)]
    global _deferring_device_checks
    _deferring_device_checks = True  # a plugin's kernels may name a device a later plugin of this batch provides
    try:
        for plugin, record in loaded:
            _phase_activate(plugin, record)
    finally:
        _deferring_device_checks = False
    for plugin, record in loaded:
        message = _unknown_device_type(record.kernels) if record.plugin is not None else None
        if message:
            _undo(plugin, record)
            _fail(record, message)


# -- plugins whose module was still being imported when corenn loaded them -----------------------------------------

_pending: dict[str, tuple[Any, PluginRecord]] = {}
_finishing = False


def _still_importing(plugin) -> bool:
    """True for a module whose own import is still running (``import my_plugin`` -> ``import corenn`` -> here)."""
    spec = getattr(plugin, "__spec__", None) if isinstance(plugin, types.ModuleType) else None
    return bool(getattr(spec, "_initializing", False))  # set by importlib while the module's code runs


def _defer(plugin, record: PluginRecord) -> None:
    record.status = "pending"
    record.reason = ("its module was still being imported when corenn loaded it; it registers when that import "
                     "has finished, at the next kernel or device lookup")
    _pending[record.name] = (plugin, record)
    dispatch.finish_pending_plugins = finish_pending
    dispatch.kernels.invalidate()  # the next lookup asks finish_pending first
    _trace(f"plugin {record.name}: {record.reason}")


def finish_pending() -> bool:
    """Register the plugins that were still being imported when corenn loaded them, once their import is done.

    A program that imports a plugin module before corenn (``import corenn_numba``)
    makes that module import corenn before it has defined its hooks; its record
    says ``pending`` until then. The dispatcher calls this before it builds a
    kernel table or reports an unknown device, and :func:`list_plugins` before it
    lists, so the plugin takes part from the first op after its import. Returns
    True if a plugin was registered (or failed) now.

    Example::

        >>> corenn.plugins.finish_pending()   # nothing is pending after a plain ``import corenn``
        False
    """
    global _finishing
    if _finishing or not _pending:
        return False
    _finishing = True
    try:
        done = [name for name, (plugin, _) in _pending.items() if not _still_importing(plugin)]
        for name in done:
            plugin, record = _pending.pop(name)
            record.status, record.reason = "active", None
            if _phase_register(plugin, record) and _phase_check(plugin, record):
                _phase_activate(plugin, record)
    finally:
        _finishing = False
        if not _pending:
            dispatch.finish_pending_plugins = None
    return bool(done)


def ensure_loaded() -> bool:
    """Load the built-in plugins and the installed entry points, once. Returns True if this call loaded them.

    ``import corenn`` calls it; it is safe to call again (a no-op).

    Example::

        >>> corenn.plugins.ensure_loaded()
        False
    """
    global _loaded, _loading
    if _loaded or _loading:
        return False
    _loading = True
    try:
        load_builtins()
        _loaded = True  # even if a strict-mode error follows: loading is not retried behind the user's back
        _load_entry_points()
    finally:
        _loading = False
    return True


def register(plugin, name: str | None = None) -> PluginRecord:
    """Register a plugin object (module, class instance) at run time; returns its record.

    The plugin goes through the same checks as an installed one: on failure it is
    warned about, skipped and its record says ``failed`` (``CORENN_STRICT_PLUGINS=1``
    raises :class:`PluginError`). Registering the same object or an active name twice
    is a ``ValueError``. Undo with :func:`unregister`.

    Example::

        class MyKernels:
            @corenn.hookimpl
            def corenn_register_kernels(self):
                return [KernelRegistration("relu", "cpu", FastRelu, priority=10)]

        record = corenn.plugins.register(MyKernels())
        assert record.status == "active"
    """
    ensure_loaded()
    name = name or getattr(plugin, "__name__", None) or type(plugin).__name__
    if not isinstance(name, str) or not name:
        raise TypeError(f"plugin name must be a non-empty string, got {name!r}")
    if manager.is_registered(plugin):
        raise ValueError(f"plugin object {plugin!r} is already registered as {manager.get_name(plugin)!r}")
    if name in records and records[name].plugin is not None:  # active, or disabled and kept for enable()
        raise ValueError(f"a plugin named {name!r} is already registered; pass name= to register it under another")
    record = records[name] = PluginRecord(name=name)
    if _phase_register(plugin, record) and _phase_check(plugin, record):
        _phase_activate(plugin, record)
    return record


def unregister(name) -> PluginRecord:
    """Remove a plugin (by name or by the registered object) with its backends, kernels and observers.

    Built-in plugins cannot be removed. Returns the removed record.

    Example::

        record = corenn.plugins.register(MyKernels(), name="mine")
        corenn.plugins.unregister("mine")
    """
    if not isinstance(name, str):
        for record_name, record in records.items():
            if record.plugin is name:
                name = record_name
                break
        else:
            raise KeyError(f"plugin object {name!r} is not registered")
    record = records.get(name)
    if record is None:
        raise KeyError(f"no plugin named {name!r}; registered: {', '.join(records) or 'none'}")
    if record.builtin:
        raise ValueError(f"{name} is built into corenn and cannot be unregistered")
    del records[name]
    _parked_process_group_backends.pop(name, None)
    _undo(record.plugin, record)
    record.plugin = None
    return record


def status_of_device_provider(device_type: str) -> str | None:
    """Why the plugin that would provide ``device_type`` is not active, if it is installed (for error messages).

    Example::

        >>> corenn.plugins.status_of_device_provider("cuda")   # doctest: +SKIP
        'it is installed but unavailable: no CUDA device found'
    """
    candidates = {device_type, f"corenn-{device_type}", f"corenn_{device_type}"}
    provider = dispatch.known_device_providers.get(device_type)
    if provider:
        candidates.add(provider.split()[0])  # "corenn-cuda (pip install ...)" -> its distribution name
    for record in records.values():
        if record.status in ("failed", "unavailable") and (record.name in candidates
                                                           or record.distribution in candidates):
            return f"it is installed but {record.status}: {record.reason}"
    return None


# -- what the rest of corenn (and users) ask of the plugins -----------------------------------------------------------

def list_plugins(*, include_disabled: bool = True) -> list[PluginRecord]:
    """Every plugin: built-ins, loaded entry points, run-time registrations, and installed ones not loaded.

    Installed entry points skipped because of ``CORENN_DISABLE_PLUGIN_AUTOLOAD`` or
    ``CORENN_PLUGINS`` appear with status ``disabled`` (unless ``include_disabled=False``).

    Example::

        >>> [(r.name, r.status) for r in corenn.plugins.list_plugins()][:1]
        [('corenn.backends.cpu', 'active')]
    """
    ensure_loaded()
    finish_pending()
    result = list(records.values())
    if include_disabled:
        if _env_flag(ENV_DISABLE_AUTOLOAD):
            why = f"{ENV_DISABLE_AUTOLOAD} is set"
        elif _wanted() is not None:
            why = f"not named in {ENV_PLUGINS}={os.environ.get(ENV_PLUGINS, '')}"
        else:
            why = "installed after corenn was imported (restart Python to load it)"
        for entry_point in installed_entry_points():
            if entry_point.name not in records:
                result.append(_record_for(entry_point, status="disabled", reason=why))
    return result


def info_lines() -> list[tuple[PluginRecord, list[str]]]:
    """Each active plugin's ``corenn_info_lines`` answer: ``[(record, lines), ...]``.

    A plugin whose hook raises gets one line naming the error, so ``info`` always completes.

    Example::

        >>> dict((r.name, lines) for r, lines in corenn.plugins.info_lines())["corenn.backends.cpu"][0][:9]
        'cpu: nump'
    """
    ensure_loaded()
    result = []
    for record in list(records.values()):
        if record.status != "active" or "corenn_info_lines" not in record.hooks:
            continue
        try:
            lines = [str(line) for answer in _answers(record.plugin, "corenn_info_lines") for line in answer]
        except KeyboardInterrupt:
            raise
        except BaseException as error:
            lines = [f"(corenn_info_lines failed: {_describe(error)})"]
        result.append((record, lines))
    return result


def fx_leaf_module_rules() -> list[Callable[[Any, str], bool | None]]:
    """Rules from ``corenn_fx_leaf_modules``: ``rule(module, qualified_name) -> bool | None``.

    Called by ``corenn.fx.Tracer.is_leaf_module``: any rule answering True makes
    the module a leaf.

    Example::

        >>> any(rule(module, "encoder.attn") for rule in corenn.plugins.fx_leaf_module_rules())  # doctest: +SKIP
    """
    return [rule for rule, source in _fx_rules if source not in _disabled_sources]


def module_state_handlers() -> list[Any]:
    """Handlers from ``corenn_module_state_handlers``, in registration order.

    Each has ``state_dict_post(module, state_dict, prefix)`` and/or
    ``load_state_dict_pre(module, state_dict, prefix)``; callers must check which
    (``getattr(handler, "state_dict_post", None)``).

    Example::

        for handler in corenn.plugins.module_state_handlers():
            post = getattr(handler, "state_dict_post", None)
            if post is not None:
                post(module, destination, prefix)
    """
    return [handler for handler, source in _state_handlers if source not in _disabled_sources]


def process_group_backends() -> dict[str, Callable]:
    """``{name: factory}`` from ``corenn_register_process_group_backends`` (e.g. ``"mpi"``, ``"nccl"``).

    Example::

        >>> sorted(corenn.plugins.process_group_backends())   # doctest: +SKIP
        ['mpi', 'nccl']
    """
    return {pg_name: factory for pg_name, (factory, _) in _process_group_backends.items()}


def compile_backends() -> dict[str, Callable]:
    """``{name: backend}`` from ``corenn_register_compile_backends`` of the active plugins, in registration order.

    A disabled plugin's backends are left out (``corenn.compile(backend=...)`` then names the plugin).
    Example::

        >>> "numba" in corenn.plugins.compile_backends()   # with corenn-numba installed  # doctest: +SKIP
        True
    """
    ensure_loaded()
    finish_pending()  # a plugin imported before corenn registers once its own import is done
    found: dict[str, Callable] = {}
    for name, record in list(records.items()):
        if record.status != "active" or record.plugin is None:
            continue
        for answer in _answers(record.plugin, "corenn_register_compile_backends"):
            if answer is None:
                continue
            if not hasattr(answer, "items"):
                raise TypeError(f"corenn_register_compile_backends must return a mapping of name -> backend, "
                                f"got {type(answer).__name__} (plugin {name!r})")
            found.update(answer)
    return found


def _checked_names(answer) -> dict[str, Any]:
    """A ``corenn_register_names`` answer as a dict; raise naming the first malformed or taken name."""
    import corenn
    if isinstance(answer, (str, bytes)) or not hasattr(answer, "items"):
        raise TypeError(f"corenn_register_names must return a mapping of name -> object, got {type(answer).__name__}")
    checked = dict(answer)
    for name in checked:
        if not isinstance(name, str) or not name.isidentifier() or name.startswith("_"):
            raise ValueError(f"corenn_register_names: {name!r} is not a public identifier")
        if name in vars(corenn) or name in ("nn", "optim", "fx", "utils", "testing", "serialization", "cuda",
                                            "save", "load") or f"corenn.{name}" in import_paths.registered() \
                or f"corenn.{name}" in import_paths.known_import_path_providers:
            raise ValueError(f"corenn_register_names: corenn.{name} is corenn's own; a plugin cannot replace it")
        if name in _names:
            raise ValueError(f"corenn_register_names: corenn.{name} is already provided by plugin {_names[name][1]!r}")
    return checked


def registered_names() -> dict[str, Any]:
    """``{name: object}`` that plugins made reachable as ``corenn.<name>`` (``corenn_register_names``).

    Example::

        >>> corenn.plugins.registered_names()["qint8"]   # doctest: +SKIP
        corenn.qint8
    """
    return {name: value for name, (value, _) in _names.items()}


# -- plugin code that fails at run time -------------------------------------------------------------------------------
# What a plugin handed over at registration runs later, inside the user's ops, state_dict() calls and
# traces. When it raises (anything but KeyboardInterrupt), that one contribution is detached -- the
# rest of the plugin stays active -- with one PluginWarning naming the plugin; strict mode raises
# PluginError instead, after detaching it all the same.

def _runtime_failure(source: str, what: str, error: BaseException | None, detached: str, went_on: str) -> None:
    """Report that ``what`` of plugin ``source`` failed and was detached (warn; strict mode raises PluginError)."""
    record = records.get(source)
    message = f"{what}: {_describe(error)}; {detached}" if error is not None else f"{what}; {detached}"
    strict = _env_flag(ENV_STRICT)
    if not strict:
        message += f", {went_on}"
    if record is not None:
        record.detached.append(message)
    _trace(f"plugin {source}: {message}")
    message = f"corenn plugin {source!r} ({_origin(record)}): {message}"
    if strict:
        raise PluginError(f"{message} [{ENV_STRICT} is set]") from error
    warnings.warn(message, PluginWarning, stacklevel=_outside_corenn())


_CORENN_DIR = os.path.dirname(os.path.abspath(__file__)) + os.sep


def _outside_corenn() -> int:
    """The ``stacklevel`` of the caller's first frame outside corenn: a warning points at the user's line."""
    frame, level = sys._getframe(1), 1
    while frame.f_back is not None and frame.f_code.co_filename.startswith(_CORENN_DIR):
        frame, level = frame.f_back, level + 1
    return level


def _observer_failed(observer, method: str, op_name: str, error: BaseException) -> bool:
    """Contain an exception from ``observer.<method>``: True if a plugin's observer was detached (the op goes on).

    False for KeyboardInterrupt and for observers added with :func:`observe_ops`: the
    caller re-raises those, as documented there.
    """
    if isinstance(error, KeyboardInterrupt):
        return False
    record = next((r for r in list(records.values()) if any(o is observer for o in r.op_observers)), None)
    if record is None:
        return False
    _remove_observer(observer)
    record.op_observers = [o for o in record.op_observers if o is not observer]  # enable() must not bring it back
    _runtime_failure(record.name, f"its op observer {type(observer).__name__} raised in {method} (op {op_name!r})",
                     error, "the observer was detached", "the op went on")
    return True


def _detach(item, source: str, live: list, attribute: str) -> None:
    """Take a failing ``item`` out of the ``live`` ``(item, source)`` list and off its plugin's record
    (``record.<attribute>``), so that :func:`enable` does not bring it back."""
    live[:] = [(i, s) for i, s in live if i is not item]
    record = records.get(source)
    if record is not None:
        setattr(record, attribute, [i for i in getattr(record, attribute) if i is not item])


_STATE_CALLERS = {"state_dict_post": "state_dict()", "load_state_dict_pre": "load_state_dict()"}


def _run_module_state_handlers(method: str, module, state_dict, prefix: str) -> None:
    """Call ``method`` (``state_dict_post`` / ``load_state_dict_pre``) of every active plugin's state handler.

    ``corenn.nn.Module.state_dict`` and ``load_state_dict`` call this for every module; a
    handler that raises is detached (see :func:`_runtime_failure`), so one broken plugin does
    not break every model's state_dict().
    """
    if not _state_handlers:
        return
    for handler, source in list(_state_handlers):  # a failing handler leaves the list while it is walked
        if source in _disabled_sources:
            continue
        try:
            call = getattr(handler, method, None)
            if call is not None:
                call(module, state_dict, prefix)
        except KeyboardInterrupt:
            raise
        except BaseException as error:
            _detach(handler, source, _state_handlers, "state_handlers")
            _runtime_failure(source, f"its module-state handler {type(handler).__name__} raised in {method} "
                                     f"({type(module).__name__} at prefix {prefix!r})", error,
                             "the handler was detached", f"{_STATE_CALLERS.get(method, method)} went on")


def _contained_fx_leaf_rules() -> list[Callable[[Any, str], bool | None]]:
    """:func:`fx_leaf_module_rules`, each wrapped so that a rule that raises is detached and answers None."""
    return [_contained_rule(rule, source) for rule, source in _fx_rules if source not in _disabled_sources]


def _contained_rule(rule, source: str) -> Callable[[Any, str], bool | None]:
    def ask(module, qualified_name):
        try:
            return rule(module, qualified_name)
        except KeyboardInterrupt:
            raise
        except BaseException as error:
            _detach(rule, source, _fx_rules, "fx_leaf_rules")
            _runtime_failure(source, f"its FX leaf rule {getattr(rule, '__name__', type(rule).__name__)} raised for "
                                     f"module {qualified_name!r} ({type(module).__name__})", error,
                             "the rule was detached", "tracing went on")
            return None
    return ask


# -- op observation ----------------------------------------------------------------------------------------------------

def _check_observer(observer, what: str) -> None:
    missing = [m for m in ("op_start", "op_end") if not callable(getattr(observer, m, None))]
    if missing:
        raise TypeError(f"{what} a {type(observer).__name__} without {' and '.join(missing)}(op_name, device, ...); "
                        "an op observer needs op_start(op_name, device, arrays) and op_end(op_name, device, out)")


def _remove_observer(observer) -> bool:
    # By identity: observers may define __eq__.
    for i, active in enumerate(dispatch.observers):
        if active is observer:
            del dispatch.observers[i]  # in place: the dispatcher holds this very list
            return True
    return False


class ObserverHandle:
    """Returned by :func:`observe_ops`: ``remove()`` stops the observation; also a context manager.

    Example::

        with corenn.plugins.observe_ops(counter):
            model(x)
    """

    def __init__(self, observer):
        self.observer = observer
        self.active = True

    def remove(self) -> None:
        """Stop observing (idempotent)."""
        if self.active:
            _remove_observer(self.observer)
            self.active = False

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.remove()
        return False

    def __repr__(self):
        return f"<ObserverHandle {type(self.observer).__name__} {'active' if self.active else 'removed'}>"


def observe_ops(observer) -> ObserverHandle:
    """Call ``observer.op_start(op_name, device, arrays)`` / ``op_end(op_name, device, out)`` around every op.

    ``arrays`` are the raw input arrays (and plain arguments), ``out`` the raw result
    (a tuple for multi-output ops); ``device`` is a ``corenn.device``. Observers
    nest: ``op_start`` runs in the order they were added, ``op_end`` in reverse. An
    exception from an observer added here propagates to the op's caller, as a hook's
    does in PyTorch: it is the caller's own code. (A plugin's observers, from
    ``corenn_op_observers``, are contained instead: one that raises is detached with a
    :class:`PluginWarning`.) With no observer the dispatcher pays one truthiness test per op.

    An observer may also define ``op_node(op_name, node)`` (after ``op_start``: the kernel
    instance running the op, the output's ``grad_fn`` if the op records; its ``sequence_nr``
    is set once the op returns) and ``backward_start(node, grad_outputs)`` /
    ``backward_end(node, grad_inputs)`` (around each node's ``backward`` in the backward walk);
    see docs/hooks.md, "Op observer".

    Example::

        class Count:
            def __init__(self): self.ops = []
            def op_start(self, op_name, device, arrays): self.ops.append(op_name)
            def op_end(self, op_name, device, out): pass

        count = Count()
        with corenn.plugins.observe_ops(count):
            corenn.ones(2) + 1
        assert "add" in count.ops
    """
    _check_observer(observer, "observe_ops() got")
    dispatch.observers.append(observer)
    return ObserverHandle(observer)
