"""``torch.distributions`` for corenn: the distributions programs use most, with PyTorch's interface.

``Normal``, ``Uniform``, ``Bernoulli`` and ``Categorical`` with ``sample`` / ``rsample``
(reparameterized, so gradients flow to the parameters), ``log_prob``, ``entropy``, ``mean``,
``variance``, ``stddev``, ``batch_shape`` / ``event_shape``, ``expand``-free broadcasting of
parameters, and ``kl_divergence`` between two of the same family. ``validate_args`` checks
parameters and values as PyTorch's do (on by default, as there). Draws come from corenn's
generator, so they are reproducible with ``corenn.manual_seed`` but are not PyTorch's numbers.
Other families (``Beta``, ``MultivariateNormal``, transforms, ...) are not built yet.

    >>> import corenn
    >>> from corenn.distributions import Categorical
    >>> Categorical(logits=corenn.tensor([0.0, 0.0])).log_prob(corenn.tensor(1))
    tensor(-0.6931)
"""
from __future__ import annotations

import math

import corenn
import corenn.nn.functional as F

__all__ = ["Distribution", "Normal", "Uniform", "Bernoulli", "Categorical", "kl_divergence"]


def _as_tensor(value, like=None):
    if isinstance(value, corenn.Tensor):
        return value
    dtype = like.dtype if isinstance(like, corenn.Tensor) and like.dtype.is_floating_point else None
    return corenn.tensor(value, dtype=dtype or corenn.get_default_dtype())


def _size(sample_shape) -> tuple:
    if isinstance(sample_shape, int):
        return (sample_shape,)
    return tuple(sample_shape)


class Distribution:
    """The shared interface (``torch.distributions.Distribution``)."""

    has_rsample = False

    def __init__(self, batch_shape=(), event_shape=(), validate_args=None):
        self._batch_shape = corenn.Size(batch_shape)
        self._event_shape = corenn.Size(event_shape)
        self._validate_args = True if validate_args is None else bool(validate_args)

    @property
    def batch_shape(self):
        return self._batch_shape

    @property
    def event_shape(self):
        return self._event_shape

    def _extended_shape(self, sample_shape=()) -> tuple:
        return _size(sample_shape) + tuple(self._batch_shape) + tuple(self._event_shape)

    def sample(self, sample_shape=()):
        with corenn.no_grad():
            return self.rsample(sample_shape) if self.has_rsample else self._sample(sample_shape)

    def rsample(self, sample_shape=()):
        raise NotImplementedError(f"{type(self).__name__} has no rsample: its samples are not differentiable in "
                                  "its parameters")

    @property
    def stddev(self):
        return self.variance.sqrt()

    def perplexity(self):
        return corenn.exp(self.entropy())

    def _check_value(self, value, support: str):
        if not self._validate_args:
            return
        if support == "real":
            ok = True
        elif support == "unit_interval":
            ok = bool(((value >= 0) & (value <= 1)).all())
        elif support == "boolean":
            ok = bool(((value == 0) | (value == 1)).all())
        else:  # an integer interval [0, support)
            ok = bool(((value >= 0) & (value < support) & (value == value.floor())).all())
        if not ok:
            raise ValueError(f"Expected value argument ({type(value).__name__} of shape {tuple(value.shape)}) to be "
                             f"within the support ({support}) of the distribution {self!r}, but found invalid values")

    def __repr__(self):
        parts = ", ".join(f"{name}: {getattr(self, name).shape}" for name in self._parameter_names)
        return f"{type(self).__name__}({parts})"


