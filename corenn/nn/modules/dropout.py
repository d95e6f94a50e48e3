"""Dropout layers: elementwise (Dropout) and channel-wise (Dropout1d/2d/3d)."""
from __future__ import annotations

from corenn.module.module import Module
from corenn.nn import functional as F


class Dropout(Module):
    """Zero elements with probability ``p`` in training (scaling the rest by ``1/(1-p)``); identity in eval.

        >>> nn.Dropout(0.5).eval()(corenn.ones(3)).tolist()
        [1.0, 1.0, 1.0]
    """

    def __init__(self, p: float = 0.5, inplace: bool = False):
        super().__init__()
        if p < 0 or p > 1:
            raise ValueError(f"dropout probability has to be between 0 and 1, but got {p}")
        self.p, self.inplace = p, inplace

    def forward(self, input):
        return F.dropout(input, self.p, self.training, self.inplace)

    def extra_repr(self) -> str:
        return f"p={self.p}, inplace={self.inplace}"


class _DropoutNd(Dropout):
    _function = None

    def forward(self, input):
        return type(self)._function(input, self.p, self.training, self.inplace)


class Dropout1d(_DropoutNd):
    """Zero whole channels of (N, C, L) / (C, L) input in training.

        >>> nn.Dropout1d(0.2)
        Dropout1d(p=0.2, inplace=False)
    """
    _function = staticmethod(F.dropout1d)


class Dropout2d(_DropoutNd):
    """Zero whole channels of (N, C, H, W) input in training.

        >>> nn.Dropout2d(0.2)
        Dropout2d(p=0.2, inplace=False)
    """
    _function = staticmethod(F.dropout2d)


class Dropout3d(_DropoutNd):
    """Zero whole channels of (N, C, D, H, W) / (C, D, H, W) input in training.

        >>> nn.Dropout3d(0.2)
        Dropout3d(p=0.2, inplace=False)
    """
    _function = staticmethod(F.dropout3d)


class AlphaDropout(Dropout):
    """Dropout for SELU networks: keeps zero mean and unit variance; identity in eval.

        >>> nn.AlphaDropout(0.2)
        AlphaDropout(p=0.2, inplace=False)
    """

    def forward(self, input):
        return F.alpha_dropout(input, self.p, self.training, self.inplace)


class FeatureAlphaDropout(Dropout):
    """:class:`AlphaDropout` of whole channels of (N, C, *) input.

        >>> nn.FeatureAlphaDropout(0.2).eval()(corenn.ones(1, 2, 3)).shape
        corenn.Size([1, 2, 3])
    """

    def forward(self, input):
        return F.feature_alpha_dropout(input, self.p, self.training, self.inplace)
