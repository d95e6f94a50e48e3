"""Fold (col2im) and Unfold (im2col): sliding blocks of an image to columns and back."""
from __future__ import annotations

from corenn.module.module import Module
from corenn.nn import functional as F


class Fold(Module):
    """Sum (N, C * prod(kernel_size), L) columns back into an (N, C, *output_size) image.

        >>> nn.Fold((4, 4), 2)(corenn.ones(1, 4, 9)).shape
        corenn.Size([1, 1, 4, 4])
    """

    def __init__(self, output_size, kernel_size, dilation=1, padding=0, stride=1):
        super().__init__()
        self.output_size, self.kernel_size = output_size, kernel_size
        self.dilation, self.padding, self.stride = dilation, padding, stride

    def forward(self, input):
        return F.fold(input, self.output_size, self.kernel_size, self.dilation, self.padding, self.stride)

    def extra_repr(self) -> str:
        return (f"output_size={self.output_size}, kernel_size={self.kernel_size}, dilation={self.dilation}, "
                f"padding={self.padding}, stride={self.stride}")


class Unfold(Module):
    """Extract sliding blocks of (N, C, H, W) input as (N, C * prod(kernel_size), L) columns.

        >>> nn.Unfold(2)(corenn.ones(1, 1, 4, 4)).shape
        corenn.Size([1, 4, 9])
    """

    def __init__(self, kernel_size, dilation=1, padding=0, stride=1):
        super().__init__()
        self.kernel_size, self.dilation, self.padding, self.stride = kernel_size, dilation, padding, stride

    def forward(self, input):
        return F.unfold(input, self.kernel_size, self.dilation, self.padding, self.stride)

    def extra_repr(self) -> str:
        return (f"kernel_size={self.kernel_size}, dilation={self.dilation}, padding={self.padding}, "
                f"stride={self.stride}")
