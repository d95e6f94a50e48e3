"""Special functions: lgamma, digamma, polygamma, mvlgamma, erfc, erfinv, i0, igamma and igammac.

numpy has none of them but ``i0``, and corenn does not depend on scipy: each is computed
here, written once against ``xp`` like every kernel, by the classical method its helper
names. The helpers work in float64; float32 and narrower inputs are rounded back at the end,
so those come out correctly rounded or nearly so.

    >>> import corenn
    >>> corenn.lgamma(corenn.tensor([0.5, 10.0]))
    tensor([ 0.5724, 12.8018])
"""
from __future__ import annotations

import math
from fractions import Fraction

import numpy as np

from corenn._argcheck import named, not_tensors
from corenn.ops._kernel import Op, kernel, public_function, run, run1, run2, sum_to_shape, to_floating
from corenn.ops.elementwise import _TWO_OVER_SQRT_PI, _erf_series, _tensor_operands, _type_name
from corenn.tensor.tensor import Tensor


def _float64(xp, a):
    return a if a.dtype == xp.float64 else a.astype(xp.float64)


def _narrow(xp, values, dtype):
    """float64 results rounded to the input's dtype; beyond its range they become +-inf, which is the answer."""
    with xp.errstate(over="ignore"):
        return values.astype(dtype, copy=False)


# ---------------------------------------------------------------------------------------------------------
# Array helpers (float64 in, float64 out)
# ---------------------------------------------------------------------------------------------------------

def _sin_pi(xp, x):
    """sin(pi x), reduced exactly to |r| <= 1/2 first: exact zeros at the integers and no loss for large |x|."""
    r = x - 2 * xp.round(x / 2)  # in [-1, 1]; sin(pi r) = sin(pi (1 - r)) folds it to [-1/2, 1/2] exactly
    r = xp.where(r > 0.5, 1 - r, xp.where(r < -0.5, -1 - r, r))
    return xp.sin(math.pi * r)


def _tan_pi(xp, x):
    """tan(pi x), reduced exactly to |r| <= 1/2 first (tan has period 1): exact zeros at the integers."""
    return xp.tan(math.pi * (x - xp.round(x)))


# Lanczos' approximation with g = 7 and 9 terms (the coefficients of Numerical Recipes and Boost's
# "lanczos13m53" family): relative error near 1e-15 for x >= 1/2.
_LANCZOS_G = 7.0
_LANCZOS = (0.99999999999980993, 676.5203681218851, -1259.1392167224028, 771.32342877765313,
            -176.61502916214059, 12.507343278686905, -0.13857109526572012, 9.9843695780195716e-6,
            1.5056327351493116e-7)
_HALF_LOG_2PI = 0.5 * math.log(2 * math.pi)


_EULER_GAMMA = 0.5772156649015329


def _lgamma_near_two(xp, e):
    """lgamma(2 + e) = (1 - gamma) e + sum_k>=2 (-1)^k (zeta(k) - 1) e^k / k for |e| <= 1/2: the Taylor series,
    exact (and exactly 0) at the root e = 0, where Lanczos' formula cancels down to its rounding error."""
    series = 0.0
    for k in range(len(_ZETA_MINUS_ONE) + 1, 1, -1):
        series = (series + (-1) ** k * _ZETA_MINUS_ONE[k - 2] / k) * e
    return ((1 - _EULER_GAMMA) + series) * e


def _lgamma_lanczos(xp, y):
    z = y - 1
    series = _LANCZOS[0]
    for i, c in enumerate(_LANCZOS[1:], 1):
        series = series + c / (z + i)
    t = z + (_LANCZOS_G + 0.5)
    return _HALF_LOG_2PI + (z + 0.5) * xp.log(t) - t + xp.log(series)


def _lgamma_taylor(xp, y):
    """lgamma(y) for 1/2 <= y < 5/2: the series about 2, through lgamma(y) = lgamma(y + 1) - log y below 3/2."""
    below = y < 1.5
    e = xp.where(below, y - 1, y - 2)
    return _lgamma_near_two(xp, e) - xp.where(below, xp.log1p(e), 0.0)


