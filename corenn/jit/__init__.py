"""``corenn.jit``: PyTorch's TorchScript entry points, served by ``corenn.compile``'s capture and replay.

``corenn.jit.script(fn)`` and ``corenn.jit.trace(fn, example_inputs)`` return compiled callables
(:class:`corenn.compiler.CompiledFunction`, or a compiled module). There is no TorchScript
language here: the function runs as Python once per input signature while its kernels are
recorded, and later calls replay them. Unlike TorchScript, type annotations are not needed
or checked, programs are specialised on shapes (a new shape is a new capture, so shape-dependent
loops such as ``for i in range(x.size(0))`` stay right), and data-dependent control flow makes
that call run eagerly with a warning instead of being compiled. Serialization of compiled
programs (``jit.save``, ``jit.load``, ``ScriptModule.save``) is not supported: save the
``state_dict`` with ``corenn.save``. See docs/jit.md.

    >>> import corenn
    >>> @corenn.jit.script
    ... def batch_gather_jit(tensor, indices):
    ...     output = []
    ...     for i in range(tensor.size(0)):
    ...         output += [tensor[i][indices[i]]]
    ...     return corenn.stack(output)
"""
from __future__ import annotations

import warnings

from corenn.compiler import CompiledFunction, CompiledModule, compile as _compile
from corenn.compiler._capture import capturing

__all__ = ["script", "trace", "trace_module", "ignore", "unused", "export", "is_scripting", "is_tracing",
           "annotate", "Final", "Attribute", "script_if_tracing", "save", "load", "freeze",
           "optimize_for_inference", "ScriptFunction", "ScriptModule", "TracerWarning"]

#: What ``jit.script`` / ``jit.trace`` return: the compiled callables of ``corenn.compile``.
ScriptFunction = CompiledFunction
ScriptModule = CompiledModule


class TracerWarning(Warning):
    """Warned when a traced call cannot be captured and runs eagerly (``torch.jit.TracerWarning``)."""


def script(obj, optimize=None, _frames_up=0, _rcb=None, example_inputs=None):
    """Compile a function or module (``torch.jit.script``): capture and replay per input signature.

    A class (TorchScript classes) is not supported: TypeError. ``example_inputs`` are accepted
    and, when given, captured at once.
    """
    from corenn.module.module import Module
    if isinstance(obj, type):
        raise TypeError(f"jit.script(): scripting a class ({obj.__name__}) is not supported by corenn; script its "
                        f"functions or instances instead")
    if not callable(obj):
        raise TypeError(f"jit.script(): argument 'obj' must be a function or a Module, not {type(obj).__name__}")
    compiled = _compile(obj, backend="replay")
    if isinstance(obj, Module) or example_inputs is None:
        return compiled
    for inputs in example_inputs:
        compiled(*(inputs if isinstance(inputs, tuple) else (inputs,)))
    return compiled


def trace(func, example_inputs=None, optimize=None, check_trace=True, check_inputs=None, check_tolerance=1e-5,
          strict=True, _force_outplace=False, _module_class=None, _compilation_unit=None,
          example_kwarg_inputs=None, _store_inputs=True):
    """Capture ``func`` on ``example_inputs`` now (``torch.jit.trace``) and return the compiled callable.

    Unlike PyTorch's trace, a call with another shape is captured again rather than replaying the
    example's shapes, and a call that cannot be captured runs eagerly (with a TracerWarning)
    rather than freezing the example's values.
    """
    if example_inputs is None and example_kwarg_inputs is None:
        raise RuntimeError("jit.trace(): pass 'example_inputs' (a tensor or a tuple of tensors) or "
                           "'example_kwarg_inputs' (a dict)")
    if not callable(func):
        raise TypeError(f"jit.trace(): argument 'func' must be a function or a Module, not {type(func).__name__}")
    compiled = _compile(func, backend="replay")
    args = () if example_inputs is None else example_inputs if isinstance(example_inputs, tuple) \
        else (example_inputs,)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        compiled(*args, **(example_kwarg_inputs or {}))
    for warning in caught:
        warnings.warn(str(warning.message), TracerWarning, stacklevel=2)
    return compiled


def trace_module(mod, inputs, **kwargs):
    """``torch.jit.trace_module``: ``inputs`` maps method names to example inputs; only ``forward`` is supported."""
    if set(inputs) != {"forward"}:
        raise RuntimeError(f"jit.trace_module(): only 'forward' can be traced by corenn, got {sorted(inputs)}")
    return trace(mod, inputs["forward"], **kwargs)


def ignore(drop=False, **kwargs):
    """``@jit.ignore``: leave a function as Python. In corenn every function stays Python: a no-op."""
    if callable(drop):
        return drop
    return lambda fn: fn


def unused(fn):
    """``@jit.unused``: a no-op in corenn (nothing is compiled ahead of time)."""
    return fn


def export(fn):
    """``@jit.export``: a no-op in corenn (methods stay callable as they are)."""
    return fn


def script_if_tracing(fn):
    """``@jit.script_if_tracing``: a no-op in corenn (the function is captured with its caller)."""
    return fn


def is_scripting() -> bool:
    """False: corenn runs functions as Python, never as TorchScript (``torch.jit.is_scripting``)."""
    return False


def is_tracing() -> bool:
    """True while a compiled call is being captured in this thread (``torch.jit.is_tracing``)."""
    return capturing()


def annotate(the_type, the_value):
    """``torch.jit.annotate``: returns ``the_value`` (corenn needs no type annotations)."""
    return the_value


class Final:
    """``torch.jit.Final[T]`` in annotations: accepted and ignored."""

    def __class_getitem__(cls, item):
        return item


def Attribute(value, type=None):  # noqa: N802 - PyTorch's name
    """``torch.jit.Attribute(value, type)``: returns ``value``."""
    return value


def _unsupported(name: str):
    def refuse(*args, **kwargs):
        raise NotImplementedError(f"jit.{name}() is not supported by corenn: compiled programs are not serialised "
                                  f"or frozen (there is no TorchScript IR). Save the module's state_dict with "
                                  f"corenn.save and compile again after loading.")
    refuse.__name__ = name
    return refuse


save = _unsupported("save")
load = _unsupported("load")
freeze = _unsupported("freeze")
optimize_for_inference = _unsupported("optimize_for_inference")
