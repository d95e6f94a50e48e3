"""PyTorch's import path for ``Module`` and the global module hooks (``torch.nn.modules.module``).

The machinery lives in :mod:`corenn.module`; this module only re-exports it so that
``from corenn.nn.modules.module import register_module_forward_hook`` works as in PyTorch.
"""
from corenn.module.hooks import (register_module_buffer_registration_hook,  # noqa: F401
                                 register_module_forward_hook, register_module_forward_pre_hook,
                                 register_module_full_backward_hook, register_module_full_backward_pre_hook,
                                 register_module_module_registration_hook,
                                 register_module_parameter_registration_hook)
from corenn.module.module import Module  # noqa: F401
