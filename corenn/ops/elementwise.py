"""Elementwise ops: arithmetic, comparisons, logic and math functions.

Each kernel's forward and backward sit together and use ``ctx.xp``, the array
module of the inputs. Binary kernels take an array or a Python scalar as their
second operand; broadcasting gradients are reduced back with ``sum_to_shape``.
"""
from __future__ import annotations

import math
from collections import namedtuple

from corenn import _dtype
from corenn._argcheck import check_number, named, not_tensors
from corenn.ops._kernel import (Op, _coerce, broadcast_shapes, is_scalar, kernel, promote_pair, public_function, run, run1,
                                run2, sum_to_shape, to_floating)
from corenn.tensor.tensor import Tensor


def _shape(x):
    return getattr(x, "shape", None)


# ---------------------------------------------------------------------------------------------------------
# Arithmetic
# ---------------------------------------------------------------------------------------------------------

@kernel("add", "AddBackward0")
class Add(Op):
    @staticmethod
    def forward(ctx, a, b, alpha=1):
        ctx.shapes = (a.shape, _shape(b), alpha)
        return a + b if alpha == 1 else a + alpha * b

    @staticmethod
    def backward(ctx, grad):
        a_shape, b_shape, alpha = ctx.shapes
        grad_b = None
        if ctx.needs_input_grad[1]:
            grad_b = sum_to_shape(grad if alpha == 1 else grad * alpha, b_shape)
        return grad if grad.shape == a_shape else sum_to_shape(grad, a_shape), grad_b


@kernel("sub", "SubBackward0")
class Sub(Op):
    @staticmethod
    def forward(ctx, a, b, alpha=1):
        ctx.a_shape, ctx.b_shape, ctx.alpha = a.shape, _shape(b), alpha
        return a - b if alpha == 1 else a - alpha * b

    @staticmethod
    def backward(ctx, grad):
        grad_b = None
        if ctx.b_shape is not None:
            grad_b = sum_to_shape(-grad if ctx.alpha == 1 else grad * -ctx.alpha, ctx.b_shape)
        return sum_to_shape(grad, ctx.a_shape), grad_b


@kernel("mul", "MulBackward0")
class Mul(Op):
    @staticmethod
    def forward(ctx, a, b):
        ctx.save_for_backward(a, b)
        return a * b

    @staticmethod
    def backward(ctx, grad):
        a, b = ctx.saved
        need_a, need_b = ctx.needs_input_grad
        grad_a = grad_b = None
        if need_a:
            grad_a = grad * b
            if grad_a.shape != a.shape:
                grad_a = sum_to_shape(grad_a, a.shape)
        if need_b:
            grad_b = grad * a
            if grad_b.shape != b.shape:
                grad_b = sum_to_shape(grad_b, b.shape)
        return grad_a, grad_b


@kernel("div", "DivBackward0")
class Div(Op):
    @staticmethod
    def forward(ctx, a, b):
        ctx.save_for_backward(a, b)
        return a / b

    @staticmethod
    def backward(ctx, grad):
        a, b = ctx.saved
        b_shape = _shape(b)
        grad_a = sum_to_shape(grad / b, a.shape)
        if b_shape is None:
            return grad_a, None
        return grad_a, sum_to_shape(-grad * a / (b * b), b_shape)


@kernel("floor_divide")
class FloorDivide(Op):
    differentiable = False

    @staticmethod
    def forward(ctx, a, b):
        _check_integer_divisor(ctx.xp, a, b)
        return ctx.xp.floor_divide(a, b)


def _check_integer_divisor(xp, a, b, op="div_floor_cpu"):
    if a.dtype.kind == "b":
        raise NotImplementedError(f"\"{op}\" not implemented for 'Bool'")
    # numpy quietly gives 0 for an integer division by zero; PyTorch raises.
    if a.dtype.kind in "iu" and (xp.asarray(b) == 0).any().item():
        raise RuntimeError("ZeroDivisionError")


@kernel("trunc_divide")
class TruncDivide(Op):
    differentiable = False

    @staticmethod
    def forward(ctx, a, b):
        xp = ctx.xp
        if a.dtype.kind == "f":
            return xp.trunc(a / b)
        _check_integer_divisor(xp, a, b)
        quotient = xp.floor_divide(a, b)  # integers: round toward zero, not toward -inf
        return quotient + ((quotient < 0) & (quotient * b != a))


@kernel("remainder", "RemainderBackward0")
class Remainder(Op):
    @staticmethod
    def forward(ctx, a, b):
        ctx.save_for_backward(a, b)
        _check_integer_divisor(ctx.xp, a, b, "remainder_cpu")
        return ctx.xp.remainder(a, b)

    @staticmethod
    def backward(ctx, grad):
        a, b = ctx.saved
        b_shape = _shape(b)
        grad_b = None if b_shape is None else sum_to_shape(-grad * ctx.xp.floor_divide(a, b), b_shape)
        return sum_to_shape(grad, a.shape), grad_b


@kernel("fmod", "FmodBackward0")
class Fmod(Op):
    @staticmethod
    def forward(ctx, a, b):
        ctx.save_for_backward(a, b)
        _check_integer_divisor(ctx.xp, a, b, "fmod_cpu")
        return ctx.xp.fmod(a, b)

    @staticmethod
    def backward(ctx, grad):
        a, b = ctx.saved
        b_shape = _shape(b)
        grad_b = None if b_shape is None else sum_to_shape(-grad * ctx.xp.trunc(a / b), b_shape)
        return sum_to_shape(grad, a.shape), grad_b


@kernel("pow", "PowBackward0")
class Pow(Op):
    @staticmethod
    def forward(ctx, a, b):
        out = a ** b
        ctx.save_for_backward(a, b, out)
        if _shape(b) is not None:
            ctx.grad_fn_name = "PowBackward1"
        return out

    @staticmethod
    def backward(ctx, grad):
        a, b, out = ctx.saved
        xp = ctx.xp
        b_shape = _shape(b)
        if b_shape is None:  # scalar exponent: PowBackward0
            grad_a = grad * b * a ** (b - 1) if b != 0 else grad * 0
            return grad_a, None
        grad_a = sum_to_shape(grad * b * xp.where(b == 0, 0, a ** xp.where(b == 0, 1, b - 1)), a.shape)
        # d(a^b)/db = a^b log(a), taken as 0 where a == 0 and b >= 0 (PyTorch's convention)
        log_a = xp.log(xp.where(a == 0, 1, a))
        grad_b = sum_to_shape(grad * xp.where((a == 0) & (b >= 0), 0, out * log_a), b_shape)
        return grad_a, grad_b


@kernel("maximum", "MaximumBackward0")
class Maximum(Op):
    @staticmethod
    def forward(ctx, a, b):
        ctx.save_for_backward(a, b)
        return ctx.xp.maximum(a, b)

    @staticmethod
    def backward(ctx, grad):
        a, b = ctx.saved
        # Ties split the gradient evenly, as PyTorch does.
        a_wins = (a > b) + 0.5 * (a == b)
        return sum_to_shape(grad * a_wins, a.shape), sum_to_shape(grad * (1 - a_wins), b.shape)


@kernel("minimum", "MinimumBackward0")
class Minimum(Op):
    @staticmethod
    def forward(ctx, a, b):
        ctx.save_for_backward(a, b)
        return ctx.xp.minimum(a, b)

    @staticmethod
    def backward(ctx, grad):
        a, b = ctx.saved
        a_wins = (a < b) + 0.5 * (a == b)
        return sum_to_shape(grad * a_wins, a.shape), sum_to_shape(grad * (1 - a_wins), b.shape)


