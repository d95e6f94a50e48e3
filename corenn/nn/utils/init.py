"""``skip_init``: build a module without running its parameter initialisation.

Example::

    >>> m = nn.utils.skip_init(nn.Linear, 5, 3)
    >>> nn.init.orthogonal_(m.weight).shape
    corenn.Size([3, 5])
"""
from __future__ import annotations

import inspect

from corenn.module.module import Module
from corenn.nn import init as _init

__all__ = ["skip_init"]


def skip_init(module_cls, *args, **kwargs) -> Module:
    """Instantiate ``module_cls(*args, **kwargs)`` with every ``corenn.nn.init`` fill skipped.

    Parameters and buffers are allocated but left uninitialised, so the time the
    default initialisation would take is saved; initialise them yourself afterwards.
    Like PyTorch, the module must accept a ``device`` argument and must initialise
    only through ``corenn.nn.init`` (the convention every ``corenn.nn`` layer
    follows). corenn has no ``meta`` device: values drawn in a constructor by other
    means (e.g. ``corenn.randn``) are still drawn.

    Example::

        >>> m = nn.utils.skip_init(nn.Linear, 5, 3, device="cpu")
        >>> nn.init.orthogonal_(m.weight).shape
        corenn.Size([3, 5])
    """
    if not (isinstance(module_cls, type) and issubclass(module_cls, Module)):
        raise RuntimeError(f"Expected a Module; got {module_cls}")
    if "device" not in inspect.signature(module_cls).parameters:
        raise RuntimeError("Module must support a 'device' arg to skip initialization")
    final_device = kwargs.pop("device", "cpu")
    _init._skip_depth += 1
    try:
        return module_cls(*args, device=final_device, **kwargs)
    finally:
        _init._skip_depth -= 1
