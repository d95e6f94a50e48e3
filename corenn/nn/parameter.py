"""``corenn.nn.parameter``: the import path of ``torch.nn.parameter`` (``from torch.nn.parameter import Parameter``).

    >>> from corenn.nn.parameter import Parameter, UninitializedParameter
    >>> UninitializedParameter()
    <UninitializedParameter>
"""
from corenn.module.parameter import Buffer, Parameter  # noqa: F401
from corenn.nn.modules.lazy import (UninitializedBuffer, UninitializedParameter,  # noqa: F401
                                    UninitializedTensorMixin, is_lazy)

__all__ = ["Parameter", "Buffer", "UninitializedParameter", "UninitializedBuffer", "UninitializedTensorMixin",
           "is_lazy"]
