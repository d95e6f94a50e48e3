"""Random numbers: ``Generator``, ``manual_seed`` and the random creation functions.

A ``corenn.Generator`` wraps its device backend's generator (numpy's PCG64 on
``cpu``). The same seed gives the same numbers on the same backend; the
streams are corenn's own and do not reproduce PyTorch's bit for bit.
"""
from __future__ import annotations

import json
import math

import numpy as np

from corenn import _dtype, dispatch
from corenn._argcheck import check_dtype, check_int, check_number, named, not_tensors, type_name

__all__ = ["Generator", "default_generator", "manual_seed", "seed", "initial_seed", "get_rng_state",
           "set_rng_state", "rand", "randn", "randint", "randperm", "multinomial", "normal", "bernoulli",
           "rand_like", "randn_like", "randint_like", "poisson", "binomial"]

_DEFAULT_SEED = 67280421310721  # PyTorch's default CPU seed, so initial_seed() reads the same


class HostDrawnGenerator:
    """The RNG of a backend without ``random_generator``: numpy draws on the host, ``to_device`` moves the result.

    Correct on any backend, and as reproducible as the cpu's, at the cost of one
    transfer per draw; a backend with an RNG of its own passes ``random_generator``.
    The result lands on the backend's current index (``corenn`` draws inside
    ``device_guard``).

    Example::

        >>> rng = HostDrawnGenerator(0, dispatch.get_backend("cpu"))
        >>> rng.random((2,)).shape
        (2,)
    """

    def __init__(self, seed, backend):
        self._rng = np.random.default_rng(seed)
        self._backend = backend
        self.bit_generator = self._rng.bit_generator  # the state corenn reads, sets and saves

    def __getattr__(self, name):  # random, standard_normal, integers, ...: numpy's draw, moved
        if name not in dispatch.RNG_METHODS:
            raise AttributeError(f"{type(self).__name__} has no attribute {name!r}")
        draw, backend = getattr(self._rng, name), self._backend

        def on_device(*args, **kwargs):
            # Array arguments (poisson's rates) may have been computed on the device.
            args = [backend.to_host(a) if hasattr(a, "shape") and not isinstance(a, np.ndarray) else a for a in args]
            return backend.to_device(np.asarray(draw(*args, **kwargs)), backend.current_index())
        return on_device


class Generator:
    """A random-number stream for one device (mirrors ``torch.Generator``).

    Example::

        >>> g = corenn.Generator().manual_seed(0)
        >>> corenn.rand(2, generator=g)   # same numbers every time for seed 0
    """

    def __init__(self, device="cpu"):
        self.device = dispatch.device(device)
        self._seed = _DEFAULT_SEED
        self._rng = self._make(self._seed)

    def _make(self, seed):
        backend = dispatch.get_backend(self.device.type)
        if backend.random_generator is None:
            return HostDrawnGenerator(seed, backend)
        rng = backend.random_generator(seed)
        missing = [name for name in dispatch.RNG_METHODS if not callable(getattr(rng, name, None))]
        if missing:
            raise TypeError(f"the {self.device.type!r} backend's random_generator(seed) returned a "
                            f"{type(rng).__name__} without {', '.join(missing)}: it must return an object with "
                            f"the methods of corenn.dispatch.RNG_METHODS (numpy.random.Generator's signatures)")
        return rng

    def manual_seed(self, seed) -> "Generator":
        seed = int(seed)
        if not -(2 ** 63) <= seed < 2 ** 64:
            raise RuntimeError(f"Overflow when unpacking long: seed {seed} is outside [-2**63, 2**64)")
        self._seed = seed % (2 ** 64)
        self._rng = self._make(self._seed)
        return self

    def seed(self) -> int:
        """Reseed from OS entropy; returns the new seed."""
        new_seed = int(np.random.SeedSequence().entropy % (2 ** 63))
        self.manual_seed(new_seed)
        return new_seed

    def initial_seed(self) -> int:
        return self._seed

    def get_state(self):
        """The generator state as a uint8 tensor (restorable with ``set_state``)."""
        from corenn.tensor.tensor import from_numpy
        state = getattr(self._rng, "bit_generator", self._rng).state
        encoded = json.dumps({"seed": self._seed, "state": state}, default=int).encode()
        return from_numpy(np.frombuffer(encoded, dtype=np.uint8).copy())

    def set_state(self, new_state) -> "Generator":
        try:
            decoded = json.loads(bytes(new_state.numpy().astype(np.uint8)).decode())
            self._seed = decoded["seed"]
            self._rng = self._make(self._seed)
            getattr(self._rng, "bit_generator", self._rng).state = decoded["state"]
        except (ValueError, KeyError, TypeError, AttributeError) as error:
            raise RuntimeError(f"Generator.set_state: not a state produced by get_state ({error})") from None
        return self

    def __repr__(self):
        return f"<corenn.Generator object (device={self.device}, seed={self._seed})>"