def lgamma_array(xp, x):
    """log|Gamma(x)|: the Taylor series about 2 on [1/2, 5/2) (through lgamma(x) = lgamma(x + 1) - log x below
    3/2), Lanczos above, the reflection log(pi / |sin(pi x)|) - lgamma(1 - x) below 1/2."""
    with xp.errstate(divide="ignore", invalid="ignore", over="ignore"):
        reflect = x < 0.5
        y = xp.where(reflect, 1 - x, x)
        near_two = y < 2.5
        positive = _on(xp, ~near_two, xp.zeros_like(y), lambda y: _lgamma_lanczos(xp, y), y)
        positive = _on(xp, near_two, positive, lambda y: _lgamma_taylor(xp, y), y)
        sin_pi = xp.abs(_sin_pi(xp, x))
        reflected = xp.log(math.pi / sin_pi) - positive
        out = xp.where(reflect, xp.where(sin_pi == 0, math.inf, reflected), positive)
        # below 2^-52, lgamma(x) = -log|x| - gamma x + O(x^2) rounds to -log|x|; sin(pi x) would go subnormal
        out = xp.where(xp.abs(x) < 2.0 ** -52, -xp.log(xp.abs(x)), out)
        return xp.where(xp.isinf(x), math.inf, out)  # the poles and both infinities: +inf, as in PyTorch


# B_2k / 2k for k = 1..7: the asymptotic series psi(x) ~ log x - 1/(2x) - sum B_2k / (2k x^2k)
_DIGAMMA_SERIES = (1 / 12, -1 / 120, 1 / 252, -1 / 240, 1 / 132, -691 / 32760, 1 / 12)


def digamma_array(xp, x):
    """psi(x): the recurrence psi(x) = psi(x + 1) - 1/x up to x >= 10, then the asymptotic series;
    the reflection psi(x) = psi(1 - x) - pi / tan(pi x) for x < 0.

    psi(+0) = -inf and psi(-0) = +inf (the 1/x term keeps the zero's sign), NaN at the negative integers.
    """
    with xp.errstate(divide="ignore", invalid="ignore"):
        reflect = x < 0
        y = xp.where(reflect, 1 - x, x)
        total = xp.zeros_like(y)
        while True:
            small = y < 10
            if not small.any().item():
                break
            total = total - xp.where(small, 1 / y, 0)
            y = xp.where(small, y + 1, y)
        inv2 = 1 / (y * y)
        series = 0.0
        for coefficient in reversed(_DIGAMMA_SERIES):
            series = (series + coefficient) * inv2
        psi = total + xp.log(y) - 0.5 / y - series
        tan_pi = _tan_pi(xp, x)
        reflected = xp.where(tan_pi == 0, math.nan, psi - math.pi / tan_pi)
        return xp.where(reflect, reflected, psi)


def _bernoulli(count):
    """B_2, B_4, ..., B_2count as exact fractions (Akiyama-Tanigawa)."""
    numbers, row = [], []
    for m in range(2 * count + 1):
        row.append(Fraction(1, m + 1))
        for j in range(m, 0, -1):
            row[j - 1] = j * (row[j - 1] - row[j])
        if m >= 2 and m % 2 == 0:
            numbers.append(row[0])
    return numbers


# (2k)! / B_2k, k = 1..12: the Euler-Maclaurin tail of the Hurwitz zeta function (Cephes' zeta table)
_ZETA_TAIL = tuple(float(math.factorial(2 * k) / b) for k, b in enumerate(_bernoulli(12), 1))


def _hurwitz_zeta(xp, s: int, q):
    """zeta(s, q) = sum_k (q + k)^-s for an integer s >= 2 and q > 0: nine terms and more until q + k > 9,
    then the Euler-Maclaurin tail, each element stopping once its terms fall below float64 precision
    (Cephes' ``zeta``)."""
    with xp.errstate(divide="ignore", invalid="ignore", over="ignore"):
        a = q
        total = a ** -s
        term = total
        done = xp.zeros(q.shape, dtype=bool)
        i = 0
        while True:
            active = ~done & ((a <= 9) | (i < 9)) & xp.isfinite(a)
            if not active.any().item():
                break
            a = xp.where(active, a + 1, a)
            term = xp.where(active, a ** -s, term)
            total = xp.where(active, total + term, total)
            done = done | (active & (xp.abs(term / total) < 1.1e-16))
            i += 1
        w = a
        # the integral of the tail, w^(1-s) / (s - 1), taken directly: Cephes' term * w underflows for huge w
        total = xp.where(done, total, total + w ** (1 - s) / (s - 1) - 0.5 * term)
        factor = xp.ones_like(q)
        k = 0
        for tail in _ZETA_TAIL:
            factor = factor * (s + k)
            term = term / w
            step = factor * term / tail
            total = xp.where(done, total, total + step)
            done = done | (xp.abs(step / total) < 1.1e-16)
            k += 1
            factor = factor * (s + k)
            term = term / w
            k += 1
        return total


