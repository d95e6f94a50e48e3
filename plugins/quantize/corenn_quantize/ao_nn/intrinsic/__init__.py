"""``corenn.ao.nn.intrinsic``: fused float modules, and their QAT (``.qat``) and quantized (``.quantized``) forms."""
import types

from ...modules import (ConvBn2d, ConvBnReLU2d, ConvReLU2d, LinearReLU, QATConvBn2d, QATConvBnReLU2d,  # noqa: F401
                        QATConvReLU2d, QATLinearReLU, QuantizedConvReLU2d, QuantizedLinearReLU, freeze_bn_stats,
                        update_bn_stats)

qat = types.SimpleNamespace(LinearReLU=QATLinearReLU, ConvReLU2d=QATConvReLU2d, ConvBn2d=QATConvBn2d,
                            ConvBnReLU2d=QATConvBnReLU2d, freeze_bn_stats=freeze_bn_stats,
                            update_bn_stats=update_bn_stats)
quantized = types.SimpleNamespace(LinearReLU=QuantizedLinearReLU, ConvReLU2d=QuantizedConvReLU2d)

__all__ = ["ConvBn2d", "ConvBnReLU2d", "ConvReLU2d", "LinearReLU", "qat", "quantized"]