def add(input, other, *, alpha=1, out=None):
    """``input + alpha * other`` with broadcasting (``torch.add``)."""
    try:
        promote = other.__class__ is not Tensor or input._data.dtype is not other._data.dtype
    except AttributeError:  # input is a number, or no tensor at all: promote_pair says which
        promote = True
    if promote:
        input, other = promote_pair(input, other)
    if out is not None:
        return _maybe_out(run("add", input, other, alpha=check_number(alpha, "alpha")), out)
    if alpha != 1:
        return run2("add", input, other, alpha=check_number(alpha, "alpha"))
    return run2("add", input, other)


def sub(input, other, *, alpha=1, out=None):
    """``input - alpha * other`` with broadcasting (``torch.sub``)."""
    _check_bool_subtraction(input, other)
    input, other = promote_pair(input, other)
    return _maybe_out(run2("sub", input, other, alpha=check_number(alpha, "alpha")), out)


def _check_bool_subtraction(input, other):
    bools = [x.dtype is _dtype.bool_ if isinstance(x, Tensor) else isinstance(x, bool) for x in (input, other)]
    if all(bools):
        raise RuntimeError(named("Subtraction, the `-` operator, with two bool tensors is not supported. "
                                 "Use the `^` or `logical_xor()` operator instead."))
    if any(bools):
        raise RuntimeError(named("Subtraction, the `-` operator, with a bool tensor is not supported. "
                                 "If you are trying to invert a mask, use the `~` or `logical_not()` operator "
                                 "instead."))


subtract = sub


def rsub(input, other, *, alpha=1):
    """``other - alpha * input``."""
    _check_bool_subtraction(input, other)
    input, other = promote_pair(input, other)
    if not isinstance(other, Tensor):
        other = Tensor._wrap(input._device._xp.asarray(other, dtype=input._data.dtype), input._device)
    return run("sub", other, input, alpha=alpha)


def mul(input, other, *, out=None):
    """Elementwise product with broadcasting (``torch.mul``)."""
    try:
        promote = other.__class__ is not Tensor or input._data.dtype is not other._data.dtype
    except AttributeError:  # input is a number, or no tensor at all: promote_pair says which
        promote = True
    if promote:
        input, other = promote_pair(input, other)
    if out is not None:
        return _maybe_out(run2("mul", input, other), out)
    return run2("mul", input, other)


multiply = mul


def div(input, other, *, rounding_mode=None, out=None):
    """True division; ``rounding_mode='trunc'`` or ``'floor'`` for integer-style division (``torch.div``)."""
    input, other = promote_pair(input, other) if rounding_mode is not None else _promote_float(input, other)
    if rounding_mode is None:
        return _maybe_out(run2("div", input, other), out)
    if rounding_mode == "floor":
        return run2("floor_divide", input, other)
    if rounding_mode == "trunc":
        return run2("trunc_divide", input, other)
    raise ValueError(f"div expected rounding_mode to be one of None, 'trunc', or 'floor' but found {rounding_mode!r}")


divide = true_divide = div


def _promote_float(input, other):
    """True division's operands: the promoted dtype, or the default float when that is not floating."""
    if isinstance(input, Tensor) and not input.dtype.is_floating_point:
        if not (isinstance(other, Tensor) and other.dtype.is_floating_point):
            input = input.to(_dtype.get_default_dtype())  # before a negative int scalar can wrap around
    elif isinstance(other, Tensor) and not other.dtype.is_floating_point and not isinstance(input, Tensor):
        other = other.to(_dtype.get_default_dtype())
    input, other = promote_pair(input, other)
    if not input.dtype.is_floating_point:
        input = input.to(_dtype.get_default_dtype())
        if isinstance(other, Tensor):
            other = other.to(input.dtype)
    return input, other


def floor_divide(input, other):
    input, other = promote_pair(input, other)
    return run2("floor_divide", input, other)


def remainder(input, other):
    """Python-style modulus (sign of the divisor), ``torch.remainder``."""
    input, other = promote_pair(input, other)
    return run2("remainder", input, other)


def fmod(input, other):
    """C-style modulus (sign of the dividend), ``torch.fmod``."""
    input, other = promote_pair(input, other)
    return run2("fmod", input, other)


def pow(input, exponent):
    """``input ** exponent``; integer tensors raised to float exponents become float (``torch.pow``)."""
    if not isinstance(input, Tensor):
        if not isinstance(exponent, Tensor) or not is_scalar(input):
            raise not_tensors(input=input) if isinstance(exponent, Tensor) else not_tensors(exponent=exponent)
        exponent_tensor = exponent
        input = Tensor._wrap(exponent_tensor._device._xp.asarray(
            input, dtype=_dtype.dtype_with_scalar(exponent_tensor.dtype, input).numpy), exponent_tensor._device)
    if isinstance(exponent, int) or (exponent.__class__ is not bool and hasattr(exponent, "__index__")
                                     and not isinstance(exponent, Tensor)):
        _check_integer_exponent(input.dtype, exponent)
    input, exponent = promote_pair(input, exponent)
    if input.dtype is _dtype.bool_ and isinstance(exponent, Tensor):
        raise NotImplementedError("\"pow\" not implemented for 'Bool'")
    try:
        return run2("pow", input, exponent)
    except ValueError as error:  # numpy's "Integers to negative integer powers are not allowed."
        if "negative integer powers" not in str(error):
            raise
        raise RuntimeError(str(error)) from None


def _check_integer_exponent(dtype, exponent) -> None:
    """PyTorch's errors for an integer tensor raised to an int that would otherwise wrap around silently."""
    if dtype.is_floating_point or dtype is _dtype.bool_ or isinstance(exponent, bool):
        return
    exponent = int(exponent)
    if exponent < 0:
        raise RuntimeError(named("Integers to negative integer powers are not allowed."))
    if exponent >= 1 << (8 * dtype.itemsize - dtype.is_signed):
        raise RuntimeError(named(f"value cannot be converted to type {dtype.numpy.name}_t without overflow"))


def float_power(input, exponent):
    if not isinstance(input, Tensor):
        raise not_tensors(input=input)
    return pow(input.to(_dtype.float64), exponent.to(_dtype.float64) if isinstance(exponent, Tensor) else exponent)


def maximum(input, other):
    input, other = promote_pair(input, other)
    return run2("maximum", input, other)


def minimum(input, other):
    input, other = promote_pair(input, other)
    return run2("minimum", input, other)


def _maybe_out(result, out):
    if out is None:
        return result
    out.copy_(result) if out.shape == result.shape else _replace(out, result)
    return out


def _replace(out, result):
    out._data = result._data.astype(out._data.dtype)


# ---------------------------------------------------------------------------------------------------------
# Comparisons and logic (no gradients)
# ---------------------------------------------------------------------------------------------------------

def _comparison(name, numpy_name):
    @kernel(name)
    class Comparison(Op):
        differentiable = False

        @staticmethod
        def forward(ctx, a, b):
            return getattr(ctx.xp, numpy_name)(a, b)

    Comparison.__name__ = Comparison.__qualname__ = name.capitalize()

    def compare(input, other):
        if other is None and name in ("eq", "ne"):
            return name == "ne"  # ``t == None`` as Python objects compare
        input, other = promote_pair(input, other)
        return run2(name, input, other)

    return public_function(compare, name, f"Elementwise ``{numpy_name}`` with broadcasting; returns a bool tensor "
                                          f"(``torch.{name}``).")


eq = _comparison("eq", "equal")
ne = _comparison("ne", "not_equal")
lt = _comparison("lt", "less")
le = _comparison("le", "less_equal")
gt = _comparison("gt", "greater")
ge = _comparison("ge", "greater_equal")
logical_and = _comparison("logical_and", "logical_and")
logical_or = _comparison("logical_or", "logical_or")
logical_xor = _comparison("logical_xor", "logical_xor")
greater, greater_equal, less, less_equal, not_equal = gt, ge, lt, le, ne


