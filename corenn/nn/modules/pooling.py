"""Pooling layers: MaxPool1d/2d/3d, AvgPool1d/2d/3d, AdaptiveAvgPool1d/2d/3d, AdaptiveMaxPool1d/2d/3d,
MaxUnpool1d/2d/3d, FractionalMaxPool2d/3d."""
from __future__ import annotations

from corenn.module.module import Module
from corenn.nn import functional as F


class _MaxPoolNd(Module):
    _n = 2

    def __init__(self, kernel_size, stride=None, padding=0, dilation=1, return_indices=False, ceil_mode=False):
        super().__init__()
        self.kernel_size = kernel_size
        self.stride = stride if stride is not None else kernel_size
        self.padding, self.dilation = padding, dilation
        self.return_indices, self.ceil_mode = return_indices, ceil_mode

    def forward(self, input):
        pool = getattr(F, f"max_pool{self._n}d")
        return pool(input, self.kernel_size, self.stride, self.padding, self.dilation, ceil_mode=self.ceil_mode,
                    return_indices=self.return_indices)

    def extra_repr(self) -> str:
        return (f"kernel_size={self.kernel_size}, stride={self.stride}, padding={self.padding}, "
                f"dilation={self.dilation}, ceil_mode={self.ceil_mode}")


class MaxPool1d(_MaxPoolNd):
    """Max over sliding windows of (N, C, L).

        >>> nn.MaxPool1d(2)
        MaxPool1d(kernel_size=2, stride=2, padding=0, dilation=1, ceil_mode=False)
    """

    _n = 1


class MaxPool2d(_MaxPoolNd):
    """Max over sliding windows of (N, C, H, W); 2x2 stride 2 is the fast path.

        >>> nn.MaxPool2d(2)(corenn.randn(1, 3, 8, 8)).shape
        corenn.Size([1, 3, 4, 4])
    """

    _n = 2


class AvgPool1d(Module):
    """Average over sliding windows of (N, C, L).

        >>> nn.AvgPool1d(2)
        AvgPool1d(kernel_size=(2,), stride=(2,), padding=(0,))
    """

    def __init__(self, kernel_size, stride=None, padding=0, ceil_mode=False, count_include_pad=True):
        super().__init__()
        single = (lambda v: (v,) if isinstance(v, int) else tuple(v))
        self.kernel_size = single(kernel_size)
        self.stride = single(stride if stride is not None else kernel_size)
        self.padding = single(padding)
        self.ceil_mode, self.count_include_pad = ceil_mode, count_include_pad

    def forward(self, input):
        return F.avg_pool1d(input, self.kernel_size, self.stride, self.padding, self.ceil_mode, self.count_include_pad)

    def extra_repr(self) -> str:
        return f"kernel_size={self.kernel_size}, stride={self.stride}, padding={self.padding}"


class AvgPool2d(Module):
    """Average over sliding windows of (N, C, H, W).

        >>> nn.AvgPool2d(2)
        AvgPool2d(kernel_size=2, stride=2, padding=0)
    """

    def __init__(self, kernel_size, stride=None, padding=0, ceil_mode=False, count_include_pad=True,
                 divisor_override=None):
        super().__init__()
        self.kernel_size = kernel_size
        self.stride = stride if stride is not None else kernel_size
        self.padding, self.ceil_mode = padding, ceil_mode
        self.count_include_pad, self.divisor_override = count_include_pad, divisor_override

    def forward(self, input):
        return F.avg_pool2d(input, self.kernel_size, self.stride, self.padding, self.ceil_mode, self.count_include_pad,
                            self.divisor_override)

    def extra_repr(self) -> str:
        return f"kernel_size={self.kernel_size}, stride={self.stride}, padding={self.padding}"


class AdaptiveAvgPool1d(Module):
    """Average pooling to a fixed output length.

        >>> nn.AdaptiveAvgPool1d(4)(corenn.randn(2, 3, 10)).shape
        corenn.Size([2, 3, 4])
    """

    def __init__(self, output_size):
        super().__init__()
        self.output_size = output_size

    def forward(self, input):
        return F.adaptive_avg_pool1d(input, self.output_size)

    def extra_repr(self) -> str:
        return f"output_size={self.output_size}"


class AdaptiveAvgPool2d(Module):
    """Average pooling to a fixed (H, W); ``None`` keeps that input size.

        >>> nn.AdaptiveAvgPool2d((1, 1))
        AdaptiveAvgPool2d(output_size=(1, 1))
    """

    def __init__(self, output_size):
        super().__init__()
        self.output_size = output_size

    def forward(self, input):
        return F.adaptive_avg_pool2d(input, self.output_size)

    def extra_repr(self) -> str:
        return f"output_size={self.output_size}"


class MaxPool3d(_MaxPoolNd):
    """Max over sliding windows of (N, C, D, H, W).

        >>> nn.MaxPool3d(2)(corenn.randn(1, 2, 4, 4, 4)).shape
        corenn.Size([1, 2, 2, 2, 2])
    """

    _n = 3


class AvgPool3d(AvgPool2d):
    """Average over sliding windows of (N, C, D, H, W).

        >>> nn.AvgPool3d(2)
        AvgPool3d(kernel_size=2, stride=2, padding=0)
    """

    def forward(self, input):
        return F.avg_pool3d(input, self.kernel_size, self.stride, self.padding, self.ceil_mode, self.count_include_pad,
                            self.divisor_override)


