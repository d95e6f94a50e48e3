"""Activation kernels beyond the core's relu/gelu/silu/sigmoid/tanh/softplus.

leaky_relu, elu (serves selu and celu through ``scale``/``input_scale``), hardtanh
(serves relu6), hardswish, hardsigmoid, mish, logsigmoid, softsign.
"""
from __future__ import annotations


from corenn._argcheck import check_number
from corenn.ops._kernel import Op, check_tensor, kernel, run, to_floating


@kernel("leaky_relu", "LeakyReluBackward0")
class LeakyRelu(Op):
    @staticmethod
    def forward(ctx, a, negative_slope=0.01):
        ctx.save_for_backward(a)
        ctx.negative_slope = negative_slope
        return ctx.xp.where(a > 0, a, a * negative_slope).astype(a.dtype, copy=False)

    @staticmethod
    def backward(ctx, grad):
        (a,) = ctx.saved
        return ctx.xp.where(a > 0, grad, grad * ctx.negative_slope).astype(grad.dtype, copy=False)


@kernel("elu", "EluBackward0")
class Elu(Op):
    """``scale * (x if x > 0 else alpha * (exp(x * input_scale) - 1))``."""

    @staticmethod
    def forward(ctx, a, alpha=1.0, scale=1.0, input_scale=1.0):
        xp = ctx.xp
        negative = alpha * xp.expm1(xp.minimum(a, 0) * input_scale)  # min(): no overflow warning for large x
        out = (scale * xp.where(a > 0, a, negative)).astype(a.dtype, copy=False)
        ctx.save_for_backward(a, negative)
        ctx.params = (alpha, scale, input_scale)
        return out

    @staticmethod
    def backward(ctx, grad):
        a, negative = ctx.saved
        alpha, scale, input_scale = ctx.params
        slope = ctx.xp.where(a > 0, scale, scale * input_scale * (negative + alpha))
        return (grad * slope).astype(grad.dtype, copy=False)


@kernel("hardtanh", "HardtanhBackward0")
class Hardtanh(Op):
    @staticmethod
    def forward(ctx, a, min_val=-1.0, max_val=1.0):
        ctx.save_for_backward(a)
        ctx.bounds = (min_val, max_val)
        return ctx.xp.clip(a, min_val, max_val).astype(a.dtype, copy=False)

    @staticmethod
    def backward(ctx, grad):
        (a,) = ctx.saved
        low, high = ctx.bounds
        return grad * ((a > low) & (a < high))  # zero at the bounds, as PyTorch


@kernel("hardswish", "HardswishBackward0")
class Hardswish(Op):
    @staticmethod
    def forward(ctx, a):
        ctx.save_for_backward(a)
        return (a * ctx.xp.clip(a + 3, 0, 6) / 6).astype(a.dtype, copy=False)

    @staticmethod
    def backward(ctx, grad):
        (a,) = ctx.saved
        xp = ctx.xp
        slope = xp.where(a < -3, 0, xp.where(a <= 3, a / 3 + 0.5, 1))
        return (grad * slope).astype(grad.dtype, copy=False)


@kernel("hardsigmoid", "HardsigmoidBackward0")
class Hardsigmoid(Op):
    @staticmethod
    def forward(ctx, a):
        ctx.save_for_backward(a)
        return (ctx.xp.clip(a + 3, 0, 6) / 6).astype(a.dtype, copy=False)

    @staticmethod
    def backward(ctx, grad):
        (a,) = ctx.saved
        return (grad * (((a > -3) & (a < 3)) / 6)).astype(grad.dtype, copy=False)


@kernel("mish", "MishBackward0")
class Mish(Op):
    """``x * tanh(softplus(x))``."""

    @staticmethod
    def forward(ctx, a):
        xp = ctx.xp
        tanh_sp = xp.tanh(xp.logaddexp(0, a))
        ctx.save_for_backward(a, tanh_sp)
        return (a * tanh_sp).astype(a.dtype, copy=False)

    @staticmethod
    def backward(ctx, grad):
        a, tanh_sp = ctx.saved
        xp = ctx.xp
        sig = xp.exp(-xp.logaddexp(0, -a))
        return (grad * (tanh_sp + a * (1 - tanh_sp * tanh_sp) * sig)).astype(grad.dtype, copy=False)


@kernel("log_sigmoid", "LogSigmoidBackward0")
class LogSigmoid(Op):
    @staticmethod
    def forward(ctx, a):
        xp = ctx.xp
        ctx.save_for_backward(a)
        return (-xp.logaddexp(0, -a)).astype(a.dtype, copy=False)

    @staticmethod
    def backward(ctx, grad):
        (a,) = ctx.saved
        xp = ctx.xp
        return (grad * xp.exp(-xp.logaddexp(0, a))).astype(grad.dtype, copy=False)  # sigmoid(-x)