def _bitwise(name, numpy_name):
    @kernel(name)
    class Bitwise(Op):
        differentiable = False

        @staticmethod
        def forward(ctx, a, b):
            return getattr(ctx.xp, numpy_name)(a, b)

    def bitwise(input, other):
        input, other = promote_pair(input, other)
        if input.dtype.is_floating_point:  # NotImplementedError, a RuntimeError, as PyTorch raises
            raise NotImplementedError(f"\"{name}_cpu\" not implemented for '{_type_name(input.dtype)}': bitwise "
                                      "operators need integer or bool tensors")
        return run2(name, input, other)

    return public_function(bitwise, name)


def _type_name(d):
    """PyTorch's scalar-type name of a dtype, as its "not implemented for 'Long'" errors spell it."""
    return {"float16": "Half", "float32": "Float", "float64": "Double", "bfloat16": "BFloat16", "int8": "Char",
            "int16": "Short", "int32": "Int", "int64": "Long", "uint8": "Byte", "bool": "Bool"}.get(d.name, d.name)


bitwise_and = _bitwise("bitwise_and", "bitwise_and")
bitwise_or = _bitwise("bitwise_or", "bitwise_or")
bitwise_xor = _bitwise("bitwise_xor", "bitwise_xor")
bitwise_left_shift = _bitwise("bitwise_left_shift", "left_shift")
bitwise_right_shift = _bitwise("bitwise_right_shift", "right_shift")


@kernel("logical_not")
class LogicalNot(Op):
    differentiable = False

    @staticmethod
    def forward(ctx, a):
        return ctx.xp.logical_not(a)


@kernel("bitwise_not")
class BitwiseNot(Op):
    differentiable = False

    @staticmethod
    def forward(ctx, a):
        return ctx.xp.invert(a)


def logical_not(input):
    return run1("logical_not", input)


def bitwise_not(input):
    """``~x``: logical not for bool tensors, bitwise not for integers."""
    if not isinstance(input, Tensor):
        raise not_tensors(input=input)
    if input.dtype.is_floating_point:
        raise TypeError(f"~ (bitwise_not) is only supported for integer and bool tensors, got {input.dtype}")
    return run1("bitwise_not", input)


def _predicate(name, numpy_name):
    @kernel(name)
    class Predicate(Op):
        differentiable = False

        @staticmethod
        def forward(ctx, a):
            return getattr(ctx.xp, numpy_name)(a)

    def predicate(input):
        return run1(name, input)

    return public_function(predicate, name)


isnan = _predicate("isnan", "isnan")
isinf = _predicate("isinf", "isinf")
isfinite = _predicate("isfinite", "isfinite")
signbit = _predicate("signbit", "signbit")


# ---------------------------------------------------------------------------------------------------------
# Unary math
# ---------------------------------------------------------------------------------------------------------

@kernel("neg", "NegBackward0")
class Neg(Op):
    @staticmethod
    def forward(ctx, a):
        return -a

    @staticmethod
    def backward(ctx, grad):
        return -grad


@kernel("abs", "AbsBackward0")
class Abs(Op):
    @staticmethod
    def forward(ctx, a):
        ctx.save_for_backward(a)
        return ctx.xp.abs(a)

    @staticmethod
    def backward(ctx, grad):
        (a,) = ctx.saved
        return grad * ctx.xp.sign(a)


@kernel("sign", "SignBackward0")
class Sign(Op):
    @staticmethod
    def forward(ctx, a):
        xp = ctx.xp
        if a.dtype.kind == "b":
            return a.copy()  # sign of a bool is itself (numpy has no bool sign)
        out = xp.sign(a)
        if a.dtype.kind == "f":  # PyTorch: sign(nan) is 0 (in place, unless numpy gave a 0-d scalar)
            out = xp.nan_to_num(out, copy=not out.ndim, nan=0.0)
        return out

    @staticmethod
    def backward(ctx, grad):
        return grad * 0


@kernel("exp", "ExpBackward0")
class Exp(Op):
    @staticmethod
    def forward(ctx, a):
        out = ctx.xp.exp(a)
        ctx.save_for_backward(out)
        return out

    @staticmethod
    def backward(ctx, grad):
        (out,) = ctx.saved
        return grad * out


@kernel("exp2", "Exp2Backward0")
class Exp2(Op):
    @staticmethod
    def forward(ctx, a):
        out = ctx.xp.exp2(a)
        ctx.save_for_backward(out)
        return out

    @staticmethod
    def backward(ctx, grad):
        (out,) = ctx.saved
        return grad * out * math.log(2.0)


@kernel("expm1", "Expm1Backward0")
class Expm1(Op):
    @staticmethod
    def forward(ctx, a):
        out = ctx.xp.expm1(a)
        ctx.save_for_backward(out)
        return out

    @staticmethod
    def backward(ctx, grad):
        (out,) = ctx.saved
        return grad * (out + 1)


@kernel("log", "LogBackward0")
class Log(Op):
    @staticmethod
    def forward(ctx, a):
        ctx.save_for_backward(a)
        return ctx.xp.log(a)

    @staticmethod
    def backward(ctx, grad):
        (a,) = ctx.saved
        return grad / a


@kernel("log2", "Log2Backward0")
class Log2(Op):
    @staticmethod
    def forward(ctx, a):
        ctx.save_for_backward(a)
        return ctx.xp.log2(a)

    @staticmethod
    def backward(ctx, grad):
        (a,) = ctx.saved
        return grad / (a * math.log(2.0))


@kernel("log10", "Log10Backward0")
class Log10(Op):
    @staticmethod
    def forward(ctx, a):
        ctx.save_for_backward(a)
        return ctx.xp.log10(a)

    @staticmethod
    def backward(ctx, grad):
        (a,) = ctx.saved
        return grad / (a * math.log(10.0))


@kernel("log1p", "Log1PBackward0")
class Log1p(Op):
    @staticmethod
    def forward(ctx, a):
        ctx.save_for_backward(a)
        return ctx.xp.log1p(a)

    @staticmethod
    def backward(ctx, grad):
        (a,) = ctx.saved
        return grad / (a + 1)


@kernel("sqrt", "SqrtBackward0")
class Sqrt(Op):
    @staticmethod
    def forward(ctx, a):
        out = ctx.xp.sqrt(a)
        ctx.save_for_backward(out)
        return out

    @staticmethod
    def backward(ctx, grad):
        (out,) = ctx.saved
        return grad / (2 * out)


@kernel("rsqrt", "RsqrtBackward0")
class Rsqrt(Op):
    @staticmethod
    def forward(ctx, a):
        out = 1 / ctx.xp.sqrt(a)
        ctx.save_for_backward(out)
        return out

    @staticmethod
    def backward(ctx, grad):
        (out,) = ctx.saved
        return grad * -0.5 * out * out * out


@kernel("square", "PowBackward0")
class Square(Op):
    @staticmethod
    def forward(ctx, a):
        ctx.save_for_backward(a)
        return a * a

    @staticmethod
    def backward(ctx, grad):
        (a,) = ctx.saved
        return 2 * grad * a


@kernel("reciprocal", "ReciprocalBackward0")
class Reciprocal(Op):
    @staticmethod
    def forward(ctx, a):
        out = 1 / a
        ctx.save_for_backward(out)
        return out

    @staticmethod
    def backward(ctx, grad):
        (out,) = ctx.saved
        return -grad * out * out


@kernel("sin", "SinBackward0")
class Sin(Op):
    @staticmethod
    def forward(ctx, a):
        ctx.save_for_backward(a)
        return ctx.xp.sin(a)

    @staticmethod
    def backward(ctx, grad):
        (a,) = ctx.saved
        return grad * ctx.xp.cos(a)


@kernel("cos", "CosBackward0")
class Cos(Op):
    @staticmethod
    def forward(ctx, a):
        ctx.save_for_backward(a)
        return ctx.xp.cos(a)

    @staticmethod
    def backward(ctx, grad):
        (a,) = ctx.saved
        return -grad * ctx.xp.sin(a)