default_generator: Generator | None = None
_device_generators: dict = {}


def _default_for(device) -> Generator:
    global default_generator
    if device.type == "cpu":
        if default_generator is None:
            default_generator = Generator("cpu")
        return default_generator
    key = (device.type, device.index)
    gen = _device_generators.get(key)
    if gen is None:
        # A device first used after manual_seed(s) starts from s, as PyTorch seeds CUDA lazily.
        gen = _device_generators[key] = Generator(device).manual_seed(_default_for(dispatch.device("cpu")).initial_seed())
    return gen


def _generator(device, generator):
    """The RNG object to draw arrays for ``device`` with; on an indexed device its draws land on that index."""
    if generator is None:
        rng = _default_for(device)._rng
    elif not isinstance(generator, Generator):
        raise TypeError(named(f"argument 'generator' must be corenn.Generator, not {type_name(generator)}"))
    elif generator.device.type != device.type:
        raise RuntimeError(f"Expected a '{device.type}' device type for generator but found '{generator.device.type}'")
    else:
        rng = generator._rng
    return rng if device.index is None else _OnDevice(rng, device)


class _OnDevice:
    """An RNG object whose draws run under ``device``'s guard (the backend's current index)."""

    __slots__ = ("_rng", "_device")

    def __init__(self, rng, device):
        self._rng, self._device = rng, device

    def __getattr__(self, name):
        method = getattr(self._rng, name)

        def draw(*args, **kwargs):
            with dispatch.device_guard(self._device):
                return method(*args, **kwargs)
        return draw


def _live_device_generators() -> list:
    """The default generators of devices whose backend is still registered (a plugin may have been removed)."""
    for key in [key for key in _device_generators if key[0] not in dispatch.backends]:
        del _device_generators[key]
    return list(_device_generators.values())


def manual_seed(seed) -> Generator:
    """Seed every device's default generator; returns the CPU one (``torch.manual_seed``)."""
    gen = _default_for(dispatch.device("cpu")).manual_seed(seed)
    for other in _live_device_generators():
        other.manual_seed(seed)
    return gen


def seed() -> int:
    new_seed = _default_for(dispatch.device("cpu")).seed()
    for other in _live_device_generators():
        other.manual_seed(new_seed)
    return new_seed


def initial_seed() -> int:
    return _default_for(dispatch.device("cpu")).initial_seed()


def get_rng_state():
    return _default_for(dispatch.device("cpu")).get_state()


def set_rng_state(new_state) -> None:
    _default_for(dispatch.device("cpu")).set_state(new_state)


# ---------------------------------------------------------------------------------------------------------
# Raw draws (used by the creation functions and the in-place ``uniform_``/``normal_``/...)
# ---------------------------------------------------------------------------------------------------------

def _float_dtype(np_dtype):
    # Generators draw float32/float64; float16 values are drawn in float32 and rounded.
    return np_dtype if np_dtype in (np.float32, np.float64) else np.float32


def uniform_array(like, low, high, generator):
    low, high = check_number(low, "from"), check_number(high, "to")
    rng = _generator(like._device, generator)
    np_dtype = like._data.dtype
    values = rng.random(like._data.shape, dtype=_float_dtype(np_dtype))
    if low != 0 or high != 1:
        values = values * (high - low) + low
    return values.astype(np_dtype, copy=False)