# zeta(k) - 1 = zeta(k, 2) for k = 2..32: the Taylor coefficients of lgamma about 2
_ZETA_MINUS_ONE = tuple(float(_hurwitz_zeta(np, k, np.array([2.0]))[0]) for k in range(2, 33))


def _cot_derivative_polynomial(n: int):
    """Coefficients (lowest first) of P_n with d^n/dx^n cot(x) = P_n(cot x): P_0 = c, P_k+1 = -(1 + c^2) P_k'."""
    poly = [0, 1]
    for _ in range(n):
        derivative = [i * c for i, c in enumerate(poly)][1:] or [0]
        nxt = [0] * (len(derivative) + 2)
        for i, c in enumerate(derivative):
            nxt[i] -= c
            nxt[i + 2] -= c
        poly = nxt
    return poly


def polygamma_array(xp, n: int, x):
    """psi^(n)(x) = (-1)^(n+1) n! zeta(n + 1, x) for n >= 1; for x < 0 the reflection
    psi^(n)(x) = (-1)^(n+1) ((-1)^n pi d^n/dx^n cot(pi x) - psi^(n)(1 - x)).

    At 0 and the negative integers: (-1)^(n+1) inf, the sign PyTorch gives; 0 at +inf, NaN at -inf.
    """
    if n == 0:
        return digamma_array(xp, x)
    sign = 1.0 if n % 2 else -1.0
    factorial = float(math.factorial(n)) if n <= 170 else math.inf
    with xp.errstate(divide="ignore", invalid="ignore", over="ignore"):
        reflect = x < 0
        y = xp.where(reflect, 1 - x, x)
        positive = sign * factorial * _hurwitz_zeta(xp, n + 1, y)
        cot = 1 / _tan_pi(xp, x)
        poly = 0.0
        for coefficient in reversed(_cot_derivative_polynomial(n)):
            poly = poly * cot + coefficient
        cot_term = (-1.0) ** n * math.pi ** (n + 1) * poly
        reflected = sign * (cot_term - positive)
        pole = (x <= 0) & (x == xp.floor(x))
        out = xp.where(reflect, reflected, positive)
        out = xp.where(pole, sign * math.inf, out)
        return xp.where(x == math.inf, 0.0, xp.where(x == -math.inf, math.nan, out))


def _exp_minus_square(xp, x):
    """exp(-x^2) without the rounding of x^2, which exp would magnify: x = hi + lo, hi on a 1/16 grid
    (hi^2 exact), exp(-hi^2) exp(-lo (2 hi + lo))."""
    hi = xp.floor(x * 16 + 0.5) / 16
    lo = x - hi
    return xp.exp(-hi * hi) * xp.exp(-lo * (2 * hi + lo))


_INV_SQRT_PI = 1 / math.sqrt(math.pi)


def _on(xp, mask, out, function, *arrays):
    """``out`` with ``function(*(array[mask] for array in arrays))`` written where ``mask`` holds: a branch
    computed on its own elements only."""
    out = xp.asarray(out)  # 0-d results of arithmetic may be scalars, which take no item assignment
    if mask.any().item():
        out[mask] = function(*(array[mask] for array in arrays))
    return out


def _erfc_continued_fraction(xp, x, terms):
    """erfc(x) for x >= 1: Laplace's continued fraction exp(-x^2) / sqrt(pi) / (x + 1/2 / (x + 1 / (x + 3/2 /
    (x + ...)))) to ``terms`` terms, evaluated from the tail."""
    finite = xp.where(x == math.inf, 1.0, x)
    fraction = finite
    for k in range(terms, 0, -1):
        fraction = finite + (k / 2) / fraction
    return xp.where(x == math.inf, 0.0, _exp_minus_square(xp, finite) * _INV_SQRT_PI / fraction)