@kernel("tan", "TanBackward0")
class Tan(Op):
    @staticmethod
    def forward(ctx, a):
        out = ctx.xp.tan(a)
        ctx.save_for_backward(out)
        return out

    @staticmethod
    def backward(ctx, grad):
        (out,) = ctx.saved
        return grad * (1 + out * out)


@kernel("tanh", "TanhBackward0")
class Tanh(Op):
    @staticmethod
    def forward(ctx, a):
        out = ctx.xp.tanh(a)
        ctx.save_for_backward(out)
        return out

    @staticmethod
    def backward(ctx, grad):
        (out,) = ctx.saved
        return grad * (1 - out * out)


@kernel("sigmoid", "SigmoidBackward0")
class Sigmoid(Op):
    @staticmethod
    def forward(ctx, a):
        # exp(-log(1 + e^-a)) never overflows, unlike 1 / (1 + e^-a) for very negative a.
        xp = ctx.xp
        out = xp.exp(-xp.logaddexp(0, -a)).astype(a.dtype, copy=False)
        ctx.save_for_backward(out)
        return out

    @staticmethod
    def backward(ctx, grad):
        (out,) = ctx.saved
        return grad * out * (1 - out)


@kernel("relu", "ReluBackward0")
class Relu(Op):
    @staticmethod
    def forward(ctx, a):
        out = ctx.xp.maximum(a, 0)
        ctx.save_for_backward(out)
        return out

    @staticmethod
    def backward(ctx, grad):
        (out,) = ctx.saved
        return grad * (out > 0)


def erf_array(xp, x):
    """erf through the complementary-error-function fit of Numerical Recipes (relative error < 1.2e-7).

    numpy has no erf; this fit is accurate to float32 precision everywhere. float64 inputs
    take :func:`_erf_series` instead, accurate to float64 precision.
    """
    if x.dtype == xp.float64:
        return _erf_series(xp, x)
    z = xp.abs(x)
    t = 1.0 / (1.0 + 0.5 * z)
    poly = -1.26551223 + t * (1.00002368 + t * (0.37409196 + t * (0.09678418 + t * (
        -0.18628806 + t * (0.27886807 + t * (-1.13520398 + t * (1.48851587 + t * (-0.82215223 + t * 0.17087277))))))))
    erfc = t * xp.exp(-z * z + poly)
    return xp.where(x >= 0, 1.0 - erfc, erfc - 1.0).astype(x.dtype, copy=False)


_TWO_OVER_SQRT_PI = 2.0 / math.sqrt(math.pi)


def _erf_series(xp, x):
    """erf(x) = 2x/sqrt(pi) e^(-x^2) sum_n (2x^2)^n / (1*3*...*(2n+1)), to float64 precision.

    Every term is positive, so nothing cancels; past |x| = 6 erf is +-1 in float64.
    """
    z = xp.minimum(xp.abs(x), 6.0)
    z2 = 2.0 * z * z
    term = xp.ones_like(z)
    total = xp.ones_like(z)
    n = 0
    while True:
        n += 1
        term = term * z2 / (2 * n + 1)
        total = total + term
        if not (term > 1e-17 * total).any().item():
            break
    return xp.sign(x) * (_TWO_OVER_SQRT_PI * z * xp.exp(-z * z) * total)


@kernel("erf", "ErfBackward0")
class Erf(Op):
    @staticmethod
    def forward(ctx, a):
        ctx.save_for_backward(a)
        return erf_array(ctx.xp, a)

    @staticmethod
    def backward(ctx, grad):
        (a,) = ctx.saved
        return grad * _TWO_OVER_SQRT_PI * ctx.xp.exp(-a * a)


_SQRT_HALF = math.sqrt(0.5)
_INV_SQRT_2PI = 1.0 / math.sqrt(2.0 * math.pi)
_SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)


@kernel("gelu", "GeluBackward0")
class Gelu(Op):
    @staticmethod
    def forward(ctx, a, approximate="none"):
        xp = ctx.xp
        ctx.save_for_backward(a)
        ctx.approximate = approximate
        if approximate == "tanh":
            inner = _SQRT_2_OVER_PI * (a + 0.044715 * a * a * a)
            return (0.5 * a * (1 + xp.tanh(inner))).astype(a.dtype, copy=False)
        return (0.5 * a * (1 + erf_array(xp, a * _SQRT_HALF))).astype(a.dtype, copy=False)

    @staticmethod
    def backward(ctx, grad):
        (a,) = ctx.saved
        xp = ctx.xp
        if ctx.approximate == "tanh":
            inner = _SQRT_2_OVER_PI * (a + 0.044715 * a * a * a)
            t = xp.tanh(inner)
            d_inner = _SQRT_2_OVER_PI * (1 + 3 * 0.044715 * a * a)
            return grad * (0.5 * (1 + t) + 0.5 * a * (1 - t * t) * d_inner)
        cdf = 0.5 * (1 + erf_array(xp, a * _SQRT_HALF))
        pdf = _INV_SQRT_2PI * xp.exp(-0.5 * a * a)
        return grad * (cdf + a * pdf)


@kernel("silu", "SiluBackward0")
class Silu(Op):
    @staticmethod
    def forward(ctx, a):
        xp = ctx.xp
        s = xp.exp(-xp.logaddexp(0, -a)).astype(a.dtype, copy=False)
        ctx.save_for_backward(a, s)
        return a * s

    @staticmethod
    def backward(ctx, grad):
        a, s = ctx.saved
        return grad * s * (1 + a * (1 - s))


@kernel("softplus", "SoftplusBackward0")
class Softplus(Op):
    @staticmethod
    def forward(ctx, a, beta=1.0, threshold=20.0):
        xp = ctx.xp
        ctx.save_for_backward(a)
        ctx.beta, ctx.threshold = beta, threshold
        scaled = a * beta
        # Above the threshold softplus is linear; below it log(1 + e^x) computed without overflow.
        return xp.where(scaled > threshold, a, xp.logaddexp(0, scaled) / beta).astype(a.dtype, copy=False)

    @staticmethod
    def backward(ctx, grad):
        (a,) = ctx.saved
        xp = ctx.xp
        scaled = a * ctx.beta
        sig = xp.exp(-xp.logaddexp(0, -scaled))
        return grad * xp.where(scaled > ctx.threshold, 1, sig).astype(a.dtype, copy=False)


@kernel("clamp", "ClampBackward1")
class Clamp(Op):
    @staticmethod
    def forward(ctx, a, low=None, high=None):
        xp = ctx.xp
        ctx.save_for_backward(a, low, high)
        out = a
        if low is not None:
            out = xp.maximum(out, low)
        if high is not None:
            out = xp.minimum(out, high)
        return out if out is not a else a.copy()

    @staticmethod
    def backward(ctx, grad):
        a, low, high = ctx.saved
        inside = True
        if low is not None:
            inside = a >= low
        if high is not None:
            inside = inside & (a <= high)
        grad_a = grad * inside
        grad_low = grad_high = None
        if _shape(low) is not None:
            grad_low = sum_to_shape(grad * (a < low), low.shape)
        if _shape(high) is not None:
            grad_high = sum_to_shape(grad * (a > high), high.shape)
        return grad_a, grad_low, grad_high


def _rounding(name):
    @kernel(name, f"{name.capitalize()}Backward0")
    class Rounding(Op):
        @staticmethod
        def forward(ctx, a, decimals=0):
            xp = ctx.xp
            if name == "round":
                return xp.round(a, decimals)
            return getattr(xp, name)(a)

        @staticmethod
        def backward(ctx, grad):
            return grad * 0  # piecewise constant: zero gradient, as in PyTorch

    def rounding(input, *, decimals=0):
        try:
            floating = input._data.dtype.kind in "fV"  # V: bfloat16 / float8 (ml_dtypes)
        except AttributeError:
            raise not_tensors(input=input) from None
        if not floating:
            return input.clone()
        return run(name, input, decimals=decimals) if name == "round" else run1(name, input)

    return public_function(rounding, name)