def normal_array(like, mean, std, generator):
    mean, std = check_number(mean, "mean"), check_number(std, "std")
    rng = _generator(like._device, generator)
    np_dtype = like._data.dtype
    values = rng.standard_normal(like._data.shape, dtype=_float_dtype(np_dtype))
    if std != 1 or mean != 0:
        values = values * std + mean
    return values.astype(np_dtype, copy=False)


def random_array(like, low, high, generator):
    low, high = check_int(low, "from"), None if high is None else check_int(high, "to")
    if high is not None and low >= high:
        raise RuntimeError(named(f"random_ expects 'from' to be less than 'to', but got from={low} >= to={high}"))
    rng = _generator(like._device, generator)
    np_dtype = like._data.dtype
    if high is None:
        # PyTorch: [0, 2^mantissa] for floats, the dtype's range for integers.
        if np_dtype.kind == "f":
            high = 2 ** {2: 11, 4: 24, 8: 53}[np_dtype.itemsize] + 1
        elif np_dtype.kind == "b":
            high = 2
        else:
            high = int(np.iinfo(np_dtype).max) + 1
    return rng.integers(low, high, size=like._data.shape).astype(np_dtype)


def bernoulli_array(like, p, generator):
    rng = _generator(like._device, generator)
    probabilities = p._data if hasattr(p, "_data") else check_number(p, "p")
    draws = rng.random(like._data.shape)
    shape = getattr(probabilities, "shape", ())
    if shape != draws.shape and (len(shape) > draws.ndim or any(
            p not in (1, d) for p, d in zip(shape[::-1], draws.shape[::-1]))):
        raise RuntimeError(named(f"expected p of a shape that broadcasts to {list(draws.shape)}, got {list(shape)}"))
    return (draws < probabilities).astype(like._data.dtype)


def cauchy_array(like, median, sigma, generator):
    """Cauchy samples, median + sigma tan(pi (u - 1/2)) for uniform u (the inverse of the CDF)."""
    median, sigma = check_number(median, "median"), check_number(sigma, "sigma")
    if like._data.dtype.kind not in "fV":
        raise RuntimeError(named(f"Cauchy distribution is a continuous probability distribution. dtype must be a "
                                 f"floating point but you specified {_C_TYPE_NAMES.get(like._data.dtype.name, '')}"))
    if not sigma > 0:
        raise RuntimeError(named(f"cauchy_ expects sigma > 0.0, but found sigma={sigma}"))
    rng = _generator(like._device, generator)
    uniform = rng.random(like._data.shape)
    return (median + sigma * like._device._xp.tan(math.pi * (uniform - 0.5))).astype(like._data.dtype)


# PyTorch's C++ type names in its "dtype must be a floating point" messages
_C_TYPE_NAMES = {"int64": "long int", "int32": "int", "int16": "short int", "int8": "signed char",
                 "uint8": "unsigned char", "bool": "bool"}


def geometric_array(like, p, generator):
    """Geometric samples: the number of Bernoulli(p) trials up to the first success (1, 2, ...)."""
    p = check_number(p, "p")
    if not 0 < p < 1:
        raise RuntimeError(named(f"geometric_ expects p to be in (0, 1), but got p={p}"))
    rng = _generator(like._device, generator)
    xp = like._device._xp
    # the inverse of the CDF, PyTorch's formula: ceil(log(u) / log(1 - p)) for u uniform in (0, 1]
    trials = xp.ceil(xp.log(1 - rng.random(like._data.shape)) / math.log1p(-p))
    return xp.maximum(trials, 1).astype(like._data.dtype)


