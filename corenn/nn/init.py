"""Parameter initialisation (mirrors ``torch.nn.init``): in-place fills that run without recording a graph.

Every function takes the tensor to fill first, fills it in place and returns it;
random fills draw from corenn's generator (``corenn.manual_seed``) or ``generator``.

Example::

    >>> import corenn
    >>> from corenn import nn
    >>> w = corenn.empty(3, 5)
    >>> nn.init.kaiming_uniform_(w, a=0, mode="fan_in", nonlinearity="relu").shape
    corenn.Size([3, 5])
"""
from __future__ import annotations

import math
import warnings

from corenn.autograd.grad_mode import no_grad
from corenn.tensor.tensor import Tensor

__all__ = ["calculate_gain", "uniform_", "normal_", "trunc_normal_", "constant_", "ones_", "zeros_", "eye_",
           "dirac_", "xavier_uniform_", "xavier_normal_", "kaiming_uniform_", "kaiming_normal_", "orthogonal_",
           "sparse_"]

# Depth of nested ``skip_init`` constructions: while > 0 the fills below leave tensors as allocated.
_skip_depth = 0


def _skipping() -> bool:
    return _skip_depth > 0


def _check(tensor, fn: str) -> Tensor:
    if not isinstance(tensor, Tensor):
        raise TypeError(f"{fn}(): argument 'tensor' must be Tensor, not {type(tensor).__name__}")
    return tensor


def calculate_gain(nonlinearity: str, param=None) -> float:
    """The recommended gain for a nonlinearity (scales the std of Xavier / Kaiming inits).

    ============ ==========================
    linear, conv ``1``
    sigmoid      ``1``
    tanh         ``5/3``
    relu         ``sqrt(2)``
    leaky_relu   ``sqrt(2 / (1 + slope^2))``
    selu         ``3/4``
    ============ ==========================

    Example::

        >>> nn.init.calculate_gain("leaky_relu", 0.2)
        1.3867504905630728
    """
    linear_fns = ["linear", "conv1d", "conv2d", "conv3d", "conv_transpose1d", "conv_transpose2d",
                  "conv_transpose3d"]
    if nonlinearity in linear_fns or nonlinearity == "sigmoid":
        return 1
    if nonlinearity == "tanh":
        return 5.0 / 3
    if nonlinearity == "relu":
        return math.sqrt(2.0)
    if nonlinearity == "leaky_relu":
        if param is None:
            negative_slope = 0.01
        elif not isinstance(param, bool) and isinstance(param, (int, float)):
            negative_slope = param
        else:
            raise ValueError(f"negative_slope {param} not a valid number")
        return math.sqrt(2.0 / (1 + negative_slope ** 2))
    if nonlinearity == "selu":
        return 3.0 / 4
    raise ValueError(f"Unsupported nonlinearity {nonlinearity}")


def _calculate_fan_in_and_fan_out(tensor: Tensor):
    if tensor.dim() < 2:
        raise ValueError("Fan in and fan out can not be computed for tensor with fewer than 2 dimensions")
    receptive_field = 1
    for size in tensor.shape[2:]:
        receptive_field *= size
    return tensor.size(1) * receptive_field, tensor.size(0) * receptive_field


def _calculate_correct_fan(tensor: Tensor, mode: str) -> int:
    mode = mode.lower()
    if mode not in ("fan_in", "fan_out"):
        raise ValueError(f"Mode {mode} not supported, please use one of ['fan_in', 'fan_out']")
    fan_in, fan_out = _calculate_fan_in_and_fan_out(tensor)
    return fan_in if mode == "fan_in" else fan_out


def uniform_(tensor: Tensor, a: float = 0.0, b: float = 1.0, generator=None) -> Tensor:
    """Fill with values drawn from U(a, b).

    Example::

        >>> nn.init.uniform_(corenn.empty(3, 5), -0.1, 0.1).abs().max() <= 0.1
        tensor(True)
    """
    _check(tensor, "uniform_")
    if _skipping():
        return tensor
    with no_grad():
        return tensor.uniform_(a, b, generator=generator)