floor = _rounding("floor")
ceil = _rounding("ceil")
round = _rounding("round")  # noqa: A001
trunc = _rounding("trunc")
fix = trunc


def _floating_unary(name):
    def unary(input):
        try:
            floating = input._data.dtype.kind in "fV"  # V: bfloat16 / float8 (ml_dtypes)
        except AttributeError:
            raise not_tensors(input=input) from None
        return run1(name, input if floating else to_floating(input))
    return public_function(unary, name, f"Elementwise {name}; integer inputs compute in the default float dtype "
                                        f"(``torch.{name}``).")


exp = _floating_unary("exp")
exp2 = _floating_unary("exp2")
expm1 = _floating_unary("expm1")
log = _floating_unary("log")
log2 = _floating_unary("log2")
log10 = _floating_unary("log10")
log1p = _floating_unary("log1p")
sqrt = _floating_unary("sqrt")
rsqrt = _floating_unary("rsqrt")
reciprocal = _floating_unary("reciprocal")
sin = _floating_unary("sin")
cos = _floating_unary("cos")
tan = _floating_unary("tan")
tanh = _floating_unary("tanh")
sigmoid = _floating_unary("sigmoid")
erf = _floating_unary("erf")
silu = _floating_unary("silu")


def neg(input):
    if not isinstance(input, Tensor):
        raise not_tensors(input=input)
    if input.dtype is _dtype.bool_:
        raise RuntimeError(named("Negation, the `-` operator, on a bool tensor is not supported. If you are trying "
                                 "to invert a mask, use the `~` or `logical_not()` operator instead."))
    return run1("neg", input)


negative = neg


def abs(input):  # noqa: A001
    return run1("abs", input)


absolute = abs


def sign(input):
    return run1("sign", input)


def square(input):
    return run1("square", input)


def relu(input):
    """``max(input, 0)`` (``torch.relu``)."""
    return run1("relu", input)


def gelu(input, approximate: str = "none"):
    """Gaussian error linear unit; ``approximate='tanh'`` for the tanh approximation."""
    if approximate not in ("none", "tanh"):
        raise ValueError(f"approximate argument must be either none or tanh, got {approximate!r}")
    return run("gelu", to_floating(input), approximate=approximate)


def softplus(input, beta: float = 1.0, threshold: float = 20.0):
    return run("softplus", to_floating(input), beta=beta, threshold=threshold)


def clamp(input, min=None, max=None):  # noqa: A002
    """Limit values to ``[min, max]``; bounds may be numbers or tensors (``torch.clamp``)."""
    if min is None and max is None:
        raise RuntimeError("torch.clamp: At least one of 'min' or 'max' must not be None")
    bounds = []
    for bound in (min, max):
        if isinstance(bound, Tensor):
            input, bound = promote_pair(input, bound)
        elif bound is not None:
            input, _ = promote_pair(input, bound)
        bounds.append(bound)
    return run("clamp", input, bounds[0], bounds[1])


clip = clamp


def clamp_min(input, min):  # noqa: A002
    if min is None:
        raise TypeError(named("argument 'min' must be Number or Tensor, not NoneType"))
    return clamp(input, min=min)


def clamp_max(input, max):  # noqa: A002
    if max is None:
        raise TypeError(named("argument 'max' must be Number or Tensor, not NoneType"))
    return clamp(input, max=max)


# ---------------------------------------------------------------------------------------------------------
# Selection and fused updates
# ---------------------------------------------------------------------------------------------------------

@kernel("where", "WhereBackward0")
class Where(Op):
    @staticmethod
    def forward(ctx, condition, a, b):
        ctx.save_for_backward(condition)
        ctx.a_shape, ctx.b_shape = _shape(a), _shape(b)
        return ctx.xp.where(condition, a, b)

    @staticmethod
    def backward(ctx, grad):
        (condition,) = ctx.saved
        grad_a = grad_b = None
        if ctx.a_shape is not None:
            grad_a = sum_to_shape(grad * condition, ctx.a_shape)
        if ctx.b_shape is not None:
            grad_b = sum_to_shape(grad * ~condition, ctx.b_shape)
        return None, grad_a, grad_b


def where(condition, input=None, other=None):
    """Pick from ``input`` where ``condition`` holds, else from ``other`` (``torch.where``).

    With one argument, the indices of the true elements (``torch.nonzero(as_tuple=True)``).
    """
    if input is None and other is None:
        from corenn.ops.movement import nonzero
        return nonzero(condition, as_tuple=True)
    if not isinstance(condition, Tensor):
        raise not_tensors(condition=condition)
    if condition.dtype is not _dtype.bool_:
        condition = condition.to(_dtype.bool_)
    if not isinstance(input, Tensor):
        if not isinstance(other, Tensor):
            if not (is_scalar(input) and is_scalar(other)):
                raise TypeError("where(): expected at least one of input and other to be a Tensor")
            # torch.where(mask, 1, 0): two numbers give a tensor of their own common type (int64, the default float)
            input = _coerce(input, condition)
        other, input = promote_pair(other, input)
    else:
        input, other = promote_pair(input, other)
    try:
        return run("where", condition, input, other)
    except ValueError:  # numpy's broadcasting message: name the shapes as PyTorch does
        broadcast_shapes(*[x.shape for x in (condition, input, other) if isinstance(x, Tensor)])
        raise


@kernel("masked_fill", "MaskedFillBackward0")
class MaskedFill(Op):
    @staticmethod
    def forward(ctx, a, mask, value):
        ctx.save_for_backward(mask)
        ctx.value_shape = _shape(value)
        return ctx.xp.where(mask, value, a).astype(a.dtype, copy=False)

    @staticmethod
    def backward(ctx, grad):
        (mask,) = ctx.saved
        grad_value = None
        if ctx.value_shape is not None:
            grad_value = sum_to_shape((grad * mask).sum().reshape(()), ctx.value_shape)
        return grad * ~mask, None, grad_value


def masked_fill(input, mask, value):
    """Set elements where ``mask`` is true to ``value`` (a number or a 0-d tensor)."""
    if not (isinstance(input, Tensor) and isinstance(mask, Tensor)):
        raise not_tensors(input=input, mask=mask)
    if mask.dtype is not _dtype.bool_:
        raise RuntimeError(f"masked_fill_ only supports boolean masks, but got mask with dtype {mask.dtype}")
    if isinstance(value, Tensor):
        if value.ndim != 0:
            raise RuntimeError(f"masked_fill_ only supports a 0-dimensional value tensor, but got tensor with "
                               f"{value.ndim} dimension(s).")
        value = value.to(input.dtype)
    else:
        value = check_number(value, "value")
    return run("masked_fill", input, mask, value)


def addcmul(input, tensor1, tensor2, *, value=1):
    """``input + value * tensor1 * tensor2``."""
    return add(input, mul(tensor1, tensor2), alpha=value)


def addcdiv(input, tensor1, tensor2, *, value=1):
    """``input + value * tensor1 / tensor2``."""
    return add(input, div(tensor1, tensor2), alpha=value)


def lerp(input, end, weight):
    """``input + weight * (end - input)``."""
    return add(input, mul(sub(end, input), weight))


def xlogy(input, other):
    """``input * log(other)``, but 0 where ``input`` is 0 and ``other`` is not NaN (``torch.xlogy``).

    The zero case is the point: ``kl_div`` and entropy terms put ``0 * log(0)`` at 0.
    """
    if isinstance(other, Tensor):
        product = mul(input, log(other))
        zero_input = eq(input, 0) if isinstance(input, Tensor) else (
            eq(other, other) if input == 0 else None)  # a scalar 0: every element whose other isn't NaN
        if zero_input is None:
            return product
        return where(logical_and(zero_input, logical_not(isnan(other))), 0.0, product)
    other = check_number(other, "other")
    product = mul(input, math.log(other) if other > 0 else -math.inf if other == 0 else math.nan)
    if math.isnan(other):
        return product
    return where(eq(input, 0), 0.0, product)


