"""corenn-numba: CPU kernel overrides compiled with numba, registered through ``corenn_register_kernels``.

Installing the plugin changes no user code: ops keep their names and the dispatcher
picks these kernels over the core's (priority 10 > 0) for the ``cpu`` device. Every
kernel falls back to the core kernel it overrides for dtypes or layouts it does not
handle, so results never depend on whether the plugin is installed beyond float32
rounding.

Turn it off for A/B comparisons with ``CORENN_NUMBA_DISABLE=1`` (at import),
``corenn_numba.disable()`` / ``corenn_numba.enable()`` at run time, or for a block with
``with corenn_numba.disabled():``. All three go through the plugin loader
(``corenn.plugins.disable("numba")`` and friends), so ``python -m corenn plugins``
always shows whether the kernels run.

Each kernel module lists its overrides in ``OVERRIDES``: ``(op name, kernel class)``.
"""
from __future__ import annotations

import importlib
import os
import sys

import corenn
from corenn import hookimpl
from corenn_numba import _malloc

__version__ = "0.1.0"
PRIORITY = 10
_KERNEL_MODULES: tuple[str, ...] = ("corenn_numba.nn", "corenn_numba.scatter", "corenn_numba.norms", "corenn_numba.optim",
                                    "corenn_numba.conv", "corenn_numba.pooling", "corenn_numba.linear")
ENV_DISABLE = "CORENN_NUMBA_DISABLE"


def _registrations() -> list:
    from corenn.kernels import KernelRegistration

    from corenn_numba.calibration import calibrated
    found = []
    for module_name in _KERNEL_MODULES:
        module = importlib.import_module(module_name)
        for op, kernel in module.OVERRIDES:
            # Each override runs only where it was measured faster than the core (corenn_numba.calibration).
            found.append(KernelRegistration(op=op, device_type="cpu", kernel=calibrated(op, kernel), priority=PRIORITY))
    return found


def _name() -> str:
    """The name the loader knows this plugin by (the entry point's, ``numba``); RuntimeError if none."""
    corenn.plugins.finish_pending()
    this = sys.modules[__name__]
    for record in corenn.plugins.records.values():
        if record.plugin is this:
            return record.name
    raise RuntimeError("corenn-numba is not registered with corenn.plugins (it was unregistered, or not loaded: "
                       "see `python -m corenn plugins`), so there are no kernels of it to turn on or off; "
                       "corenn.plugins.register(corenn_numba, name='numba') registers it again")


def disable() -> None:
    """Stop using the numba kernels (the core's kernels run again); ``enable()`` undoes it.

    Same as ``corenn.plugins.disable("numba")``::

        corenn_numba.disable()
        assert not corenn_numba.is_enabled()
    """
    corenn.plugins.disable(_name())


def enable() -> None:
    """Use the numba kernels again after ``disable()`` (or ``CORENN_NUMBA_DISABLE=1``).

    Same as ``corenn.plugins.enable("numba")``; after ``corenn.plugins.unregister("numba")``
    it raises RuntimeError instead of bringing kernels back behind the loader's back::

        corenn_numba.enable()
        assert corenn_numba.is_enabled()
    """
    corenn.plugins.enable(_name())


def is_enabled() -> bool:
    """True while the loader lists this plugin as active (its kernels are dispatched).

    Example: ``corenn_numba.is_enabled()`` is False under ``CORENN_NUMBA_DISABLE=1``.
    """
    corenn.plugins.finish_pending()  # imported before corenn: registered once this module's import was done
    this = sys.modules[__name__]
    return any(record.plugin is this and record.status == "active" for record in corenn.plugins.records.values())


def disabled():
    """The core's kernels inside the block, the plugin's again after it (if they were on before)::

        with corenn_numba.disabled():
            expected = model(x)      # numpy kernels
        got = model(x)               # compiled kernels
    """
    return corenn.plugins.disabled(_name())


@hookimpl
def corenn_register_kernels():
    return _registrations()


@hookimpl
def corenn_register_compile_backends():
    # fusion imports numba only when a program is compiled with it
    from corenn_numba.fusion import numba_backend
    return {"numba": numba_backend}


@hookimpl
def corenn_info_lines():
    import numba
    allocator = ("glibc malloc thresholds raised (CORENN_NUMBA_MALLOC=0 to leave them)" if _malloc.tuned
                 else "malloc left as it is until a compiled kernel first runs" if _malloc.wanted()
                 else "malloc left as it is")
    from corenn_numba import _blas, calibration
    compiled = numba.config.CACHE_DIR or calibration.cache_dir() / "numba"  # see _base.compiled_code_cache
    return [f"numba {numba.__version__}, {numba.get_num_threads()} threads; compiled code cache: {compiled}; "
            f"{allocator}; {_blas.status()}",
            *calibration.summary_lines()]


if os.environ.get(ENV_DISABLE, "") not in ("", "0"):
    # Loaded (so enable() can turn the kernels on) but disabled from the start, through the loader.
    corenn.plugins.disable(sys.modules[__name__], reason=f"{ENV_DISABLE}=1 is set")
