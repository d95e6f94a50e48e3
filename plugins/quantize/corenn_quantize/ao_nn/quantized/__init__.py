"""``corenn.ao.nn.quantized``: statically quantized modules (quint8 in, quint8 out) and weight-only embeddings.

    >>> import corenn.ao.nn.quantized as nnq
    >>> nnq.Embedding(10, 4).weight().dtype
    corenn.quint8
"""
from ...modules import (AdaptiveAvgPool2d, AvgPool2d, Conv2d, DeQuantize, Embedding, EmbeddingBag,  # noqa: F401
                        FloatFunctional, LayerNorm, Linear, MaxPool2d, QFunctional, Quantize)
from . import dynamic, functional  # noqa: F401

__all__ = ["AdaptiveAvgPool2d", "AvgPool2d", "Conv2d", "DeQuantize", "Embedding", "EmbeddingBag", "FloatFunctional",
           "LayerNorm", "Linear", "MaxPool2d", "QFunctional", "Quantize", "dynamic", "functional"]
