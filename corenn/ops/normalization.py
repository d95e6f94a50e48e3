"""Normalization kernels: batch_norm (with running statistics), layer_norm and group_norm.

All three normalise ``x`` to ``xhat = (x - mean) / sqrt(var + eps)`` over some axes
and apply a per-channel (or per-element) affine; their backward is the same
three-term formula ``invstd * (g - mean(g) - xhat * mean(g * xhat))`` over those axes.
"""
from __future__ import annotations

from corenn._argcheck import check_int, check_ints
from corenn.ops._kernel import Op, check_tensor, kernel, run


def _moments(xp, x, axes):
    """The mean over ``axes``, ``x - mean`` and the biased variance (kept dims).

    A float32 (or float16) variance overflows long before the data does (float32 values
    around 1e20 have squares beyond its range): 1/sqrt(inf) would then scale every centered
    value to 0. Where a statistic is not finite they are computed again in float64, as
    corenn-numba accumulates them, so both give the same normalised values. The test is on
    the statistics (one value per normalised group), not on the data.
    """
    mean = x.mean(axis=axes, keepdims=True)
    centered = x - mean
    var = (centered * centered).mean(axis=axes, keepdims=True)
    if x.dtype.itemsize < 8 and not xp.isfinite(var).all().item():
        wide = x.astype(xp.float64)
        wide_mean = wide.mean(axis=axes, keepdims=True)
        wide_centered = wide - wide_mean
        var = (wide_centered * wide_centered).mean(axis=axes, keepdims=True)  # float64: 1/sqrt fits x's dtype
        mean = wide_mean.astype(x.dtype)
        centered = wide_centered.astype(x.dtype)
    return mean, centered, var


def _normalized_grad(grad_xhat, xhat, invstd, axes):
    """d loss / d x of ``xhat = (x - mean) * invstd`` with batch statistics over ``axes``."""
    mean_grad = grad_xhat.mean(axis=axes, keepdims=True)
    mean_grad_xhat = (grad_xhat * xhat).mean(axis=axes, keepdims=True)
    return invstd * (grad_xhat - mean_grad - xhat * mean_grad_xhat)


def _channel_affine(xhat, weight, bias):
    """``xhat * weight + bias`` with per-channel (axis 1) parameters, either of them optional."""
    shape = (1, -1) + (1,) * (xhat.ndim - 2)
    out = xhat * weight.reshape(shape) if weight is not None else xhat
    return out + bias.reshape(shape) if bias is not None else out


def _channel_affine_backward(ctx, grad, xhat, weight):
    """Gradients through ``_channel_affine``: (grad wrt xhat, grad_weight, grad_bias)."""
    axes = (0,) + tuple(range(2, grad.ndim))
    grad_xhat = grad * weight.reshape((1, -1) + (1,) * (grad.ndim - 2)) if weight is not None else grad
    grad_weight = grad_bias = None
    if weight is not None and ctx.needs_input_grad[1]:
        grad_weight = (grad * xhat).sum(axis=axes)
    if ctx.has_bias and ctx.needs_input_grad[2]:
        grad_bias = grad.sum(axis=axes)
    return grad_xhat, grad_weight, grad_bias


@kernel("batch_norm", "NativeBatchNormBackward0")
class BatchNorm(Op):
    """Normalise over every axis but the channel axis 1.

    With batch statistics, ``running_mean``/``running_var`` (raw arrays or None) are
    updated in place: ``(1 - momentum) * running + momentum * batch``, the variance
    unbiased as PyTorch does. Without, the running statistics normalise.
    """

    mutates_inputs = True  # the running statistics

    @staticmethod
    def forward(ctx, x, weight=None, bias=None, *, running_mean, running_var, use_batch_stats, momentum, eps):
        xp = ctx.xp
        axes = (0,) + tuple(range(2, x.ndim))
        shape = (1, -1) + (1,) * (x.ndim - 2)
        if use_batch_stats:
            mean, centered, var = _moments(xp, x, axes)
            if running_mean is not None:
                count = x.size // x.shape[1]
                running_mean *= 1 - momentum
                running_mean += (momentum * mean.reshape(-1)).astype(running_mean.dtype, copy=False)
                running_var *= 1 - momentum
                running_var += (momentum * count / max(count - 1, 1) * var.reshape(-1)).astype(
                    running_var.dtype, copy=False)
        else:
            centered = x - running_mean.reshape(shape)
            var = running_var.reshape(shape)
        invstd = (1.0 / xp.sqrt(var + eps)).astype(x.dtype, copy=False)
        xhat = centered * invstd
        ctx.save_for_backward(xhat, invstd, weight)
        ctx.batch_stats, ctx.has_bias = use_batch_stats, bias is not None
        return _channel_affine(xhat, weight, bias)

    @staticmethod
    def backward(ctx, grad):
        xhat, invstd, weight = ctx.saved
        grad_xhat, grad_weight, grad_bias = _channel_affine_backward(ctx, grad, xhat, weight)
        grad_x = None
        if ctx.needs_input_grad[0]:
            if ctx.batch_stats:
                grad_x = _normalized_grad(grad_xhat, xhat, invstd, (0,) + tuple(range(2, grad.ndim)))
            else:
                grad_x = grad_xhat * invstd
        return grad_x, grad_weight, grad_bias


