"""Convolution layers: Conv1d/2d/3d, ConvTranspose1d/2d/3d."""
from __future__ import annotations

import math
import numbers

import corenn
from corenn.module.module import Module
from corenn.module.parameter import Parameter
from corenn.nn import functional as F, init

_PADDING_MODES = ("zeros", "reflect", "replicate", "circular")


def _ntuple(value, n):
    if isinstance(value, numbers.Integral):
        return (int(value),) * n
    value = tuple(value)
    return value * n if len(value) == 1 else value


class _ConvNd(Module):
    _n = 2
    _transposed = False

    def __init__(self, in_channels, out_channels, kernel_size, stride=1, padding=0, dilation=1, groups=1,
                 bias=True, padding_mode="zeros", device=None, dtype=None, output_padding=0):
        super().__init__()
        n = self._n
        if groups <= 0:
            raise ValueError("groups must be a positive integer")
        if in_channels % groups != 0:
            raise ValueError("in_channels must be divisible by groups")
        if out_channels % groups != 0:
            raise ValueError("out_channels must be divisible by groups")
        if isinstance(padding, str):
            if padding not in ("same", "valid"):
                raise ValueError(f"Invalid padding string {padding!r}, should be one of {{'valid', 'same'}}")
            if padding == "same" and any(s != 1 for s in _ntuple(stride, n)):
                raise ValueError("padding='same' is not supported for strided convolutions")
        if padding_mode not in _PADDING_MODES:
            raise ValueError(f"padding_mode must be one of {list(_PADDING_MODES)}, but got padding_mode="
                             f"'{padding_mode}'")
        if self._transposed and padding_mode != "zeros":
            raise ValueError(f'Only "zeros" padding mode is supported for {type(self).__name__}')
        self.in_channels, self.out_channels = in_channels, out_channels
        self.kernel_size = _ntuple(kernel_size, n)
        self.stride = _ntuple(stride, n)
        self.padding = padding if isinstance(padding, str) else _ntuple(padding, n)
        self.dilation = _ntuple(dilation, n)
        self.transposed = self._transposed
        self.output_padding = _ntuple(output_padding, n)
        self.groups, self.padding_mode = groups, padding_mode
        if self._transposed:
            shape = (in_channels, out_channels // groups) + self.kernel_size
        else:
            shape = (out_channels, in_channels // groups) + self.kernel_size
        self.weight = Parameter(corenn.empty(shape, device=device, dtype=dtype))
        if bias:
            self.bias = Parameter(corenn.empty(out_channels, device=device, dtype=dtype))
        else:
            self.register_parameter("bias", None)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        init.kaiming_uniform_(self.weight, a=math.sqrt(5))
        if self.bias is not None:
            fan_in, _ = init._calculate_fan_in_and_fan_out(self.weight)
            if fan_in != 0:
                bound = 1 / math.sqrt(fan_in)
                init.uniform_(self.bias, -bound, bound)

    def extra_repr(self) -> str:
        s = f"{self.in_channels}, {self.out_channels}, kernel_size={self.kernel_size}, stride={self.stride}"
        if self.padding != (0,) * self._n:
            s += f", padding={self.padding}"
        if self.dilation != (1,) * self._n:
            s += f", dilation={self.dilation}"
        if self.output_padding != (0,) * self._n:
            s += f", output_padding={self.output_padding}"
        if self.groups != 1:
            s += f", groups={self.groups}"
        if self.bias is None:
            s += ", bias=False"
        if self.padding_mode != "zeros":
            s += f", padding_mode={self.padding_mode}"
        return s


class _Conv(_ConvNd):
    def __init__(self, in_channels, out_channels, kernel_size, stride=1, padding=0, dilation=1, groups=1,
                 bias=True, padding_mode="zeros", device=None, dtype=None):
        super().__init__(in_channels, out_channels, kernel_size, stride, padding, dilation, groups, bias,
                         padding_mode, device, dtype)

    def _explicit_padding(self):
        """``F.pad`` widths (last dim first) for a non-zeros padding mode."""
        if self.padding == "valid":
            pairs = [(0, 0)] * self._n
        elif self.padding == "same":
            pairs = [(d * (k - 1) // 2, d * (k - 1) - d * (k - 1) // 2)
                     for d, k in zip(self.dilation, self.kernel_size)]
        else:
            pairs = [(p, p) for p in self.padding]
        return [w for pair in reversed(pairs) for w in pair]

    def forward(self, input):
        conv = getattr(F, f"conv{self._n}d")
        if self.padding_mode != "zeros":
            padded = F.pad(input, self._explicit_padding(), mode=self.padding_mode)
            return conv(padded, self.weight, self.bias, self.stride, 0, self.dilation, self.groups)
        return conv(input, self.weight, self.bias, self.stride, self.padding, self.dilation, self.groups)


class Conv1d(_Conv):
    """1-d convolution over (N, C_in, L); weight (C_out, C_in/groups, k).

        >>> nn.Conv1d(4, 8, 3, padding=1)
        Conv1d(4, 8, kernel_size=(3,), stride=(1,), padding=(1,))
    """

    _n = 1


class Conv2d(_Conv):
    """2-d convolution over (N, C_in, H, W); weight (C_out, C_in/groups, kh, kw).

        >>> nn.Conv2d(1, 16, 3, padding=1)
        Conv2d(1, 16, kernel_size=(3, 3), stride=(1, 1), padding=(1, 1))
        >>> nn.Conv2d(1, 16, 3, padding=1)(corenn.randn(2, 1, 28, 28)).shape
        corenn.Size([2, 16, 28, 28])
    """

    _n = 2


class Conv3d(_Conv):
    """3-d convolution over (N, C_in, D, H, W); weight (C_out, C_in/groups, kd, kh, kw).

        >>> nn.Conv3d(1, 4, 3, padding=1)(corenn.randn(1, 1, 4, 4, 4)).shape
        corenn.Size([1, 4, 4, 4, 4])
    """

    _n = 3


class _ConvTranspose(_ConvNd):
    _transposed = True

    def __init__(self, in_channels, out_channels, kernel_size, stride=1, padding=0, output_padding=0, groups=1,
                 bias=True, dilation=1, padding_mode="zeros", device=None, dtype=None):
        if isinstance(padding, str):
            raise ValueError(f"{type(self).__name__} does not support string padding ({padding!r})")
        super().__init__(in_channels, out_channels, kernel_size, stride, padding, dilation, groups, bias,
                         padding_mode, device, dtype, output_padding)

    def _output_padding(self, input, output_size):
        if output_size is None:
            return self.output_padding
        n = self._n
        output_size = list(output_size)[-n:]
        if len(output_size) != n:
            raise ValueError(f"ConvTranspose{n}D: for {input.ndim}D input, output_size must have {n} or {n + 2} "
                             f"elements (got {len(output_size)})")
        result = []
        for size, wanted, s, p, d, k in zip(input.shape[-n:], output_size, self.stride, self.padding, self.dilation,
                                            self.kernel_size):
            smallest = (size - 1) * s - 2 * p + d * (k - 1) + 1
            if not smallest <= wanted < smallest + s:
                raise ValueError(f"requested an output size of {output_size}, but valid sizes range from "
                                 f"{smallest} to {smallest + s - 1} (for an input of {list(input.shape[-n:])})")
            result.append(wanted - smallest)
        return tuple(result)

    def forward(self, input, output_size=None):
        conv = getattr(F, f"conv_transpose{self._n}d")
        return conv(input, self.weight, self.bias, self.stride, self.padding, self._output_padding(input, output_size),
                    self.groups, self.dilation)


class ConvTranspose1d(_ConvTranspose):
    """1-d transposed convolution; weight (C_in, C_out/groups, k).

        >>> nn.ConvTranspose1d(4, 2, 3, stride=2)(corenn.randn(1, 4, 5)).shape
        corenn.Size([1, 2, 11])
    """

    _n = 1


class ConvTranspose2d(_ConvTranspose):
    """2-d transposed convolution (the gradient of Conv2d); weight (C_in, C_out/groups, kh, kw).

        >>> nn.ConvTranspose2d(16, 8, 2, stride=2)
        ConvTranspose2d(16, 8, kernel_size=(2, 2), stride=(2, 2))
    """

    _n = 2


class ConvTranspose3d(_ConvTranspose):
    """3-d transposed convolution (the gradient of Conv3d); weight (C_in, C_out/groups, kd, kh, kw).

        >>> nn.ConvTranspose3d(4, 2, 2, stride=2)(corenn.randn(1, 4, 2, 2, 2)).shape
        corenn.Size([1, 2, 4, 4, 4])
    """

    _n = 3
