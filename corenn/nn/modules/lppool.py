"""LPPool1d/2d/3d: power-average pooling, ``(sum over the window of x**p) ** (1/p)``."""
from __future__ import annotations

from corenn.module.module import Module
from corenn.nn import functional as F


class _LPPoolNd(Module):
    def __init__(self, norm_type: float, kernel_size, stride=None, ceil_mode: bool = False):
        super().__init__()
        self.norm_type, self.kernel_size, self.stride, self.ceil_mode = norm_type, kernel_size, stride, ceil_mode

    def extra_repr(self) -> str:
        return (f"norm_type={self.norm_type}, kernel_size={self.kernel_size}, stride={self.stride}, "
                f"ceil_mode={self.ceil_mode}")


class LPPool1d(_LPPoolNd):
    """Power-average pooling over (N, C, L).

        >>> nn.LPPool1d(2, 2)(corenn.tensor([[[3., 4.]]])).tolist()
        [[[5.0]]]
    """

    def forward(self, input):
        return F.lp_pool1d(input, float(self.norm_type), self.kernel_size, self.stride, self.ceil_mode)


class LPPool2d(_LPPoolNd):
    """Power-average pooling over (N, C, H, W).

        >>> nn.LPPool2d(1, 2)(corenn.ones(1, 1, 2, 2)).tolist()
        [[[[4.0]]]]
    """

    def forward(self, input):
        return F.lp_pool2d(input, float(self.norm_type), self.kernel_size, self.stride, self.ceil_mode)


class LPPool3d(_LPPoolNd):
    """Power-average pooling over (N, C, D, H, W).

        >>> nn.LPPool3d(1, 2)(corenn.ones(1, 1, 2, 2, 2)).flatten().tolist()
        [8.0]
    """

    def forward(self, input):
        return F.lp_pool3d(input, float(self.norm_type), self.kernel_size, self.stride, self.ceil_mode)
