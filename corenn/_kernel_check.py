"""The first-call check of plugin kernels: output shapes and dtypes against the core kernel's.

A plugin kernel that returns the wrong shape or dtype would otherwise go unnoticed until
something downstream breaks, far from the cause. So the first time a plugin's kernel runs
for an (op, device type), the dispatcher also runs the core's kernel on the same inputs and
compares the outputs' shapes and dtypes (not their values: that is the conformance kit's
job, ``corenn.testing.run_conformance``). On a match the plugin kernel runs unchecked from
then on; on a mismatch its registration for that (op, device type) is detached, with a
``PluginWarning`` naming the plugin, the op and both shapes and dtypes (``CORENN_STRICT_PLUGINS=1``
raises ``PluginError``), that call returns the core kernel's result, and the op falls back
to the next kernel registered for it -- the core's, unless another plugin has one.
``CORENN_CHECK_KERNELS=1`` checks every call instead of the first (a debug mode: each
checked call runs the op twice).

It costs the op hot path nothing after the first call: the dispatch table holds a
:class:`FirstCallCheck` in the plugin kernel's place, which puts the kernel itself there
once its first call has passed.

Example::

    CORENN_CHECK_KERNELS=1 python train.py   # every plugin kernel call compared with the core kernel's
"""
from __future__ import annotations

import os
from typing import Any

ENV_CHECK_KERNELS = "CORENN_CHECK_KERNELS"

# A KernelOverride that declines its first calls (inputs it does not handle) ran the core kernel:
# those calls prove nothing, and the check waits for one the plugin's code ran. Not forever: a
# program that never feeds the override what it handles would pay the wrapper on every call.
MAX_INCONCLUSIVE_CALLS = 16


def check_every_call() -> bool:
    """True when ``CORENN_CHECK_KERNELS`` is set: check each call of a plugin kernel, not only the first."""
    return os.environ.get(ENV_CHECK_KERNELS, "").strip().lower() not in ("", "0", "false", "no", "off")


class FirstCallCheck:
    """Stands in a dispatch table for a plugin kernel whose first call on ``device_type`` is not checked yet.

    The dispatcher uses it as it uses a kernel class: ``FirstCallCheck()`` makes the
    graph node (an instance of the plugin's kernel itself, so ``grad_fn`` is the
    plugin's), ``forward`` runs the kernel and checks it, and the class attributes the
    dispatcher reads are the kernel's.
    """

    __slots__ = ("kernel", "core", "registration", "device_type", "registry", "every_call", "inconclusive",
                 "num_outputs", "differentiable", "differentiable_outputs")

    def __init__(self, registration, core, device_type: str, registry, every_call: bool):
        kernel = registration.kernel
        self.kernel, self.core, self.registration = kernel, core, registration
        self.device_type, self.registry, self.every_call = device_type, registry, every_call
        self.inconclusive = 0
        self.num_outputs = kernel.num_outputs
        self.differentiable = kernel.differentiable
        self.differentiable_outputs = kernel.differentiable_outputs

    def __call__(self):
        return self.kernel()

    def __repr__(self):
        return f"<first-call check of {self.kernel.__qualname__} ({self.registration.source}) on {self.device_type}>"

    def forward(self, ctx, *args, **params):
        kernel, core = self.kernel, self.core
        if not self.every_call and (self.registration.op, self.device_type, kernel) in self.registry._checked:
            self._step_aside()  # checked through another table (tables are rebuilt on every registration)
            return kernel.forward(ctx, *args, **params)
        core_args, core_params = args, params
        if core.mutates_inputs or kernel.mutates_inputs:  # batch_norm's running statistics: not updated twice
            ndarray = getattr(ctx.xp, "ndarray", None)
            if ndarray is None:  # arrays that can't be told apart can't be copied: no check
                self._no_verdict()
                return kernel.forward(ctx, *args, **params)
            core_args, core_params = _copied(args, ndarray), _copied(params, ndarray)
        out = kernel.forward(ctx, *args, **params)
        if "backward" in vars(ctx):  # a KernelOverride that declined these inputs: the core kernel ran
            self._no_verdict()
            return out
        core_ctx = core()
        core_ctx.xp = ctx.xp
        try:
            expected = core.forward(core_ctx, *core_args, **core_params)
        except Exception:  # inputs the core kernel refuses: there is nothing to compare with
            self._no_verdict()
            return out
        got, want = describe_outputs(out, self.num_outputs), describe_outputs(expected, core.num_outputs)
        if got == want:
            if not self.every_call:
                self.registry._checked.add((self.registration.op, self.device_type, kernel))
                self._step_aside()
            return out
        self._reject(got, want)  # raises PluginError in strict mode
        # This call returns the core's result, so its node must run the core's backward on the
        # core's saved state (as a KernelOverride's fallback does).
        vars(ctx).update(vars(core_ctx))
        ctx.backward = core.backward
        return expected

    def _step_aside(self) -> None:
        table = self.registry._resolved.get(self.device_type)
        if table is not None and table.get(self.registration.op) is self:
            table[self.registration.op] = self.kernel

    def _no_verdict(self) -> None:
        self.inconclusive += 1
        if self.inconclusive >= MAX_INCONCLUSIVE_CALLS and not self.every_call:
            self._step_aside()

    def _reject(self, got: str, want: str) -> None:
        from corenn import plugins

        registration, device_type = self.registration, self.device_type
        self.registry.reject(registration.source, registration.op, device_type)
        now = self.registry.source_of(registration.op, device_type)
        plugins._runtime_failure(
            registration.source,
            f"its kernel {self.kernel.__name__} for op {registration.op!r} on {device_type} returned {got} "
            f"where the core kernel returns {want}", None, "the kernel was detached",
            f"this call returned the core kernel's result and {registration.op!r} on {device_type} now runs "
            f"{now}'s kernel")


def describe_outputs(out: Any, num_outputs: int) -> str:
    """``"shape (2, 3) float32"``, or for several outputs ``"(shape (2,) float32, shape (2,) int64)"``."""
    if num_outputs == 1 or not isinstance(out, (tuple, list)):
        return _describe_one(out)
    return "(" + ", ".join(_describe_one(o) for o in out) + ")"


def _describe_one(array) -> str:
    shape, dtype = getattr(array, "shape", None), getattr(array, "dtype", None)
    if shape is None or dtype is None:
        return "None" if array is None else f"a {type(array).__name__}"
    return f"shape {tuple(shape)} {dtype}"


def _copied(value, ndarray):
    """``value`` with every array in it (in lists, tuples and dict values too) copied."""
    if isinstance(value, ndarray):
        return value.copy()
    if type(value) in (list, tuple):
        return type(value)(_copied(v, ndarray) for v in value)
    if type(value) is dict:
        return {k: _copied(v, ndarray) for k, v in value.items()}
    return value