def normal_(tensor: Tensor, mean: float = 0.0, std: float = 1.0, generator=None) -> Tensor:
    """Fill with values drawn from N(mean, std^2).

    Example::

        >>> nn.init.normal_(corenn.empty(3, 5), std=0.02).shape
        corenn.Size([3, 5])
    """
    _check(tensor, "normal_")
    if _skipping():
        return tensor
    with no_grad():
        return tensor.normal_(mean, std, generator=generator)


def _erfinv(xp, y):
    """Inverse error function on float64 arrays: Giles' approximation refined by Newton steps on erf."""
    from corenn.ops.elementwise import erf_array
    w = -xp.log((1.0 - y) * (1.0 + y))
    central = w < 5.0
    wc = w - 2.5
    p_central = 2.81022636e-08
    for c in (3.43273939e-07, -3.5233877e-06, -4.39150654e-06, 0.00021858087, -0.00125372503, -0.00417768164,
              0.246640727, 1.50140941):
        p_central = c + p_central * wc
    wt = xp.sqrt(xp.maximum(w, 5.0)) - 3.0
    p_tail = -0.000200214257
    for c in (0.000100950558, 0.00134934322, -0.00367342844, 0.00573950773, -0.0076224613, 0.00943887047,
              1.00167406, 2.83297682):
        p_tail = c + p_tail * wt
    x = xp.where(central, p_central, p_tail) * y
    two_over_sqrt_pi = 2.0 / math.sqrt(math.pi)
    for _ in range(3):
        x = x - (erf_array(xp, x) - y) / (two_over_sqrt_pi * xp.exp(-x * x))
    return x


def trunc_normal_(tensor: Tensor, mean: float = 0.0, std: float = 1.0, a: float = -2.0, b: float = 2.0,
                  generator=None) -> Tensor:
    """Fill with values from N(mean, std^2) truncated to ``[a, b]`` (inverse-CDF sampling, exact in the tails).

    Example::

        >>> w = nn.init.trunc_normal_(corenn.empty(1000), std=1.0, a=-0.5, b=0.5)
        >>> bool(w.min() >= -0.5) and bool(w.max() <= 0.5)
        True
    """
    _check(tensor, "trunc_normal_")
    if _skipping():
        return tensor
    if not a < b:
        raise ValueError(f"trunc_normal_: the lower bound a ({a}) must be less than the upper bound b ({b})")
    if mean < a - 2 * std or mean > b + 2 * std:
        warnings.warn("mean is more than 2 std from [a, b] in nn.init.trunc_normal_. The distribution of values may "
                      "be incorrect.", stacklevel=2)

    def norm_cdf(x):
        return (1.0 + math.erf(x / math.sqrt(2.0))) / 2.0

    with no_grad():
        lower, upper = norm_cdf((a - mean) / std), norm_cdf((b - mean) / std)
        xp = tensor._device._xp
        # Uniform in [2l-1, 2u-1] pushed through erfinv gives the truncated standard normal (times sqrt 2).
        u = Tensor._wrap(xp.empty(tensor.shape, dtype=xp.float64), tensor._device).uniform_(
            2 * lower - 1, 2 * upper - 1, generator=generator)
        eps = xp.finfo(xp.float64).eps
        y = xp.clip(u._data, -1 + eps, 1 - eps)
        values = xp.clip(_erfinv(xp, y) * (std * math.sqrt(2.0)) + mean, a, b)
        tensor._write(values.astype(tensor._data.dtype))
    return tensor


def constant_(tensor: Tensor, val: float) -> Tensor:
    """Fill with the value ``val``.

    Example::

        >>> nn.init.constant_(corenn.empty(2), 0.3)
        tensor([0.3000, 0.3000])
    """
    _check(tensor, "constant_")
    if _skipping():
        return tensor
    with no_grad():
        return tensor.fill_(val)


