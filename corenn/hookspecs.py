"""The extension contract: every hook a corenn plugin can implement.

A plugin is a module or object with functions decorated by ``corenn.hookimpl``
and named after the specs below; it is found through the entry-point group
``corenn`` (or registered with ``corenn.plugins.register``). The core's own
``cpu`` backend and kernels are plugins of exactly this kind
(``corenn.backends.cpu``, ``corenn.ops``).

Hooks are called with keyword arguments only, so a spec can gain arguments
without breaking plugins that don't ask for them (a hookimpl names only the
arguments it wants). No hook here is ``firstresult``: every plugin's answer is
used, in registration order.

Three kinds of hooks:

- *registration* hooks run once per plugin, when it loads, and hand corenn
  objects to keep (backends, kernels, process-group backends, FX leaf rules,
  module-state handlers, op observers, import paths). Their answers are checked: a
  malformed answer, or any exception but KeyboardInterrupt (``sys.exit()``
  included), marks the plugin *failed* and nothing of it stays
  registered. Raising :class:`corenn.plugins.PluginUnavailable` from any of
  them marks the plugin *unavailable* (cannot run on this machine) instead.
- *information* hooks run when asked (``python -m corenn info``).
- the *host* hook :func:`corenn_add_hookspecs` lets a plugin publish hooks of
  its own for other plugins.

Runtime participation (the profiler seeing every op, a plugin's state in
``state_dict``) goes through the objects the registration hooks return, not
through a hook call per op: that keeps the op hot path free of pluggy.

Example plugin module::

    import corenn

    @corenn.hookimpl
    def corenn_info_lines():
        return ["my-plugin: nothing to report"]
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, Iterable, Mapping

import pluggy

if TYPE_CHECKING:
    from corenn.dispatch import Backend, KernelRegistration

__all__ = ["hookspec", "hookimpl"]

hookspec = pluggy.HookspecMarker("corenn")
hookimpl = pluggy.HookimplMarker("corenn")


# -- registration: called once per plugin, when plugins load ---------------------------------------

@hookspec
def corenn_register_backends() -> Iterable[Backend]:
    """Return the device backends this plugin provides (``corenn.dispatch.Backend`` objects).

    When: once, when the plugin loads, before any of its other registration hooks.
    Receives: nothing.
    Returns: an iterable of ``Backend`` (or None for none).
    First answer wins: no, every plugin's backends are registered; a device
    type may be provided by one plugin only, and a second provider fails to load.
    A plugin whose device cannot run on this machine (no GPU, no driver) raises
    ``corenn.plugins.PluginUnavailable("reason")`` instead of returning a
    backend: it is then listed as *unavailable*, not *failed*.
    """


@hookspec
def corenn_register_kernels() -> Iterable[KernelRegistration]:
    """Return kernel registrations (``corenn.dispatch.KernelRegistration``): (op, device type, kernel, priority).

    When: once, when the plugin loads, after its backends are registered.
    Receives: nothing.
    Returns: an iterable of ``KernelRegistration`` whose ``kernel`` is a
    ``corenn.autograd.node.Op`` subclass (forward and backward together),
    ``op`` one of the core's ops (docs/kernels.md) and ``device_type``
    ``"*"``, a registered backend's type or one with a known first-party
    provider (``cuda``); another name fails the plugin, naming it.
    First answer wins: no, every registration is kept; at dispatch the one
    with the highest ``priority`` for (op, device type) runs,
    ``device_type="*"`` matching any numpy-API backend, earlier registration
    winning ties. The core's kernels have priority 0, so priority >= 1 overrides.
    The kernel's ``num_outputs`` and ``differentiable`` must be the core kernel's
    (else the plugin fails). The first call of each plugin kernel on each device
    type is checked: output shapes and dtypes against the core kernel's on the
    same inputs; a kernel that differs is detached with a warning naming the
    plugin and both, and the op falls back (``CORENN_CHECK_KERNELS=1`` checks
    every call).
    """


@hookspec
def corenn_register_process_group_backends() -> Mapping[str, Callable[..., Any]]:
    """Return ``{backend name: factory}`` for collective communication (``"mpi"``, ``"nccl"``, ``"gloo"``).

    When: once, when the plugin loads.
    Receives: nothing.
    Returns: a mapping from a backend name to a callable that builds a
    process group; the keyword arguments the factory takes are defined by the
    distributed plugin that calls it (``corenn_distributed.init_process_group``),
    which looks factories up with ``corenn.plugins.process_group_backends()``.
    First answer wins: no, all plugins' mappings are merged; a name provided
    by two plugins fails the second. Raise ``PluginUnavailable`` when no
    backend can run here (no MPI, no NCCL); leave out just the ones that can't.
    """


@hookspec
def corenn_register_compile_backends() -> Mapping[str, Callable[..., Any]]:
    """Return ``{name: backend}``: compile backends that ``corenn.compile(..., backend=name)`` can use.

    When: on each ``corenn.compile(...)`` call that names a backend the core doesn't ship, and by
    ``corenn.compiler.list_backends()``.
    Receives: nothing.
    Returns: a mapping of backend name to a callable ``backend(program) -> runner``: ``program``
    is a captured :class:`corenn.compiler.Program` (``replay``, ``kernel_steps()``,
    ``slot_info()``, ``barriers()``, ``fuse()``: docs/jit.md, "Writing a backend"); the
    runner is called with the call's input tensors, in the order they appear in the arguments,
    and returns what the function returns; a backend returning None makes every call eager.
    First answer wins: no, every plugin's mapping is merged in registration order (a later
    plugin's name overrides an earlier one's); the core's ``"replay"`` and ``"eager"`` are
    built in and cannot be overridden.
    """


@hookspec
def corenn_fx_leaf_modules() -> Iterable[Callable[[Any, str], bool | None]]:
    """Return rules ``rule(module, qualified_name) -> bool | None`` that FX tracing asks about each module.

    When: once, when the plugin loads; the rules are then asked by
    ``corenn.fx.Tracer.is_leaf_module`` through ``corenn.plugins.fx_leaf_module_rules()``.
    Receives: nothing.
    Returns: an iterable of callables. A rule returns True to keep the module
    as a single ``call_module`` node (a leaf), False to trace through it, None
    for no opinion.
    First answer wins: no. Any rule answering True makes the module a leaf,
    whatever the other rules say; otherwise any False traces through it; with
    neither, the tracer's own rule decides (standard corenn layers are leaves).
    A rule that raises is detached, with a warning naming the plugin, and
    tracing goes on.
    """


@hookspec
def corenn_module_state_handlers() -> Iterable[Any]:
    """Return handlers that join ``Module.state_dict`` / ``load_state_dict`` for what a plugin hangs on a module.

    When: once, when the plugin loads; the handlers are then listed by
    ``corenn.plugins.module_state_handlers()``.
    Receives: nothing.
    Returns: an iterable of objects with one or both of the methods
    ``state_dict_post(module, state_dict, prefix)`` (after a module has put its
    own entries, under ``prefix``, into ``state_dict``: add, rename or drop
    entries in place) and ``load_state_dict_pre(module, state_dict, prefix)``
    (before a module reads its entries from ``state_dict``: convert them in
    place). Return values are ignored. A handler with neither method is malformed.
    First answer wins: no, every handler runs, in registration order.
    Called by ``corenn.nn.Module.state_dict`` (after each module's own entries) and
    ``load_state_dict`` (before each module reads its entries), for every module.
    A handler that raises is detached, with a warning naming the plugin, and
    the call goes on: one broken plugin does not break every model's state_dict().
    """


@hookspec
def corenn_op_observers() -> Iterable[Any]:
    """Return observers that see every op for as long as the plugin is registered.

    When: once, when the plugin loads. (To observe for a while only -- a
    profiler's ``with profile():`` -- use ``corenn.plugins.observe_ops(observer)``.)
    Receives: nothing.
    Returns: an iterable of objects with ``op_start(op_name, device, arrays)``
    and ``op_end(op_name, device, out)``, called around every kernel forward
    run by the dispatcher (``arrays``: the raw inputs; ``out``: the raw result).
    Optional methods, called only on observers that define them:
    ``op_node(op_name, node)`` after ``op_start``, with the kernel instance
    that runs the op (it becomes the output's ``grad_fn`` if the op records
    a graph node, and its ``sequence_nr`` is set when the op returns), and
    ``backward_start(node, grad_outputs)`` / ``backward_end(node,
    grad_inputs)`` around each node's ``backward`` in the backward walk
    (``node.sequence_nr`` matches the forward op's node; ``grad_outputs`` /
    ``grad_inputs``: what ``backward`` receives and returns). An active
    observer slows every op; with none the dispatcher pays one truthiness
    test per op and the backward walk one per node.
    First answer wins: no, every observer is called (``op_start`` in
    registration order, ``op_end`` in reverse). An observer that raises is
    detached, with a warning naming the plugin, and the op goes on.
    """


@hookspec
def corenn_register_import_paths() -> Mapping[str, str]:
    """Return ``{public corenn module path: this plugin's module}``, so PyTorch's import paths reach plugin APIs.

    When: once, when the plugin loads, after its other registration hooks.
    Receives: nothing.
    Returns: a mapping from a dotted path under ``corenn.`` (PyTorch's path with
    ``torch`` renamed) to the dotted name of the plugin's own module, e.g.
    ``{"corenn.nn.utils.prune": "corenn_prune.prune"}``. Importing
    the path (``import corenn.nn.utils.prune as prune``, ``from corenn.nn.utils
    import prune``) then imports that module -- only then: registering imports
    nothing -- and gives that very module object; modules below the path are the
    plugin's modules below it. Parent packages the core lacks (``corenn.ao``) are
    created. A path that is a module of corenn itself, or a name its parent
    already has, is malformed, as is a path outside ``corenn.``. Unregistering the
    plugin removes its paths, also from ``sys.modules``.
    First answer wins: no, every plugin's paths are registered; a path provided
    by two plugins fails the second. See ``corenn.import_paths``.
    """



@hookspec
def corenn_register_names() -> Mapping[str, Any]:
    """Return ``{name: object}`` to appear as ``corenn.<name>``, for PyTorch's top-level names a plugin provides.

    When: once, when the plugin loads, after its other registration hooks.
    Receives: nothing.
    Returns: a mapping from an identifier to any object, e.g. corenn-quantize's
    ``{"qint8": qint8, "quantize_per_tensor": quantize_per_tensor}``, so that
    ``torch.quantize_per_tensor(x, 0.1, 0, torch.qint8)`` ports by renaming.
    ``corenn.<name>`` then gives the object (looked up by the package's
    ``__getattr__``: nothing is added to corenn's namespace and no op pays for
    it). A name corenn itself has (``tensor``, ``nn``, ...), a name that is
    not an identifier or starts with ``_``, is malformed. Unregistering the
    plugin removes its names; a disabled plugin's names stay reachable.
    ``corenn.plugins.registered_names()`` lists them.
    First answer wins: no, every plugin's names are registered; a name provided
    by two plugins fails the second.
    """

# -- information ------------------------------------------------------------------------------------------

@hookspec
def corenn_info_lines() -> Iterable[str]:
    """Return lines describing this plugin's state for ``python -m corenn info`` (versions, devices found).

    When: each time ``info`` runs (``corenn.plugins.info_lines()``).
    Receives: nothing.
    Returns: an iterable of strings, shown under the plugin's name.
    First answer wins: no, every plugin's lines are shown; a plugin whose
    hook raises (even ``SystemExit``) gets one line naming the error instead.
    """


# -- host ---------------------------------------------------------------------------------------------------

@hookspec(historic=True)
def corenn_add_hookspecs(plugin_manager: pluggy.PluginManager) -> None:
    """Add hookspecs of this plugin's own, for other plugins to implement (like ``pytest_addhooks``).

    When: when the plugin is registered (a historic hook: plugins registered
    later are called too).
    Receives: ``plugin_manager``, corenn's ``pluggy.PluginManager``; call
    ``plugin_manager.add_hookspecs(module_or_class)``.
    Returns: nothing.
    First answer wins: no, every plugin is called. Implementations of hooks
    that another plugin adds should be marked ``@corenn.hookimpl(optionalhook=True)``
    if they must also load where that plugin is absent.
    """
