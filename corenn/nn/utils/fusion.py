"""Folding an eval-mode batch norm into the convolution or linear layer before it (``torch.nn.utils.fusion``).

``bn(conv(x))`` with frozen statistics is one affine map per output channel, so the fused layer's weight is
``w * gamma / sqrt(var + eps)`` (per output channel) and its bias ``(b - mean) * gamma / sqrt(var + eps) + beta``.
"""
from __future__ import annotations

import copy

import corenn
from corenn.module.parameter import Parameter

__all__ = ["fuse_conv_bn_eval", "fuse_conv_bn_weights", "fuse_linear_bn_eval", "fuse_linear_bn_weights"]


def fuse_conv_bn_eval(conv, bn, transpose: bool = False):
    """A copy of ``conv`` (eval mode) with the eval-mode ``bn`` after it folded in; ``transpose`` for a
    transposed convolution (output channels on the weight's dim 1).

        >>> conv, bn = nn.Conv2d(3, 4, 3).eval(), nn.BatchNorm2d(4).eval()
        >>> fused = nn.utils.fuse_conv_bn_eval(conv, bn)
        >>> x = corenn.randn(1, 3, 5, 5)
        >>> bool((fused(x) - bn(conv(x))).abs().max() < 1e-5)
        True
    """
    if conv.training or bn.training:
        raise AssertionError("Fusion only for eval!")
    fused = copy.deepcopy(conv)
    if bn.running_mean is None or bn.running_var is None:
        raise AssertionError("bn.running_mean and bn.running_var must not be None")
    fused.weight, fused.bias = fuse_conv_bn_weights(fused.weight, fused.bias, bn.running_mean, bn.running_var, bn.eps,
                                                    bn.weight, bn.bias, transpose)
    return fused


def fuse_conv_bn_weights(conv_w, conv_b, bn_rm, bn_rv, bn_eps, bn_w, bn_b, transpose: bool = False):
    """The fused convolution's ``(weight, bias)`` as new Parameters (PyTorch's formula and dtypes).

        >>> w, b = nn.utils.fuse_conv_bn_weights(corenn.ones(2, 1, 1, 1), None, corenn.zeros(2), corenn.ones(2), 0.0,
        ...                                      None, None)
        >>> w.flatten().tolist(), b.tolist()
        ([1.0, 1.0], [0.0, 0.0])
    """
    weight_dtype = conv_w.dtype
    bias_dtype = conv_b.dtype if conv_b is not None else weight_dtype
    if conv_b is None:
        conv_b = corenn.zeros_like(bn_rm)
    if bn_w is None:
        bn_w = corenn.ones_like(bn_rm)
    if bn_b is None:
        bn_b = corenn.zeros_like(bn_rm)
    bn_var_rsqrt = corenn.rsqrt(bn_rv + bn_eps)
    shape = ([1, -1] if transpose else [-1, 1]) + [1] * (len(conv_w.shape) - 2)
    fused_w = (conv_w * (bn_w * bn_var_rsqrt).reshape(shape)).to(dtype=weight_dtype)
    fused_b = ((conv_b - bn_rm) * bn_var_rsqrt * bn_w + bn_b).to(dtype=bias_dtype)
    return Parameter(fused_w, conv_w.requires_grad), Parameter(fused_b, conv_b.requires_grad)


def fuse_linear_bn_eval(linear, bn):
    """A copy of ``linear`` (eval mode) with the eval-mode ``bn`` after it folded in.

        >>> linear, bn = nn.Linear(3, 4).eval(), nn.BatchNorm1d(4).eval()
        >>> nn.utils.fuse_linear_bn_eval(linear, bn).weight.shape
        corenn.Size([4, 3])
    """
    if linear.training or bn.training:
        raise AssertionError("Fusion only for eval!")
    fused = copy.deepcopy(linear)
    if linear.out_features != bn.num_features and bn.num_features != 1:
        raise AssertionError(f"To fuse, linear.out_features == bn.num_features or bn.num_features == 1, got "
                             f"linear.out_features={linear.out_features} and bn.num_features={bn.num_features}")
    if bn.running_mean is None or bn.running_var is None:
        raise AssertionError("bn.running_mean and bn.running_var must not be None")
    fused.weight, fused.bias = fuse_linear_bn_weights(fused.weight, fused.bias, bn.running_mean, bn.running_var,
                                                      bn.eps, bn.weight, bn.bias)
    return fused


def fuse_linear_bn_weights(linear_w, linear_b, bn_rm, bn_rv, bn_eps, bn_w, bn_b):
    """The fused linear layer's ``(weight, bias)`` as new Parameters (PyTorch's formula and dtypes).

        >>> w, b = nn.utils.fuse_linear_bn_weights(corenn.ones(2, 3), None, corenn.zeros(2), corenn.ones(2), 0.0,
        ...                                        corenn.ones(2), corenn.zeros(2))
        >>> w.shape, b.tolist()
        (corenn.Size([2, 3]), [0.0, 0.0])
    """
    weight_dtype = linear_w.dtype
    bias_dtype = linear_b.dtype if linear_b is not None else weight_dtype
    if linear_b is None:
        linear_b = corenn.zeros_like(bn_rm)
    bn_scale = bn_w * corenn.rsqrt(bn_rv + bn_eps)
    fused_w = linear_w * bn_scale.unsqueeze(-1).to(dtype=weight_dtype)
    fused_b = ((linear_b - bn_rm) * bn_scale + bn_b).to(dtype=bias_dtype)
    return Parameter(fused_w, linear_w.requires_grad), Parameter(fused_b, linear_b.requires_grad)
