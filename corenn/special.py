"""``torch.special`` for corenn: the special functions under their SciPy-style names.

Most are corenn's own functions under a second name (``expit`` is ``sigmoid``, ``gammaln`` is
``lgamma``, ``psi`` is ``digamma``, ...); ``ndtr``, ``ndtri``, ``xlog1py`` and ``entr`` are
built from differentiable ops. Not built yet: the Bessel and orthogonal-polynomial families,
``zeta``, ``erfcx``, ``log_ndtr``, ``i0e``, ``i1``, ``i1e``, ``airy_ai``.

    >>> import corenn
    >>> corenn.special.expit(corenn.tensor([0.0]))
    tensor([0.5000])
"""
from __future__ import annotations

import math

import corenn
from corenn._argcheck import not_tensors

__all__ = ["digamma", "psi", "erf", "erfc", "erfinv", "exp2", "expm1", "expit", "i0", "log1p", "log_softmax",
           "softmax", "logit", "logsumexp", "polygamma", "round", "sinc", "xlogy", "xlog1py", "gammaln", "gammainc",
           "gammaincc", "multigammaln", "ndtr", "ndtri", "entr"]

digamma = psi = corenn.digamma
erf, erfc, erfinv = corenn.erf, corenn.erfc, corenn.erfinv
exp2, expm1, log1p, i0 = corenn.exp2, corenn.expm1, corenn.log1p, corenn.i0
expit = corenn.sigmoid
logit, logsumexp, polygamma, round, sinc, xlogy = (corenn.logit, corenn.logsumexp, corenn.polygamma, corenn.round,
                                                   corenn.sinc, corenn.xlogy)
gammaln, gammainc, gammaincc, multigammaln = corenn.lgamma, corenn.igamma, corenn.igammac, corenn.mvlgamma


def softmax(input, dim, *, dtype=None):
    """``softmax`` with ``dim`` required, as in ``torch.special``."""
    return corenn.nn.functional.softmax(input, dim, dtype=dtype)


def log_softmax(input, dim, *, dtype=None):
    return corenn.nn.functional.log_softmax(input, dim, dtype=dtype)


def _tensor(value, name):
    if not isinstance(value, corenn.Tensor):
        raise not_tensors(**{name: value})
    return value


def ndtr(input):
    """The standard normal distribution function, ``(1 + erf(x / sqrt 2)) / 2``, through ``erfc`` so that the
    lower tail keeps its precision."""
    x = _tensor(input, "input")
    return 0.5 * corenn.erfc(-x / math.sqrt(2))


def ndtri(input):
    """The inverse of ``ndtr``: ``sqrt(2) * erfinv(2 p - 1)`` (``inf`` / ``-inf`` at 1 / 0, NaN outside [0, 1])."""
    p = _tensor(input, "input")
    return math.sqrt(2) * corenn.erfinv(2 * p - 1)


def xlog1py(input, other):
    """``input * log1p(other)``, 0 where ``input`` is 0 (unless ``other`` is NaN)."""
    x = input if isinstance(input, corenn.Tensor) else corenn.tensor(input)
    y = other if isinstance(other, corenn.Tensor) else corenn.tensor(other, dtype=x.dtype)
    product = x * corenn.log1p(y)
    return corenn.where((x == 0) & ~corenn.isnan(y), corenn.zeros_like(product), product)


def entr(input):
    """Elementwise entropy ``-x log x``: 0 at 0, ``-inf`` for negative ``x``."""
    x = _tensor(input, "input")
    positive = x > 0
    safe = corenn.where(positive, x, corenn.ones_like(x))  # log(1) = 0 on the other branch, no nan in backward
    value = -x * corenn.log(safe)
    return corenn.where(positive, value, corenn.where(x == 0, corenn.zeros_like(x),
                                                      corenn.full_like(x, -math.inf)))
