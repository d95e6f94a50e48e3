"""The layer classes of ``corenn.nn`` (Linear, Conv2d, BatchNorm2d, CrossEntropyLoss, ...).

``corenn.nn`` star-imports this package; each layer lives in the file of its family
and is loaded on first use of its name.

    >>> from corenn.nn.modules import Linear
    >>> Linear(64, 32)
    Linear(in_features=64, out_features=32, bias=True)
"""
from __future__ import annotations

import importlib

#: public name -> the submodule that defines it
_SOURCES = {
    "linear": ["Identity", "Linear", "Bilinear"],
    "flatten": ["Flatten", "Unflatten"],
    "conv": ["Conv1d", "Conv2d", "Conv3d", "ConvTranspose1d", "ConvTranspose2d", "ConvTranspose3d"],
    "pooling": ["MaxPool1d", "MaxPool2d", "AvgPool1d", "AvgPool2d", "AdaptiveAvgPool1d", "AdaptiveAvgPool2d",
                "MaxPool3d", "AvgPool3d", "AdaptiveAvgPool3d", "AdaptiveMaxPool1d", "AdaptiveMaxPool2d",
                "AdaptiveMaxPool3d", "MaxUnpool1d", "MaxUnpool2d", "MaxUnpool3d",
                "FractionalMaxPool2d", "FractionalMaxPool3d"],
    "upsampling": ["Upsample", "UpsamplingNearest2d", "UpsamplingBilinear2d"],
    "normalization": ["BatchNorm1d", "BatchNorm2d", "BatchNorm3d", "LayerNorm", "GroupNorm", "InstanceNorm1d",
                      "InstanceNorm2d", "InstanceNorm3d", "LocalResponseNorm", "RMSNorm",
                      "CrossMapLRN2d", "SyncBatchNorm"],
    "dropout": ["Dropout", "Dropout1d", "Dropout2d", "Dropout3d", "AlphaDropout", "FeatureAlphaDropout"],
    "pixelshuffle": ["PixelShuffle", "PixelUnshuffle"],
    "sparse": ["Embedding", "EmbeddingBag"],
    "padding": ["ZeroPad1d", "ZeroPad2d", "ZeroPad3d", "ConstantPad1d", "ConstantPad2d", "ConstantPad3d",
                "ReflectionPad1d", "ReflectionPad2d", "ReflectionPad3d", "ReplicationPad1d", "ReplicationPad2d",
                "ReplicationPad3d", "CircularPad1d", "CircularPad2d", "CircularPad3d"],
    "distance": ["CosineSimilarity", "PairwiseDistance"],
    "fold": ["Fold", "Unfold"],
    "channelshuffle": ["ChannelShuffle"],
    "lppool": ["LPPool1d", "LPPool2d", "LPPool3d"],
    "activation": ["ReLU", "ReLU6", "LeakyReLU", "ELU", "SELU", "CELU", "GELU", "SiLU", "Mish", "Sigmoid", "Tanh",
                   "Softmax", "LogSoftmax", "Softplus", "Softsign", "Hardtanh", "Hardswish", "Hardsigmoid",
                   "LogSigmoid", "Tanhshrink", "PReLU", "MultiheadAttention", "Threshold", "GLU", "Hardshrink",
                   "Softshrink", "RReLU", "Softmin", "Softmax2d"],
    "loss": ["MSELoss", "L1Loss", "SmoothL1Loss", "HuberLoss", "CrossEntropyLoss", "NLLLoss", "BCELoss",
             "BCEWithLogitsLoss", "KLDivLoss", "PoissonNLLLoss", "GaussianNLLLoss", "MarginRankingLoss",
             "HingeEmbeddingLoss", "SoftMarginLoss", "CosineEmbeddingLoss", "TripletMarginLoss",
             "TripletMarginWithDistanceLoss", "MultiLabelSoftMarginLoss", "MultiMarginLoss", "MultiLabelMarginLoss",
             "CTCLoss", "LinearCrossEntropyLoss", "NLLLoss2d"],
    "transformer": ["TransformerEncoderLayer", "TransformerEncoder", "TransformerDecoderLayer", "TransformerDecoder",
                    "Transformer"],
    "adaptive": ["AdaptiveLogSoftmaxWithLoss"],
    "data_parallel": ["DataParallel"],
    "lazy": ["UninitializedParameter", "UninitializedBuffer", "LazyLinear", "LazyConv1d", "LazyConv2d", "LazyConv3d",
             "LazyConvTranspose1d", "LazyConvTranspose2d", "LazyConvTranspose3d", "LazyBatchNorm1d",
             "LazyBatchNorm2d", "LazyBatchNorm3d", "LazyInstanceNorm1d", "LazyInstanceNorm2d", "LazyInstanceNorm3d"],
    "rnn": ["RNNBase", "RNN", "LSTM", "GRU", "RNNCellBase", "RNNCell", "LSTMCell", "GRUCell"],
}
_OWNER = {name: module for module, names in _SOURCES.items() for name in names}

__all__ = list(_OWNER)


def __getattr__(name):
    module = _OWNER.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value


def __dir__():
    return sorted(set(globals()) | set(__all__))
