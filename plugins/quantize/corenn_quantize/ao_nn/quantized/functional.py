"""``corenn.ao.nn.quantized.functional``: functions of quantized tensors (see ``corenn_quantize.functional``)."""
from ...functional import adaptive_avg_pool2d, avg_pool2d, max_pool2d  # noqa: F401

__all__ = ["adaptive_avg_pool2d", "avg_pool2d", "max_pool2d"]
