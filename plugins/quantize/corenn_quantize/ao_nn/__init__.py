"""``corenn.ao.nn`` (PyTorch's ``torch.ao.nn``): the quantized, dynamic, intrinsic and QAT modules under their paths.

The classes live in ``corenn_quantize.modules``; these packages only name them where a
PyTorch program imports them (``corenn.ao.nn.quantized.LayerNorm``).
"""
from . import intrinsic, qat, quantized  # noqa: F401

__all__ = ["intrinsic", "qat", "quantized"]