def log_normal_array(like, mean, std, generator):
    """Log-normal samples: exp of normal samples with the given mean and std."""
    mean, std = check_number(mean, "mean"), check_number(std, "std")
    if like._data.dtype.kind not in "fV":
        raise NotImplementedError(f"\"log_normal_cpu\" not implemented for '{_TORCH_TYPE_NAMES.get(like._data.dtype.name)}'")
    if not std > 0:
        raise RuntimeError(named(f"log_normal_ expects std > 0.0, but found std={std}"))
    rng = _generator(like._device, generator)
    return like._device._xp.exp(rng.standard_normal(like._data.shape) * std + mean).astype(like._data.dtype)


_TORCH_TYPE_NAMES = {"int64": "Long", "int32": "Int", "int16": "Short", "int8": "Char", "uint8": "Byte", "bool": "Bool",
                     "float64": "Double", "float32": "Float", "float16": "Half", "bfloat16": "BFloat16"}


def exponential_array(like, lambd, generator):
    lambd = check_number(lambd, "lambd")
    rng = _generator(like._device, generator)
    return (rng.standard_exponential(like._data.shape) / lambd).astype(like._data.dtype)


# ---------------------------------------------------------------------------------------------------------
# Creation functions
# ---------------------------------------------------------------------------------------------------------

def _empty_like_spec(sizes, dtype, device, size=None):
    from corenn.tensor.creation import empty
    return empty(*sizes, size=size, dtype=dtype, device=device)


def rand(*sizes, size=None, generator=None, dtype=None, device=None, requires_grad=False, out=None):
    """Uniform samples from [0, 1) (``torch.rand``)."""
    t = _empty_like_spec(sizes, _dtype.get_default_dtype() if dtype is None else dtype, device, size)
    if not t.dtype.is_floating_point:
        raise RuntimeError(named(f"\"check_uniform_bounds\" not implemented for '{t.dtype}'"))
    t._data = uniform_array(t, 0.0, 1.0, generator)
    return t.requires_grad_(requires_grad)


def randn(*sizes, size=None, generator=None, dtype=None, device=None, requires_grad=False, out=None):
    """Standard normal samples (``torch.randn``)."""
    t = _empty_like_spec(sizes, _dtype.get_default_dtype() if dtype is None else dtype, device, size)
    if not t.dtype.is_floating_point:
        raise RuntimeError(named(f"\"normal_kernel_cpu\" not implemented for '{t.dtype}'"))
    t._data = normal_array(t, 0.0, 1.0, generator)
    return t.requires_grad_(requires_grad)


def randint(low, high=None, size=None, *, generator=None, dtype=None, device=None, requires_grad=False):
    """Integers uniform in [low, high) (``torch.randint(low=0, high, size)``)."""
    if size is None:
        if high is None or not isinstance(high, (tuple, list)):
            raise TypeError("randint() missing required argument 'size'")
        low, high, size = 0, low, high
    elif high is None:
        low, high = 0, low
    low, high = check_int(low, "low"), check_int(high, "high")
    if not isinstance(size, (tuple, list)):
        raise TypeError(named(f"argument 'size' must be tuple of ints, not {type_name(size)}"))
    if high <= low:
        raise RuntimeError(named(f"random_ expects 'from' to be less than 'to', but got from={low} >= to={high}"))
    t = _empty_like_spec(tuple(size), _dtype.int64 if dtype is None else dtype, device)
    rng = _generator(t._device, generator)
    t._data = _to_device(rng.integers(low, high, size=tuple(size)).astype(t._data.dtype), t._device)
    return t


def _to_device(array, device):
    if device.type == "cpu" or not isinstance(array, np.ndarray):
        return array
    return dispatch.get_backend(device.type).to_device(array, device.index)


def randperm(n, *, generator=None, dtype=None, device=None, requires_grad=False):
    """A random permutation of ``0 .. n-1`` (``torch.randperm``)."""
    from corenn.tensor.tensor import Tensor
    n = check_int(n, "n")
    dtype = _dtype.int64 if dtype is None else check_dtype(dtype)
    if n < 0:
        raise RuntimeError(f"randperm(): n must be non-negative, got {n}")
    target = dispatch.resolve_device(device) if device is not None else dispatch.device("cpu")
    rng = _generator(target, generator)
    array = rng.permutation(n).astype(dtype.numpy)
    return Tensor._wrap(_to_device(array, target), target)