# (from, terms): how many terms the continued fraction needs for float64 precision from each x on
_ERFC_FRACTION_TERMS = ((1.0, 200), (1.5, 100), (2.0, 60), (3.0, 30))


def erfc_array(xp, x):
    """erfc(x): 1 - erf(x) below 1 (no cancellation: erfc > 0.15 there), the continued fraction above
    (relative error near 1e-15 everywhere)."""
    with xp.errstate(divide="ignore", invalid="ignore", over="ignore", under="ignore"):
        out = 1 - _erf_series(xp, xp.where(x >= 1, 0.0, x))
        bounds = [start for start, _ in _ERFC_FRACTION_TERMS[1:]] + [math.inf]
        for (start, terms), stop in zip(_ERFC_FRACTION_TERMS, bounds):
            band = (x >= start) & ((x < stop) | (stop == math.inf))
            out = _on(xp, band, out, lambda z, terms=terms: _erfc_continued_fraction(xp, z, terms), x)
        return out


def _erfinv_near_zero(xp, a, x):
    """Newton steps on erf(x) = a, for a <= 1/2 (Giles' start is good to 1e-7 there: two steps suffice)."""
    for _ in range(2):
        x = x - (_erf_series(xp, x) - a) / (_TWO_OVER_SQRT_PI * _exp_minus_square(xp, x))
    return x


def _erfinv_near_one(xp, a, x):
    """Newton steps on log erfc(x) = log(1 - a), for 1/2 < a < 1: nearly linear in x there, and 1 - a is exact,
    so that even Giles' rougher start next to 1 converges in four steps."""
    log_complement = xp.log(1 - a)
    for _ in range(4):
        tail = erfc_array(xp, x)
        x = x + (xp.log(tail) - log_complement) * tail / (_TWO_OVER_SQRT_PI * _exp_minus_square(xp, x))
    return x


def erfinv_array(xp, y):
    """erfinv(y): Giles' single-precision approximation ("Approximating the erfinv function", 2010), then
    Newton steps on erf(x) = |y| (near 0) or on log erfc(x) = log(1 - |y|) (near 1, where 1 - |y| is exact)."""
    with xp.errstate(divide="ignore", invalid="ignore", over="ignore", under="ignore"):
        a = xp.abs(y)
        inside = a < 1
        a_in = xp.where(inside, a, 0.5)
        w = -xp.log((1 - a_in) * (1 + a_in))
        central, outer = w - 2.5, xp.sqrt(w) - 3
        p_central, p_outer = 2.81022636e-08, -0.000200214257
        for c_central, c_outer in ((3.43273939e-07, 0.000100950558), (-3.5233877e-06, 0.00134934322),
                                   (-4.39150654e-06, -0.00367342844), (0.00021858087, 0.00573950773),
                                   (-0.00125372503, -0.0076224613), (-0.00417768164, 0.00943887047),
                                   (0.246640727, 1.00167406), (1.50140941, 2.83297682)):
            p_central = c_central + p_central * central
            p_outer = c_outer + p_outer * outer
        start = xp.where(w < 5, p_central, p_outer) * a_in
        near_one = a_in > 0.5
        x = _on(xp, ~near_one, start.copy(), lambda a, x: _erfinv_near_zero(xp, a, x), a_in, start)
        x = _on(xp, near_one, x, lambda a, x: _erfinv_near_one(xp, a, x), a_in, start)
        out = xp.where(inside, x, xp.where(a == 1, math.inf, math.nan))
        return xp.copysign(out, y)


def i0_array(xp, x):
    """The modified Bessel function I0 (numpy's Chebyshev expansions, Cephes' i0, as PyTorch's: NaN at +-inf)."""
    return xp.i0(x)


def i1_array(xp, x):
    """The modified Bessel function I1 (the derivative of I0): its power series (x/2) sum (x^2/4)^k / (k! (k+1)!),
    every term positive, summed until the terms fall below float64 precision."""
    with xp.errstate(over="ignore", invalid="ignore"):
        half = x / 2
        quarter_square = half * half
        term = half
        total = half
        k = 0
        while True:
            k += 1
            term = term * quarter_square / (k * (k + 1))
            total = total + term
            if not (xp.abs(term) > 1e-17 * xp.abs(total)).any().item():
                return total


