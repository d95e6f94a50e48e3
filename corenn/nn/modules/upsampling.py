"""Upsampling layers: Upsample, UpsamplingNearest2d, UpsamplingBilinear2d (all through F.interpolate)."""
from __future__ import annotations

from corenn.module.module import Module
from corenn.nn import functional as F


class Upsample(Module):
    """Resample (N, C, *S) by ``scale_factor`` or to ``size`` with F.interpolate's modes.

        >>> nn.Upsample(scale_factor=2, mode="bilinear")
        Upsample(scale_factor=2.0, mode='bilinear')
    """

    def __init__(self, size=None, scale_factor=None, mode="nearest", align_corners=None,
                 recompute_scale_factor=None):
        super().__init__()
        self.name = type(self).__name__
        self.size = size
        if isinstance(scale_factor, tuple):
            self.scale_factor = tuple(float(factor) for factor in scale_factor)
        else:
            self.scale_factor = float(scale_factor) if scale_factor else None
        self.mode = mode
        self.align_corners = align_corners
        self.recompute_scale_factor = recompute_scale_factor

    def forward(self, input):
        return F.interpolate(input, self.size, self.scale_factor, self.mode, self.align_corners,
                             recompute_scale_factor=self.recompute_scale_factor)

    def extra_repr(self) -> str:
        info = f"scale_factor={self.scale_factor!r}" if self.scale_factor is not None else f"size={self.size!r}"
        return info + f", mode={self.mode!r}"


class UpsamplingNearest2d(Upsample):
    """Nearest-neighbour upsampling of (N, C, H, W).

        >>> nn.UpsamplingNearest2d(scale_factor=2)(corenn.ones(1, 1, 2, 2)).shape
        corenn.Size([1, 1, 4, 4])
    """

    def __init__(self, size=None, scale_factor=None):
        super().__init__(size, scale_factor, mode="nearest")


class UpsamplingBilinear2d(Upsample):
    """Bilinear upsampling of (N, C, H, W) with ``align_corners=True``.

        >>> nn.UpsamplingBilinear2d(scale_factor=2)
        UpsamplingBilinear2d(scale_factor=2.0, mode='bilinear')
    """

    def __init__(self, size=None, scale_factor=None):
        super().__init__(size, scale_factor, mode="bilinear", align_corners=True)
