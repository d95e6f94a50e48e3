"""Shared machinery of the ``corenn.backends.*`` flag modules: checked boolean flags and ``flags()``.

PyTorch's backend flags are module attributes that type-check on assignment
(``torch.backends.cudnn.benchmark = 1`` raises TypeError). Each flag module here
swaps its class for a ``ModuleType`` subclass with one property per flag, the
same way PyTorch's ``torch/backends/cudnn/__init__.py`` does.
"""
from __future__ import annotations

import contextlib
import sys
import types


def bool_flag(module_name: str, name: str):
    """A property storing a bool in the module's ``_values``; anything but a bool is a TypeError."""
    def get(module):
        return module._values[name]

    def set_(module, value):
        if not isinstance(value, bool):
            raise TypeError(f"{module_name}.{name} must be a bool, got {type(value).__name__}")
        module._values[name] = value
    return property(get, set_, doc=f"``{module_name}.{name}`` (a bool)")


def install(module_name: str, defaults: dict) -> None:
    """Give module ``module_name`` checked boolean flags with ``defaults`` and a ``flags(**values)`` context."""
    module = sys.modules[module_name]
    namespace = {name: bool_flag(module_name, name) for name, value in defaults.items() if isinstance(value, bool)}
    module.__class__ = type(f"{module_name.rsplit('.', 1)[-1].capitalize()}FlagsModule", (types.ModuleType,),
                            namespace)
    object.__setattr__(module, "_values", dict(defaults))


@contextlib.contextmanager
def set_temporarily(module, **values):
    """Set flags of ``module`` inside the block; restore the previous values after, even on error."""
    previous = {name: getattr(module, name) for name in values}
    try:
        for name, value in values.items():
            if value is not None:
                setattr(module, name, value)
        yield
    finally:
        for name, value in previous.items():
            setattr(module, name, value)
