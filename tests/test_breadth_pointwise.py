"""Inverse trigonometric and hyperbolic functions, sinc, logit, hypot, logaddexp, copysign, fmax, ldexp, ...,
the predicates and the complex-number names that are identities on real tensors, against PyTorch 2.13:
float64 values and gradients, float32 values, dtypes, gradcheck and PyTorch's errors."""
from __future__ import annotations

import math

import numpy as np
import pytest

import corenn
from corenn.autograd import gradcheck

from _breadth_oracle import compare_with_torch

pytestmark = pytest.mark.torch
RNG = np.random.default_rng(22)

# name -> (low, high) of the inputs drawn: inside the function's domain, away from its poles
UNARY = {
    "asin": (-0.95, 0.95), "acos": (-0.95, 0.95), "atan": (-5, 5), "asinh": (-5, 5), "acosh": (1.05, 6),
    "atanh": (-0.95, 0.95), "sinh": (-5, 5), "cosh": (-5, 5), "sinc": (-4, 4), "deg2rad": (-400, 400),
    "rad2deg": (-7, 7), "frac": (-9, 9), "logit": (0.02, 0.98), "sgn": (-3, 3),
    "arcsin": (-0.95, 0.95), "arccos": (-0.95, 0.95), "arctan": (-5, 5), "arcsinh": (-5, 5),
    "arccosh": (1.05, 6), "arctanh": (-0.95, 0.95),
}


@pytest.mark.parametrize("name", sorted(UNARY))
def test_unary_matches_torch(name, torch):
    x = RNG.uniform(*UNARY[name], size=(4, 5))
    frozen = (0,) if name == "sgn" else ()  # PyTorch's gradient of sgn is a ZeroTensor, which numpy can't read
    out = compare_with_torch(getattr(corenn, name), getattr(torch, name), [x], torch, rtol=1e-12, atol=1e-12,
                             frozen=frozen)
    if frozen:
        leaf = corenn.tensor(x, requires_grad=True)
        out = getattr(corenn, name)(leaf)
        out.sum().backward()
        assert not leaf.grad.numpy().any()
    assert out.grad_fn.name() == getattr(torch, name)(torch.tensor(x, requires_grad=True)).grad_fn.name()
    x32 = x.astype(np.float32)
    ours, theirs = getattr(corenn.Tensor, name)(corenn.tensor(x32)), getattr(torch.Tensor, name)(torch.tensor(x32))
    assert ours.dtype == corenn.float32
    np.testing.assert_allclose(ours.numpy(), theirs.numpy(), rtol=2e-6, atol=2e-6)


@pytest.mark.parametrize("name", sorted(UNARY))
def test_unary_gradcheck(name):
    x = corenn.tensor(RNG.uniform(*UNARY[name], size=(3, 2)), requires_grad=True)
    assert gradcheck(getattr(corenn, name), (x,))


def test_special_values_match_torch(torch):
    x = np.array([0.0, -0.0, 1.0, -1.0, 2.0, 1e-30, 1e300, -1e300, math.inf, -math.inf, math.nan, 0.5, 3.25, -7.5])
    for name in ["asin", "acos", "atan", "asinh", "acosh", "atanh", "sinh", "cosh", "sinc", "deg2rad", "rad2deg",
                 "frac", "logit", "sgn"]:
        with np.errstate(all="ignore"):
            ours = getattr(corenn, name)(corenn.tensor(x)).numpy()
        np.testing.assert_allclose(ours, getattr(torch, name)(torch.tensor(x)).numpy(), rtol=1e-14, atol=0,
                                   err_msg=name)


def test_sinc_gradient_at_zero_is_zero(torch):
    x = np.array([0.0, 1.0, -2.0, 0.5])
    compare_with_torch(corenn.sinc, torch.sinc, [x], torch)


@pytest.mark.parametrize("eps", [None, 0.1, 0.0, -1.0])
def test_logit_eps_matches_torch(eps, torch):
    x = np.array([-0.5, 0.0, 0.05, 0.3, 0.5, 0.95, 1.0, 1.5])
    with np.errstate(all="ignore"):
        compare_with_torch(lambda t: corenn.logit(t, eps), lambda t: torch.logit(t, eps), [x], torch)
        compare_with_torch(lambda t: t.logit(eps=eps), lambda t: t.logit(eps=eps), [x], torch)


