"""Finding, loading and registering plugins (the pluggy host).

Built-in plugins (the ``cpu`` backend and the core kernels) register first, then
the entry points of group ``corenn``, unless ``CORENN_DISABLE_PLUGIN_AUTOLOAD=1``;
``CORENN_PLUGINS=a,b`` loads only the named entry points. A plugin that fails to
import or register is reported once as a warning naming it, its distribution and
the cause; it is skipped and the core keeps working (``CORENN_STRICT_PLUGINS=1``
raises instead). ``corenn.plugins.register(obj)`` adds a plugin at run time.
"""
from __future__ import annotations

import os
import traceback
import warnings
from typing import Any

import attrs
import pluggy

from corenn import dispatch, hookspecs

__all__ = ["manager", "register", "unregister", "PluginUnavailable", "PluginError", "PluginRecord", "records",
           "ensure_loaded"]

BUILTIN_PLUGINS = ("corenn.backends.cpu", "corenn.ops")


class PluginUnavailable(Exception):
    """Raised by a plugin's registration hook when it cannot run on this machine (no GPU, no MPI)."""


class PluginError(RuntimeError):
    """A plugin failed to load or register (raised only with ``CORENN_STRICT_PLUGINS=1``)."""


class PluginWarning(UserWarning):
    """Warned once for each plugin that failed and was skipped."""


@attrs.define
class PluginRecord:
    """What is known about one plugin: where it came from and how loading went."""

    name: str
    distribution: str | None = None
    version: str | None = None
    status: str = "active"  # active | unavailable | failed | disabled
    reason: str | None = None
    builtin: bool = False
    plugin: Any = None
    devices: list = attrs.Factory(list)
    kernels: list = attrs.Factory(list)


manager = pluggy.PluginManager("corenn")
manager.add_hookspecs(hookspecs)
records: dict[str, PluginRecord] = {}
_loaded = False
_loading = False


def _strict() -> bool:
    return os.environ.get("CORENN_STRICT_PLUGINS", "") not in ("", "0")


def _fail(record: PluginRecord, reason: str, status: str = "failed") -> None:
    record.status = status
    record.reason = reason
    if status == "failed":
        if _strict():
            raise PluginError(f"corenn plugin {record.name!r} (distribution {record.distribution}) failed: {reason}")
        warnings.warn(f"corenn plugin {record.name!r} (distribution {record.distribution or 'unknown'}) failed and "
                      f"was skipped: {reason}", PluginWarning, stacklevel=3)


def _register_plugin(plugin, record: PluginRecord) -> None:
    """Register ``plugin`` with pluggy, then let it register backends and kernels."""
    try:
        manager.register(plugin, name=record.name)
        manager.check_pending()
    except Exception as error:  # a hookimpl matching no spec, a duplicate name, ...
        if manager.is_registered(plugin):
            manager.unregister(plugin)
        return _fail(record, f"{type(error).__name__}: {error}")
    record.plugin = plugin
    registered_devices = []
    try:
        for impl in manager.hook.corenn_register_backends.get_hookimpls():
            if impl.plugin is not plugin:
                continue
            for backend in impl.function() or ():
                if not isinstance(backend, dispatch.Backend):
                    raise TypeError(f"corenn_register_backends returned {type(backend).__name__}, expected "
                                    "corenn.dispatch.Backend")
                backend.source = record.name
                dispatch.backends.register(backend)
                registered_devices.append(backend.type)
        for impl in manager.hook.corenn_register_kernels.get_hookimpls():
            if impl.plugin is not plugin:
                continue
            registrations = list(impl.function() or ())
            for registration in registrations:
                if not isinstance(registration, dispatch.KernelRegistration):
                    raise TypeError(f"corenn_register_kernels returned {type(registration).__name__}, expected "
                                    "corenn.dispatch.KernelRegistration")
            for registration in registrations:
                registration = attrs.evolve(registration, source=record.name)
                dispatch.kernels.register(registration)
                record.kernels.append(registration)
    except PluginUnavailable as why:
        _undo(plugin, record, registered_devices)
        return _fail(record, str(why), status="unavailable")
    except Exception as error:
        _undo(plugin, record, registered_devices)
        detail = "".join(traceback.format_exception_only(type(error), error)).strip()
        return _fail(record, detail)
    record.devices = registered_devices
    record.status = "active"