@kernel("softsign", "SoftsignBackward0")
class Softsign(Op):
    @staticmethod
    def forward(ctx, a):
        denominator = 1 + ctx.xp.abs(a)
        ctx.save_for_backward(denominator)
        return a / denominator

    @staticmethod
    def backward(ctx, grad):
        (denominator,) = ctx.saved
        return grad / (denominator * denominator)


# ---------------------------------------------------------------------------------------------------------
# Front ends (also ``corenn.nn.functional.<name>``)
# ---------------------------------------------------------------------------------------------------------

_SELU_ALPHA = 1.6732632423543772848170429916717
_SELU_SCALE = 1.0507009873554804934193349852946


def leaky_relu(input, negative_slope=0.01):
    """``x`` for positive ``x``, else ``negative_slope * x``.

        >>> corenn.leaky_relu(corenn.tensor([-1., 2.]), 0.1).tolist()
        [-0.1, 2.0]
    """
    check_tensor(input, "input", "leaky_relu")
    return run("leaky_relu", input, negative_slope=float(check_number(negative_slope, "negative_slope")))


def elu(input, alpha=1.0):
    """``x`` for positive ``x``, else ``alpha * (exp(x) - 1)``.

        >>> round(corenn.elu(corenn.tensor([-1.])).item(), 4)
        -0.6321
    """
    check_tensor(input, "input", "elu")
    return run("elu", to_floating(input), alpha=float(check_number(alpha, "alpha")))


def selu(input):
    """Self-normalising ELU: ``scale * elu(x, alpha)`` with the constants of Klambauer et al.

        >>> corenn.selu(corenn.tensor([0., 1.])).tolist()[0]
        0.0
    """
    check_tensor(input, "input", "selu")
    return run("elu", to_floating(input), alpha=_SELU_ALPHA, scale=_SELU_SCALE)


def celu(input, alpha=1.0):
    """``max(0, x) + min(0, alpha * (exp(x / alpha) - 1))``.

        >>> corenn.celu(corenn.tensor([2.])).item()
        2.0
    """
    check_tensor(input, "input", "celu")
    alpha = check_number(alpha, "alpha")
    if alpha == 0:
        raise RuntimeError("ZeroDivisionError: celu: alpha must not be 0")
    return run("elu", to_floating(input), alpha=float(alpha), input_scale=1.0 / alpha)


def hardtanh(input, min_val=-1.0, max_val=1.0):
    """Clamp to ``[min_val, max_val]`` (gradient zero outside and at the bounds).

        >>> corenn.hardtanh(corenn.tensor([-3., 0.5, 3.])).tolist()
        [-1.0, 0.5, 1.0]
    """
    check_tensor(input, "input", "hardtanh")
    min_val, max_val = check_number(min_val, "min_val"), check_number(max_val, "max_val")
    if min_val > max_val:
        raise ValueError(f"hardtanh: min_val ({min_val}) cannot be greater than max_val ({max_val})")
    return run("hardtanh", input, min_val=min_val, max_val=max_val)


def relu6(input):
    """``min(max(0, x), 6)``.

        >>> corenn.relu6(corenn.tensor([-1., 7.])).tolist()
        [0.0, 6.0]
    """
    return hardtanh(input, 0.0, 6.0)


def hardswish(input):
    """``x * relu6(x + 3) / 6``.

        >>> corenn.hardswish(corenn.tensor([3.])).item()
        3.0
    """
    check_tensor(input, "input", "hardswish")
    return run("hardswish", to_floating(input))


def hardsigmoid(input):
    """``relu6(x + 3) / 6``.

        >>> corenn.hardsigmoid(corenn.tensor([0.])).item()
        0.5
    """
    check_tensor(input, "input", "hardsigmoid")
    return run("hardsigmoid", to_floating(input))


def mish(input):
    """``x * tanh(softplus(x))``.

        >>> corenn.mish(corenn.tensor([0.])).item()
        0.0
    """
    check_tensor(input, "input", "mish")
    return run("mish", to_floating(input))


def logsigmoid(input):
    """``log(sigmoid(x))`` without overflow for large negative ``x``.

        >>> corenn.logsigmoid(corenn.tensor([-1000.])).item()
        -1000.0
    """
    check_tensor(input, "input", "logsigmoid")
    return run("log_sigmoid", to_floating(input))


def softsign(input):
    """``x / (1 + |x|)``.

        >>> corenn.softsign(corenn.tensor([1.])).item()
        0.5
    """
    check_tensor(input, "input", "softsign")
    return run("softsign", to_floating(input))


def tanhshrink(input):
    """``x - tanh(x)``.

        >>> corenn.tanhshrink(corenn.tensor([0.])).item()
        0.0
    """
    check_tensor(input, "input", "tanhshrink")
    return input - input.tanh()



# The public op functions of this file (what ``from corenn.ops import *`` re-exports as ``corenn.X``).
__all__ = [name for name, value in list(globals().items())
           if not name.startswith("_") and callable(value) and not isinstance(value, type)
           and getattr(value, "__module__", None) == __name__]