@pytest.mark.parametrize("name", ["asin", "sinh", "deg2rad", "rad2deg", "sinc", "logit", "sgn", "atan"])
def test_integer_inputs_follow_torch_dtype(name, torch):
    values = [[0, 1, 2], [-1, 3, 0]]
    with np.errstate(all="ignore"):
        ours = getattr(corenn, name)(corenn.tensor(values))
    theirs = getattr(torch, name)(torch.tensor(values))
    assert str(ours.dtype).split(".")[1] == str(theirs.dtype).split(".")[1]
    np.testing.assert_allclose(ours.numpy(), theirs.numpy(), rtol=1e-6)


def test_frac_refuses_integers_as_torch(torch):
    with pytest.raises(NotImplementedError, match="\"frac_cpu\" not implemented for 'Long'"):
        corenn.frac(corenn.tensor([1, 2]))
    with pytest.raises(NotImplementedError):
        torch.frac(torch.tensor([1, 2]))


# name -> inputs (first, second) drawn from these ranges
BINARY = {
    "atan2": ((-3, 3), (-3, 3)), "arctan2": ((-3, 3), (-3, 3)), "hypot": ((-3, 3), (-3, 3)),
    "copysign": ((-3, 3), (-3, 3)), "logaddexp": ((-30, 30), (-30, 30)), "logaddexp2": ((-30, 30), (-30, 30)),
    "fmax": ((-3, 3), (-3, 3)), "fmin": ((-3, 3), (-3, 3)), "ldexp": ((-3, 3), (-4, 4)),
}


@pytest.mark.parametrize("name", sorted(BINARY))
def test_binary_matches_torch(name, torch):
    (a_low, a_high), (b_low, b_high) = BINARY[name]
    a, b = RNG.uniform(a_low, a_high, size=(3, 4)), RNG.uniform(b_low, b_high, size=(4,))
    if name == "ldexp":
        b = np.round(b)
    compare_with_torch(getattr(corenn, name), getattr(torch, name), [a, b], torch, rtol=1e-12, atol=1e-12)
    compare_with_torch(getattr(corenn.Tensor, name), getattr(torch.Tensor, name), [a, b], torch, rtol=1e-12,
                       atol=1e-12)
    a32, b32 = a.astype(np.float32), b.astype(np.float32)
    ours = getattr(corenn, name)(corenn.tensor(a32), corenn.tensor(b32))
    theirs = getattr(torch, name)(torch.tensor(a32), torch.tensor(b32))
    assert ours.dtype == corenn.float32
    np.testing.assert_allclose(ours.numpy(), theirs.numpy(), rtol=2e-6, atol=2e-6)


@pytest.mark.parametrize("name", sorted(BINARY))
def test_binary_gradcheck(name):
    (a_low, a_high), (b_low, b_high) = BINARY[name]
    a = corenn.tensor(RNG.uniform(a_low, a_high, size=(2, 3)), requires_grad=True)
    b = corenn.tensor(RNG.uniform(b_low, b_high, size=(3,)), requires_grad=True)
    assert gradcheck(getattr(corenn, name), (a, b))


def test_binary_ties_nans_and_zeros_match_torch(torch):
    a = np.array([1.0, math.nan, 2.0, math.nan, 0.0, -0.0, 3.0, 0.0])
    b = np.array([1.0, 2.0, math.nan, math.nan, -1.0, 2.0, 3.0, 0.0])
    for name in ["fmax", "fmin", "copysign", "hypot", "atan2", "logaddexp", "logaddexp2"]:
        with np.errstate(all="ignore"):
            compare_with_torch(getattr(corenn, name), getattr(torch, name), [a, b], torch, rtol=1e-14, atol=0)


def test_logaddexp_far_apart_and_infinite(torch):
    a = np.array([-1000.0, 1000.0, -math.inf, math.inf, 0.0])
    b = np.array([1000.0, 999.0, -math.inf, 0.0, -math.inf])
    for name in ["logaddexp", "logaddexp2"]:
        ours = getattr(corenn, name)(corenn.tensor(a), corenn.tensor(b))
        np.testing.assert_allclose(ours.numpy(), getattr(torch, name)(torch.tensor(a), torch.tensor(b)).numpy())


def test_copysign_scalar_other(torch):
    x = RNG.uniform(-2, 2, size=(5,))
    for other in (-1.0, 2, -0.0):
        out = compare_with_torch(lambda t, other=other: corenn.copysign(t, other),
                                 lambda t, other=other: torch.copysign(t, other), [x], torch)
        assert out.grad_fn.name() == "CopysignBackward1"
    ours, theirs = corenn.copysign(corenn.tensor([1, -2]), -1), torch.copysign(torch.tensor([1, -2]), -1)
    assert ours.dtype == corenn.float32 and ours.tolist() == theirs.tolist()