@kernel("layer_norm", "NativeLayerNormBackward0")
class LayerNorm(Op):
    """Normalise over the last ``n_dims`` axes; ``weight``/``bias`` have those axes' shape."""

    @staticmethod
    def forward(ctx, x, weight=None, bias=None, *, n_dims, eps):
        xp = ctx.xp
        axes = tuple(range(x.ndim - n_dims, x.ndim))
        _, centered, var = _moments(xp, x, axes)
        invstd = (1.0 / xp.sqrt(var + eps)).astype(x.dtype, copy=False)
        xhat = centered * invstd
        out = xhat * weight if weight is not None else xhat
        if bias is not None:
            out = out + bias
        ctx.save_for_backward(xhat, invstd, weight)
        ctx.n_dims, ctx.has_bias = n_dims, bias is not None
        return out

    @staticmethod
    def backward(ctx, grad):
        xhat, invstd, weight = ctx.saved
        axes = tuple(range(grad.ndim - ctx.n_dims, grad.ndim))
        leading = tuple(range(grad.ndim - ctx.n_dims))
        grad_xhat = grad * weight if weight is not None else grad
        grad_x = grad_weight = grad_bias = None
        if ctx.needs_input_grad[0]:
            grad_x = _normalized_grad(grad_xhat, xhat, invstd, axes)
        if weight is not None and ctx.needs_input_grad[1]:
            grad_weight = (grad * xhat).sum(axis=leading)
        if ctx.has_bias and ctx.needs_input_grad[2]:
            grad_bias = grad.sum(axis=leading)
        return grad_x, grad_weight, grad_bias


@kernel("group_norm", "NativeGroupNormBackward0")
class GroupNorm(Op):
    """Normalise each of ``num_groups`` channel groups per sample; per-channel affine."""

    @staticmethod
    def forward(ctx, x, weight=None, bias=None, *, num_groups, eps):
        xp = ctx.xp
        grouped = x.reshape(x.shape[0], num_groups, -1)
        _, centered, var = _moments(xp, grouped, (2,))
        invstd = (1.0 / xp.sqrt(var + eps)).astype(x.dtype, copy=False)
        xhat = (centered * invstd).reshape(x.shape)
        ctx.save_for_backward(xhat, invstd, weight)
        ctx.num_groups, ctx.has_bias = num_groups, bias is not None
        return _channel_affine(xhat, weight, bias)

    @staticmethod
    def backward(ctx, grad):
        xhat, invstd, weight = ctx.saved
        grad_xhat, grad_weight, grad_bias = _channel_affine_backward(ctx, grad, xhat, weight)
        grad_x = None
        if ctx.needs_input_grad[0]:
            n, groups = grad.shape[0], ctx.num_groups
            grad_x = _normalized_grad(grad_xhat.reshape(n, groups, -1), xhat.reshape(n, groups, -1), invstd,
                                      (2,)).reshape(grad.shape)
        return grad_x, grad_weight, grad_bias


# ---------------------------------------------------------------------------------------------------------
# Front ends (``torch.nn.functional.batch_norm`` ...)
# ---------------------------------------------------------------------------------------------------------

def _check_affine(tensor, name, expected_shape, op):
    if tensor is None:
        return
    check_tensor(tensor, name, op)
    if tuple(tensor.shape) != tuple(expected_shape):
        raise RuntimeError(f"{op}: expected {name} of shape {list(expected_shape)}, but got {list(tensor.shape)}")


def _batch_norm(input, running_mean, running_var, weight=None, bias=None, training=False, momentum=0.1,
                eps=1e-5):
    check_tensor(input, "input", "batch_norm")
    if input.ndim < 2:
        raise ValueError(f"batch_norm: expected 2D or higher input (got {input.ndim}D input)")
    channels = input.shape[1]
    for tensor, name in ((running_mean, "running_mean"), (running_var, "running_var"), (weight, "weight"),
                         (bias, "bias")):
        _check_affine(tensor, name, (channels,), "batch_norm")
    if (running_mean is None) != (running_var is None):
        raise RuntimeError("batch_norm: running_mean and running_var must both be given or both be None")
    if training and not eps > 0:
        raise ValueError(f"batch_norm eps must be positive during training, but got {eps}")
    use_batch_stats = bool(training) or running_mean is None
    if use_batch_stats:
        count = input.numel() // channels
        if count <= 1:
            raise ValueError(f"Expected more than 1 value per channel when training, got input size "
                             f"{input.shape}")
    update = bool(training) and running_mean is not None
    return run("batch_norm", input, weight, bias,
               running_mean=running_mean._data if running_mean is not None and (update or not use_batch_stats)
               else None,
               running_var=running_var._data if running_var is not None and (update or not use_batch_stats)
               else None,
               use_batch_stats=use_batch_stats, momentum=0.0 if momentum is None else float(momentum), eps=eps)