def isclose(input, other, rtol=1e-05, atol=1e-08, equal_nan=False):
    """Elementwise ``|input - other| <= atol + rtol * |other|`` (``torch.isclose``)."""
    input, other = promote_pair(input, other)
    rtol, atol = check_number(rtol, "rtol"), check_number(atol, "atol")
    other_array = other._data if isinstance(other, Tensor) else other
    xp = input._device._xp
    if isinstance(other, Tensor) and other.shape != input.shape:
        broadcast_shapes(input.shape, other.shape)  # PyTorch's error, naming both shapes
    return Tensor._wrap(xp.isclose(input._data, other_array, rtol=rtol, atol=atol, equal_nan=equal_nan),
                        input._device)


def allclose(input, other, rtol=1e-05, atol=1e-08, equal_nan=False) -> bool:
    """Whether every element is close (``torch.allclose``); shapes must broadcast."""
    return bool(isclose(input, other, rtol, atol, equal_nan).all().item())


def equal(input, other) -> bool:
    """True when both tensors have the same shape and elements (``torch.equal``)."""
    if not (isinstance(input, Tensor) and isinstance(other, Tensor)):
        raise not_tensors(input=input, other=other)
    if input.shape != other.shape:
        return False
    return bool((input == other).all().item())


@kernel("nan_to_num", "NanToNumBackward0")
class NanToNum(Op):
    @staticmethod
    def forward(ctx, a, nan, posinf, neginf):
        ctx.save_for_backward(a)
        return ctx.xp.nan_to_num(a, nan=nan, posinf=posinf, neginf=neginf)

    @staticmethod
    def backward(ctx, grad):
        (a,) = ctx.saved
        return grad * ctx.xp.isfinite(a), None, None, None  # a replaced value no longer depends on the input


def nan_to_num(input, nan=0.0, posinf=None, neginf=None):
    """NaN, +inf and -inf replaced by ``nan``, ``posinf`` and ``neginf`` (default: 0 and the dtype's largest and
    smallest finite values) (``torch.nan_to_num``)."""
    if not isinstance(input, Tensor):
        raise not_tensors(input=input)
    nan = check_number(nan, "nan")
    posinf = None if posinf is None else check_number(posinf, "posinf")
    neginf = None if neginf is None else check_number(neginf, "neginf")
    return run("nan_to_num", input, nan, posinf, neginf)


# ---------------------------------------------------------------------------------------------------------
# More unary math: one table row (forward, derivative) per kernel
# ---------------------------------------------------------------------------------------------------------

def _math_kernel(name, grad_fn_name, forward, derivative):
    """Register kernel ``name``: ``forward(xp, a)`` and its derivative ``derivative(xp, a, out)``."""
    @kernel(name, grad_fn_name)
    class UnaryMath(Op):
        @staticmethod
        def forward(ctx, a):
            out = forward(ctx.xp, a).astype(a.dtype, copy=False)
            ctx.save_for_backward(a, out)
            return out

        @staticmethod
        def backward(ctx, grad):
            a, out = ctx.saved
            return grad * derivative(ctx.xp, a, out)

    UnaryMath.__name__ = UnaryMath.__qualname__ = grad_fn_name[:-len("Backward0")]
    return UnaryMath


def _sinc(xp, a):
    pi_a = math.pi * a
    safe = xp.where(a == 0, 1, pi_a)
    return xp.where(a == 0, 1, xp.sin(safe) / safe)


def _sinc_derivative(xp, a, out):
    pi_a = math.pi * a
    safe = xp.where(a == 0, 1, a)
    return xp.where(a == 0, 0, (pi_a * xp.cos(pi_a) - xp.sin(pi_a)) / (math.pi * safe * safe))


_UNARY_MATH = [  # name, PyTorch's node, forward, derivative (d out / d a)
    ("asin", "AsinBackward0", lambda xp, a: xp.arcsin(a), lambda xp, a, out: 1 / xp.sqrt(1 - a * a)),
    ("acos", "AcosBackward0", lambda xp, a: xp.arccos(a), lambda xp, a, out: -1 / xp.sqrt(1 - a * a)),
    ("atan", "AtanBackward0", lambda xp, a: xp.arctan(a), lambda xp, a, out: 1 / (1 + a * a)),
    ("asinh", "AsinhBackward0", lambda xp, a: xp.arcsinh(a), lambda xp, a, out: 1 / xp.sqrt(a * a + 1)),
    ("acosh", "AcoshBackward0", lambda xp, a: xp.arccosh(a), lambda xp, a, out: 1 / xp.sqrt((a - 1) * (a + 1))),
    ("atanh", "AtanhBackward0", lambda xp, a: xp.arctanh(a), lambda xp, a, out: 1 / (1 - a * a)),
    ("sinh", "SinhBackward0", lambda xp, a: xp.sinh(a), lambda xp, a, out: xp.cosh(a)),
    ("cosh", "CoshBackward0", lambda xp, a: xp.cosh(a), lambda xp, a, out: xp.sinh(a)),
    ("sinc", "SincBackward0", _sinc, _sinc_derivative),
    ("deg2rad", "Deg2RadBackward0", lambda xp, a: a * (math.pi / 180), lambda xp, a, out: math.pi / 180),
    ("rad2deg", "Rad2DegBackward0", lambda xp, a: a * (180 / math.pi), lambda xp, a, out: 180 / math.pi),
    ("frac", "FracBackward0", lambda xp, a: a - xp.trunc(a), lambda xp, a, out: 1),
]
for _row in _UNARY_MATH:
    _math_kernel(*_row)

asin = arcsin = _floating_unary("asin")
acos = arccos = _floating_unary("acos")
atan = arctan = _floating_unary("atan")
asinh = arcsinh = _floating_unary("asinh")
acosh = arccosh = _floating_unary("acosh")
atanh = arctanh = _floating_unary("atanh")
sinh = _floating_unary("sinh")
cosh = _floating_unary("cosh")
sinc = _floating_unary("sinc")
deg2rad = _floating_unary("deg2rad")
rad2deg = _floating_unary("rad2deg")


def frac(input):
    """``input - trunc(input)``: the fractional part, with the sign of ``input`` (``torch.frac``)."""
    if not isinstance(input, Tensor):
        raise not_tensors(input=input)
    if not input.dtype.is_floating_point:
        raise NotImplementedError(f"\"frac_cpu\" not implemented for '{_type_name(input.dtype)}'")
    return run1("frac", input)


@kernel("logit", "LogitBackward0")
class Logit(Op):
    @staticmethod
    def forward(ctx, a, eps=None):
        xp = ctx.xp
        ctx.save_for_backward(a)
        ctx.eps = eps
        clamped = a if eps is None else xp.clip(a, eps, 1 - eps)
        return xp.log(clamped / (1 - clamped)).astype(a.dtype, copy=False)

    @staticmethod
    def backward(ctx, grad):
        (a,) = ctx.saved
        xp = ctx.xp
        # PyTorch: outside [eps, 1 - eps] the clamp cuts the gradient; without eps, outside [0, 1] it is NaN.
        outside, fill = ((a < 0) | (a > 1), math.nan) if ctx.eps is None else (
            (a < ctx.eps) | (a > 1 - ctx.eps), 0)
        return xp.where(outside, fill, grad / (a * (1 - a))).astype(grad.dtype, copy=False)


def logit(input, eps=None):
    """``log(p / (1 - p))``, with ``p`` clamped to ``[eps, 1 - eps]`` when ``eps`` is given (``torch.logit``)."""
    if not isinstance(input, Tensor):
        raise not_tensors(input=input)
    if eps is not None:
        eps = float(check_number(eps, "eps"))
        if eps < 0:  # PyTorch reads a negative eps as "no clamping"
            eps = None
    return run("logit", input if input.dtype.is_floating_point else to_floating(input), eps=eps)