def _log_gamma_prefactor(xp, a, x):
    """log(x^a e^-x / Gamma(a)), the factor in front of both incomplete-gamma expansions."""
    return a * xp.log(x) - x - lgamma_array(xp, a)


def _regularized_gamma(xp, a, x, upper: bool):
    """P(a, x) (``upper=False``) or Q(a, x) = 1 - P(a, x), by the series of P where x < a + 1 and the continued
    fraction of Q elsewhere (Numerical Recipes' gser / gcf, Lentz's method), each element iterating until
    its terms fall below float64 precision. PyTorch's values at the edges: NaN for a < 0 or x < 0, for
    a = x = 0 and for a = x = inf; P = 1 for a = 0 < x and for x = inf; P = 0 for x = 0 and for a = inf
    (even where the other is NaN, as PyTorch checks them)."""
    with xp.errstate(divide="ignore", invalid="ignore", over="ignore", under="ignore"):
        shape = xp.broadcast_shapes(a.shape, x.shape)
        a, x = xp.broadcast_to(a, shape), xp.broadcast_to(x, shape)
        ordinary = (a > 0) & (x > 0) & xp.isfinite(a) & xp.isfinite(x)
        a_ok, x_ok = xp.where(ordinary, a, 1.0), xp.where(ordinary, x, 1.0)
        prefactor = xp.exp(_log_gamma_prefactor(xp, a_ok, x_ok))
        use_series = x_ok < a_ok + 1

        # series: P = prefactor / a * sum_n x^n / ((a + 1) ... (a + n))
        term = total = 1 / a_ok
        denominator = a_ok
        pending = use_series.copy()
        while pending.any().item():
            denominator = denominator + 1
            term = xp.where(pending, term * x_ok / denominator, term)
            total = xp.where(pending, total + term, total)
            pending = pending & (xp.abs(term) > xp.abs(total) * 1e-17)
        lower_series = total * prefactor

        # continued fraction: Q = prefactor * 1 / (x + 1 - a - 1 (1 - a) / (x + 3 - a - 2 (2 - a) / (x + 5 - a ...
        tiny = 1e-300
        b = x_ok + 1 - a_ok
        c = xp.full(a_ok.shape, 1 / tiny)
        d = 1 / xp.where(xp.abs(b) < tiny, tiny, b)
        h = d
        pending = ~use_series
        i = 0
        while pending.any().item():
            i += 1
            an = -i * (i - a_ok)
            b = b + 2
            d = an * d + b
            d = 1 / xp.where(xp.abs(d) < tiny, tiny, d)
            c = b + an / c
            c = xp.where(xp.abs(c) < tiny, tiny, c)
            delta = d * c
            h = xp.where(pending, h * delta, h)
            # a factor within two ulps of 1 changes nothing more (1e-16 would wait forever for 1 + 2.2e-16)
            pending = pending & (xp.abs(delta - 1) > 4.5e-16)
        upper_fraction = h * prefactor

        lower = xp.where(use_series, lower_series, 1 - upper_fraction)
        result = 1 - lower if upper else lower
        if upper:
            result = xp.where(use_series, result, upper_fraction)
        # PyTorch's checks (calc_igamma), the first that holds deciding, applied here from the last one up
        lower = xp.where(xp.isinf(x), 1.0, math.nan)
        lower = xp.where(xp.isinf(a), xp.where(xp.isinf(x), math.nan, 0.0), lower)
        lower = xp.where(x == 0, 0.0, lower)
        lower = xp.where(a == 0, xp.where(x > 0, 1.0, math.nan), lower)
        lower = xp.where((x < 0) | (a < 0), math.nan, lower)
        return xp.where(ordinary, result, 1 - lower if upper else lower)


# ---------------------------------------------------------------------------------------------------------
# Kernels
# ---------------------------------------------------------------------------------------------------------

def _special_kernel(name, grad_fn_name, value, derivative):
    """Register kernel ``name``: ``value(xp, a)`` and ``derivative(xp, a)``, both on float64 arrays."""
    @kernel(name, grad_fn_name)
    class Special(Op):
        @staticmethod
        def forward(ctx, a):
            ctx.save_for_backward(a)
            return _narrow(ctx.xp, value(ctx.xp, _float64(ctx.xp, a)), a.dtype)

        @staticmethod
        def backward(ctx, grad):
            (a,) = ctx.saved
            return grad * _narrow(ctx.xp, derivative(ctx.xp, _float64(ctx.xp, a)), a.dtype)

    Special.__name__ = Special.__qualname__ = grad_fn_name[:-len("Backward0")]
    return Special


