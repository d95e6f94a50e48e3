"""Identity, Linear and Bilinear layers."""
from __future__ import annotations

import math

import corenn
from corenn.module.module import Module
from corenn.module.parameter import Parameter
from corenn.nn import functional as F, init


class Identity(Module):
    """Returns its input unchanged; any constructor arguments are ignored.

        >>> nn.Identity()(corenn.ones(2)).tolist()
        [1.0, 1.0]
    """

    def __init__(self, *args, **kwargs):
        super().__init__()

    def forward(self, input):
        return input


class Linear(Module):
    """``y = x @ weight.T + bias``; weight (out, in) kaiming-uniform, bias uniform(+-1/sqrt(in)), as PyTorch.

        >>> layer = nn.Linear(64, 32)
        >>> layer
        Linear(in_features=64, out_features=32, bias=True)
        >>> layer(corenn.randn(8, 64)).shape
        corenn.Size([8, 32])
    """

    def __init__(self, in_features: int, out_features: int, bias: bool = True, device=None, dtype=None):
        super().__init__()
        self.in_features = in_features
        self.out_features = out_features
        self.weight = Parameter(corenn.empty((out_features, in_features), device=device, dtype=dtype))
        if bias:
            self.bias = Parameter(corenn.empty(out_features, device=device, dtype=dtype))
        else:
            self.register_parameter("bias", None)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        init.kaiming_uniform_(self.weight, a=math.sqrt(5))
        if self.bias is not None:
            fan_in, _ = init._calculate_fan_in_and_fan_out(self.weight)
            bound = 1 / math.sqrt(fan_in) if fan_in > 0 else 0
            init.uniform_(self.bias, -bound, bound)

    def forward(self, input):
        return F.linear(input, self.weight, self.bias)

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, bias={self.bias is not None}"


class Bilinear(Module):
    """``y_o = x1 @ weight[o] @ x2 + bias_o`` with weight (out, in1, in2).

        >>> nn.Bilinear(3, 4, 5)(corenn.randn(2, 3), corenn.randn(2, 4)).shape
        corenn.Size([2, 5])
    """

    def __init__(self, in1_features: int, in2_features: int, out_features: int, bias: bool = True, device=None,
                 dtype=None):
        super().__init__()
        self.in1_features, self.in2_features, self.out_features = in1_features, in2_features, out_features
        self.weight = Parameter(corenn.empty((out_features, in1_features, in2_features), device=device, dtype=dtype))
        if bias:
            self.bias = Parameter(corenn.empty(out_features, device=device, dtype=dtype))
        else:
            self.register_parameter("bias", None)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        bound = 1 / math.sqrt(self.weight.shape[1])
        init.uniform_(self.weight, -bound, bound)
        if self.bias is not None:
            init.uniform_(self.bias, -bound, bound)

    def forward(self, input1, input2):
        return F.bilinear(input1, input2, self.weight, self.bias)

    def extra_repr(self) -> str:
        return (f"in1_features={self.in1_features}, in2_features={self.in2_features}, "
                f"out_features={self.out_features}, bias={self.bias is not None}")