@kernel("sgn", "SgnBackward0")
class Sgn(Sign):
    """``sgn`` is ``sign`` for real tensors (the complex ``z / |z|`` has no real counterpart to differ)."""


def sgn(input):
    """The sign of each element, as ``sign`` for real tensors (``torch.sgn``)."""
    if not isinstance(input, Tensor):
        raise not_tensors(input=input)
    return run1("sgn", input)


def positive(input):
    """``input`` itself (``+input``); bool tensors are refused, as in PyTorch (``torch.positive``)."""
    if not isinstance(input, Tensor):
        raise not_tensors(input=input)
    if input.dtype is _dtype.bool_:
        raise RuntimeError(named("The `+` operator, on a bool tensor is not supported."))
    return input


# ---------------------------------------------------------------------------------------------------------
# More binary math
# ---------------------------------------------------------------------------------------------------------

def _binary_math_kernel(name, grad_fn_name, forward, derivatives):
    """Register kernel ``name``: ``forward(xp, a, b)``, ``derivatives(xp, a, b, out)`` -> (d/da, d/db).

    ``b`` is an array or a Python number; a derivative is left out for a number.
    """
    @kernel(name, grad_fn_name)
    class BinaryMath(Op):
        @staticmethod
        def forward(ctx, a, b):
            out = forward(ctx.xp, a, b)
            if _shape(b) is None:
                ctx.grad_fn_name = grad_fn_name[:-1] + "1"  # PyTorch's node for a Scalar other
                out = out.astype(a.dtype, copy=False)
            ctx.save_for_backward(a, b, out)
            return out

        @staticmethod
        def backward(ctx, grad):
            a, b, out = ctx.saved
            d_a, d_b = derivatives(ctx.xp, a, b, out)
            grad_a = sum_to_shape(grad * d_a, a.shape) if ctx.needs_input_grad[0] else None
            grad_b = None
            if _shape(b) is not None and ctx.needs_input_grad[1]:
                grad_b = sum_to_shape(grad * d_b, b.shape)
            return grad_a, grad_b

    BinaryMath.__name__ = BinaryMath.__qualname__ = grad_fn_name[:-len("Backward0")]
    return BinaryMath


def _copysign_derivatives(xp, a, b, out):
    ratio = out / xp.where(a == 0, 1, a)
    return xp.where(a == 0, 0, ratio), 0


def _atan2_derivatives(xp, a, b, out):
    squared_norm = a * a + b * b
    # PyTorch gives atan2 a zero gradient at the origin, where the derivative is undefined.
    inverse = xp.where(squared_norm == 0, 0, 1 / xp.where(squared_norm == 0, 1, squared_norm))
    return b * inverse, -a * inverse


def _fmax_derivatives(xp, a, b, out):
    a_wins = (a >= b) | xp.isnan(b)  # ties go to input, and a NaN other picks input (PyTorch's rule)
    return a_wins, ~a_wins


def _fmin_derivatives(xp, a, b, out):
    a_wins = (a <= b) | xp.isnan(b)
    return a_wins, ~a_wins


_LN2 = math.log(2.0)

_BINARY_MATH = [  # name, PyTorch's node, forward, derivatives
    ("atan2", "Atan2Backward0", lambda xp, a, b: xp.arctan2(a, b), _atan2_derivatives),
    ("hypot", "HypotBackward0", lambda xp, a, b: xp.hypot(a, b), lambda xp, a, b, out: (a / out, b / out)),
    ("copysign", "CopysignBackward0", lambda xp, a, b: xp.copysign(a, b), _copysign_derivatives),
    # d/da log(e^a + e^b) = e^(a - out): never overflows, as out >= a
    ("logaddexp", "LogaddexpBackward0", lambda xp, a, b: xp.logaddexp(a, b),
     lambda xp, a, b, out: (xp.exp(a - out), xp.exp(b - out))),
    ("logaddexp2", "Logaddexp2Backward0", lambda xp, a, b: xp.logaddexp2(a, b),
     lambda xp, a, b, out: (xp.exp2(a - out), xp.exp2(b - out))),
    ("fmax", "FmaxBackward0", lambda xp, a, b: xp.fmax(a, b), _fmax_derivatives),
    ("fmin", "FminBackward0", lambda xp, a, b: xp.fmin(a, b), _fmin_derivatives),
    ("ldexp", "LdexpBackward0", lambda xp, a, b: a * xp.exp2(b),
     lambda xp, a, b, out: (xp.exp2(b), out * _LN2)),
]
for _row in _BINARY_MATH:
    _binary_math_kernel(*_row)


def _tensor_operands(name, input, other, argument="other"):
    """PyTorch's checks for ``torch.<name>(Tensor input, Tensor other)``, then the promoted pair."""
    if not isinstance(input, Tensor):
        raise not_tensors(input=input)
    if not isinstance(other, Tensor):
        raise TypeError(f"{name}(): argument '{argument}' (position 2) must be Tensor, not "
                        f"{type(other).__name__}")
    return promote_pair(input, other)


def _floating_binary(name, *, integers=True, scalar_other=False):
    """Front end of a floating binary op; ``integers``: integer inputs compute in the default float dtype
    (else PyTorch has no integer kernel); ``scalar_other``: ``other`` may be a Python number."""
    def binary(input, other):
        if scalar_other and is_scalar(other) and isinstance(input, Tensor):
            input, other = promote_pair(input, check_number(other, "other"))
        else:
            input, other = _tensor_operands(name, input, other)
        if not input.dtype.is_floating_point:
            if not integers:
                raise NotImplementedError(f"\"{name}_cpu\" not implemented for '{_type_name(input.dtype)}'")
            input = input.to(_dtype.get_default_dtype())
            other = other.to(input.dtype) if isinstance(other, Tensor) else float(other)
        return run2(name, input, other)
    return public_function(binary, name, f"Elementwise ``{name}`` with broadcasting (``torch.{name}``).")


atan2 = arctan2 = _floating_binary("atan2")
hypot = _floating_binary("hypot", integers=False)
copysign = _floating_binary("copysign", scalar_other=True)
logaddexp = _floating_binary("logaddexp", integers=False)
logaddexp2 = _floating_binary("logaddexp2", integers=False)


def fmax(input, other):
    """Elementwise maximum that ignores NaN: NaN only where both are NaN (``torch.fmax``)."""
    input, other = _tensor_operands("fmax", input, other)
    return run2("fmax", input, other)


def fmin(input, other):
    """Elementwise minimum that ignores NaN: NaN only where both are NaN (``torch.fmin``)."""
    input, other = _tensor_operands("fmin", input, other)
    return run2("fmin", input, other)


def ldexp(input, other):
    """``input * 2 ** other`` (``torch.ldexp``); integer inputs compute in the default float dtype."""
    input, other = _tensor_operands("ldexp", input, other)
    if not input.dtype.is_floating_point:
        input = input.to(_dtype.get_default_dtype())
    return run2("ldexp", input, other.to(input.dtype))


@kernel("nextafter", "NextafterBackward0")
class Nextafter(Op):
    @staticmethod
    def forward(ctx, a, b):
        return ctx.xp.nextafter(a, b)

    @staticmethod
    def backward(ctx, grad):
        raise NotImplementedError("the derivative for 'nextafter' is not implemented.")


def nextafter(input, other):
    """The next floating-point value after ``input`` towards ``other`` (``torch.nextafter``)."""
    input, other = _tensor_operands("nextafter", input, other)
    if not input.dtype.is_floating_point:
        raise NotImplementedError(f"\"nextafter_cpu\" not implemented for '{_type_name(input.dtype)}'")
    return run2("nextafter", input, other)