class Normal(Distribution):
    """The normal distribution ``N(loc, scale^2)``."""

    has_rsample = True
    _parameter_names = ("loc", "scale")

    def __init__(self, loc, scale, validate_args=None):
        self.loc, self.scale = corenn.broadcast_tensors(_as_tensor(loc, scale), _as_tensor(scale, loc))
        if (validate_args is None or validate_args) and not bool((self.scale > 0).all()):
            raise ValueError(f"Expected parameter scale ({type(self.scale).__name__} of shape "
                             f"{tuple(self.scale.shape)}) of distribution Normal(loc: {self.loc.shape}, scale: "
                             f"{self.scale.shape}) to satisfy the constraint GreaterThan(lower_bound=0.0), but found "
                             "invalid values")
        super().__init__(self.loc.shape, validate_args=validate_args)

    @property
    def mean(self):
        return self.loc

    @property
    def mode(self):
        return self.loc

    @property
    def variance(self):
        return self.scale ** 2

    def rsample(self, sample_shape=()):
        eps = corenn.randn(self._extended_shape(sample_shape), dtype=self.loc.dtype)
        return self.loc + eps * self.scale

    def log_prob(self, value):
        value = _as_tensor(value, self.loc)
        return -((value - self.loc) ** 2) / (2 * self.variance) - self.scale.log() - math.log(math.sqrt(2 * math.pi))

    def cdf(self, value):
        return 0.5 * (1 + corenn.erf((_as_tensor(value, self.loc) - self.loc) / (self.scale * math.sqrt(2))))

    def icdf(self, value):
        return self.loc + self.scale * corenn.erfinv(2 * _as_tensor(value, self.loc) - 1) * math.sqrt(2)

    def entropy(self):
        return 0.5 + 0.5 * math.log(2 * math.pi) + self.scale.log()


class Uniform(Distribution):
    """The uniform distribution on ``[low, high)``."""

    has_rsample = True
    _parameter_names = ("low", "high")

    def __init__(self, low, high, validate_args=None):
        self.low, self.high = corenn.broadcast_tensors(_as_tensor(low, high), _as_tensor(high, low))
        if (validate_args is None or validate_args) and not bool((self.low < self.high).all()):
            raise ValueError("Expected parameter low of distribution Uniform to satisfy the constraint "
                             "LessThan(upper_bound=high), but found invalid values")
        super().__init__(self.low.shape, validate_args=validate_args)

    @property
    def mean(self):
        return (self.low + self.high) / 2

    @property
    def variance(self):
        return (self.high - self.low) ** 2 / 12

    def rsample(self, sample_shape=()):
        u = corenn.rand(self._extended_shape(sample_shape), dtype=self.low.dtype)
        return self.low + u * (self.high - self.low)

    def log_prob(self, value):
        value = _as_tensor(value, self.low)
        inside = ((value >= self.low) & (value < self.high)).to(self.low.dtype)
        return inside.log() - (self.high - self.low).log()

    def entropy(self):
        return (self.high - self.low).log()


class Bernoulli(Distribution):
    """Independent coin flips, given ``probs`` or ``logits`` (one of them)."""

    _parameter_names = ("probs", "logits")

    def __init__(self, probs=None, logits=None, validate_args=None):
        if (probs is None) == (logits is None):
            raise ValueError("Either `probs` or `logits` must be specified, but not both.")
        if probs is not None:
            self.probs = _as_tensor(probs)
            if (validate_args is None or validate_args) and not bool(((self.probs >= 0) & (self.probs <= 1)).all()):
                raise ValueError("Expected parameter probs of distribution Bernoulli to satisfy the constraint "
                                 "Interval(lower_bound=0.0, upper_bound=1.0), but found invalid values")
            clamped = self.probs.clamp(corenn.finfo(self.probs.dtype).eps, 1 - corenn.finfo(self.probs.dtype).eps)
            self.logits = clamped.log() - (-clamped).log1p()
        else:
            self.logits = _as_tensor(logits)
            self.probs = corenn.sigmoid(self.logits)
        super().__init__(self.probs.shape, validate_args=validate_args)

    @property
    def mean(self):
        return self.probs

    @property
    def variance(self):
        return self.probs * (1 - self.probs)

    def _sample(self, sample_shape):
        return corenn.bernoulli(self.probs.expand(self._extended_shape(sample_shape)))

    def log_prob(self, value):
        value = _as_tensor(value, self.logits)
        self._check_value(value, "boolean")
        logits, value = corenn.broadcast_tensors(self.logits, value.to(self.logits.dtype))
        return -F.binary_cross_entropy_with_logits(logits, value, reduction="none")

    def entropy(self):
        return F.binary_cross_entropy_with_logits(self.logits, self.probs, reduction="none")