def multinomial(input, num_samples, replacement=False, *, generator=None):
    """Draw category indices with probabilities proportional to ``input``'s rows (``torch.multinomial``)."""
    from corenn.tensor.tensor import Tensor
    if not isinstance(input, Tensor):
        raise not_tensors(input=input)
    num_samples = check_int(num_samples, "num_samples")
    if num_samples <= 0:
        raise RuntimeError(f"multinomial(): cannot sample n_sample <= 0 samples ({num_samples})")
    weights = input._host().astype(np.float64)
    if weights.ndim not in (1, 2):
        raise RuntimeError(f"multinomial(): prob_dist must be 1 or 2 dim, got {weights.ndim}")
    if weights.shape[-1] == 0:
        raise RuntimeError("multinomial(): prob_dist must have at least one category")
    if (weights < 0).any() or not np.isfinite(weights).all():
        raise RuntimeError("probability tensor contains either `inf`, `nan` or element < 0")
    rows = weights.reshape(-1, weights.shape[-1])
    if not replacement and num_samples > rows.shape[1]:
        raise RuntimeError(f"cannot sample n_sample > prob_dist.size(-1) samples without replacement "
                           f"({num_samples} > {rows.shape[1]})")
    rng = _generator(dispatch.device("cpu"), generator if generator is None or generator.device.type == "cpu"
                     else None)
    out = np.empty((rows.shape[0], num_samples), dtype=np.int64)
    for r, row in enumerate(rows):
        total = row.sum()
        if total <= 0:
            raise RuntimeError("invalid multinomial distribution (sum of probabilities <= 0)")
        if replacement:
            out[r] = rng.choice(len(row), size=num_samples, replace=True, p=row / total)
        else:
            # Gumbel-top-k: k draws without replacement in one pass (zero weights never chosen).
            keys = np.where(row > 0, np.log(np.where(row > 0, row, 1)) - np.log(-np.log(rng.random(len(row)))),
                            -np.inf)
            chosen = np.argsort(-keys, kind="stable")[:num_samples]
            if num_samples > np.count_nonzero(row):
                raise RuntimeError("invalid multinomial distribution (with replacement=False, not enough non-negative "
                                   "category to sample)")
            out[r] = chosen
    result = out.reshape(weights.shape[:-1] + (num_samples,))
    return Tensor._wrap(_to_device(result, input._device), input._device)


def normal(mean, std=1.0, size=None, *, generator=None, dtype=None, device=None):
    """Normal samples with the given mean and std (tensors broadcast, or numbers with ``size``)."""
    from corenn.tensor.tensor import Tensor
    if isinstance(mean, Tensor) or isinstance(std, Tensor):
        like = mean if isinstance(mean, Tensor) else std
        shape = np.broadcast_shapes(getattr(mean, "shape", ()), getattr(std, "shape", ()))
        noise = randn(*shape, generator=generator, dtype=like.dtype, device=like._device)
        return noise * std + mean
    mean, std = check_number(mean, "mean"), check_number(std, "std")
    if not isinstance(size, (tuple, list)):
        raise TypeError(named(f"argument 'size' must be tuple of ints, not {type_name(size)}"))
    noise = randn(*tuple(size), generator=generator, dtype=dtype, device=device)
    return noise * std + mean


def bernoulli(input, p=None, *, generator=None):
    """0/1 samples: 1 with probability ``input`` (or ``p``, a number), in ``input``'s dtype (``torch.bernoulli``)."""
    from corenn.tensor.tensor import Tensor
    if not isinstance(input, Tensor):
        raise not_tensors(input=input)
    if p is None:
        if input._data.dtype.kind not in "fV":
            raise NotImplementedError(f"\"bernoulli_tensor_cpu_p_\" not implemented for "
                                      f"'{_TORCH_TYPE_NAMES.get(input._data.dtype.name)}'")
        if not bool(((input._data >= 0) & (input._data <= 1)).all().item()):
            raise RuntimeError(named("Expected p_in >= 0 && p_in <= 1 to be true, but got false."))
    elif not isinstance(p, Tensor) and not 0 <= check_number(p, "p") <= 1:
        raise RuntimeError(named(f"bernoulli_ expects p to be in [0, 1], but got p={p}"))
    probabilities = input if p is None else p
    return Tensor._wrap(bernoulli_array(input, probabilities, generator), input._device)