@pytest.mark.parametrize("name", ["atan2", "copysign", "fmax", "fmin", "ldexp"])
def test_binary_integer_dtypes_follow_torch(name, torch):
    a, b = [[3, -1, 0], [2, 5, -4]], [1, -2, 3]
    for other_float in (False, True):
        b_ours = corenn.tensor(b, dtype=corenn.float32 if other_float else None)
        b_theirs = torch.tensor(b, dtype=torch.float32 if other_float else None)
        ours, theirs = getattr(corenn, name)(corenn.tensor(a), b_ours), getattr(torch, name)(torch.tensor(a), b_theirs)
        assert str(ours.dtype).split(".")[1] == str(theirs.dtype).split(".")[1]
        np.testing.assert_allclose(ours.numpy(), theirs.numpy(), rtol=1e-6)


@pytest.mark.parametrize("name", ["hypot", "logaddexp", "logaddexp2", "nextafter"])
def test_binary_refuses_integers_as_torch(name, torch):
    with pytest.raises(NotImplementedError, match=f"\"{name}_cpu\" not implemented for 'Long'"):
        getattr(corenn, name)(corenn.tensor([1]), corenn.tensor([2]))
    with pytest.raises(NotImplementedError):
        getattr(torch, name)(torch.tensor([1]), torch.tensor([2]))


@pytest.mark.parametrize("name", ["atan2", "hypot", "logaddexp", "fmax", "fmin", "ldexp", "nextafter", "gcd"])
def test_binary_refuses_number_other_as_torch(name, torch):
    message = f"{name}(): argument 'other' (position 2) must be Tensor, not float"
    with pytest.raises(TypeError, match=re_escape(message)):
        getattr(corenn, name)(corenn.tensor([1.0]), 2.0)
    with pytest.raises(TypeError, match=re_escape(message)):
        getattr(torch, name)(torch.tensor([1.0]), 2.0)


def re_escape(text):
    import re
    return re.escape(text)


def test_nextafter_matches_torch_and_has_no_derivative(torch):
    a = np.array([0.0, 1.0, -1.0, 1e-310, 3.0])
    b = np.array([1.0, 0.0, -2.0, 0.0, 3.0])
    for dtype in (np.float64, np.float32):
        ours = corenn.nextafter(corenn.tensor(a.astype(dtype)), corenn.tensor(b.astype(dtype)))
        theirs = torch.nextafter(torch.tensor(a.astype(dtype)), torch.tensor(b.astype(dtype)))
        assert ours.numpy().tobytes() == theirs.numpy().tobytes()
    x = corenn.tensor(a, requires_grad=True)
    with pytest.raises(NotImplementedError, match="the derivative for 'nextafter' is not implemented"):
        corenn.nextafter(x, corenn.tensor(b)).sum().backward()


def test_heaviside_matches_torch(torch):
    x = np.array([-1.5, 0.0, 2.0, -0.0, math.nan])
    values = np.array([0.5, 0.25, 0.75, 0.125, 0.5])
    ours = corenn.heaviside(corenn.tensor(x), corenn.tensor(values))
    np.testing.assert_array_equal(ours.numpy(), torch.heaviside(torch.tensor(x), torch.tensor(values)).numpy())
    ours = corenn.tensor([-2, 0, 3]).heaviside(corenn.tensor([7]))
    assert ours.dtype == corenn.int64 and ours.tolist() == [0, 7, 1]
    with pytest.raises(RuntimeError, match="heaviside is not yet implemented for tensors with different dtypes"):
        corenn.heaviside(corenn.tensor([1.0]), corenn.tensor([1]))
    with pytest.raises(TypeError, match=re_escape("heaviside(): argument 'values' (position 2) must be Tensor")):
        corenn.heaviside(corenn.tensor([1.0]), 0.5)
    x = corenn.tensor([1.0, 0.0], requires_grad=True)
    with pytest.raises(NotImplementedError, match="the derivative for 'heaviside' is not implemented"):
        corenn.heaviside(x, corenn.tensor([0.5])).sum().backward()


@pytest.mark.parametrize("name", ["gcd", "lcm"])
def test_gcd_lcm_match_torch(name, torch):
    a = RNG.integers(-60, 60, size=(4, 5))
    b = RNG.integers(-60, 60, size=(5,))
    for dtype in ("int64", "int32", "int16", "uint8"):
        if dtype == "uint8":
            a_d, b_d = np.abs(a).astype(dtype), np.abs(b).astype(dtype)
        else:
            a_d, b_d = a.astype(dtype), b.astype(dtype)
        ours = getattr(corenn, name)(corenn.tensor(a_d), corenn.tensor(b_d))
        theirs = getattr(torch, name)(torch.tensor(a_d), torch.tensor(b_d))
        assert str(ours.dtype).split(".")[1] == str(theirs.dtype).split(".")[1]
        np.testing.assert_array_equal(ours.numpy(), theirs.numpy())
    with pytest.raises(NotImplementedError, match=f"\"{name}_cpu\" not implemented for 'Float'"):
        getattr(corenn, name)(corenn.tensor([1.0]), corenn.tensor([2.0]))