_special_kernel("lgamma", "LgammaBackward0", lgamma_array, digamma_array)
_special_kernel("digamma", "DigammaBackward0", digamma_array, lambda xp, a: polygamma_array(xp, 1, a))
_special_kernel("erfc", "ErfcBackward0", erfc_array, lambda xp, a: -_TWO_OVER_SQRT_PI * _exp_minus_square(xp, a))
_special_kernel("i0", "I0Backward0", i0_array, i1_array)


@kernel("erfinv", "ErfinvBackward0")
class Erfinv(Op):
    @staticmethod
    def forward(ctx, a):
        out = erfinv_array(ctx.xp, _float64(ctx.xp, a))
        ctx.save_for_backward(out)
        return _narrow(ctx.xp, out, a.dtype)

    @staticmethod
    def backward(ctx, grad):
        (out,) = ctx.saved  # d erfinv(y) / dy = sqrt(pi) / 2 exp(erfinv(y)^2)
        with ctx.xp.errstate(over="ignore", divide="ignore"):
            return grad * _narrow(ctx.xp, 1 / (_TWO_OVER_SQRT_PI * _exp_minus_square(ctx.xp, out)), grad.dtype)


@kernel("polygamma", "PolygammaBackward0")
class Polygamma(Op):
    @staticmethod
    def forward(ctx, a, n):
        ctx.save_for_backward(a)
        ctx.n = n
        return _narrow(ctx.xp, polygamma_array(ctx.xp, n, _float64(ctx.xp, a)), a.dtype)

    @staticmethod
    def backward(ctx, grad):
        (a,) = ctx.saved
        return grad * _narrow(ctx.xp, polygamma_array(ctx.xp, ctx.n + 1, _float64(ctx.xp, a)), a.dtype), None


@kernel("mvlgamma", "MvlgammaBackward0")
class Mvlgamma(Op):
    """log of the multivariate gamma function: sum_i lgamma(a - i/2) + p (p - 1) / 4 log(pi)."""

    @staticmethod
    def forward(ctx, a, p):
        ctx.save_for_backward(a)
        ctx.p = p
        a64 = _float64(ctx.xp, a)
        total = sum(lgamma_array(ctx.xp, a64 - i / 2) for i in range(p))
        return _narrow(ctx.xp, total + p * (p - 1) / 4 * math.log(math.pi), a.dtype)

    @staticmethod
    def backward(ctx, grad):
        (a,) = ctx.saved
        a64 = _float64(ctx.xp, a)
        return grad * _narrow(ctx.xp, sum(digamma_array(ctx.xp, a64 - i / 2) for i in range(ctx.p)), a.dtype), None


def _incomplete_gamma_kernel(name, upper):
    @kernel(name, f"{name.capitalize()}Backward0")
    class IncompleteGamma(Op):
        @staticmethod
        def forward(ctx, a, x):
            xp = ctx.xp
            ctx.save_for_backward(a, x)
            return _narrow(xp, _regularized_gamma(xp, _float64(xp, a), _float64(xp, x), upper), a.dtype)

        @staticmethod
        def backward(ctx, grad):
            a, x = ctx.saved
            xp = ctx.xp
            if ctx.needs_input_grad[0]:
                raise NotImplementedError(f"the derivative for '{name}: input' is not implemented.")
            a64, x64 = _float64(xp, a), _float64(xp, x)
            with xp.errstate(divide="ignore", invalid="ignore", over="ignore"):
                # d P(a, x) / dx = x^(a-1) e^-x / Gamma(a); Q = 1 - P
                density = xp.exp((a64 - 1) * xp.log(x64) - x64 - lgamma_array(xp, a64))
            grad_x = grad * _narrow(xp, -density if upper else density, x.dtype)
            return None, sum_to_shape(grad_x, x.shape)

    IncompleteGamma.__name__ = IncompleteGamma.__qualname__ = name.capitalize()


_incomplete_gamma_kernel("igamma", upper=False)
_incomplete_gamma_kernel("igammac", upper=True)