class AdaptiveAvgPool3d(AdaptiveAvgPool1d):
    """Average pooling to a fixed (D, H, W); ``None`` keeps that input size.

        >>> nn.AdaptiveAvgPool3d(1)(corenn.randn(1, 2, 3, 4, 5)).shape
        corenn.Size([1, 2, 1, 1, 1])
    """

    def forward(self, input):
        return F.adaptive_avg_pool3d(input, self.output_size)


class _AdaptiveMaxPoolNd(Module):
    _n = 2

    def __init__(self, output_size, return_indices=False):
        super().__init__()
        self.output_size, self.return_indices = output_size, return_indices

    def forward(self, input):
        return getattr(F, f"adaptive_max_pool{self._n}d")(input, self.output_size, self.return_indices)

    def extra_repr(self) -> str:
        return f"output_size={self.output_size}"


class AdaptiveMaxPool1d(_AdaptiveMaxPoolNd):
    """Max pooling to a fixed output length.

        >>> nn.AdaptiveMaxPool1d(4)(corenn.randn(2, 3, 10)).shape
        corenn.Size([2, 3, 4])
    """

    _n = 1


class AdaptiveMaxPool2d(_AdaptiveMaxPoolNd):
    """Max pooling to a fixed (H, W); ``None`` keeps that input size.

        >>> nn.AdaptiveMaxPool2d((5, 7))
        AdaptiveMaxPool2d(output_size=(5, 7))
    """

    _n = 2


class AdaptiveMaxPool3d(_AdaptiveMaxPoolNd):
    """Max pooling to a fixed (D, H, W).

        >>> nn.AdaptiveMaxPool3d(1)(corenn.randn(1, 2, 3, 4, 5)).shape
        corenn.Size([1, 2, 1, 1, 1])
    """

    _n = 3


def _ntuple(value, n):
    return tuple(value) if isinstance(value, (tuple, list)) else (value,) * n


class _MaxUnpoolNd(Module):
    _n = 0

    def __init__(self, kernel_size, stride=None, padding=0):
        super().__init__()
        self.kernel_size = _ntuple(kernel_size, self._n)
        self.stride = _ntuple(stride if stride is not None else kernel_size, self._n)
        self.padding = _ntuple(padding, self._n)

    def forward(self, input, indices, output_size=None):
        unpool = getattr(F, f"max_unpool{self._n}d")
        return unpool(input, indices, self.kernel_size, self.stride, self.padding, output_size)

    def extra_repr(self) -> str:
        return f"kernel_size={self.kernel_size}, stride={self.stride}, padding={self.padding}"


class MaxUnpool1d(_MaxUnpoolNd):
    """Partial inverse of :class:`MaxPool1d`: values back at their indices, zeros elsewhere.

        >>> nn.MaxUnpool1d(2)
        MaxUnpool1d(kernel_size=(2,), stride=(2,), padding=(0,))
    """

    _n = 1


class MaxUnpool2d(_MaxUnpoolNd):
    """Partial inverse of :class:`MaxPool2d`.

        >>> pool, unpool = nn.MaxPool2d(2, return_indices=True), nn.MaxUnpool2d(2)
        >>> unpool(*pool(corenn.randn(1, 1, 4, 4))).shape
        corenn.Size([1, 1, 4, 4])
    """

    _n = 2


class MaxUnpool3d(_MaxUnpoolNd):
    """Partial inverse of :class:`MaxPool3d`.

        >>> nn.MaxUnpool3d(2, stride=1)
        MaxUnpool3d(kernel_size=(2, 2, 2), stride=(1, 1, 1), padding=(0, 0, 0))
    """

    _n = 3


class _FractionalMaxPoolNd(Module):
    _n = 0

    def __init__(self, kernel_size, output_size=None, output_ratio=None, return_indices: bool = False,
                 _random_samples=None):
        super().__init__()
        n, name = self._n, type(self).__name__
        if n == 3 and any(k <= 0 for k in _ntuple(kernel_size, n)):
            raise ValueError(f"kernel_size must be greater than 0, but got {kernel_size}")
        self.kernel_size = _ntuple(kernel_size, n)
        self.return_indices = return_indices
        self.register_buffer("_random_samples", _random_samples)
        self.output_size = _ntuple(output_size, n) if output_size is not None else None
        self.output_ratio = _ntuple(output_ratio, n) if output_ratio is not None else None
        if output_size is None and output_ratio is None:
            raise ValueError(f"{name} requires specifying either an output size, or a pooling ratio")
        if output_size is not None and output_ratio is not None:
            raise ValueError("only one of output_size and output_ratio may be specified")
        if self.output_ratio is not None and not all(0 < r < 1 for r in self.output_ratio):
            raise ValueError(f"output_ratio must be between 0 and 1 (got {output_ratio})")

    def forward(self, input):
        pool = getattr(F, f"fractional_max_pool{self._n}d")
        return pool(input, self.kernel_size, self.output_size, self.output_ratio, self.return_indices,
                    _random_samples=self._random_samples)


class FractionalMaxPool2d(_FractionalMaxPoolNd):
    """Max pooling over windows at pseudo-random starts (Graham 2014) to a fixed size or ratio.

        >>> nn.FractionalMaxPool2d(3, output_ratio=0.5)(corenn.randn(1, 2, 10, 10)).shape
        corenn.Size([1, 2, 5, 5])
    """

    _n = 2


class FractionalMaxPool3d(_FractionalMaxPoolNd):
    """:class:`FractionalMaxPool2d` over (N, C, T, H, W).

        >>> nn.FractionalMaxPool3d(2, output_size=(3, 3, 3))(corenn.randn(1, 1, 6, 6, 6)).shape
        corenn.Size([1, 1, 3, 3, 3])
    """

    _n = 3