def _layer_norm(input, normalized_shape, weight=None, bias=None, eps=1e-5):
    check_tensor(input, "input", "layer_norm")
    normalized_shape = check_ints(normalized_shape, "normalized_shape")
    n = len(normalized_shape)
    if n == 0 or tuple(input.shape[input.ndim - n:]) != normalized_shape or input.ndim < n:
        raise RuntimeError(f"Given normalized_shape={list(normalized_shape)}, expected input with shape "
                           f"[*, {', '.join(str(s) for s in normalized_shape)}], but got input of size "
                           f"{list(input.shape)}")
    _check_affine(weight, "weight", normalized_shape, "layer_norm")
    _check_affine(bias, "bias", normalized_shape, "layer_norm")
    return run("layer_norm", input, weight, bias, n_dims=n, eps=eps)


def _group_norm(input, num_groups, weight=None, bias=None, eps=1e-5):
    check_tensor(input, "input", "group_norm")
    if input.ndim < 2:
        raise RuntimeError(f"Expected at least 2 dimensions for input tensor but received {input.ndim}")
    channels = input.shape[1]
    num_groups = check_int(num_groups, "num_groups")
    if num_groups <= 0 or channels % num_groups:
        raise RuntimeError(f"Expected number of channels in input to be divisible by num_groups, but got input of "
                           f"shape {list(input.shape)} and num_groups={num_groups}")
    _check_affine(weight, "weight", (channels,), "group_norm")
    _check_affine(bias, "bias", (channels,), "group_norm")
    return run("group_norm", input, weight, bias, num_groups=int(num_groups), eps=eps)


# ---------------------------------------------------------------------------------------------------------
# cross-map local response norm (nn.CrossMapLRN2d): Lua Torch's SpatialCrossMapLRN, as PyTorch computes it
# ---------------------------------------------------------------------------------------------------------

@kernel("cross_map_lrn2d", "CrossMapLRN2dBackward")
class CrossMapLRN2d(Op):
    """``x / scale ** beta``, ``scale = k + alpha / size * (sum of squares over a window of channels)``.

    The window slides as in PyTorch's implementation: the first channel sums channels
    ``[0, (size - 1) // 2 + 1)``, each next one adds a channel ahead and, past the first
    ``(size - 1) // 2 + 1``, drops one behind. The backward is PyTorch's (Lua Torch's formula, a
    symmetric window); it is the derivative of the forward for one channel only, and PyTorch's
    own gradcheck fails beyond that too.
    """

    @staticmethod
    def forward(ctx, x, size, alpha, beta, k):
        xp = ctx.xp
        channels = x.shape[1]
        square = x * x
        pre_pad = int((size - 1) / 2 + 1)
        scale = xp.empty(x.shape, dtype=x.dtype)
        scale[:, 0] = square[:, :min(pre_pad, channels)].sum(axis=1)
        for c in range(1, channels):
            scale[:, c] = scale[:, c - 1]
            if c < channels - pre_pad + 1:
                scale[:, c] += square[:, c + pre_pad - 1]
            if c > pre_pad:
                scale[:, c] -= square[:, c - pre_pad]
        scale = scale * (alpha / size) + k
        out = scale ** -beta * x
        ctx.save_for_backward(x, out, scale)
        ctx.params = (size, alpha, beta)
        return out.astype(x.dtype, copy=False)

    @staticmethod
    def backward(ctx, grad):
        xp = ctx.xp
        x, out, scale = ctx.saved
        size, alpha, beta = ctx.params
        channels = x.shape[1]
        inverse_pre_pad = int(size - (size - 1) / 2)
        if inverse_pre_pad + channels > channels + size - 1:  # size 1: PyTorch's narrow fails the same way
            raise RuntimeError(f"start ({inverse_pre_pad}) + length ({channels}) exceeds dimension size "
                               f"({channels + size - 1}).")
        padded = xp.zeros((x.shape[0], channels + size - 1) + x.shape[2:], dtype=x.dtype)
        padded[:, inverse_pre_pad:inverse_pre_pad + channels] = grad * out / scale
        window = sum(padded[:, offset:offset + channels] for offset in range(size))  # channels [c, c + size)
        grad_input = scale ** -beta * grad - (2 * alpha * beta / size) * x * window
        return grad_input.astype(x.dtype, copy=False)


def _cross_map_lrn2d(input, size, alpha, beta, k):
    check_tensor(input, "input", "CrossMapLRN2d")
    if input.ndim != 4:
        raise ValueError(f"CrossMapLRN2d: Expected input to be 4D, got {input.ndim}D instead.")
    return run("cross_map_lrn2d", input, size=check_int(size, "size"), alpha=float(alpha), beta=float(beta),
               k=float(k))


# No public op functions: the front ends are ``corenn.nn.functional.batch_norm`` / ``layer_norm`` /
# ``group_norm`` (torch.batch_norm etc. take other arguments; they are not mirrored here).
__all__ = [name for name, value in list(globals().items())
           if not name.startswith("_") and callable(value) and not isinstance(value, type)
           and getattr(value, "__module__", None) == __name__]