def binomial(count, prob, generator=None):
    """Binomial samples: successes in ``count`` trials (truncated to integers) of probability ``prob``, in count's
    dtype (``torch.binomial``). As PyTorch's draws show, a count below 0 acts as 0 and a probability outside
    [0, 1] as the nearer end; a NaN count or probability gives NaN (PyTorch never returns there).

    >>> binomial(corenn.tensor([10.0]), corenn.tensor([0.0]))
    tensor([0.])
    """
    from corenn.tensor.tensor import Tensor
    if not isinstance(count, Tensor):
        raise not_tensors(count=count)
    if not isinstance(prob, Tensor):
        raise TypeError(f"binomial(): argument 'prob' (position 2) must be Tensor, not {type_name(prob)}")
    name = count._data.dtype.name
    if count._data.dtype.kind not in "fV":
        raise ValueError(f"binomial only supports floating-point dtypes for count, got: {_TORCH_TYPE_NAMES.get(name)}")
    if name not in ("float32", "float64"):
        raise NotImplementedError(f"\"binomial_cpu\" not implemented for '{_TORCH_TYPE_NAMES.get(name, name)}'")
    if prob._data.dtype != count._data.dtype:
        raise RuntimeError(named(f"Found dtype {_TORCH_TYPE_NAMES.get(prob._data.dtype.name)} but expected "
                                 f"{_TORCH_TYPE_NAMES.get(name)}"))
    if generator is not None and not isinstance(generator, Generator):
        raise TypeError(named(f"argument 'generator' must be corenn.Generator, not {type_name(generator)}"))
    from corenn.ops._kernel import broadcast_shapes
    shape = broadcast_shapes(tuple(count.shape), tuple(prob.shape))
    trials, probability = np.broadcast_to(count._host(), shape), np.broadcast_to(prob._host(), shape)
    unknown = np.isnan(trials) | np.isnan(probability)
    # drawn on the host, as multinomial is: a device's generator need not have binomial()
    rng = _generator(dispatch.device("cpu"), generator if generator is None or generator.device.type == "cpu"
                     else None)
    draws = rng.binomial(np.where(unknown, 0, np.maximum(np.trunc(trials), 0)).astype(np.int64),
                         np.where(unknown, 0.5, np.clip(probability, 0, 1)))
    result = np.where(unknown, np.nan, draws).astype(count._data.dtype)
    return Tensor._wrap(_to_device(result, count._device), count._device)


def poisson(input, generator=None):
    from corenn.tensor.tensor import Tensor
    if not isinstance(input, Tensor):
        raise not_tensors(input=input)
    rng = _generator(input._device, generator)
    return Tensor._wrap(np.asarray(rng.poisson(input._data)).astype(input._data.dtype), input._device)


def rand_like(input, *, dtype=None, device=None, requires_grad=False):
    _check_input(input)
    return rand(*input.shape, dtype=input.dtype if dtype is None else dtype, device=device or input.device,
                requires_grad=requires_grad)


def randn_like(input, *, dtype=None, device=None, requires_grad=False):
    _check_input(input)
    return randn(*input.shape, dtype=input.dtype if dtype is None else dtype, device=device or input.device,
                 requires_grad=requires_grad)


def _check_input(input):
    from corenn.tensor.tensor import Tensor
    if not isinstance(input, Tensor):
        raise not_tensors(input=input)


def randint_like(input, low=0, high=None, *, dtype=None, device=None):
    _check_input(input)
    if high is None:
        low, high = 0, low
    return randint(low, high, tuple(input.shape), dtype=input.dtype if dtype is None else dtype,
                   device=device or input.device)