# ---------------------------------------------------------------------------------------------------------
# Front ends
# ---------------------------------------------------------------------------------------------------------

def _unary(name, doc):
    def unary(input):
        if not isinstance(input, Tensor):
            raise not_tensors(input=input)
        return run1(name, to_floating(input))
    return public_function(unary, name, doc)


lgamma = _unary("lgamma", "log|Gamma(input)| (``torch.lgamma``).\n\n    >>> corenn.lgamma(corenn.tensor([3.0]))\n"
                          "    tensor([0.6931])")
digamma = _unary("digamma", "The logarithmic derivative of Gamma, psi(input) (``torch.digamma``).\n\n"
                            "    >>> corenn.digamma(corenn.tensor([1.0]))\n    tensor([-0.5772])")
erfc = _unary("erfc", "The complementary error function 1 - erf(input), accurate where it is tiny (``torch.erfc``)."
                      "\n\n    >>> corenn.erfc(corenn.tensor([0.0]))\n    tensor([1.])")
erfinv = _unary("erfinv", "The inverse error function on (-1, 1); +-inf at +-1 (``torch.erfinv``).\n\n"
                          "    >>> corenn.erfinv(corenn.tensor([0.0]))\n    tensor([0.])")
i0 = _unary("i0", "The modified Bessel function of the first kind of order zero (``torch.i0``).\n\n"
                  "    >>> corenn.i0(corenn.tensor([0.0]))\n    tensor([1.])")


def polygamma(n, input):
    """The n-th derivative of digamma (``torch.polygamma``).

    >>> corenn.polygamma(1, corenn.tensor([1.0]))  # pi^2 / 6
    tensor([1.6449])
    """
    if not isinstance(n, int) or isinstance(n, bool):
        raise TypeError(f"polygamma(): argument 'n' (position 1) must be int, not {type(n).__name__}")
    if not isinstance(input, Tensor):
        raise not_tensors(input=input)
    if n < 0:
        raise RuntimeError("polygamma(n, x) does not support negative n.")
    return run("polygamma", to_floating(input), n)


def _polygamma_method(self, n):
    """``self.polygamma(n)`` is ``corenn.polygamma(n, self)``, as in PyTorch."""
    return polygamma(n, self)


public_function(_polygamma_method, "polygamma")


def mvlgamma(input, p):
    """The log of the multivariate gamma function of dimension ``p`` (``torch.mvlgamma``).

    >>> corenn.mvlgamma(corenn.tensor([2.5]), p=1)  # lgamma
    tensor([0.2847])
    """
    if not isinstance(input, Tensor):
        raise not_tensors(input=input)
    if not isinstance(p, int) or isinstance(p, bool):
        raise TypeError(f"mvlgamma(): argument 'p' (position 2) must be int, not {type(p).__name__}")
    if p < 1:
        raise RuntimeError(named("p has to be greater than or equal to 1"))
    # PyTorch 2.13 no longer refuses elements <= (p - 1) / 2: lgamma's poles give +inf there
    return run("mvlgamma", to_floating(input), p)


def _incomplete_gamma(name, doc):
    def incomplete_gamma(input, other):
        input, other = _tensor_operands(name, input, other)
        if not input.dtype.is_floating_point:
            raise NotImplementedError(f"\"{name}_cpu\" not implemented for '{_type_name(input.dtype)}'")
        return run2(name, input, other)
    return public_function(incomplete_gamma, name, doc)


igamma = _incomplete_gamma("igamma", "The regularized lower incomplete gamma function P(input, other) "
                                     "(``torch.igamma``); differentiable in ``other`` only, as in PyTorch.\n\n"
                                     "    >>> corenn.igamma(corenn.tensor([1.0]), corenn.tensor([1.0]))  # 1 - 1/e\n"
                                     "    tensor([0.6321])")
igammac = _incomplete_gamma("igammac", "The regularized upper incomplete gamma function Q(input, other) = "
                                       "1 - P (``torch.igammac``); differentiable in ``other`` only.\n\n"
                                       "    >>> corenn.igammac(corenn.tensor([1.0]), corenn.tensor([1.0]))\n"
                                       "    tensor([0.3679])")

__all__ = ["digamma", "erfc", "erfinv", "i0", "igamma", "igammac", "lgamma", "mvlgamma", "polygamma"]
