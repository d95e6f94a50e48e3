"""``corenn.nn``: modules, parameters, containers, layers, ``functional``, ``init`` and ``utils``.

Mirrors ``torch.nn``.

Example::

    >>> import corenn
    >>> from corenn import nn
    >>> net = nn.Sequential(nn.Linear(4, 3), nn.ReLU(), nn.Linear(3, 1))
    >>> net(corenn.randn(4)).shape
    corenn.Size([1])
"""
from corenn.module import hooks as module_hooks  # noqa: F401  (global hooks; PyTorch: torch.nn.modules.module)
from corenn.module.container import ModuleDict, ModuleList, ParameterDict, ParameterList, Sequential  # noqa: F401
from corenn.module.module import Module  # noqa: F401
from corenn.module.parameter import Buffer, Parameter  # noqa: F401
from corenn.nn import init, utils  # noqa: F401,E402
from corenn.nn.modules import *  # noqa: F401,F403,E402


def __getattr__(name):
    # ``functional`` is imported on first use: it pulls in every layer's kernels.
    if name == "functional":
        import importlib
        return importlib.import_module("corenn.nn.functional")
    from corenn import import_paths  # ``corenn.nn.parallel``: a path a plugin registers
    return import_paths.module_getattr(__name__, name)
