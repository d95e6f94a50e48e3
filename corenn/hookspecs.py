"""The extension contract: every hook a corenn plugin can implement.

A plugin is a module or object with functions decorated by ``corenn.hookimpl``
and named after the specs below; it is found through the entry-point group
``corenn`` (or registered with ``corenn.plugins.register``). The core's own
``cpu`` backend and kernels are plugins of exactly this kind
(``corenn.backends.cpu``, ``corenn.ops``).

Hooks are called with keyword arguments only, so a spec can gain arguments
without breaking plugins that don't ask for them.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Iterable

import pluggy

if TYPE_CHECKING:
    from corenn.dispatch import Backend, KernelRegistration

hookspec = pluggy.HookspecMarker("corenn")
hookimpl = pluggy.HookimplMarker("corenn")


# -- registration: called once per plugin, when plugins load ---------------------------------------

@hookspec
def corenn_register_backends() -> Iterable["Backend"]:
    """Return the device backends this plugin provides (``corenn.dispatch.Backend`` objects).

    Called once when the plugin loads, before kernels are registered. Every
    plugin's answer is used. A device type may be provided by one plugin only; a
    second provider is reported as a failed registration. A plugin whose device
    cannot run on this machine (no GPU, no driver) should raise
    ``corenn.plugins.PluginUnavailable("reason")`` instead of returning a
    backend: it is then listed as *unavailable*, not *failed*.
    """


@hookspec
def corenn_register_kernels() -> Iterable["KernelRegistration"]:
    """Return kernel registrations (``corenn.dispatch.KernelRegistration``): (op, device type, kernel, priority).

    Called once when the plugin loads, after all backends are registered. Every
    plugin's answer is used; at dispatch the registration with the highest
    priority for (op, device type) wins, ``device_type="*"`` matching any
    backend. The core's kernels have priority 0.
    """


# -- information ------------------------------------------------------------------------------------------

@hookspec
def corenn_info_lines() -> Iterable[str]:
    """Return lines describing this plugin's state for ``python -m corenn info`` (versions, devices found).

    Called each time ``info`` runs. Every plugin's answer is shown under its name.
    """