def test_positive_and_identities(torch):
    x = corenn.tensor([[1.0, -2.0], [3.0, 4.0]])
    for name in ["positive", "conj", "conj_physical", "resolve_conj", "resolve_neg"]:
        assert getattr(corenn, name)(x) is x and getattr(x, name)() is x
        t = torch.tensor([1.0])
        assert getattr(torch, name)(t) is t
    assert x.conj_physical_() is x and corenn.conj_physical_(x) is x
    with pytest.raises(RuntimeError, match="The `\\+` operator, on a bool tensor is not supported."):
        corenn.positive(corenn.tensor([True]))
    with pytest.raises(RuntimeError, match="The `\\+` operator, on a bool tensor is not supported."):
        torch.positive(torch.tensor([True]))


def test_predicates_match_torch(torch):
    x = np.array([1.0, math.inf, -math.inf, math.nan, 0.0, -1e308])
    for name in ["isposinf", "isneginf", "isreal"]:
        ours, theirs = getattr(corenn, name)(corenn.tensor(x)), getattr(torch, name)(torch.tensor(x))
        assert ours.dtype == corenn.bool and ours.tolist() == theirs.tolist()
        assert getattr(corenn.tensor([1, 2]), name)().tolist() == getattr(torch.tensor([1, 2]), name)().tolist()
    for dtype in ["float32", "float64", "int64", "int8", "uint8", "bool", "int16"]:
        assert corenn.is_signed(corenn.zeros(1, dtype=getattr(corenn, dtype))) is torch.is_signed(
            torch.zeros(1, dtype=getattr(torch, dtype)))
        assert corenn.zeros(1, dtype=getattr(corenn, dtype)).is_signed() is torch.is_signed(
            torch.zeros(1, dtype=getattr(torch, dtype)))
    t = corenn.ones(2)
    assert corenn.is_complex(t) is False and corenn.is_conj(t) is False and corenn.is_neg(t) is False
    assert t.is_conj() is False and t.is_neg() is False
    assert corenn.is_same_size(t, corenn.zeros(2)) and not corenn.is_same_size(t, corenn.zeros(1, 2))
    assert t.is_same_size(corenn.zeros(2))
    for value in ([0.0], [2], [[True]], [-0.0], [math.nan]):
        assert corenn.is_nonzero(corenn.tensor(value)) is torch.is_nonzero(torch.tensor(value))
    for value, message in (([], "with no values"), ([1, 2], "with more than one value")):
        with pytest.raises(RuntimeError, match=f"Boolean value of Tensor {message} is ambiguous"):
            corenn.is_nonzero(corenn.tensor(value))
        with pytest.raises(RuntimeError, match=f"Boolean value of Tensor {message} is ambiguous"):
            torch.is_nonzero(torch.tensor(value))
    with pytest.raises(TypeError):
        corenn.is_signed([1.0])


def test_tensor_sizes_and_adjoints_match_torch(torch):
    scalar = corenn.tensor(2.0)
    with pytest.warns(UserWarning, match="Tensor.H is deprecated on 0-D tensors"):
        transposed = scalar.H
    assert transposed is scalar
    for shape, dtype in [((2, 3), "float32"), ((4,), "int16"), ((2, 3, 4), "uint8")]:
        ours = corenn.zeros(shape, dtype=getattr(corenn, dtype))
        theirs = torch.zeros(shape, dtype=getattr(torch, dtype))
        assert (ours.itemsize, ours.nbytes) == (theirs.itemsize, theirs.nbytes)
        for name in ["H", "mH"]:
            try:
                expected = getattr(theirs, name)
            except RuntimeError as error:
                with pytest.raises(RuntimeError, match=re_escape(str(error))):
                    getattr(ours, name)
            else:
                assert tuple(getattr(ours, name).shape) == tuple(expected.shape)
        try:
            expected = theirs.adjoint()
        except RuntimeError as error:
            with pytest.raises(RuntimeError, match=re_escape(str(error))):
                ours.adjoint()
            with pytest.raises(RuntimeError, match=re_escape(str(error))):
                corenn.adjoint(ours)
        else:
            assert tuple(ours.adjoint().shape) == tuple(expected.shape) == tuple(corenn.adjoint(ours).shape)
    x = RNG.standard_normal((2, 3, 4))
    compare_with_torch(lambda t: t.mH, lambda t: t.mH, [x], torch)
    compare_with_torch(lambda t: t.adjoint(), lambda t: t.adjoint(), [x], torch)
    compare_with_torch(lambda t: t.H, lambda t: t.H, [x[0]], torch)