class Categorical(Distribution):
    """A choice among the last dimension's categories, given ``probs`` (normalized here) or ``logits``."""

    _parameter_names = ("probs", "logits")

    def __init__(self, probs=None, logits=None, validate_args=None):
        if (probs is None) == (logits is None):
            raise ValueError("Either `probs` or `logits` must be specified, but not both.")
        if probs is not None:
            probs = _as_tensor(probs)
            if probs.dim() < 1:
                raise ValueError("`probs` parameter must be at least one-dimensional.")
            if (validate_args is None or validate_args) and not bool((probs >= 0).all()):
                raise ValueError("Expected parameter probs of distribution Categorical to satisfy the constraint "
                                 "Simplex(), but found invalid values")
            self.probs = probs / probs.sum(-1, keepdim=True)
            eps = corenn.finfo(self.probs.dtype).eps
            self.logits = self.probs.clamp(eps, 1 - eps).log()
        else:
            logits = _as_tensor(logits)
            if logits.dim() < 1:
                raise ValueError("`logits` parameter must be at least one-dimensional.")
            self.logits = logits - logits.logsumexp(-1, keepdim=True)
            self.probs = F.softmax(self.logits, -1)
        self._num_events = self.probs.shape[-1]
        super().__init__(self.probs.shape[:-1], validate_args=validate_args)

    @property
    def param_shape(self):
        return self.probs.shape

    @property
    def mean(self):
        return corenn.full(self._extended_shape(), float("nan"), dtype=self.probs.dtype)

    @property
    def mode(self):
        return self.probs.argmax(-1)

    @property
    def variance(self):
        return corenn.full(self._extended_shape(), float("nan"), dtype=self.probs.dtype)

    def _sample(self, sample_shape):
        shape = _size(sample_shape)
        count = math.prod(shape) if shape else 1
        flat = self.probs.reshape(-1, self._num_events)
        draws = corenn.multinomial(flat, count, replacement=True)  # (batch, count)
        return draws.T.reshape(shape + tuple(self._batch_shape))

    def log_prob(self, value):
        value = _as_tensor(value).long()
        self._check_value(value, self._num_events)
        value, log_pmf = corenn.broadcast_tensors(value.unsqueeze(-1), self.logits)
        return log_pmf.gather(-1, value[..., :1]).squeeze(-1)

    def entropy(self):
        eps = corenn.finfo(self.logits.dtype).min
        return -(self.logits.clamp(min=eps) * self.probs).sum(-1)

    def enumerate_support(self, expand=True):
        values = corenn.arange(self._num_events).reshape((-1,) + (1,) * len(self._batch_shape))
        return values.expand((-1,) + tuple(self._batch_shape)) if expand else values


def kl_divergence(p, q):
    """KL(p || q) for two distributions of one family (Normal, Uniform, Bernoulli, Categorical)."""
    if type(p) is not type(q):
        raise NotImplementedError(f"kl_divergence: no KL divergence between {type(p).__name__} and "
                                  f"{type(q).__name__} in corenn")
    if isinstance(p, Normal):
        ratio = (p.scale / q.scale) ** 2
        return 0.5 * (ratio + ((p.loc - q.loc) / q.scale) ** 2 - 1 - ratio.log())
    if isinstance(p, Categorical):
        return (p.probs * (p.logits - q.logits)).sum(-1)
    if isinstance(p, Bernoulli):
        return (p.probs * (F.softplus(-q.logits) - F.softplus(-p.logits))
                + (1 - p.probs) * (F.softplus(q.logits) - F.softplus(p.logits)))
    if isinstance(p, Uniform):
        result = ((q.high - q.low) / (p.high - p.low)).log()
        outside = (q.low > p.low) | (q.high < p.high)
        return corenn.where(outside, corenn.full_like(result, math.inf), result)
    raise NotImplementedError(f"kl_divergence: {type(p).__name__} is not supported in corenn")
