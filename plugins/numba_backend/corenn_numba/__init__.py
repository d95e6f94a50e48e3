"""corenn-numba: CPU kernel overrides compiled with numba, registered through ``corenn_register_kernels``.

Installing the plugin changes no user code: ops keep their names and the dispatcher
picks these kernels over the core's (priority 10 > 0) for the ``cpu`` device. Every
kernel falls back to the core kernel it overrides for dtypes or layouts it does not
handle, so results never depend on whether the plugin is installed beyond float32
rounding.

Turn it off for A/B comparisons with ``CORENN_NUMBA_DISABLE=1`` (at import),
``corenn_numba.disable()`` / ``corenn_numba.enable()`` at run time, or for a block with
``with corenn_numba.disabled():``.

Each kernel module lists its overrides in ``OVERRIDES``: ``(op name, kernel class)``.
"""
from __future__ import annotations

import contextlib
import importlib
import os

import corenn
from corenn.dispatch import KernelRegistration, kernels
from corenn_numba import _malloc

__version__ = "0.1.0"
PRIORITY = 10
_KERNEL_MODULES: tuple[str, ...] = ("corenn_numba.nn", "corenn_numba.scatter", "corenn_numba.norms", "corenn_numba.optim",
                                    "corenn_numba.conv", "corenn_numba.pooling", "corenn_numba.linear")
_enabled = os.environ.get("CORENN_NUMBA_DISABLE", "") in ("", "0")


def _registrations() -> list[KernelRegistration]:
    found = []
    for module_name in _KERNEL_MODULES:
        module = importlib.import_module(module_name)
        for op, kernel in module.OVERRIDES:
            found.append(KernelRegistration(op=op, device_type="cpu", kernel=kernel, priority=PRIORITY,
                                            source="numba"))
    return found


def _source() -> str:
    # The plugin loader records registrations under the plugin's name (the entry point's, "numba").
    for record in corenn.plugins.records.values():
        if record.plugin is not None and getattr(record.plugin, "__name__", None) == __name__:
            return record.name
    return "numba"


def disable() -> None:
    """Stop using the numba kernels (the core's kernels run again); ``enable()`` undoes it."""
    global _enabled
    _enabled = False
    kernels.unregister_source(_source())


def enable() -> None:
    """Use the numba kernels again after ``disable()`` (or ``CORENN_NUMBA_DISABLE=1``)."""
    global _enabled
    if _enabled:
        return
    _enabled = True
    _malloc.tune()
    source = _source()
    for registration in _registrations():
        kernels.register(KernelRegistration(op=registration.op, device_type=registration.device_type,
                                            kernel=registration.kernel, priority=registration.priority,
                                            source=source))


def is_enabled() -> bool:
    return _enabled


@contextlib.contextmanager
def disabled():
    """The core's kernels inside the block, the plugin's again after it (if they were on before)::

        with corenn_numba.disabled():
            expected = model(x)      # numpy kernels
        got = model(x)               # compiled kernels
    """
    was_enabled = _enabled
    disable()
    try:
        yield
    finally:
        if was_enabled:
            enable()


@corenn.hookimpl
def corenn_register_kernels():
    if not _enabled:
        return []
    _malloc.tune()  # large temporaries without page faults every step: see _malloc
    return _registrations()


@corenn.hookimpl
def corenn_info_lines():
    import numba
    state = "enabled" if _enabled else "disabled (CORENN_NUMBA_DISABLE or corenn_numba.disable())"
    allocator = ("glibc malloc thresholds raised (CORENN_NUMBA_MALLOC=0 to leave them)" if _malloc.tuned
                 else "malloc left as it is")
    return [f"numba {numba.__version__}, {numba.get_num_threads()} threads; kernels {state}; "
            f"cache: {numba.config.CACHE_DIR or 'next to the sources'}; {allocator}"]

