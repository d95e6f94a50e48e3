"""Padding layers: Zero/Constant/Reflection/Replication/Circular pads in 1, 2 and 3 dimensions.

Each holds its ``padding`` as PyTorch's ``(left, right[, top, bottom[, front, back]])`` tuple and
calls ``F.pad``; an int pads every side by that much.
"""
from __future__ import annotations

from corenn.module.module import Module
from corenn.nn import functional as F


def _padding_tuple(padding, dims, layer):
    if isinstance(padding, bool) or not isinstance(padding, (int, tuple, list)):
        raise TypeError(f"{layer}: padding must be an int or a tuple of {2 * dims} ints, got "
                        f"{type(padding).__name__}")
    if isinstance(padding, int):
        return (padding,) * (2 * dims)
    if len(padding) != 2 * dims:
        raise ValueError(f"{layer}: padding must be an int or a tuple of {2 * dims} ints, got {tuple(padding)}")
    return tuple(padding)


class _PadNd(Module):
    _dims = 1
    _mode = "constant"

    def __init__(self, padding):
        super().__init__()
        self.padding = _padding_tuple(padding, self._dims, type(self).__name__)

    def _check_input_dim(self, input):
        # the spatial dims plus a channel dim, and an optional batch dim (PyTorch's wording)
        if input.ndim not in (self._dims + 1, self._dims + 2):
            raise ValueError(f"{type(self).__name__}: expected {self._dims + 1}D or {self._dims + 2}D input "
                             f"(got {input.ndim}D input)")

    def forward(self, input):
        if self._mode != "constant":
            self._check_input_dim(input)
        return F.pad(input, self.padding, self._mode)

    def extra_repr(self) -> str:
        return f"{self.padding}"


class _ConstantPadNd(_PadNd):
    def __init__(self, padding, value: float):
        super().__init__(padding)
        self.value = value

    def forward(self, input):
        return F.pad(input, self.padding, "constant", self.value)

    def extra_repr(self) -> str:
        return f"padding={self.padding}, value={self.value}"


class ConstantPad1d(_ConstantPadNd):
    """Pad the last dim with ``value``.

        >>> nn.ConstantPad1d(1, 3.5)(corenn.zeros(1, 2)).tolist()
        [[3.5, 0.0, 0.0, 3.5]]
    """
    _dims = 1


class ConstantPad2d(_ConstantPadNd):
    """Pad the last 2 dims with ``value``; ``padding = (left, right, top, bottom)``.

        >>> nn.ConstantPad2d((1, 0, 0, 1), 1.)(corenn.zeros(1, 1, 1)).tolist()
        [[[1.0, 0.0], [1.0, 1.0]]]
    """
    _dims = 2


class ConstantPad3d(_ConstantPadNd):
    """Pad the last 3 dims with ``value``.

        >>> nn.ConstantPad3d(1, 0.)(corenn.zeros(1, 1, 1, 1)).shape
        corenn.Size([1, 3, 3, 3])
    """
    _dims = 3


class _ZeroPadNd(_ConstantPadNd):
    def __init__(self, padding):
        super().__init__(padding, 0.0)

    def extra_repr(self) -> str:
        return f"{self.padding}"


class ZeroPad1d(_ZeroPadNd):
    """Pad the last dim with zeros.

        >>> nn.ZeroPad1d((1, 2))(corenn.ones(1, 1)).tolist()
        [[0.0, 1.0, 0.0, 0.0]]
    """
    _dims = 1


class ZeroPad2d(_ZeroPadNd):
    """Pad the last 2 dims with zeros.

        >>> nn.ZeroPad2d(1)(corenn.ones(1, 1, 1)).shape
        corenn.Size([1, 3, 3])
    """
    _dims = 2


class ZeroPad3d(_ZeroPadNd):
    """Pad the last 3 dims with zeros.

        >>> nn.ZeroPad3d(1)(corenn.ones(1, 1, 1, 1)).shape
        corenn.Size([1, 3, 3, 3])
    """
    _dims = 3


class ReflectionPad1d(_PadNd):
    """Pad the last dim by reflecting the input at its edges (the edge itself is not repeated).

        >>> nn.ReflectionPad1d(2)(corenn.tensor([[0., 1., 2.]])).tolist()
        [[2.0, 1.0, 0.0, 1.0, 2.0, 1.0, 0.0]]
    """
    _dims, _mode = 1, "reflect"


class ReflectionPad2d(_PadNd):
    """Reflect at the edges of the last 2 dims.

        >>> nn.ReflectionPad2d(1)(corenn.ones(1, 2, 2)).shape
        corenn.Size([1, 4, 4])
    """
    _dims, _mode = 2, "reflect"


class ReflectionPad3d(_PadNd):
    """Reflect at the edges of the last 3 dims.

        >>> nn.ReflectionPad3d(1)(corenn.ones(1, 1, 2, 2, 2)).shape
        corenn.Size([1, 1, 4, 4, 4])
    """
    _dims, _mode = 3, "reflect"


class ReplicationPad1d(_PadNd):
    """Pad the last dim by repeating its edge values.

        >>> nn.ReplicationPad1d(1)(corenn.tensor([[0., 1.]])).tolist()
        [[0.0, 0.0, 1.0, 1.0]]
    """
    _dims, _mode = 1, "replicate"


class ReplicationPad2d(_PadNd):
    """Repeat the edge values of the last 2 dims.

        >>> nn.ReplicationPad2d(1)(corenn.ones(1, 2, 2)).shape
        corenn.Size([1, 4, 4])
    """
    _dims, _mode = 2, "replicate"


class ReplicationPad3d(_PadNd):
    """Repeat the edge values of the last 3 dims.

        >>> nn.ReplicationPad3d(1)(corenn.ones(1, 1, 1, 1, 1)).shape
        corenn.Size([1, 1, 3, 3, 3])
    """
    _dims, _mode = 3, "replicate"


class CircularPad1d(_PadNd):
    """Pad the last dim by wrapping around (periodic boundary).

        >>> nn.CircularPad1d(1)(corenn.tensor([[0., 1., 2.]])).tolist()
        [[2.0, 0.0, 1.0, 2.0, 0.0]]
    """
    _dims, _mode = 1, "circular"


class CircularPad2d(_PadNd):
    """Wrap around the last 2 dims.

        >>> nn.CircularPad2d(1)(corenn.ones(1, 2, 2)).shape
        corenn.Size([1, 4, 4])
    """
    _dims, _mode = 2, "circular"


class CircularPad3d(_PadNd):
    """Wrap around the last 3 dims.

        >>> nn.CircularPad3d(1)(corenn.ones(1, 1, 2, 2, 2)).shape
        corenn.Size([1, 1, 4, 4, 4])
    """
    _dims, _mode = 3, "circular"
