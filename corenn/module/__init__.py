"""The module system: ``Module``, ``Parameter``/``Buffer``, containers and global module hooks.

Users reach these through :mod:`corenn.nn` (``nn.Module``, ``nn.Sequential``, ...).

Example::

    >>> from corenn import nn
    >>> nn.Module is corenn.module.Module
    True
"""
from corenn.module.container import ModuleDict, ModuleList, ParameterDict, ParameterList, Sequential
from corenn.module.module import Module
from corenn.module.parameter import Buffer, Parameter

__all__ = ["Module", "Parameter", "Buffer", "Sequential", "ModuleList", "ModuleDict", "ParameterList",
           "ParameterDict"]
