"""PixelShuffle and PixelUnshuffle (sub-pixel rearrangement between channels and space)."""
from __future__ import annotations

from corenn.module.module import Module
from corenn.nn import functional as F


class PixelShuffle(Module):
    """(*, C*r*r, H, W) -> (*, C, H*r, W*r).

        >>> nn.PixelShuffle(2)(corenn.randn(1, 8, 3, 3)).shape
        corenn.Size([1, 2, 6, 6])
    """

    def __init__(self, upscale_factor: int):
        super().__init__()
        self.upscale_factor = upscale_factor

    def forward(self, input):
        return F.pixel_shuffle(input, self.upscale_factor)

    def extra_repr(self) -> str:
        return f"upscale_factor={self.upscale_factor}"


class PixelUnshuffle(Module):
    """(*, C, H*r, W*r) -> (*, C*r*r, H, W).

        >>> nn.PixelUnshuffle(2)(corenn.randn(1, 2, 6, 6)).shape
        corenn.Size([1, 8, 3, 3])
    """

    def __init__(self, downscale_factor: int):
        super().__init__()
        self.downscale_factor = downscale_factor

    def forward(self, input):
        return F.pixel_unshuffle(input, self.downscale_factor)

    def extra_repr(self) -> str:
        return f"downscale_factor={self.downscale_factor}"