@kernel("heaviside", "NotImplemented")
class Heaviside(Op):
    @staticmethod
    def forward(ctx, a, values):
        xp = ctx.xp
        return xp.where(a == 0, values, a > 0).astype(a.dtype, copy=False)

    @staticmethod
    def backward(ctx, grad):
        raise NotImplementedError("the derivative for 'heaviside' is not implemented.")


def heaviside(input, values):
    """Step function: 0 below zero, 1 above, ``values`` at zero (``torch.heaviside``)."""
    if not isinstance(input, Tensor):
        raise not_tensors(input=input)
    if not isinstance(values, Tensor):
        raise TypeError(f"heaviside(): argument 'values' (position 2) must be Tensor, not {type(values).__name__}")
    if input.dtype is not values.dtype:
        raise RuntimeError("heaviside is not yet implemented for tensors with different dtypes.")
    broadcast_shapes(input.shape, values.shape)
    return run2("heaviside", input, values)


def _integer_binary(name):
    @kernel(name)
    class IntegerBinary(Op):
        differentiable = False

        @staticmethod
        def forward(ctx, a, b):
            return getattr(ctx.xp, name)(a, b)

    IntegerBinary.__name__ = IntegerBinary.__qualname__ = name.capitalize()

    def integer_binary(input, other):
        input, other = _tensor_operands(name, input, other)
        if input.dtype.is_floating_point or input.dtype is _dtype.bool_:
            raise NotImplementedError(f"\"{name}_cpu\" not implemented for '{_type_name(input.dtype)}'")
        return run2(name, input, other)

    return public_function(integer_binary, name, f"Elementwise ``{name}`` of integer tensors (``torch.{name}``).")


gcd = _integer_binary("gcd")
lcm = _integer_binary("lcm")


@kernel("angle", "AngleBackward0")
class Angle(Op):
    """The argument of a real number: pi below zero, 0 elsewhere (-0 included), NaN for NaN."""

    @staticmethod
    def forward(ctx, a):
        xp = ctx.xp
        return xp.where(a < 0, math.pi, xp.where(xp.isnan(a), a, 0)).astype(a.dtype, copy=False)

    @staticmethod
    def backward(ctx, grad):
        return grad * 0  # piecewise constant


def angle(input):
    """The elementwise argument (phase): pi for negative numbers, 0 otherwise (``torch.angle``)."""
    return run1("angle", to_floating(_checked(input)))


def real(input):
    """``input`` itself: the real part of a real tensor (``torch.real``)."""
    return _checked(input)


def imag(input):
    """The imaginary part, which real tensors don't have: RuntimeError, as in PyTorch (``torch.imag``)."""
    _checked(input)
    raise RuntimeError("imag is not implemented for tensors with non-complex dtypes.")


FrexpResult = namedtuple("frexp", ["mantissa", "exponent"])
FrexpResult.__doc__ = "``corenn.frexp``'s result, as ``torch.return_types.frexp``: (mantissa, exponent)."


@kernel("frexp", "FrexpBackward0")
class Frexp(Op):
    num_outputs = 2
    differentiable_outputs = (True, False)

    @staticmethod
    def forward(ctx, a):
        mantissa, exponent = ctx.xp.frexp(a)
        exponent = exponent.astype(ctx.xp.int32, copy=False)
        ctx.save_for_backward(exponent)
        return mantissa, exponent

    @staticmethod
    def backward(ctx, grad):
        (exponent,) = ctx.saved
        return grad[0] * ctx.xp.exp2(-exponent).astype(grad[0].dtype, copy=False)  # mantissa = input * 2^-exponent


def frexp(input):
    """Split into mantissa in [0.5, 1) (signed) and int32 exponent with ``input = mantissa * 2 ** exponent``
    (``torch.frexp``)."""
    if not _checked(input).dtype.is_floating_point:
        raise RuntimeError("torch.frexp() only supports floating-point dtypes")
    return FrexpResult(*run("frexp", input))


# ---------------------------------------------------------------------------------------------------------
# Predicates, and the complex-number names that are identities on real tensors
# ---------------------------------------------------------------------------------------------------------

def _checked(input):
    if not isinstance(input, Tensor):
        raise not_tensors(input=input)
    return input


def is_complex(input) -> bool:
    """False: corenn has no complex dtype (``torch.is_complex``)."""
    return _checked(input).is_complex()


def is_signed(input) -> bool:
    """Whether the dtype holds negative numbers: floats and signed integers (``torch.is_signed``)."""
    return _checked(input).dtype.is_signed


def is_conj(input) -> bool:
    """False: a real tensor never carries a lazy conjugation (``torch.is_conj``)."""
    _checked(input)
    return False


def is_neg(input) -> bool:
    """False: a real tensor never carries a lazy negation (``torch.is_neg``)."""
    _checked(input)
    return False


def is_nonzero(input) -> bool:
    """Whether a one-element tensor is not zero; other sizes raise, as ``bool(t)`` does (``torch.is_nonzero``)."""
    size = _checked(input).numel()
    if size == 0:
        raise RuntimeError(named("Boolean value of Tensor with no values is ambiguous"))
    if size > 1:
        raise RuntimeError(named("Boolean value of Tensor with more than one value is ambiguous"))
    return bool(input._data.reshape(()).item() != 0)


def is_same_size(input, other) -> bool:
    """Whether both tensors have the same shape (``torch.is_same_size``)."""
    if not (isinstance(input, Tensor) and isinstance(other, Tensor)):
        raise not_tensors(input=input, other=other)
    return input.shape == other.shape


def conj(input):
    """``input`` itself: the conjugate of a real tensor (``torch.conj``)."""
    return _checked(input)


conj_physical = resolve_conj = resolve_neg = conj


def isreal(input):
    """A bool tensor of True: every element of a real tensor is real (``torch.isreal``)."""
    xp = _checked(input)._device._xp
    return Tensor._wrap(xp.ones(input._data.shape, dtype=bool), input._device)


def isposinf(input):
    """Where ``input`` is +inf (``torch.isposinf``)."""
    return eq(input, math.inf) if _checked(input).dtype.is_floating_point else isreal(input).logical_not()


def isneginf(input):
    """Where ``input`` is -inf (``torch.isneginf``)."""
    return eq(input, -math.inf) if _checked(input).dtype.is_floating_point else isreal(input).logical_not()


def adjoint(input):
    """The last two dimensions swapped: the conjugate transpose of a real tensor (``torch.adjoint``)."""
    return _checked(input).adjoint()


# ---------------------------------------------------------------------------------------------------------
# torch.<name>_: the in-place variants PyTorch also has as functions, each ``input.<name>_(...)``
# ---------------------------------------------------------------------------------------------------------

def _inplace_function(name):
    def inplace(input, *args, **kwargs):
        return getattr(_checked(input), name)(*args, **kwargs)
    return public_function(inplace, name, f"``input.{name}(...)``: in-place, returns ``input`` (``torch.{name}``).")


for _name in """
abs_ neg_ negative_ exp_ exp2_ expm1_ log_ log2_ log10_ log1p_ sqrt_ rsqrt_ square_ reciprocal_ sin_ cos_ tan_ tanh_
sigmoid_ relu_ erf_ floor_ ceil_ round_ trunc_ fix_ clamp_ clip_ clamp_min_ clamp_max_ xlogy_ nan_to_num_
asin_ acos_ atan_ asinh_ acosh_ atanh_ sinh_ cosh_ arcsin_ arccos_ arctan_ arcsinh_ arccosh_ arctanh_ sinc_ deg2rad_
rad2deg_ frac_ logit_ ldexp_ gcd_ lcm_ conj_physical_ erfc_ i0_
""".split():
    globals()[_name] = _inplace_function(_name)


# The public op functions of this file (what ``from corenn.ops import *`` re-exports as ``corenn.X``).
__all__ = [name for name, value in list(globals().items())
           if not name.startswith("_") and callable(value) and not isinstance(value, type)
           and getattr(value, "__module__", None) == __name__]