def test_frexp_matches_torch(torch):
    values = [0.0, -0.0, 1.0, 3.0, -5.5, 1e-40, 1e-310, 6e37, math.inf, -math.inf, math.nan, 0.1]
    for dtype in ("float32", "float64"):
        with np.errstate(over="ignore"):
            x = np.array(values, dtype=dtype)
        ours, theirs = corenn.frexp(corenn.tensor(x)), torch.frexp(torch.tensor(x))
        assert isinstance(ours, corenn.return_types.frexp) and ours._fields == ("mantissa", "exponent")
        np.testing.assert_array_equal(ours.mantissa.numpy(), theirs.mantissa.numpy())
        np.testing.assert_array_equal(ours.exponent.numpy(), theirs.exponent.numpy())
        assert ours.exponent.dtype == corenn.int32 and ours.mantissa.dtype == getattr(corenn, dtype)
        method = corenn.tensor(x).frexp()
        np.testing.assert_array_equal(method.exponent.numpy(), theirs.exponent.numpy())
    x = RNG.uniform(-40, 40, (3, 4))
    out = compare_with_torch(lambda t: corenn.frexp(t).mantissa, lambda t: torch.frexp(t).mantissa, [x], torch)
    assert out.grad_fn.name() == "FrexpBackward0"
    assert gradcheck(lambda t: corenn.frexp(t).mantissa, (corenn.tensor(x[0] * 0.37, requires_grad=True),))
    for lib in (corenn, torch):
        with pytest.raises(RuntimeError, match=re_escape("torch.frexp() only supports floating-point dtypes")):
            lib.frexp(lib.tensor([1, 2]))


def test_angle_real_imag_match_torch(torch):
    x = np.array([-2.0, 0.0, -0.0, 3.0, math.nan, -math.inf, math.inf])
    out = compare_with_torch(corenn.angle, torch.angle, [x], torch, rtol=1e-15, atol=0)
    assert out.grad_fn.name() == "AngleBackward0"
    for values in ([-1, 0, 2], [True, False]):
        ours, theirs = corenn.angle(corenn.tensor(values)), torch.angle(torch.tensor(values))
        assert ours.dtype == corenn.float32
        np.testing.assert_allclose(ours.numpy(), theirs.numpy())
    t = corenn.tensor([1.0, 2.0])
    assert corenn.real(t) is t and t.real is t
    for lib in (corenn, torch):
        with pytest.raises(RuntimeError, match="imag is not implemented for tensors with non-complex dtypes."):
            lib.imag(lib.tensor([1.0]))
        with pytest.raises(RuntimeError, match="imag is not implemented for tensors with non-complex dtypes."):
            _ = lib.tensor([1.0]).imag


@pytest.mark.parametrize("kwargs", [{}, {"nan": 2.0}, {"nan": -1.0, "posinf": 7.0, "neginf": -3.5}])
def test_nan_to_num_values_and_gradient_match_torch(kwargs, torch):
    x = np.array([math.nan, math.inf, -math.inf, 1.5, -0.25, 0.0])
    out = compare_with_torch(lambda t: corenn.nan_to_num(t, **kwargs), lambda t: torch.nan_to_num(t, **kwargs), [x],
                             torch, rtol=0, atol=0)
    assert out.grad_fn.name() == "NanToNumBackward0"
    for dtype in ("float32", "float16"):
        ours = corenn.nan_to_num(corenn.tensor(x, dtype=getattr(corenn, dtype)), **kwargs)
        theirs = torch.nan_to_num(torch.tensor(x, dtype=getattr(torch, dtype)), **kwargs)
        np.testing.assert_array_equal(ours.numpy(), theirs.numpy())
    assert corenn.nan_to_num(corenn.tensor([1, 2])).tolist() == [1, 2]


def test_logaddexp_gradient_far_apart_matches_torch(torch):
    a = np.array([-1000.0, 1000.0, 0.0, 700.0, -3.0])
    b = np.array([1000.0, -1000.0, 0.0, -700.0, 2.0])
    for name in ["logaddexp", "logaddexp2"]:
        with np.errstate(over="raise"):  # the gradient needs no exp of a large difference
            compare_with_torch(getattr(corenn, name), getattr(torch, name), [a, b], torch, rtol=1e-14, atol=1e-300)