def _undo(plugin, record, registered_devices):
    for device_type in registered_devices:
        dispatch.backends.unregister(device_type)
    dispatch.kernels.unregister_source(record.name)
    record.kernels.clear()
    if manager.is_registered(plugin):
        manager.unregister(plugin)


def _load_builtins() -> None:
    import importlib
    for module_name in BUILTIN_PLUGINS:
        module = importlib.import_module(module_name)
        record = PluginRecord(name=module_name, distribution="corenn", version=_corenn_version(), builtin=True)
        records[module_name] = record
        _register_plugin(module, record)
        if record.status != "active":  # the core itself is broken: never hide that
            raise RuntimeError(f"built-in plugin {module_name} failed: {record.reason}")


def _corenn_version() -> str:
    from corenn import __version__
    return __version__


def _load_entry_points() -> None:
    if os.environ.get("CORENN_DISABLE_PLUGIN_AUTOLOAD", "") not in ("", "0"):
        return
    from importlib.metadata import entry_points
    wanted = os.environ.get("CORENN_PLUGINS")
    wanted_names = None if wanted is None else {n.strip() for n in wanted.split(",") if n.strip()}
    for entry_point in entry_points(group="corenn"):
        if wanted_names is not None and entry_point.name not in wanted_names:
            continue
        if entry_point.name in records:
            continue
        dist = entry_point.dist
        record = PluginRecord(name=entry_point.name, distribution=dist.name if dist else None,
                              version=dist.version if dist else None)
        records[entry_point.name] = record
        try:
            plugin = entry_point.load()
        except PluginUnavailable as why:
            _fail(record, str(why), status="unavailable")
            continue
        except Exception as error:
            _fail(record, f"import failed: {type(error).__name__}: {error}")
            continue
        _register_plugin(plugin, record)


def ensure_loaded() -> bool:
    """Load built-in and installed plugins once. Returns True if this call loaded anything."""
    global _loaded, _loading
    if _loaded or _loading:
        return False
    _loading = True
    try:
        _load_builtins()
        _load_entry_points()
        _loaded = True
    finally:
        _loading = False
    return True


def register(plugin, name: str | None = None) -> PluginRecord:
    """Register a plugin object at run time (tests, notebooks); returns its record.

    Example::

        class MyKernels:
            @corenn.hookimpl
            def corenn_register_kernels(self):
                return [KernelRegistration("relu", "cpu", FastRelu, priority=10)]

        corenn.plugins.register(MyKernels())
    """
    ensure_loaded()
    name = name or getattr(plugin, "__name__", None) or type(plugin).__name__
    if name in records and records[name].status == "active":
        raise ValueError(f"a plugin named {name!r} is already registered")
    record = PluginRecord(name=name, distribution=None)
    records[name] = record
    _register_plugin(plugin, record)
    return record


def unregister(name: str) -> None:
    """Remove a plugin registered at run time, with its backends and kernels."""
    record = records.pop(name, None)
    if record is None:
        raise KeyError(f"no plugin named {name!r}")
    if record.builtin:
        raise ValueError(f"{name} is built into corenn and cannot be unregistered")
    if record.plugin is not None:
        _undo(record.plugin, record, record.devices)


def status_of_device_provider(device_type: str) -> str | None:
    """Why the plugin that would provide ``device_type`` is not active, if it is installed."""
    for record in records.values():
        if record.status in ("failed", "unavailable") and device_type in (record.name, record.distribution or "",
                                                                           f"corenn-{device_type}"):
            return f"it is installed but {record.status}: {record.reason}"
    return None