def ones_(tensor: Tensor) -> Tensor:
    """Fill with ones.

    Example::

        >>> nn.init.ones_(corenn.empty(2))
        tensor([1., 1.])
    """
    return constant_(tensor, 1.0)


def zeros_(tensor: Tensor) -> Tensor:
    """Fill with zeros.

    Example::

        >>> nn.init.zeros_(corenn.empty(2))
        tensor([0., 0.])
    """
    return constant_(tensor, 0.0)


def eye_(tensor: Tensor) -> Tensor:
    """Fill a 2-D tensor with the identity matrix (ones on the diagonal, zeros elsewhere).

    Example::

        >>> nn.init.eye_(corenn.empty(2, 3))
        tensor([[1., 0., 0.],
                [0., 1., 0.]])
    """
    _check(tensor, "eye_")
    if tensor.dim() != 2:
        raise ValueError("Only tensors with 2 dimensions are supported")
    if _skipping():
        return tensor
    xp = tensor._device._xp
    with no_grad():
        tensor._write(xp.eye(tensor.shape[0], tensor.shape[1], dtype=tensor._data.dtype))
    return tensor


def dirac_(tensor: Tensor, groups: int = 1) -> Tensor:
    """Fill a 3/4/5-D conv weight with the Dirac delta: the conv passes its input channels through.

    With ``groups > 1`` each group of output channels gets its own identity.

    Example::

        >>> w = nn.init.dirac_(corenn.empty(2, 2, 3))
        >>> w[0, 0].tolist(), w[0, 1].tolist()
        ([0.0, 1.0, 0.0], [0.0, 0.0, 0.0])
    """
    _check(tensor, "dirac_")
    dims = tensor.dim()
    if dims not in (3, 4, 5):
        raise ValueError("Only tensors with 3, 4, or 5 dimensions are supported")
    sizes = tensor.shape
    if sizes[0] % groups != 0:
        raise ValueError("dim 0 must be divisible by groups")
    if _skipping():
        return tensor
    out_per_group = sizes[0] // groups
    min_dim = min(out_per_group, sizes[1])
    xp = tensor._device._xp
    values = xp.zeros(tuple(sizes), dtype=tensor._data.dtype)
    centre = tuple(s // 2 for s in sizes[2:])
    for g in range(groups):
        for d in range(min_dim):
            values[(g * out_per_group + d, d) + centre] = 1
    with no_grad():
        tensor._write(values)
    return tensor


def xavier_uniform_(tensor: Tensor, gain: float = 1.0, generator=None) -> Tensor:
    """Glorot uniform: U(-b, b) with ``b = gain * sqrt(6 / (fan_in + fan_out))``.

    Example::

        >>> nn.init.xavier_uniform_(corenn.empty(3, 5), gain=nn.init.calculate_gain("relu")).shape
        corenn.Size([3, 5])
    """
    _check(tensor, "xavier_uniform_")
    fan_in, fan_out = _calculate_fan_in_and_fan_out(tensor)
    std = gain * math.sqrt(2.0 / float(fan_in + fan_out))
    bound = math.sqrt(3.0) * std
    return uniform_(tensor, -bound, bound, generator)


def xavier_normal_(tensor: Tensor, gain: float = 1.0, generator=None) -> Tensor:
    """Glorot normal: N(0, std^2) with ``std = gain * sqrt(2 / (fan_in + fan_out))``.

    Example::

        >>> nn.init.xavier_normal_(corenn.empty(3, 5)).shape
        corenn.Size([3, 5])
    """
    _check(tensor, "xavier_normal_")
    fan_in, fan_out = _calculate_fan_in_and_fan_out(tensor)
    std = gain * math.sqrt(2.0 / float(fan_in + fan_out))
    return normal_(tensor, 0.0, std, generator)


def kaiming_uniform_(tensor: Tensor, a: float = 0, mode: str = "fan_in", nonlinearity: str = "leaky_relu",
                     generator=None) -> Tensor:
    """He uniform: U(-b, b) with ``b = gain * sqrt(3 / fan)``, ``gain = calculate_gain(nonlinearity, a)``.

    Example::

        >>> nn.init.kaiming_uniform_(corenn.empty(3, 5), mode="fan_in", nonlinearity="relu").shape
        corenn.Size([3, 5])
    """
    _check(tensor, "kaiming_uniform_")
    if 0 in tensor.shape:
        warnings.warn("Initializing zero-element tensors is a no-op", stacklevel=2)
        return tensor
    fan = _calculate_correct_fan(tensor, mode)
    gain = calculate_gain(nonlinearity, a)
    bound = math.sqrt(3.0) * gain / math.sqrt(fan)
    return uniform_(tensor, -bound, bound, generator)


def kaiming_normal_(tensor: Tensor, a: float = 0, mode: str = "fan_in", nonlinearity: str = "leaky_relu",
                    generator=None) -> Tensor:
    """He normal: N(0, std^2) with ``std = gain / sqrt(fan)``.

    Example::

        >>> nn.init.kaiming_normal_(corenn.empty(3, 5), mode="fan_out", nonlinearity="relu").shape
        corenn.Size([3, 5])
    """
    _check(tensor, "kaiming_normal_")
    if 0 in tensor.shape:
        warnings.warn("Initializing zero-element tensors is a no-op", stacklevel=2)
        return tensor
    fan = _calculate_correct_fan(tensor, mode)
    std = calculate_gain(nonlinearity, a) / math.sqrt(fan)
    return normal_(tensor, 0.0, std, generator)


def orthogonal_(tensor: Tensor, gain: float = 1, generator=None) -> Tensor:
    """Fill with a (semi-)orthogonal matrix (trailing dims flattened), times ``gain``.

    Rows are orthonormal when there are fewer rows than columns, columns otherwise.

    Example::

        >>> w = nn.init.orthogonal_(corenn.empty(3, 5))
        >>> bool(((w @ w.T) - corenn.eye(3)).abs().max() < 1e-5)
        True
    """
    _check(tensor, "orthogonal_")
    if tensor.dim() < 2:
        raise ValueError("Only tensors with 2 or more dimensions are supported")
    if tensor.numel() == 0 or _skipping():
        return tensor
    rows = tensor.shape[0]
    cols = tensor.numel() // rows
    xp = tensor._device._xp
    flattened = Tensor._wrap(xp.empty((rows, cols), dtype=xp.float64), tensor._device)
    flattened.normal_(0.0, 1.0, generator=generator)
    matrix = flattened._data.T if rows < cols else flattened._data
    q, r = xp.linalg.qr(matrix)
    # Fix the signs so that q is uniformly distributed (QR's sign convention is not).
    q = q * xp.sign(xp.diagonal(r))
    if rows < cols:
        q = q.T
    with no_grad():
        tensor._write((q * gain).reshape(tensor.shape).astype(tensor._data.dtype))
    return tensor


def sparse_(tensor: Tensor, sparsity: float, std: float = 0.01, generator=None) -> Tensor:
    """Fill a 2-D tensor from N(0, std^2), then zero a fraction ``sparsity`` of each column.

    Example::

        >>> w = nn.init.sparse_(corenn.empty(10, 3), sparsity=0.5)
        >>> int((w == 0).sum())
        15
    """
    _check(tensor, "sparse_")
    if tensor.dim() != 2:
        raise ValueError("Only tensors with 2 dimensions are supported")
    if _skipping():
        return tensor
    from corenn.tensor.random import randperm
    rows, cols = tensor.shape
    num_zeros = int(math.ceil(sparsity * rows))
    with no_grad():
        tensor.normal_(0, std, generator=generator)
        for col in range(cols):
            zero_rows = randperm(rows, generator=generator, device=tensor.device)[:num_zeros]
            tensor._data[zero_rows._data, col] = 0
    return tensor
