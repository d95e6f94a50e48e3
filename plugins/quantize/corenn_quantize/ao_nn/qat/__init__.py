"""``corenn.ao.nn.qat``: modules whose weights pass a fake quantizer in every forward."""
from ...modules import QATConv2d as Conv2d, QATLinear as Linear  # noqa: F401

__all__ = ["Conv2d", "Linear"]
