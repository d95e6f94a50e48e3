"""``corenn.nn.functional``: the function form of every layer (``import corenn.nn.functional as F``).

Argument names, defaults and shapes are PyTorch's. Heavy lifting happens in the
op kernels of ``corenn/ops`` (conv, pooling, normalization, loss, ...); this file
checks arguments and maps PyTorch's signatures onto them.

    >>> import corenn.nn.functional as F
    >>> F.relu(corenn.tensor([-1., 2.])).tolist()
    [0.0, 2.0]
"""
from __future__ import annotations

import math
import warnings

import corenn
from corenn._argcheck import check_int, check_number, not_tensors
from corenn.ops._kernel import check_tensor, run
from corenn.ops.activation import (celu as _celu, elu as _elu, hardsigmoid, hardswish,  # noqa: F401
                                   hardtanh as _hardtanh, leaky_relu as _leaky_relu, logsigmoid, mish,
                                   selu as _selu, softsign, tanhshrink)
from corenn.ops.conv import conv1d, conv2d, conv3d, conv_transpose1d, conv_transpose2d  # noqa: F401
from corenn.ops.dropout import _keep_mask
from corenn.ops.elementwise import gelu, sigmoid, silu, softplus, tanh  # noqa: F401
from corenn.ops.movement import pad  # noqa: F401
from corenn.ops.nn import linear, log_softmax as _log_softmax, softmax as _softmax  # noqa: F401
from corenn.ops.normalization import _batch_norm, _group_norm, _layer_norm
from corenn.ops.pooling import (adaptive_avg_pool1d, adaptive_avg_pool2d, avg_pool1d, avg_pool2d,  # noqa: F401
                                max_pool1d, max_pool2d)
from corenn.tensor.tensor import Tensor
from corenn import _autocast


def _inplace(input, result, inplace):
    return input._inplace_from(result) if inplace else result


# ---------------------------------------------------------------------------------------------------------
# Activations
# ---------------------------------------------------------------------------------------------------------

def relu(input, inplace=False):
    """``max(x, 0)``.

        >>> F.relu(corenn.tensor([-1., 1.])).tolist()
        [0.0, 1.0]
    """
    check_tensor(input, "input", "relu")
    return _inplace(input, run("relu", input), inplace)


def relu_(input):
    """In-place :func:`relu`."""
    return relu(input, inplace=True)


def relu6(input, inplace=False):
    """``min(max(x, 0), 6)``.

        >>> F.relu6(corenn.tensor([7.])).item()
        6.0
    """
    return _inplace(input, _hardtanh(input, 0.0, 6.0), inplace)


def leaky_relu(input, negative_slope=0.01, inplace=False):
    """``x`` if ``x > 0`` else ``negative_slope * x``.

        >>> F.leaky_relu(corenn.tensor([-2.]), 0.5).item()
        -1.0
    """
    return _inplace(input, _leaky_relu(input, negative_slope), inplace)


def elu(input, alpha=1.0, inplace=False):
    """``x`` if ``x > 0`` else ``alpha * (exp(x) - 1)``.

        >>> F.elu(corenn.tensor([0.])).item()
        0.0
    """
    return _inplace(input, _elu(input, alpha), inplace)


def selu(input, inplace=False):
    """Scaled ELU with the self-normalising constants.

        >>> F.selu(corenn.tensor([0.])).item()
        0.0
    """
    return _inplace(input, _selu(input), inplace)


def celu(input, alpha=1.0, inplace=False):
    """Continuously differentiable ELU.

        >>> F.celu(corenn.tensor([1.])).item()
        1.0
    """
    return _inplace(input, _celu(input, alpha), inplace)


def hardtanh(input, min_val=-1.0, max_val=1.0, inplace=False):
    """Clamp to ``[min_val, max_val]``.

        >>> F.hardtanh(corenn.tensor([2.])).item()
        1.0
    """
    return _inplace(input, _hardtanh(input, min_val, max_val), inplace)


def softmax(input, dim=None, _stacklevel=3, dtype=None):
    """``exp(x) / sum(exp(x))`` along ``dim``.

        >>> F.softmax(corenn.tensor([0., 0.]), dim=0).tolist()
        [0.5, 0.5]
    """
    if dim is None:
        warnings.warn("Implicit dimension choice for softmax has been deprecated. Change the call to include dim=X "
                      "as an argument.", UserWarning, stacklevel=_stacklevel)
    return _softmax(input, dim, dtype=dtype)


def log_softmax(input, dim=None, _stacklevel=3, dtype=None):
    """``x - logsumexp(x)`` along ``dim``.

        >>> round(F.log_softmax(corenn.tensor([0., 0.]), dim=0)[0].item(), 4)
        -0.6931
    """
    if dim is None:
        warnings.warn("Implicit dimension choice for log_softmax has been deprecated. Change the call to include "
                      "dim=X as an argument.", UserWarning, stacklevel=_stacklevel)
    return _log_softmax(input, dim, dtype=dtype)


def softmin(input, dim=None, _stacklevel=3, dtype=None):
    """``softmax(-x)``.

        >>> F.softmin(corenn.tensor([0., 0.]), dim=0).tolist()
        [0.5, 0.5]
    """
    if not isinstance(input, Tensor):
        raise not_tensors(input=input)
    return softmax(-input, dim, _stacklevel + 1 if dim is None else _stacklevel, dtype)


# ---------------------------------------------------------------------------------------------------------
# Linear, bilinear, dropout, embedding
# ---------------------------------------------------------------------------------------------------------

def bilinear(input1, input2, weight, bias=None):
    """``y_o = x1 @ weight[o] @ x2 + bias_o``; ``weight`` is (out, in1, in2).

        >>> F.bilinear(corenn.ones(2, 3), corenn.ones(2, 4), corenn.ones(5, 3, 4)).shape
        corenn.Size([2, 5])
    """
    for t, name in ((input1, "input1"), (input2, "input2"), (weight, "weight")):
        check_tensor(t, name, "bilinear")
    if weight.ndim != 3 or input1.shape[-1] != weight.shape[1] or input2.shape[-1] != weight.shape[2] \
            or tuple(input1.shape[:-1]) != tuple(input2.shape[:-1]):
        raise RuntimeError(f"bilinear: expected input1 [*, {weight.shape[1] if weight.ndim == 3 else '?'}] and "
                           f"input2 [*, {weight.shape[2] if weight.ndim == 3 else '?'}] with equal leading dims "
                           f"for weight of size {list(weight.shape)}, got {list(input1.shape)} and "
                           f"{list(input2.shape)}")
    out = corenn.einsum("...i,oij,...j->...o", input1, weight, input2)
    return out if bias is None else out + bias


def dropout(input, p=0.5, training=True, inplace=False):
    """Zero each element with probability ``p`` and scale the rest by ``1 / (1 - p)`` (identity in eval).

        >>> F.dropout(corenn.ones(3), p=0.5, training=False).tolist()
        [1.0, 1.0, 1.0]
    """
    check_tensor(input, "input", "dropout")
    p = check_number(p, "p")
    if not 0.0 <= p <= 1.0:
        raise ValueError(f"dropout probability has to be between 0 and 1, but got {p}")
    if not training or p == 0.0:
        return input
    return _inplace(input, run("dropout", input, mask=_keep_mask(input, p)), inplace)


def _renorm_rows(weight, indices, max_norm, norm_type):
    xp = weight._device._xp
    rows = xp.unique(indices._data.reshape(-1))
    with corenn.no_grad():
        data = weight._data
        norms = (xp.abs(data[rows]) ** norm_type).sum(axis=1) ** (1.0 / norm_type)
        scale = xp.where(norms > max_norm, max_norm / (norms + 1e-7), 1.0).astype(data.dtype)
        data[rows] = data[rows] * scale[:, None]


def embedding(input, weight, padding_idx=None, max_norm=None, norm_type=2.0, scale_grad_by_freq=False,
              sparse=False):
    """Rows of ``weight`` picked by the integer tensor ``input``; output shape ``input.shape + (dim,)``.

        >>> F.embedding(corenn.tensor([[0, 2]]), corenn.eye(3)).tolist()
        [[[1.0, 0.0, 0.0], [0.0, 0.0, 1.0]]]
    """
    check_tensor(input, "input", "embedding")
    check_tensor(weight, "weight", "embedding")
    if input.dtype.is_floating_point or input.dtype is corenn.bool:
        raise RuntimeError(f"Expected tensor for argument #1 'indices' to have one of the following scalar types: "
                           f"Long, Int; but got {input.dtype} instead (while checking arguments for embedding)")
    if weight.ndim != 2:
        raise RuntimeError(f"'weight' must be 2-D, got weight of size {list(weight.shape)}")
    if scale_grad_by_freq or sparse:
        raise NotImplementedError("embedding: scale_grad_by_freq and sparse gradients are not supported")
    rows = weight.shape[0]
    if padding_idx is not None:
        if not -rows <= padding_idx < rows:
            raise AssertionError("Padding_idx must be within num_embeddings")
        padding_idx = padding_idx % rows
    if input.numel() and (int(input.min()) < 0 or int(input.max()) >= rows):
        raise IndexError(f"index out of range in self (embedding of {rows} rows looked up with indices in "
                         f"[{int(input.min())}, {int(input.max())}])")
    if max_norm is not None:
        _renorm_rows(weight, input, max_norm, norm_type)
    return run("embedding", weight, input, padding_idx=padding_idx)


def one_hot(tensor, num_classes=-1):
    """Integer class indices to a one-hot int64 tensor with a trailing class dimension.

        >>> F.one_hot(corenn.tensor([0, 2])).tolist()
        [[1, 0, 0], [0, 0, 1]]
    """
    check_tensor(tensor, "tensor", "one_hot")
    if tensor.dtype.is_floating_point:
        raise RuntimeError("one_hot is only applicable to index tensor of type LongTensor.")
    xp = tensor._device._xp
    data = tensor._data
    if num_classes == -1:
        num_classes = data.max().item() + 1 if data.size else 0
    if data.size and (data.min().item() < 0 or data.max().item() >= num_classes):
        raise RuntimeError("Class values must be non-negative and smaller than num_classes.")
    return Tensor._wrap((data[..., None] == xp.arange(num_classes)).astype(xp.int64), tensor._device)


# ---------------------------------------------------------------------------------------------------------
# Normalization
# ---------------------------------------------------------------------------------------------------------

def batch_norm(input, running_mean, running_var, weight=None, bias=None, training=False, momentum=0.1, eps=1e-5):
    """Normalise each channel (dim 1) by batch statistics (training) or the running ones (eval).

    In training the running statistics are updated in place with ``momentum``; the
    running variance uses the unbiased batch variance, as PyTorch.

        >>> x = corenn.randn(8, 3)
        >>> F.batch_norm(x, None, None, training=True).mean(0).abs().max().item() < 1e-6
        True
    """
    return _batch_norm(input, running_mean, running_var, weight, bias, training, momentum, eps)


def layer_norm(input, normalized_shape, weight=None, bias=None, eps=1e-5):
    """Normalise over the trailing ``normalized_shape`` dims of each sample.

        >>> F.layer_norm(corenn.tensor([[1., 3.]]), (2,)).tolist()
        [[-0.9999949932098389, 0.9999949932098389]]
    """
    return _layer_norm(input, normalized_shape, weight, bias, eps)


def group_norm(input, num_groups, weight=None, bias=None, eps=1e-5):
    """Normalise each of ``num_groups`` groups of channels per sample.

        >>> F.group_norm(corenn.randn(2, 4, 3), 2).shape
        corenn.Size([2, 4, 3])
    """
    return _group_norm(input, num_groups, weight, bias, eps)


def normalize(input, p=2.0, dim=1, eps=1e-12):
    """``x / max(||x||_p, eps)`` along ``dim``, with ``corenn.norm``'s p (``inf``, ``-inf``, 0, any float).

        >>> F.normalize(corenn.tensor([[3., 4.]])).tolist()
        [[0.6000000238418579, 0.800000011920929]]
        >>> F.normalize(corenn.tensor([[3., -4.]]), p=float("inf")).tolist()
        [[0.75, -1.0]]
    """
    if not isinstance(input, Tensor):
        raise not_tensors(input=input)
    return input / corenn.norm(input, p, dim, keepdim=True).clamp_min(check_number(eps, "eps"))


# ---------------------------------------------------------------------------------------------------------
# Losses
# ---------------------------------------------------------------------------------------------------------

_REDUCTIONS = ("none", "mean", "sum")


def _reduction(size_average, reduce, reduction, name="reduction"):
    if size_average is not None or reduce is not None:
        # The legacy pair maps onto ``reduction`` as in PyTorch (both default to True).
        size_average = True if size_average is None else size_average
        reduce = True if reduce is None else reduce
        warnings.warn("size_average and reduce args will be deprecated, please use reduction='"
                      f"{'none' if not reduce else 'mean' if size_average else 'sum'}' instead.", UserWarning,
                      stacklevel=3)
        return "none" if not reduce else "mean" if size_average else "sum"
    if reduction not in _REDUCTIONS:
        raise ValueError(f"{reduction} is not a valid value for reduction")
    return reduction


def _same_shape(input, target, op):
    check_tensor(input, "input", op)
    check_tensor(target, "target", op)
    if tuple(input.shape) != tuple(target.shape):
        warnings.warn(f"Using a target size ({target.shape}) that is different to the input size ({input.shape}). "
                      "This will likely lead to incorrect results due to broadcasting. Please ensure they have the "
                      "same size.", UserWarning, stacklevel=3)
        input, target = corenn.broadcast_tensors(input, target)
    if input.dtype is not target.dtype:
        dtype = corenn.promote_types(input.dtype, target.dtype)
        input, target = input.to(dtype), target.to(dtype)
    return input, target


@_autocast.autocast_op(_autocast.FLOAT32)
def mse_loss(input, target, size_average=None, reduce=None, reduction="mean", weight=None):
    """Mean squared error ``(input - target)**2``, reduced by ``reduction``.

        >>> F.mse_loss(corenn.tensor([1., 2.]), corenn.tensor([1., 4.])).item()
        2.0
    """
    reduction = _reduction(size_average, reduce, reduction)
    input, target = _same_shape(input, target, "mse_loss")
    if weight is not None:
        return _weighted_reduce((input - target) ** 2 * weight, reduction)
    return run("mse_loss", input, target, reduction=reduction)


def _weighted_reduce(loss, reduction):
    return loss if reduction == "none" else loss.sum() if reduction == "sum" else loss.mean()


@_autocast.autocast_op(_autocast.FLOAT32)
def l1_loss(input, target, size_average=None, reduce=None, reduction="mean"):
    """Mean absolute error ``|input - target|``.

        >>> F.l1_loss(corenn.tensor([1., 2.]), corenn.tensor([1., 4.])).item()
        1.0
    """
    reduction = _reduction(size_average, reduce, reduction)
    input, target = _same_shape(input, target, "l1_loss")
    return run("l1_loss", input, target, reduction=reduction)


@_autocast.autocast_op(_autocast.FLOAT32)
def smooth_l1_loss(input, target, size_average=None, reduce=None, reduction="mean", beta=1.0):
    """``0.5 d**2 / beta`` where ``|d| < beta``, else ``|d| - 0.5 beta``.

        >>> F.smooth_l1_loss(corenn.tensor([0., 0.]), corenn.tensor([0.5, 3.])).item()
        1.3125
    """
    reduction = _reduction(size_average, reduce, reduction)
    beta = check_number(beta, "beta")
    if beta < 0:
        raise RuntimeError("smooth_l1_loss does not support negative values for beta.")
    input, target = _same_shape(input, target, "smooth_l1_loss")
    return run("smooth_l1_loss", input, target, reduction=reduction, param=float(beta))


@_autocast.autocast_op(_autocast.FLOAT32)
def huber_loss(input, target, reduction="mean", delta=1.0, weight=None):
    """``0.5 d**2`` where ``|d| < delta``, else ``delta * (|d| - 0.5 delta)``.

        >>> F.huber_loss(corenn.tensor([0.]), corenn.tensor([3.])).item()
        2.5
    """
    reduction = _reduction(None, None, reduction)
    delta = check_number(delta, "delta")
    if delta <= 0:
        raise RuntimeError("huber_loss does not support non-positive values for delta.")
    input, target = _same_shape(input, target, "huber_loss")
    if weight is not None:
        return _weighted_reduce(huber_loss(input, target, "none", delta) * weight, reduction)
    return run("huber_loss", input, target, reduction=reduction, param=float(delta))


def _class_input(input, target, op):
    """Shape checks shared by cross_entropy/nll_loss; an unbatched (C,) input gains a batch dim."""
    check_tensor(input, "input", op)
    check_tensor(target, "target", op)
    if input.ndim == 0:
        raise ValueError(f"{op}: input tensor should be 1D or more, got a 0-dim tensor")
    unbatched = input.ndim == 1
    if unbatched:
        input = input.unsqueeze(0)
        target = target.unsqueeze(0)
    return input, target, unbatched


@_autocast.autocast_op(_autocast.FLOAT32)
def cross_entropy(input, target, weight=None, size_average=None, ignore_index=-100, reduce=None,
                  reduction="mean", label_smoothing=0.0):
    """Cross-entropy of logits ``input`` (N, C, *d) against class indices (N, *d) or probabilities (N, C, *d).

    One fused kernel: log_softmax + nll, with ``weight``, ``ignore_index`` and
    ``label_smoothing``.

        >>> round(F.cross_entropy(corenn.tensor([[0., 0.]]), corenn.tensor([1])).item(), 4)
        0.6931
    """
    reduction = _reduction(size_average, reduce, reduction)
    label_smoothing = check_number(label_smoothing, "label_smoothing")
    ignore_index = check_int(ignore_index, "ignore_index")
    if not 0.0 <= label_smoothing <= 1.0:
        raise ValueError(f"label_smoothing must be between 0.0 and 1.0. Got: {label_smoothing}")
    input, target, unbatched = _class_input(input, target, "cross_entropy")
    classes = input.shape[1]
    prob_target = target.dtype.is_floating_point
    if prob_target:
        if tuple(target.shape) != tuple(input.shape):
            raise RuntimeError(f"Expected floating point target of the same shape as input {list(input.shape)} "
                               f"for class probabilities, got target of size {list(target.shape)}")
        if target.dtype is not input.dtype:
            raise RuntimeError(f"expected scalar type {input.dtype} but found {target.dtype}")
    else:
        if target.dtype is corenn.bool:
            raise RuntimeError("cross_entropy: expected class-index target of an integer dtype, got bool")
        if target.shape[0] != input.shape[0]:
            raise ValueError(f"Expected input batch_size ({input.shape[0]}) to match target batch_size "
                             f"({target.shape[0]}).")
        if tuple(target.shape) != tuple(input.shape[:1]) + tuple(input.shape[2:]):
            raise RuntimeError(f"Expected target size {[input.shape[0]] + list(input.shape[2:])}, got "
                               f"{list(target.shape)}")
    if weight is not None:
        check_tensor(weight, "weight", "cross_entropy")
        if tuple(weight.shape) != (classes,):
            raise RuntimeError(f"cross_entropy: weight tensor should be defined either for all {classes} classes "
                               f"or no classes but got weight tensor of shape: {list(weight.shape)}")
    out = run("cross_entropy", input, target, weight, ignore_index=int(ignore_index),
              label_smoothing=float(label_smoothing), reduction=reduction, prob_target=prob_target)
    return out.squeeze(0) if unbatched and reduction == "none" else out


@_autocast.autocast_op(_autocast.FLOAT32)
def nll_loss(input, target, weight=None, size_average=None, ignore_index=-100, reduce=None, reduction="mean"):
    """Negative log-likelihood of log-probabilities ``input`` (N, C, *d) at class indices ``target`` (N, *d).

        >>> F.nll_loss(corenn.tensor([[-1., -2.]]), corenn.tensor([1])).item()
        2.0
    """
    reduction = _reduction(size_average, reduce, reduction)
    ignore_index = check_int(ignore_index, "ignore_index")
    input, target, unbatched = _class_input(input, target, "nll_loss")
    if target.dtype.is_floating_point or target.dtype is corenn.bool:
        raise RuntimeError(f"nll_loss(): expected scalar type Long but found {target.dtype}")
    if target.shape[0] != input.shape[0]:
        raise ValueError(f"Expected input batch_size ({input.shape[0]}) to match target batch_size "
                         f"({target.shape[0]}).")
    if tuple(target.shape) != tuple(input.shape[:1]) + tuple(input.shape[2:]):
        raise RuntimeError(f"Expected target size {[input.shape[0]] + list(input.shape[2:])}, got "
                           f"{list(target.shape)}")
    if weight is not None and not isinstance(weight, Tensor):
        raise not_tensors(weight=weight)
    if weight is not None and tuple(weight.shape) != (input.shape[1],):
        raise RuntimeError(f"nll_loss(): weight tensor should be defined either for all {input.shape[1]} classes or "
                           f"no classes but got weight tensor of shape: {list(weight.shape)}")
    out = run("nll_loss", input, target, weight, ignore_index=int(ignore_index), reduction=reduction)
    return out.squeeze(0) if unbatched and reduction == "none" else out


@_autocast.autocast_op(_autocast.FLOAT32)
def binary_cross_entropy(input, target, weight=None, size_average=None, reduce=None, reduction="mean"):
    """``-w (t log x + (1 - t) log(1 - x))`` for probabilities ``input`` in [0, 1].

        >>> round(F.binary_cross_entropy(corenn.tensor([0.5]), corenn.tensor([1.])).item(), 4)
        0.6931
    """
    reduction = _reduction(size_average, reduce, reduction)
    check_tensor(input, "input", "binary_cross_entropy")
    check_tensor(target, "target", "binary_cross_entropy")
    if tuple(target.shape) != tuple(input.shape):
        raise ValueError(f"Using a target size ({target.shape}) that is different to the input size "
                         f"({input.shape}) is deprecated. Please ensure they have the same size.")
    if weight is not None:
        weight = weight.expand(input.shape) if tuple(weight.shape) != tuple(input.shape) else weight
    return run("binary_cross_entropy", input, target, weight, reduction=reduction)


@_autocast.autocast_op(_autocast.FLOAT32)
def binary_cross_entropy_with_logits(input, target, weight=None, size_average=None, reduce=None, reduction="mean",
                                     pos_weight=None):
    """Sigmoid + binary cross-entropy in one numerically stable step; ``pos_weight`` weights positives.

        >>> round(F.binary_cross_entropy_with_logits(corenn.tensor([0.]), corenn.tensor([1.])).item(), 4)
        0.6931
    """
    reduction = _reduction(size_average, reduce, reduction)
    check_tensor(input, "input", "binary_cross_entropy_with_logits")
    check_tensor(target, "target", "binary_cross_entropy_with_logits")
    if tuple(target.shape) != tuple(input.shape):
        raise ValueError(f"Target size ({target.shape}) must be the same as input size ({input.shape})")
    return run("binary_cross_entropy_with_logits", input, target, weight, pos_weight, reduction=reduction)


@_autocast.autocast_op(_autocast.FLOAT32)
def kl_div(input, target, size_average=None, reduce=None, reduction="mean", log_target=False):
    """Kullback-Leibler divergence ``target * (log target - input)`` for log-probabilities ``input``.

    ``reduction='batchmean'`` divides the sum by the batch size (the mathematically
    correct KL); ``'mean'`` averages over every element, as PyTorch.

        >>> F.kl_div(corenn.tensor([0.]), corenn.tensor([1.]), reduction="sum").item()
        0.0
    """
    if size_average is not None or reduce is not None:
        reduction = _reduction(size_average, reduce, reduction)
    elif reduction not in _REDUCTIONS + ("batchmean",):
        raise ValueError(f"{reduction} is not a valid value for reduction")
    if not (isinstance(input, Tensor) and isinstance(target, Tensor)):
        raise not_tensors(input=input, target=target)
    if reduction == "mean":
        warnings.warn("reduction: 'mean' divides the total loss by both the batch size and the support size."
                      "'batchmean' divides only by the batch size, and aligns with the KL div math definition."
                      "'mean' will be changed to behave the same as 'batchmean' in the next major release.",
                      UserWarning, stacklevel=2)
    if log_target:
        loss = corenn.exp(target) * (target - input)
    else:
        loss = corenn.xlogy(target, target) - target * input
    if reduction == "batchmean":
        return loss.sum() / (input.shape[0] if input.ndim else 1)
    return _weighted_reduce(loss, reduction)


# ---------------------------------------------------------------------------------------------------------
# Attention
# ---------------------------------------------------------------------------------------------------------

@_autocast.autocast_op(_autocast.LOWER)
def scaled_dot_product_attention(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None,
                                 enable_gqa=False):
    """``softmax(q @ k^T * scale + mask) @ v`` over the last two dims.

    ``attn_mask``: bool (True = attend) or float (added to the scores); ``is_causal``
    masks the upper triangle.

        >>> q = corenn.randn(2, 4, 8)
        >>> F.scaled_dot_product_attention(q, q, q).shape
        corenn.Size([2, 4, 8])
    """
    if not (isinstance(query, Tensor) and isinstance(key, Tensor) and isinstance(value, Tensor)):
        raise not_tensors(query=query, key=key, value=value)
    if attn_mask is not None and not isinstance(attn_mask, Tensor):
        raise not_tensors(attn_mask=attn_mask)
    if is_causal and attn_mask is not None:
        raise RuntimeError("scaled_dot_product_attention(): Explicit attn_mask should not be set when is_causal=True")
    scale = 1.0 / math.sqrt(query.shape[-1]) if scale is None else scale
    scores = corenn.matmul(query, key.transpose(-2, -1)) * scale
    if is_causal:
        length, source = query.shape[-2], key.shape[-2]
        attn_mask = corenn.ones(length, source, dtype=corenn.bool, device=query.device).tril()
    if attn_mask is not None:
        if attn_mask.dtype is corenn.bool:
            scores = scores.masked_fill(attn_mask.logical_not(), float("-inf"))
        else:
            scores = scores + attn_mask
    weights = _softmax(scores, -1)
    if dropout_p > 0.0:
        weights = dropout(weights, dropout_p)
    return corenn.matmul(weights, value)


# ---------------------------------------------------------------------------------------------------------
# Channel dropout, PReLU, pixel shuffle (composites of the core's ops)
# ---------------------------------------------------------------------------------------------------------

def _feature_dropout(input, p, training, inplace, name, spatial):
    """Zero whole channels: one keep/drop draw per (sample, channel), broadcast over ``spatial`` dims."""
    check_tensor(input, "input", name)
    p = check_number(p, "p")
    if not 0.0 <= p <= 1.0:
        raise ValueError(f"{name}(): dropout probability has to be between 0 and 1, but got p={p}")
    if input.ndim not in (spatial + 1, spatial + 2):
        raise RuntimeError(f"{name}: Expected {spatial + 1}D or {spatial + 2}D input, but received a "
                           f"{input.ndim}D input. Note that {name} exists to provide channel-wise dropout on "
                           f"inputs with {spatial} spatial dimension{'s' if spatial > 1 else ''}, a channel "
                           "dimension, and an optional batch dimension.")
    if not training or p == 0.0:
        return input
    batched = input.ndim == spatial + 2
    channels = tuple(input.shape[:2]) if batched else (input.shape[0],)
    mask = _keep_mask(input, p, shape=channels + (1,) * spatial)
    return _inplace(input, run("dropout", input, mask=mask), inplace)


def dropout1d(input, p=0.5, training=True, inplace=False):
    """Zero whole channels of (N, C, L) or (C, L) input with probability ``p``; scale the rest by ``1/(1-p)``.

        >>> F.dropout1d(corenn.ones(2, 3, 4), 0.5, training=False).shape
        corenn.Size([2, 3, 4])
    """
    return _feature_dropout(input, p, training, inplace, "dropout1d", 1)


def dropout2d(input, p=0.5, training=True, inplace=False):
    """Zero whole channels of (N, C, H, W) input with probability ``p`` (3-D input: (N, C, L), as PyTorch).

        >>> F.dropout2d(corenn.ones(2, 3, 4, 4), 0.5).shape
        corenn.Size([2, 3, 4, 4])
    """
    if isinstance(input, Tensor) and input.ndim == 3:
        # PyTorch keeps its historical reading of 3-D input as (N, C, L) and warns about it
        warnings.warn("dropout2d: Received a 3D input to dropout2d and assuming that channel-wise 1D dropout "
                      "behavior is desired - input is interpreted as shape (N, C, L), where C is the channel "
                      "dim. This behavior will change in a future release to interpret the input as one "
                      "without a batch dimension, i.e. shape (C, H, W). To maintain the 1D channel-wise "
                      "dropout behavior, please switch to using dropout1d instead.", stacklevel=2)
        return _feature_dropout(input, p, training, inplace, "dropout2d", 1)
    if isinstance(input, Tensor) and input.ndim != 4:
        # PyTorch still accepts other ranks (pytorch/examples mnist_rnn applies Dropout2d to (N, C) features):
        # it warns, then drops per (sample, channel) entry over whatever dimensions follow.
        warnings.warn(f"dropout2d: Received a {input.ndim}-D input to dropout2d, which is deprecated and will "
                      "result in an error in a future release. To retain the behavior and silence this warning, "
                      "please use dropout instead. Note that dropout2d exists to provide channel-wise dropout on "
                      "inputs with 2 spatial dimensions, a channel dimension, and an optional batch dimension "
                      "(i.e. 3D or 4D inputs).", stacklevel=2)
        if input.ndim < 2:
            raise RuntimeError("Feature dropout requires at least 2 dimensions in the input")
        return _feature_dropout(input, p, training, inplace, "dropout2d", input.ndim - 2)
    return _feature_dropout(input, p, training, inplace, "dropout2d", 2)


def dropout3d(input, p=0.5, training=True, inplace=False):
    """Zero whole channels of (N, C, D, H, W) or (C, D, H, W) input with probability ``p``.

        >>> F.dropout3d(corenn.ones(2, 3, 2, 2, 2), 0.5, training=False).shape
        corenn.Size([2, 3, 2, 2, 2])
    """
    return _feature_dropout(input, p, training, inplace, "dropout3d", 3)


def prelu(input, weight):
    """``max(0, x) + weight * min(0, x)``; ``weight`` has 1 or C elements (C: dim 1; 1 for 0-D/1-D input).

        >>> F.prelu(corenn.tensor([-2.0, 3.0]), corenn.tensor([0.25])).tolist()
        [-0.5, 3.0]
    """
    if not (isinstance(input, Tensor) and isinstance(weight, Tensor)):
        raise not_tensors(input=input, weight=weight)
    if weight.ndim > 1:
        raise RuntimeError(f"prelu: weight must be 0-D or 1-D, got {weight.ndim}-D")
    count = weight.numel()
    if count != 1:
        channels = input.shape[1] if input.ndim >= 2 else 1   # 0-D and 1-D input have one channel
        if count != channels:
            raise RuntimeError(f"Mismatch of parameter numbers and input channel size. Found parameter numbers = "
                               f"{count} and channel size = {channels}.")
        if input.ndim >= 2:
            weight = weight.reshape((count,) + (1,) * (input.ndim - 2))
    return corenn.where(input > 0, input, weight * input)


def pixel_shuffle(input, upscale_factor):
    """Rearrange (*, C*r*r, H, W) into (*, C, H*r, W*r) (sub-pixel convolution's upsampling).

        >>> F.pixel_shuffle(corenn.randn(1, 8, 3, 3), 2).shape
        corenn.Size([1, 2, 6, 6])
    """
    check_tensor(input, "input", "pixel_shuffle")
    r = check_int(upscale_factor, "upscale_factor")
    if r <= 0:
        raise RuntimeError(f"pixel_shuffle expects a positive upscale_factor, but got {upscale_factor}")
    if input.ndim < 3:
        raise RuntimeError(f"pixel_shuffle expects input to have at least 3 dimensions, but got input with "
                           f"{input.ndim} dimension(s)")
    *batch, channels, height, width = input.shape
    if channels % (r * r) != 0:
        raise RuntimeError(f"pixel_shuffle expects its input's 'channel' dimension to be divisible by the square "
                           f"of upscale_factor, but input.size(-3)={channels} is not divisible by {r * r}")
    lead = len(batch)
    x = input.reshape(*batch, channels // (r * r), r, r, height, width)
    x = x.permute(*range(lead), lead, lead + 3, lead + 1, lead + 4, lead + 2)   # (*, C, H, r, W, r)
    return x.reshape(*batch, channels // (r * r), height * r, width * r)


def pixel_unshuffle(input, downscale_factor):
    """Rearrange (*, C, H*r, W*r) into (*, C*r*r, H, W), the inverse of :func:`pixel_shuffle`.

        >>> F.pixel_unshuffle(corenn.randn(1, 2, 6, 6), 2).shape
        corenn.Size([1, 8, 3, 3])
    """
    check_tensor(input, "input", "pixel_unshuffle")
    r = check_int(downscale_factor, "downscale_factor")
    if r <= 0:
        raise RuntimeError(f"pixel_unshuffle expects a positive downscale_factor, but got {downscale_factor}")
    if input.ndim < 3:
        raise RuntimeError(f"pixel_unshuffle expects input to have at least 3 dimensions, but got input with "
                           f"{input.ndim} dimension(s)")
    *batch, channels, height, width = input.shape
    if height % r != 0 or width % r != 0:
        raise RuntimeError(f"pixel_unshuffle expects height and width to be divisible by downscale_factor, but "
                           f"got height={height}, width={width} and downscale_factor={r}")
    lead = len(batch)
    x = input.reshape(*batch, channels, height // r, r, width // r, r)
    x = x.permute(*range(lead), lead, lead + 2, lead + 4, lead + 1, lead + 3)   # (*, C, r, r, H, W)
    return x.reshape(*batch, channels * r * r, height // r, width // r)


# ---------------------------------------------------------------------------------------------------------
# Breadth (issue 22): instance/RMS/local-response norm, more activations and losses, distances,
# fold/unfold, embedding_bag, channel shuffle, alpha dropout, LP pooling. Composites of the core's ops,
# so autograd, devices and plugins come for free; the formulas follow PyTorch's own step by step.
# ---------------------------------------------------------------------------------------------------------

from corenn._argcheck import check_ints  # noqa: E402

def _check_reduction(reduction, op):
    if reduction not in _REDUCTIONS:
        raise ValueError(f"{op}: {reduction} is not a valid value for reduction")
    return reduction


def _without_grad_clamp_min(tensor, minimum):
    """``tensor.clamp_min(minimum)`` whose gradient is that of ``tensor`` itself.

    PyTorch clamps some denominators in place under ``no_grad`` (cosine_similarity's norms,
    gaussian_nll_loss's variance), so their gradient ignores the clamp; this mirrors it.
    """
    return tensor + (tensor.clamp_min(minimum) - tensor).detach()


def instance_norm(input, running_mean=None, running_var=None, weight=None, bias=None, use_input_stats=True,
                  momentum=0.1, eps=1e-5):
    """Normalise each (sample, channel) over its spatial dims; (N, C, *) input.

    As in PyTorch, this is batch norm over a (1, N*C, *) view; with ``use_input_stats``
    the running statistics (if given) move by ``momentum`` towards the batch's average
    per-channel statistics.

        >>> [round(v, 4) for v in F.instance_norm(corenn.tensor([[[1., 3.]]])).flatten().tolist()]
        [-1.0, 1.0]
    """
    check_tensor(input, "input", "instance_norm")
    for tensor, name in ((running_mean, "running_mean"), (running_var, "running_var"), (weight, "weight"),
                         (bias, "bias")):
        if tensor is not None:
            check_tensor(tensor, name, "instance_norm")
    momentum, eps = check_number(momentum, "momentum"), check_number(eps, "eps")
    if input.ndim < 2:
        raise ValueError(f"instance_norm: expected input with at least 2 dimensions (N, C, *), got {input.ndim}D")
    batch, channels = input.shape[0], input.shape[1]
    if use_input_stats:
        spatial = 1
        for size in input.shape[2:]:
            spatial *= size
        if spatial == 1:
            raise ValueError(f"Expected more than 1 spatial element when training, got input size "
                             f"{list(input.shape)}")
    elif running_mean is None or running_var is None:
        raise RuntimeError("instance_norm: Expected running_mean and running_var to be defined when "
                           "use_input_stats is false")
    folded = input.reshape(1, batch * channels, *input.shape[2:])
    repeated_mean = running_mean.repeat(batch) if running_mean is not None else None
    repeated_var = running_var.repeat(batch) if running_var is not None else None
    out = _batch_norm(folded, repeated_mean, repeated_var, weight.repeat(batch) if weight is not None else None,
                      bias.repeat(batch) if bias is not None else None, use_input_stats, momentum, eps)
    if use_input_stats:
        with corenn.no_grad():
            # the batch-norm kernel moved every (sample, channel) copy; the running value is their mean
            if running_mean is not None:
                running_mean.copy_(repeated_mean.reshape(batch, channels).mean(0))
            if running_var is not None:
                running_var.copy_(repeated_var.reshape(batch, channels).mean(0))
    return out.reshape(input.shape)


def _machine_epsilon(dtype):
    import numpy
    if dtype is corenn.bfloat16:
        return 2.0 ** -7          # 8 significand bits (numpy.finfo does not know bfloat16)
    return float(numpy.finfo(dtype.numpy).eps) if dtype.is_floating_point else float(numpy.finfo(numpy.float32).eps)


def rms_norm(input, normalized_shape, weight=None, eps=None):
    """``x / sqrt(mean(x**2) + eps) * weight`` over the trailing ``normalized_shape`` dims.

    ``eps=None`` uses the machine epsilon of the input's dtype, as PyTorch.

        >>> [round(v, 4) for v in F.rms_norm(corenn.tensor([[3., 4.]]), (2,), eps=0.0).flatten().tolist()]
        [0.8485, 1.1314]
    """
    check_tensor(input, "input", "rms_norm")
    shape = check_ints(normalized_shape, "normalized_shape") if not isinstance(normalized_shape, int) \
        else (normalized_shape,)
    if tuple(input.shape[input.ndim - len(shape):]) != tuple(shape) or len(shape) > input.ndim:
        raise RuntimeError(f"rms_norm: Given normalized_shape={list(shape)}, expected input with shape "
                           f"[*, {', '.join(map(str, shape))}], but got input of size {list(input.shape)}")
    if weight is not None:
        check_tensor(weight, "weight", "rms_norm")
    eps = _machine_epsilon(input.dtype) if eps is None else check_number(eps, "eps")
    dims = tuple(range(input.ndim - len(shape), input.ndim))
    out = input * corenn.rsqrt((input * input).mean(dims, keepdim=True) + eps) if dims else input
    return out * weight if weight is not None else out


def local_response_norm(input, size, alpha=1e-4, beta=0.75, k=1.0):
    """Divide each element by ``(k + alpha * mean of squares over `size` neighbouring channels) ** beta``.

        >>> F.local_response_norm(corenn.ones(1, 3, 2), 2).shape
        corenn.Size([1, 3, 2])
    """
    check_tensor(input, "input", "local_response_norm")
    size = check_int(size, "size")
    if input.ndim < 3:
        raise ValueError(f"local_response_norm: Expected 3D or higher dimensionality input (got {input.ndim} "
                         f"dimensions)")
    if size <= 0:
        raise ValueError(f"local_response_norm: size must be positive, got {size}")
    if input.numel() == 0:
        return input
    channels = input.shape[1]
    squares = input * input
    # zero-pad the channel axis as PyTorch does (size//2 before, (size-1)//2 after), then a window mean
    padding = [0, 0] * (input.ndim - 2) + [size // 2, (size - 1) // 2]
    padded = pad(squares, padding)
    window = padded.narrow(1, 0, channels)
    for offset in range(1, size):
        window = window + padded.narrow(1, offset, channels)
    div = (window / size * alpha + k) ** beta
    return input / div


def glu(input, dim=-1):
    """Gated linear unit: split ``input`` in halves ``a, b`` along ``dim``; ``a * sigmoid(b)``.

        >>> F.glu(corenn.tensor([2., 0.])).tolist()
        [1.0]
    """
    check_tensor(input, "input", "glu")
    dim = check_int(dim, "dim")
    if input.ndim == 0:
        raise RuntimeError("glu does not support scalars because halving size must be even")
    if not -input.ndim <= dim < input.ndim:
        raise IndexError(f"glu: Dimension out of range (expected to be in range of [{-input.ndim}, "
                         f"{input.ndim - 1}], but got {dim})")
    size = input.shape[dim]
    if size % 2:
        raise RuntimeError(f"glu: Halving dimension must be even, but dimension {dim % input.ndim} is size {size}")
    first, second = input.narrow(dim, 0, size // 2), input.narrow(dim, size // 2, size // 2)
    return first * sigmoid(second)


def hardshrink(input, lambd=0.5):
    """``x`` where ``|x| > lambd``, else 0.

        >>> F.hardshrink(corenn.tensor([-1., 0.2, 0.7])).tolist()
        [-1.0, 0.0, 0.699999988079071]
    """
    check_tensor(input, "input", "hardshrink")
    lambd = check_number(lambd, "lambd")
    return corenn.where((input > lambd) | (input < -lambd), input, corenn.zeros_like(input))


def softshrink(input, lambd=0.5):
    """``x - lambd`` above ``lambd``, ``x + lambd`` below ``-lambd``, else 0.

        >>> F.softshrink(corenn.tensor([-1., 0.2, 1.5])).tolist()
        [-0.5, 0.0, 1.0]
    """
    check_tensor(input, "input", "softshrink")
    lambd = check_number(lambd, "lambd")
    if lambd < 0:
        raise RuntimeError(f"softshrink: lambda must be greater or equal to 0, but found to be {lambd}.")
    zeros = corenn.zeros_like(input)
    return corenn.where(input > lambd, input - lambd, corenn.where(input < -lambd, input + lambd, zeros))


def threshold(input, threshold, value, inplace=False):
    """``x`` where ``x > threshold``, else ``value``.

        >>> F.threshold(corenn.tensor([1., 3.]), 2., -1.).tolist()
        [-1.0, 3.0]
    """
    check_tensor(input, "input", "threshold")
    limit, value = check_number(threshold, "threshold"), check_number(value, "value")
    out = corenn.where(input > limit, input, corenn.full_like(input, value))
    return _inplace(input, out, inplace)


def threshold_(input, threshold, value):
    """In-place :func:`threshold`."""
    return globals()["threshold"](input, threshold, value, inplace=True)


def rrelu(input, lower=1.0 / 8, upper=1.0 / 3, training=False, inplace=False):
    """Randomized leaky ReLU: in training each negative element gets a slope drawn from U(lower, upper);
    in eval the slope is ``(lower + upper) / 2``.

        >>> F.rrelu(corenn.tensor([-2., 1.]), 0.25, 0.25).tolist()
        [-0.5, 1.0]
    """
    check_tensor(input, "input", "rrelu")
    lower, upper = check_number(lower, "lower"), check_number(upper, "upper")
    if lower > upper:
        raise RuntimeError(f"rrelu: Lower bound should be less than or equal to the upper bound, got lower={lower} "
                           f"and upper={upper}")
    if not training:
        return _inplace(input, _leaky_relu(input, (lower + upper) / 2), inplace)
    slopes = corenn.rand(input.shape, dtype=input.dtype, device=input.device) * (upper - lower) + lower
    return _inplace(input, corenn.where(input >= 0, input, input * slopes), inplace)


def rrelu_(input, lower=1.0 / 8, upper=1.0 / 3, training=False):
    """In-place :func:`rrelu`."""
    return rrelu(input, lower, upper, training, inplace=True)


def elu_(input, alpha=1.0):
    """In-place :func:`elu`."""
    return elu(input, alpha, inplace=True)


def selu_(input):
    """In-place :func:`selu`."""
    return selu(input, inplace=True)


def celu_(input, alpha=1.0):
    """In-place :func:`celu`."""
    return celu(input, alpha, inplace=True)


def leaky_relu_(input, negative_slope=0.01):
    """In-place :func:`leaky_relu`."""
    return leaky_relu(input, negative_slope, inplace=True)


def hardtanh_(input, min_val=-1.0, max_val=1.0):
    """In-place :func:`hardtanh`."""
    return hardtanh(input, min_val, max_val, inplace=True)


def channel_shuffle(input, groups):
    """Interleave the channels of (N, C, *) input across ``groups`` (ShuffleNet).

        >>> F.channel_shuffle(corenn.arange(4.).reshape(1, 4, 1), 2).flatten().tolist()
        [0.0, 2.0, 1.0, 3.0]
    """
    check_tensor(input, "input", "channel_shuffle")
    groups = check_int(groups, "groups")
    if input.ndim < 3:
        raise RuntimeError(f"channel_shuffle expects input to have at least 3 dimensions, but got input with "
                           f"{input.ndim} dimension(s)")
    if groups <= 0:
        raise RuntimeError(f"channel_shuffle: Number of groups to divide channels in must be positive. Value of "
                           f"groups:{groups}")
    batch, channels, *spatial = input.shape
    if channels % groups:
        raise RuntimeError(f"channel_shuffle: Number of channels must be divisible by groups. Got {channels} "
                           f"channels and {groups} groups.")
    x = input.reshape(batch, groups, channels // groups, *spatial).transpose(1, 2)
    return x.reshape(input.shape)


def _alpha_dropout(input, p, training, inplace, name, feature):
    check_tensor(input, "input", name)
    p = check_number(p, "p")
    if not 0.0 <= p <= 1.0:
        raise ValueError(f"{name}: dropout probability has to be between 0 and 1, but got {p}")
    if not training or p == 0.0:
        return input
    if p == 1.0:
        return _inplace(input, input * 0.0, inplace)
    # PyTorch's constants: keep SELU's self-normalising mean and variance (alpha = -selu_scale * selu_alpha)
    alpha = 1.7580993408473766
    a = 1.0 / math.sqrt((alpha * alpha * p + 1) * (1 - p))
    shape = tuple(input.shape[:2]) + (1,) * (input.ndim - 2) if feature else tuple(input.shape)
    keep = (corenn.rand(shape, device=input.device) >= p).to(input.dtype)
    b = (keep - 1) * (alpha * a) + alpha * a * p
    return _inplace(input, input * (keep * a) + b, inplace)


def alpha_dropout(input, p=0.5, training=False, inplace=False):
    """Dropout that keeps SELU's zero mean and unit variance (dropped elements go to SELU's negative limit).

        >>> F.alpha_dropout(corenn.ones(3), 0.5).tolist()
        [1.0, 1.0, 1.0]
    """
    return _alpha_dropout(input, p, training, inplace, "alpha_dropout", feature=False)


def feature_alpha_dropout(input, p=0.5, training=False, inplace=False):
    """:func:`alpha_dropout` of whole channels of (N, C, *) input.

        >>> F.feature_alpha_dropout(corenn.ones(2, 3, 4), 0.5).shape
        corenn.Size([2, 3, 4])
    """
    return _alpha_dropout(input, p, training, inplace, "feature_alpha_dropout", feature=True)


def _lp_pool(input, norm_type, kernel_size, stride, ceil_mode, name, average, window):
    check_tensor(input, "input", name)
    norm_type = check_number(norm_type, "norm_type")
    if norm_type in (math.inf, -math.inf):  # the p -> +-inf limits are the max / min of |x| (PyTorch's branch)
        maximum = getattr(corenn.ops.pooling, name.replace("lp_", "max_"))
        if norm_type > 0:
            return maximum(input.abs(), kernel_size, stride, 0, 1, ceil_mode)
        return -maximum(-input.abs(), kernel_size, stride, 0, 1, ceil_mode)
    powered = input ** norm_type
    pooled = average(powered, kernel_size, stride if stride is not None else kernel_size, 0, ceil_mode)
    return (corenn.sign(pooled) * relu(pooled.abs())).mul(window).pow(1.0 / norm_type)


def lp_pool1d(input, norm_type, kernel_size, stride=None, ceil_mode=False):
    """Power-average pooling over (N, C, L): ``(sum over the window of x**p) ** (1/p)``.

        >>> F.lp_pool1d(corenn.tensor([[[3., 4.]]]), 2, 2).tolist()
        [[[5.0]]]
    """
    kernel = check_int(kernel_size, "kernel_size")
    return _lp_pool(input, norm_type, kernel, stride, ceil_mode, "lp_pool1d", avg_pool1d, kernel)


def lp_pool2d(input, norm_type, kernel_size, stride=None, ceil_mode=False):
    """Power-average pooling over (N, C, H, W).

        >>> F.lp_pool2d(corenn.ones(1, 1, 2, 2), 1, 2).tolist()
        [[[[4.0]]]]
    """
    kernel = check_ints(kernel_size, "kernel_size")
    kernel = kernel * 2 if len(kernel) == 1 else kernel
    return _lp_pool(input, norm_type, kernel, stride, ceil_mode, "lp_pool2d", avg_pool2d, kernel[0] * kernel[1])


def lp_pool3d(input, norm_type, kernel_size, stride=None, ceil_mode=False):
    """Power-average pooling over (N, C, D, H, W).

        >>> F.lp_pool3d(corenn.ones(1, 1, 2, 2, 2), 1, 2).flatten().tolist()
        [8.0]
    """
    kernel = check_ints(kernel_size, "kernel_size")
    kernel = kernel * 3 if len(kernel) == 1 else kernel
    return _lp_pool(input, norm_type, kernel, stride, ceil_mode, "lp_pool3d", corenn.ops.pooling.avg_pool3d,
                    math.prod(kernel))


# Distances ------------------------------------------------------------------------------------------------

def pairwise_distance(x1, x2, p=2.0, eps=1e-6, keepdim=False):
    """``||x1 - x2 + eps||_p`` over the last dimension (PyTorch adds ``eps`` to the difference).

        >>> round(F.pairwise_distance(corenn.tensor([[0., 0.]]), corenn.tensor([[3., 4.]]), eps=0.).item(), 4)
        5.0
    """
    check_tensor(x1, "x1", "pairwise_distance")
    check_tensor(x2, "x2", "pairwise_distance")
    p, eps = check_number(p, "p"), check_number(eps, "eps")
    ndim = max(x1.ndim, x2.ndim)
    if ndim == 0:
        return (x1 - x2 + eps).abs()
    return corenn.norm(x1 - x2 + eps, p, ndim - 1, keepdim=keepdim)


def cosine_similarity(x1, x2, dim=1, eps=1e-8):
    """``x1 . x2 / (max(||x1||, eps) * max(||x2||, eps))`` along ``dim`` (inputs broadcast).

        >>> F.cosine_similarity(corenn.tensor([[1., 0.]]), corenn.tensor([[1., 1.]])).tolist()
        [0.7071067690849304]
    """
    check_tensor(x1, "x1", "cosine_similarity")
    check_tensor(x2, "x2", "cosine_similarity")
    dim, eps = check_int(dim, "dim"), check_number(eps, "eps")
    x1, x2 = corenn.broadcast_tensors(x1, x2)
    if x1.dtype is not x2.dtype:
        dtype = corenn.promote_types(x1.dtype, x2.dtype)
        x1, x2 = x1.to(dtype), x2.to(dtype)
    if not x1.dtype.is_floating_point:
        x1, x2 = x1.to(corenn.get_default_dtype()), x2.to(corenn.get_default_dtype())
    # each vector divided by its own norm first, as PyTorch (better-conditioned than one division at the end)
    norm1 = _without_grad_clamp_min(corenn.norm(x1, 2, dim, keepdim=True), eps)
    norm2 = _without_grad_clamp_min(corenn.norm(x2, 2, dim, keepdim=True), eps)
    return ((x1 / norm1) * (x2 / norm2)).sum(dim)


def pdist(input, p=2):
    """The p-norm distances between every pair of rows of an (N, M) input: the upper triangle, row by row.

        >>> F.pdist(corenn.tensor([[0., 0.], [3., 4.], [0., 1.]])).tolist()
        [5.0, 1.0, 4.242640495300293]
    """
    check_tensor(input, "input", "pdist")
    p = check_number(p, "p")
    if input.ndim != 2:
        raise RuntimeError(f"pdist only supports 2D tensors, got: {input.ndim}D")
    if p < 0:
        raise RuntimeError("pdist only supports non-negative p values")
    rows = input.shape[0]
    first, second = (corenn.tensor(index, device=input.device) for index in _upper_pairs(rows))
    return corenn.norm(input.index_select(0, first) - input.index_select(0, second), p, 1)


def _upper_pairs(rows):
    import numpy
    first, second = numpy.triu_indices(rows, 1)
    return first.astype(numpy.int64), second.astype(numpy.int64)


# Fold / unfold ----------------------------------------------------------------------------------------------

def _pair_arg(value, name, op):
    values = check_ints(value, name)
    if len(values) == 1:
        values = values * 2
    if len(values) != 2:
        raise RuntimeError(f"{op}: {name} must be an int or a pair of ints, got {value}")
    return values


def _patch_positions(height, width, kernel, dilation, padding, stride, op):
    """Flat indices into the padded (H+2p, W+2p) image, ordered (kernel row, kernel col, out row, out col)."""
    import numpy
    for values, name, least in ((kernel, "kernel_size", 1), (dilation, "dilation", 1), (stride, "stride", 1),
                                (padding, "padding", 0)):
        if min(values) < least:
            raise RuntimeError(f"{op}: expected {name} to be {'greater than zero' if least else 'non-negative'}, "
                               f"but got {name}: {list(values)}")
    padded_h, padded_w = height + 2 * padding[0], width + 2 * padding[1]
    out_h = (padded_h - dilation[0] * (kernel[0] - 1) - 1) // stride[0] + 1
    out_w = (padded_w - dilation[1] * (kernel[1] - 1) - 1) // stride[1] + 1
    if out_h < 1 or out_w < 1:
        raise RuntimeError(f"{op}: Given input with spatial size ({height}, {width}), kernel_size={list(kernel)}, "
                           f"dilation={list(dilation)}, padding={list(padding)}, calculated shape of the array of "
                           f"sliding blocks as ({out_h}, {out_w}), but its components must be at least one.")
    rows = (numpy.arange(kernel[0])[:, None, None, None] * dilation[0]
            + numpy.arange(out_h)[None, None, :, None] * stride[0])
    cols = (numpy.arange(kernel[1])[None, :, None, None] * dilation[1]
            + numpy.arange(out_w)[None, None, None, :] * stride[1])
    return (rows * padded_w + cols).reshape(-1).astype(numpy.int64), (padded_h, padded_w), out_h * out_w


def unfold(input, kernel_size, dilation=1, padding=0, stride=1):
    """Sliding blocks (im2col): (N, C, H, W) -> (N, C * prod(kernel_size), L), L the number of blocks.

        >>> F.unfold(corenn.randn(1, 3, 4, 4), 2).shape
        corenn.Size([1, 12, 9])
    """
    check_tensor(input, "input", "unfold")
    kernel, dilation = _pair_arg(kernel_size, "kernel_size", "unfold"), _pair_arg(dilation, "dilation", "unfold")
    padding, stride = _pair_arg(padding, "padding", "unfold"), _pair_arg(stride, "stride", "unfold")
    if input.ndim not in (3, 4):
        raise NotImplementedError(f"Input Error: Only 3D or 4D input Tensors are supported (got {input.ndim}D)")
    batched = input if input.ndim == 4 else input.unsqueeze(0)
    batch, channels, height, width = batched.shape
    positions, (padded_h, padded_w), blocks = _patch_positions(height, width, kernel, dilation, padding, stride,
                                                               "unfold")
    padded = pad(batched, (padding[1], padding[1], padding[0], padding[0])) if any(padding) else batched
    flat = padded.reshape(batch, channels, padded_h * padded_w)
    out = flat.index_select(2, corenn.tensor(positions, device=input.device))
    out = out.reshape(batch, channels * kernel[0] * kernel[1], blocks)
    return out if input.ndim == 4 else out.squeeze(0)


def fold(input, output_size, kernel_size, dilation=1, padding=0, stride=1):
    """Sum sliding blocks back into an image (col2im), the adjoint of :func:`unfold`:
    (N, C * prod(kernel_size), L) -> (N, C, *output_size).

        >>> F.fold(corenn.ones(1, 4, 9), (4, 4), 2)[0, 0].tolist()[1]
        [2.0, 4.0, 4.0, 2.0]
    """
    check_tensor(input, "input", "fold")
    size = _pair_arg(output_size, "output_size", "fold")
    kernel, dilation = _pair_arg(kernel_size, "kernel_size", "fold"), _pair_arg(dilation, "dilation", "fold")
    padding, stride = _pair_arg(padding, "padding", "fold"), _pair_arg(stride, "stride", "fold")
    if input.ndim not in (2, 3):
        raise NotImplementedError(f"Input Error: Only unbatched (2D) or batched (3D) input Tensors are supported "
                                  f"(got {input.ndim}D)")
    batched = input if input.ndim == 3 else input.unsqueeze(0)
    batch, columns, blocks = batched.shape
    # validates kernel_size, dilation, padding and stride first (a zero kernel would divide by zero below)
    positions, (padded_h, padded_w), expected = _patch_positions(size[0], size[1], kernel, dilation, padding,
                                                                 stride, "fold")
    window = kernel[0] * kernel[1]
    if columns % window:
        raise RuntimeError(f"fold: Expected size of input's dimension 1 to be divisible by the product of "
                           f"kernel_size, but got input.size(1)={columns} and kernel_size={tuple(kernel)}")
    if blocks != expected:
        raise RuntimeError(f"fold: Given output_size={tuple(size)}, kernel_size={tuple(kernel)}, "
                           f"dilation={tuple(dilation)}, padding={tuple(padding)}, stride={tuple(stride)}, expected "
                           f"size of input's dimension 2 to match the calculated number of sliding blocks "
                           f"{expected}, but got input.size(2)={blocks}.")
    channels = columns // window
    canvas = corenn.zeros(batch, channels, padded_h * padded_w, dtype=input.dtype, device=input.device)
    summed = canvas.index_add(2, corenn.tensor(positions, device=input.device),
                              batched.reshape(batch, channels, window * blocks))
    out = summed.reshape(batch, channels, padded_h, padded_w)
    out = out[:, :, padding[0]:padding[0] + size[0], padding[1]:padding[1] + size[1]]
    return out if input.ndim == 3 else out.squeeze(0)


# EmbeddingBag ------------------------------------------------------------------------------------------------

def embedding_bag(input, weight, offsets=None, max_norm=None, norm_type=2, scale_grad_by_freq=False, mode="mean",
                  sparse=False, per_sample_weights=None, include_last_offset=False, padding_idx=None):
    """Sum, mean or max of the embeddings of each bag of indices, without materialising the lookups per bag.

    Bags: the rows of a 2-D ``input``, or the slices ``input[offsets[i]:offsets[i+1]]`` of a 1-D one.
    Indices equal to ``padding_idx`` are left out (and not counted by ``mean``); an empty bag gives zeros.

        >>> F.embedding_bag(corenn.tensor([0, 1, 2]), corenn.eye(3), corenn.tensor([0, 2]), mode="sum").tolist()
        [[1.0, 1.0, 0.0], [0.0, 0.0, 1.0]]
    """
    import numpy
    check_tensor(input, "input", "embedding_bag")
    check_tensor(weight, "weight", "embedding_bag")
    if mode not in ("sum", "mean", "max"):
        raise ValueError(f"embedding_bag: mode has to be one of sum, mean or max, got {mode!r}")
    if scale_grad_by_freq or sparse:
        raise NotImplementedError("embedding_bag: scale_grad_by_freq and sparse gradients are not supported")
    if input.dtype.is_floating_point or input.dtype is corenn.bool:
        raise RuntimeError(f"embedding_bag: expected tensor for argument 'input' to have one of the following "
                           f"scalar types: Long, Int; but got {input.dtype} instead")
    if weight.ndim != 2:
        raise ValueError(f"embedding_bag: weight has to be a 2D Tensor, but got Tensor of dimension {weight.ndim}")
    if per_sample_weights is not None:
        check_tensor(per_sample_weights, "per_sample_weights", "embedding_bag")
        if tuple(per_sample_weights.shape) != tuple(input.shape):
            raise ValueError(f"embedding_bag: embedding_bag: If per_sample_weights ({list(per_sample_weights.shape)}) "
                             f"is not None, then it must have the same shape as the input ({list(input.shape)})")
        if mode != "sum":
            raise NotImplementedError(f"embedding_bag: per_sample_weights was not None. per_sample_weights is only "
                                      f"supported for mode='sum' (got mode='{mode}'). Please open a feature request "
                                      f"on GitHub.")
    if input.ndim == 2:
        if offsets is not None:
            raise ValueError(f"embedding_bag: if input is 2D, then offsets has to be None, as input is treated is a "
                             f"mini-batch of fixed length sequences. However, found offsets of type "
                             f"{type(offsets).__name__}")
        bags, length = input.shape
        starts = numpy.arange(bags, dtype=numpy.int64) * length
        flat_input = input.reshape(-1)
        flat_weights = per_sample_weights.reshape(-1) if per_sample_weights is not None else None
        ends = starts + length
    elif input.ndim == 1:
        if offsets is None:
            raise ValueError("embedding_bag: offsets has to be a 1D Tensor but got None")
        check_tensor(offsets, "offsets", "embedding_bag")
        if offsets.ndim != 1:
            raise ValueError("embedding_bag: offsets has to be a 1D Tensor")
        starts = offsets.numpy().astype(numpy.int64)
        if starts.size and starts[0] != 0:
            raise RuntimeError(f"embedding_bag: offsets[0] has to be 0, i.e., the first sequence in the mini-batch "
                               f"has to start from position 0. However, got {starts[0]}")
        if starts.size and (numpy.any(numpy.diff(starts) < 0) or starts[-1] > input.shape[0]):
            raise RuntimeError("embedding_bag: offsets must be non-decreasing and at most the number of indices")
        if include_last_offset:
            starts, ends = starts[:-1], starts[1:]
        else:
            ends = numpy.append(starts[1:], input.shape[0]).astype(numpy.int64)
        flat_input, flat_weights = input, per_sample_weights
    else:
        raise ValueError(f"embedding_bag: input has to be 1D or 2D Tensor, but got Tensor of dimension {input.ndim}")
    rows = weight.shape[0]
    if padding_idx is not None:
        if not -rows <= padding_idx < rows:
            raise AssertionError("padding_idx must be within num_embeddings")
        padding_idx %= rows
    indices = flat_input.numpy().astype(numpy.int64)
    if indices.size and (indices.min() < 0 or indices.max() >= rows):
        raise IndexError(f"embedding_bag: index out of range in self (weight of {rows} rows looked up with "
                         f"indices in [{indices.min()}, {indices.max()}])")
    if max_norm is not None:
        _renorm_rows(weight, flat_input, max_norm, norm_type)
    bag_of = numpy.repeat(numpy.arange(len(starts), dtype=numpy.int64), ends - starts)
    positions = numpy.concatenate([numpy.arange(s, e) for s, e in zip(starts, ends)]) if len(starts) \
        else numpy.zeros(0, numpy.int64)
    keep = indices[positions] != padding_idx if padding_idx is not None else numpy.ones(len(positions), bool)
    positions, bag_of = positions[keep], bag_of[keep]
    device = input.device
    picked = weight.index_select(0, corenn.tensor(indices[positions], device=device))
    bags = len(starts)
    if mode == "max":
        empty = weight.new_zeros((weight.shape[1],))
        out = [picked[corenn.tensor(numpy.flatnonzero(bag_of == b), device=device)].max(0).values
               if numpy.any(bag_of == b) else empty for b in range(bags)]
        return corenn.stack(out) if out else weight.new_zeros((0, weight.shape[1]))
    if flat_weights is not None:
        picked = picked * flat_weights.index_select(0, corenn.tensor(positions, device=device)).unsqueeze(1)
    out = weight.new_zeros((bags, weight.shape[1])).index_add(0, corenn.tensor(bag_of, device=device), picked)
    if mode == "mean":
        counts = numpy.maximum(numpy.bincount(bag_of, minlength=bags), 1)
        out = out / corenn.tensor(counts, dtype=weight.dtype, device=device).unsqueeze(1)
    return out


# Losses -----------------------------------------------------------------------------------------------------

def _check_same_shape(tensors, op):
    shape = tuple(tensors[0][0].shape)
    for tensor, name in tensors:
        check_tensor(tensor, name, op)
    for tensor, name in tensors[1:]:
        if tuple(tensor.shape) != shape:
            raise ValueError(f"{op}: Using a {name} size ({list(tensor.shape)}) that is different to the "
                             f"{tensors[0][1]} size ({list(shape)}) is not supported")


@_autocast.autocast_op(_autocast.FLOAT32)
def poisson_nll_loss(input, target, log_input=True, full=False, size_average=None, eps=1e-8, reduce=None,
                     reduction="mean"):
    """Negative log-likelihood of ``target`` under Poisson(rate): ``exp(input) - target * input`` when
    ``log_input``, else ``input - target * log(input + eps)``; ``full`` adds Stirling's term for targets > 1.

        >>> F.poisson_nll_loss(corenn.tensor([0.]), corenn.tensor([1.])).item()
        1.0
    """
    reduction = _reduction(size_average, reduce, reduction)
    check_tensor(input, "input", "poisson_nll_loss")
    check_tensor(target, "target", "poisson_nll_loss")
    eps = check_number(eps, "eps")
    if log_input:
        loss = corenn.exp(input) - target * input
    else:
        loss = input - target * corenn.log(input + eps)
    if full:
        stirling = target * corenn.log(target) - target + 0.5 * corenn.log(2 * math.pi * target)
        loss = loss + stirling.masked_fill(target <= 1, 0)
    return _weighted_reduce(loss, reduction)


@_autocast.autocast_op(_autocast.FLOAT32)
def gaussian_nll_loss(input, target, var, full=False, eps=1e-6, reduction="mean"):
    """Negative log-likelihood of ``target`` under N(input, var): ``0.5 (log var + (input - target)**2 / var)``.

    ``var`` is a tensor of the input's shape, of its shape without the last dim, with a last dim of
    1 (one variance shared by the features), or a float. It is clamped below at ``eps``.

        >>> F.gaussian_nll_loss(corenn.tensor([0.]), corenn.tensor([2.]), corenn.tensor([1.])).item()
        2.0
    """
    check_tensor(input, "input", "gaussian_nll_loss")
    check_tensor(target, "target", "gaussian_nll_loss")
    eps = check_number(eps, "eps")
    if isinstance(var, (int, float)) and not isinstance(var, bool):
        if var < 0:
            raise ValueError("gaussian_nll_loss: var has negative entry/entries")
        var = corenn.full_like(input, float(var))
    check_tensor(var, "var", "gaussian_nll_loss")
    if tuple(var.shape) != tuple(input.shape):
        if tuple(input.shape[:-1]) == tuple(var.shape):
            var = var.unsqueeze(-1)      # one variance per sample, shared by the features
        elif tuple(input.shape[:-1]) == tuple(var.shape[:-1]) and var.shape[-1] == 1:
            pass                         # heteroscedastic: one variance per sample, explicit last dim 1
        else:
            raise ValueError(f"gaussian_nll_loss: var is of incorrect size {list(var.shape)} for input of size "
                             f"{list(input.shape)}")
    if reduction not in _REDUCTIONS:
        raise ValueError(f"gaussian_nll_loss: {reduction} is not valid")
    if bool((var < 0).any()):
        raise ValueError("gaussian_nll_loss: var has negative entry/entries")
    var = _without_grad_clamp_min(var, eps)
    loss = 0.5 * (corenn.log(var) + (input - target) ** 2 / var)
    if full:
        loss = loss + 0.5 * math.log(2 * math.pi)
    return _weighted_reduce(loss, reduction)


@_autocast.autocast_op(_autocast.FLOAT32)
def margin_ranking_loss(input1, input2, target, margin=0, size_average=None, reduce=None, reduction="mean"):
    """``max(0, -target * (input1 - input2) + margin)``; ``target`` is 1 or -1 (which input should rank higher).

        >>> F.margin_ranking_loss(corenn.tensor([1.]), corenn.tensor([2.]), corenn.tensor([1.])).item()
        1.0
    """
    reduction = _reduction(size_average, reduce, reduction)
    for tensor, name in ((input1, "input1"), (input2, "input2"), (target, "target")):
        check_tensor(tensor, name, "margin_ranking_loss")
    margin = check_number(margin, "margin")
    if not input1.ndim == input2.ndim == target.ndim:
        raise RuntimeError(f"margin_ranking_loss : All input tensors should have same dimension but got sizes: "
                           f"input1: {input1.shape}, input2: {input2.shape}, target: {target.shape} ")
    return _weighted_reduce((-target * (input1 - input2) + margin).clamp_min(0), reduction)


@_autocast.autocast_op(_autocast.FLOAT32)
def hinge_embedding_loss(input, target, margin=1.0, size_average=None, reduce=None, reduction="mean"):
    """``input`` where ``target == 1``, ``max(0, margin - input)`` where ``target == -1``.

        >>> F.hinge_embedding_loss(corenn.tensor([0.3, 2.]), corenn.tensor([-1., 1.]), reduction="none").tolist()
        [0.699999988079071, 2.0]
    """
    reduction = _reduction(size_average, reduce, reduction)
    check_tensor(input, "input", "hinge_embedding_loss")
    check_tensor(target, "target", "hinge_embedding_loss")
    margin = check_number(margin, "margin")
    zeros = corenn.zeros_like(input)
    # both terms are kept where target is neither 1 nor -1, exactly as PyTorch's kernel
    margin_term = corenn.where(target != 1, (margin - input).clamp_min(0), zeros)
    input_term = corenn.where(target != -1, input, zeros)
    return _weighted_reduce(margin_term + input_term, reduction)


@_autocast.autocast_op(_autocast.FLOAT32)
def soft_margin_loss(input, target, size_average=None, reduce=None, reduction="mean"):
    """Two-class logistic loss ``log(1 + exp(-target * input))`` for targets 1 or -1.

        >>> round(F.soft_margin_loss(corenn.tensor([0.]), corenn.tensor([1.])).item(), 4)
        0.6931
    """
    reduction = _reduction(size_average, reduce, reduction)
    check_tensor(input, "input", "soft_margin_loss")
    check_tensor(target, "target", "soft_margin_loss")
    return _weighted_reduce(corenn.log1p(corenn.exp(-target * input)), reduction)


@_autocast.autocast_op(_autocast.FLOAT32)
def cosine_embedding_loss(input1, input2, target, margin=0, size_average=None, reduce=None, reduction="mean"):
    """``1 - cos(x1, x2)`` where ``target == 1``, ``max(0, cos(x1, x2) - margin)`` where ``target == -1``.

        >>> F.cosine_embedding_loss(corenn.tensor([[1., 0.]]), corenn.tensor([[0., 1.]]), corenn.tensor([1.])).item()
        1.0
    """
    reduction = _reduction(size_average, reduce, reduction)
    for tensor, name in ((input1, "input1"), (input2, "input2"), (target, "target")):
        check_tensor(tensor, name, "cosine_embedding_loss")
    margin = check_number(margin, "margin")
    if target.ndim > 1:
        raise RuntimeError("cosine_embedding_loss: 0D or 1D target tensor expected, multi-target not supported")
    if input1.ndim != target.ndim + 1 or input2.ndim != target.ndim + 1:
        raise RuntimeError(f"cosine_embedding_loss: {target.ndim}D target tensor expects {target.ndim + 1}D input "
                           f"tensors, but found inputs with sizes {list(input1.shape)} and {list(input2.shape)}.")
    dim = target.ndim
    tiny = 1e-12      # PyTorch's EPSILON: keeps the denominator of zero vectors finite
    products = (input1 * input2).sum(dim)
    squares1 = (input1 * input1).sum(dim) + tiny
    squares2 = (input2 * input2).sum(dim) + tiny
    cos = products / (squares1 * squares2).sqrt()
    zeros = corenn.zeros_like(cos)
    loss = corenn.where(target == 1, 1 - cos, zeros) + corenn.where(target == -1, (cos - margin).clamp_min(0), zeros)
    return _weighted_reduce(loss, reduction)


def _check_triplet(anchor, positive, negative, op):
    for tensor, name in ((anchor, "anchor"), (positive, "positive"), (negative, "negative")):
        check_tensor(tensor, name, op)
    if not anchor.ndim == positive.ndim == negative.ndim:
        raise RuntimeError(f"{op}: The anchor, positive, and negative tensors are expected to have the same number "
                           f"of dimensions, but got: anchor {anchor.ndim}D, positive {positive.ndim}D, and negative "
                           f"{negative.ndim}D inputs")


@_autocast.autocast_op(_autocast.FLOAT32)
def triplet_margin_loss(anchor, positive, negative, margin=1.0, p=2, eps=1e-6, swap=False, size_average=None,
                        reduce=None, reduction="mean"):
    """``max(0, d(a, p) - d(a, n) + margin)`` with ``d`` the p-norm :func:`pairwise_distance`; ``swap`` uses
    ``min(d(a, n), d(p, n))`` (distance swap).

        >>> a = corenn.tensor([[0., 0.]])
        >>> round(F.triplet_margin_loss(a, a, a + 3., eps=0.).item(), 4)
        0.0
    """
    reduction = _reduction(size_average, reduce, reduction)
    _check_triplet(anchor, positive, negative, "triplet_margin_loss")
    if anchor.ndim not in (1, 2):
        raise RuntimeError(f"triplet_margin_loss: expected 1D (unbatched) or 2D (batched) inputs, got "
                           f"{anchor.ndim}D")
    margin = check_number(margin, "margin")
    dist_pos = pairwise_distance(anchor, positive, p, eps)
    dist_neg = pairwise_distance(anchor, negative, p, eps)
    if swap:
        dist_neg = corenn.minimum(dist_neg, pairwise_distance(positive, negative, p, eps))
    return _weighted_reduce((margin + dist_pos - dist_neg).clamp_min(0), reduction)


def triplet_margin_with_distance_loss(anchor, positive, negative, *, distance_function=None, margin=1.0,
                                      swap=False, reduction="mean"):
    """:func:`triplet_margin_loss` with any ``distance_function(x1, x2)`` (default: pairwise_distance).

        >>> a = corenn.tensor([[0., 0.]])
        >>> F.triplet_margin_with_distance_loss(a, a, a + 3.).item()
        0.0
    """
    _check_reduction(reduction, "triplet_margin_with_distance_loss")
    margin = check_number(margin, "margin")
    if margin <= 0:
        raise ValueError(f"triplet_margin_with_distance_loss: expected margin to be greater than 0, got {margin} "
                         f"instead")
    _check_triplet(anchor, positive, negative, "triplet_margin_with_distance_loss")
    distance = distance_function if distance_function is not None else pairwise_distance
    dist_pos, dist_neg = distance(anchor, positive), distance(anchor, negative)
    if swap:
        dist_neg = corenn.minimum(dist_neg, distance(positive, negative))
    return _weighted_reduce((margin + dist_pos - dist_neg).clamp_min(0), reduction)


@_autocast.autocast_op(_autocast.FLOAT32)
def multilabel_soft_margin_loss(input, target, weight=None, size_average=None, reduce=None, reduction="mean"):
    """Per-class logistic loss for multi-label targets in {0, 1}, averaged over the classes (last dim).

        >>> round(F.multilabel_soft_margin_loss(corenn.tensor([[0., 0.]]), corenn.tensor([[1., 0.]])).item(), 4)
        0.6931
    """
    reduction = _reduction(size_average, reduce, reduction)
    check_tensor(input, "input", "multilabel_soft_margin_loss")
    check_tensor(target, "target", "multilabel_soft_margin_loss")
    loss = -(target * logsigmoid(input) + (1 - target) * logsigmoid(-input))
    if weight is not None:
        check_tensor(weight, "weight", "multilabel_soft_margin_loss")
        loss = loss * weight
    class_dim = input.ndim - 1
    loss = loss.sum(class_dim) / input.shape[class_dim] if input.ndim else loss
    return _weighted_reduce(loss, reduction)


def _class_targets(input, target, op):
    """(N, C) input and (N,) int64 target for the margin losses (unbatched (C,) input gains a batch dim)."""
    check_tensor(input, "input", op)
    check_tensor(target, "target", op)
    if target.dtype.is_floating_point or target.dtype is corenn.bool:
        raise RuntimeError(f"{op}: expected scalar type Long but found {target.dtype}")
    if input.ndim not in (1, 2) or input.numel() == 0:
        raise RuntimeError(f"{op}: Expected non-empty vector or matrix with optional 0-dim batch size, but got: "
                           f"{list(input.shape)}")
    return input.ndim == 1


@_autocast.autocast_op(_autocast.FLOAT32)
def multi_margin_loss(input, target, p=1, margin=1.0, weight=None, size_average=None, reduce=None, reduction="mean"):
    """Multi-class hinge loss: ``sum_{j != y} max(0, margin - x[y] + x[j])**p / C`` per sample (p 1 or 2),
    scaled by ``weight[y]``.

        >>> F.multi_margin_loss(corenn.tensor([[0.1, 0.2, 0.4, 0.8]]), corenn.tensor([3])).item()
        0.32499998807907104
    """
    reduction = _reduction(size_average, reduce, reduction)
    if isinstance(p, bool) or p not in (1, 2):   # checked first, for any type of p, as PyTorch
        raise ValueError("multi_margin_loss: only p == 1 and p == 2 supported")
    margin = check_number(margin, "margin")
    unbatched = _class_targets(input, target, "multi_margin_loss")
    if weight is not None:
        check_tensor(weight, "weight", "multi_margin_loss")
        if weight.ndim != 1:
            raise ValueError("multi_margin_loss: weight must be one-dimensional")
    scores = input.unsqueeze(0) if unbatched else input
    labels = target.reshape(-1)
    batch, classes = scores.shape
    if labels.shape[0] != batch:
        raise RuntimeError(f"multi_margin_loss: inconsistent target size: {list(target.shape)} for input of size: "
                           f"{list(input.shape)}")
    if labels.numel() and (int(labels.min()) < 0 or int(labels.max()) >= classes):
        raise IndexError(f"multi_margin_loss: target out of range: targets must be in [0, {classes - 1}]")
    labels = labels.to(corenn.int64)
    target_scores = scores.gather(1, labels.unsqueeze(1))
    hinge = (margin - target_scores + scores).clamp_min(0)
    if p == 2:
        hinge = hinge * hinge
    if weight is not None:
        hinge = hinge * weight.index_select(0, labels).unsqueeze(1)
    others = corenn.ones_like(scores).scatter(1, labels.unsqueeze(1), 0.0)   # the target class is left out
    loss = (hinge * others).sum(1) / classes
    if unbatched:
        loss = loss.squeeze(0)
    return _weighted_reduce(loss, reduction)


@_autocast.autocast_op(_autocast.FLOAT32)
def multilabel_margin_loss(input, target, size_average=None, reduce=None, reduction="mean"):
    """Multi-label hinge loss: ``sum over targets j and non-targets i of max(0, 1 - (x[j] - x[i])) / C``.

    ``target`` holds each sample's class indices, ended by the first -1 (the rest is ignored).

        >>> F.multilabel_margin_loss(corenn.tensor([[0.1, 0.2, 0.4, 0.8]]), corenn.tensor([[3, 0, -1, 1]])).item()
        0.8500000238418579
    """
    import numpy
    reduction = _reduction(size_average, reduce, reduction)
    unbatched = _class_targets(input, target, "multilabel_margin_loss")
    if tuple(target.shape) != tuple(input.shape):
        raise RuntimeError(f"multilabel_margin_loss: inconsistent target size: {list(target.shape)} for input of "
                           f"size: {list(input.shape)}")
    scores = input.unsqueeze(0) if unbatched else input
    labels = target.numpy().reshape(scores.shape).astype(numpy.int64)
    batch, classes = scores.shape
    # occurrences of each class in the list before the first -1 (PyTorch counts a repeated class twice)
    counts = numpy.zeros((batch, classes))
    for row in range(batch):
        for label in labels[row]:
            if label < 0:
                break
            if label >= classes:
                raise IndexError(f"multilabel_margin_loss: target index {label} is out of bounds for {classes} "
                                 f"classes")
            counts[row, label] += 1
    is_target = corenn.tensor(counts > 0, device=input.device).to(scores.dtype)
    count = corenn.tensor(counts, dtype=scores.dtype, device=input.device)
    # pairs (j target, i non-target): max(0, 1 - x[j] + x[i])
    hinge = (1 - scores.unsqueeze(2) + scores.unsqueeze(1)).clamp_min(0)
    loss = (hinge * count.unsqueeze(2) * (1 - is_target).unsqueeze(1)).sum((1, 2)) / classes
    if unbatched:
        loss = loss.squeeze(0)
    return _weighted_reduce(loss, reduction)


# ---------------------------------------------------------------------------------------------------------
# Resampling (interpolate and its deprecated spellings), adaptive max pooling, the 3-d conv and pooling
# functions. Their kernels live in corenn/ops (upsample.py, pooling.py, conv.py).
# ---------------------------------------------------------------------------------------------------------

from corenn.ops.conv import conv_transpose3d  # noqa: E402,F401
from corenn.ops.pooling import (adaptive_avg_pool3d, adaptive_max_pool1d, adaptive_max_pool2d,  # noqa: E402,F401
                                adaptive_max_pool3d, avg_pool3d, max_pool3d)
from corenn.ops.upsample import interpolate  # noqa: E402,F401


def upsample(input, size=None, scale_factor=None, mode="nearest", align_corners=None):
    """Deprecated spelling of :func:`interpolate` (warns, as PyTorch does).

        >>> F.interpolate(corenn.ones(1, 1, 2), scale_factor=2).shape
        corenn.Size([1, 1, 4])
    """
    warnings.warn("nn.functional.upsample is deprecated. Use nn.functional.interpolate instead.", stacklevel=2)
    return interpolate(input, size, scale_factor, mode, align_corners)


def upsample_nearest(input, size=None, scale_factor=None):
    """Deprecated: :func:`interpolate` with ``mode='nearest'``."""
    warnings.warn("nn.functional.upsample_nearest is deprecated. Use nn.functional.interpolate instead.",
                  stacklevel=2)
    return interpolate(input, size, scale_factor, mode="nearest")


def upsample_bilinear(input, size=None, scale_factor=None):
    """Deprecated: :func:`interpolate` with ``mode='bilinear', align_corners=True``."""
    warnings.warn("nn.functional.upsample_bilinear is deprecated. Use nn.functional.interpolate instead.",
                  stacklevel=2)
    return interpolate(input, size, scale_factor, mode="bilinear", align_corners=True)


def gumbel_softmax(logits, tau=1.0, hard=False, eps=1e-10, dim=-1):
    """A sample of the Gumbel-softmax (Concrete) distribution: ``softmax((logits + g) / tau)``, g ~ Gumbel(0, 1).

    ``hard=True`` returns one-hot samples whose gradient is the soft sample's (straight-through).

        >>> F.gumbel_softmax(corenn.zeros(2, 3), hard=True).sum(-1).tolist()
        [1.0, 1.0]
    """
    check_tensor(logits, "logits", "gumbel_softmax")
    tau = check_number(tau, "tau")
    uniform = corenn.rand(logits.shape, dtype=logits.dtype, device=logits.device)
    # -log(Exp(1)) is Gumbel(0, 1); Exp(1) = -log(U), U in (0, 1] (1 - rand avoids log(0))
    gumbels = -corenn.log(-corenn.log(1.0 - uniform))
    soft = _softmax((logits + gumbels) / tau, dim)
    if not hard:
        return soft
    index = soft.max(dim, keepdim=True).indices
    one_hot_sample = corenn.zeros_like(logits).scatter(dim, index, 1.0)
    return one_hot_sample - soft.detach() + soft


# ---------------------------------------------------------------------------------------------------------
# Max pooling with indices under their own names, and max unpooling (its partial inverse)
# ---------------------------------------------------------------------------------------------------------

from corenn.ops.pooling import (_adaptive_max_poolnd, _max_poolnd, _max_unpoolnd,  # noqa: E402,F401
                                max_pool1d_with_indices)


def max_pool2d_with_indices(input, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False,
                            return_indices=False):
    """:func:`max_pool2d` that always returns ``(output, indices)`` (``return_indices`` is ignored, as in PyTorch).

        >>> F.max_pool2d_with_indices(corenn.arange(16.).reshape(1, 1, 4, 4), 2)[1].tolist()
        [[[[5, 7], [13, 15]]]]
    """
    return _max_poolnd(input, kernel_size, stride, padding, dilation, ceil_mode, True, 2)


def max_pool3d_with_indices(input, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False,
                            return_indices=False):
    """:func:`max_pool3d` that always returns ``(output, indices)``.

        >>> F.max_pool3d_with_indices(corenn.arange(8.).reshape(1, 1, 2, 2, 2), 2)[1].flatten().tolist()
        [7]
    """
    return _max_poolnd(input, kernel_size, stride, padding, dilation, ceil_mode, True, 3)


def adaptive_max_pool1d_with_indices(input, output_size, return_indices=False):
    """:func:`adaptive_max_pool1d` that always returns ``(output, indices)``.

        >>> F.adaptive_max_pool1d_with_indices(corenn.tensor([[[1., 4., 2., 3.]]]), 2)[1].tolist()
        [[[1, 3]]]
    """
    return _adaptive_max_poolnd(input, output_size, True, 1, "adaptive_max_pool1d_with_indices")


def adaptive_max_pool2d_with_indices(input, output_size, return_indices=False):
    """:func:`adaptive_max_pool2d` that always returns ``(output, indices)``.

        >>> F.adaptive_max_pool2d_with_indices(corenn.arange(16.).reshape(1, 1, 4, 4), 1)[1].flatten().tolist()
        [15]
    """
    return _adaptive_max_poolnd(input, output_size, True, 2, "adaptive_max_pool2d_with_indices")


def adaptive_max_pool3d_with_indices(input, output_size, return_indices=False):
    """:func:`adaptive_max_pool3d` that always returns ``(output, indices)``.

        >>> F.adaptive_max_pool3d_with_indices(corenn.arange(8.).reshape(1, 1, 2, 2, 2), 1)[1].flatten().tolist()
        [7]
    """
    return _adaptive_max_poolnd(input, output_size, True, 3, "adaptive_max_pool3d_with_indices")


def max_unpool1d(input, indices, kernel_size, stride=None, padding=0, output_size=None):
    """Partial inverse of :func:`max_pool1d`: each value back at its index, zeros elsewhere.

        >>> out, idx = F.max_pool1d(corenn.tensor([[[1., 3., 2., 4.]]]), 2, return_indices=True)
        >>> F.max_unpool1d(out, idx, 2).tolist()
        [[[0.0, 3.0, 0.0, 4.0]]]
    """
    return _max_unpoolnd(input, indices, kernel_size, stride, padding, output_size, 1)


def max_unpool2d(input, indices, kernel_size, stride=None, padding=0, output_size=None):
    """Partial inverse of :func:`max_pool2d`; ``output_size`` resolves the ambiguous sizes.

        >>> out, idx = F.max_pool2d(corenn.arange(16.).reshape(1, 1, 4, 4), 2, return_indices=True)
        >>> F.max_unpool2d(out, idx, 2).shape
        corenn.Size([1, 1, 4, 4])
    """
    return _max_unpoolnd(input, indices, kernel_size, stride, padding, output_size, 2)


def max_unpool3d(input, indices, kernel_size, stride=None, padding=0, output_size=None):
    """Partial inverse of :func:`max_pool3d`.

        >>> out, idx = F.max_pool3d(corenn.arange(8.).reshape(1, 1, 2, 2, 2), 2, return_indices=True)
        >>> F.max_unpool3d(out, idx, 2).flatten().tolist()
        [0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 7.0]
    """
    return _max_unpoolnd(input, indices, kernel_size, stride, padding, output_size, 3)


# ---------------------------------------------------------------------------------------------------------
# CTC loss (the kernel: corenn/ops/ctc.py)
# ---------------------------------------------------------------------------------------------------------

def ctc_loss(log_probs, targets, input_lengths, target_lengths, blank=0, reduction="mean", zero_infinity=False):
    """Connectionist temporal classification loss of (T, N, C) log probabilities (``log_softmax`` output).

    ``targets`` is (N, S) padded, or 1-D with every sample's targets one after the other;
    ``reduction='mean'`` divides each sample's loss by its target length, then averages.

        >>> lp = corenn.randn(6, 2, 4).log_softmax(2)
        >>> F.ctc_loss(lp, corenn.tensor([[1, 2], [3, 0]]), [6, 5], [2, 1]).shape
        corenn.Size([])
    """
    from corenn.ops.ctc import _ctc_loss
    return _ctc_loss(log_probs, targets, input_lengths, target_lengths, blank, _reduction(None, None, reduction),
                     zero_infinity)


# ---------------------------------------------------------------------------------------------------------
# Sampling grids (the kernel: corenn/ops/sampling.py)
# ---------------------------------------------------------------------------------------------------------

from corenn.ops.sampling import affine_grid, grid_sample  # noqa: E402,F401


# ---------------------------------------------------------------------------------------------------------
# Multi-head attention (nn.MultiheadAttention's forward, over explicit weights)
# ---------------------------------------------------------------------------------------------------------

def _extend_key_masks(*masks):
    """Each mask with one more key column that masks nothing (for an appended bias or zero key)."""
    def extend(mask):
        if mask is None:
            return None
        column = corenn.zeros(tuple(mask.shape[:-1]) + (1,), dtype=mask.dtype, device=mask.device)
        return corenn.cat([mask, column], dim=-1)
    return tuple(extend(mask) for mask in masks)


def _masked_scores(scores, mask):
    """A bool mask's True is *not* allowed (-inf); a float mask is added."""
    if mask.dtype is corenn.bool:
        return scores.masked_fill(mask, float("-inf"))
    return scores + mask


def multi_head_attention_forward(query, key, value, embed_dim_to_check, num_heads, in_proj_weight, in_proj_bias,
                                 bias_k, bias_v, add_zero_attn, dropout_p, out_proj_weight, out_proj_bias,
                                 training=True, key_padding_mask=None, need_weights=True, attn_mask=None,
                                 use_separate_proj_weight=False, q_proj_weight=None, k_proj_weight=None,
                                 v_proj_weight=None, static_k=None, static_v=None, average_attn_weights=True,
                                 is_causal=False):
    """The forward of :class:`~corenn.nn.MultiheadAttention` with its weights as arguments.

    ``query`` is (L, N, E) or unbatched (L, E); ``key`` / ``value`` (S, N, E_k) / (S, N, E_v). Returns the
    output (L, N, E) and, with ``need_weights``, the attention weights (N, L, S) averaged over heads
    (``average_attn_weights=False``: (N, num_heads, L, S)).

        >>> E, x = 4, corenn.randn(3, 2, 4)
        >>> out, w = F.multi_head_attention_forward(x, x, x, E, 2, corenn.randn(3 * E, E), None, None, None,
        ...                                         False, 0.0, corenn.randn(E, E), None)
        >>> out.shape, w.shape
        (corenn.Size([3, 2, 4]), corenn.Size([2, 3, 3]))
    """
    op = "multi_head_attention_forward"
    for tensor, name in ((query, "query"), (key, "key"), (value, "value")):
        check_tensor(tensor, name, op)
    # PyTorch's shape checks (_mha_shape_check) raise AssertionError
    batched = query.ndim == 3
    if query.ndim not in (2, 3):
        raise AssertionError(f"query should be unbatched 2D or batched 3D tensor but received {query.ndim}-D query "
                             f"tensor")
    kind = "batched (3-D)" if batched else "unbatched (2-D)"
    if key.ndim != query.ndim or value.ndim != query.ndim:
        raise AssertionError(f"For {kind} `query`, expected `key` and `value` to be {query.ndim}-D but found "
                             f"{key.ndim}-D and {value.ndim}-D tensors respectively")
    if key_padding_mask is not None and key_padding_mask.ndim != query.ndim - 1:
        raise AssertionError(f"For {kind} `query`, expected `key_padding_mask` to be `None` or {query.ndim - 1}-D "
                             f"but found {key_padding_mask.ndim}-D tensor instead")
    if attn_mask is not None and attn_mask.ndim not in (2, 3):
        raise AssertionError(f"For {kind} `query`, expected `attn_mask` to be `None`, 2-D or 3-D but found "
                             f"{attn_mask.ndim}-D tensor instead")
    if not batched:
        query, key, value = query.unsqueeze(1), key.unsqueeze(1), value.unsqueeze(1)
        if key_padding_mask is not None:
            key_padding_mask = key_padding_mask.unsqueeze(0)
    length, batch, embed = query.shape
    source = key.shape[0]
    if embed != embed_dim_to_check:
        raise AssertionError(f"was expecting embedding dimension of {embed_dim_to_check}, but got {embed}")
    heads = num_heads
    head_dim = embed // heads
    if head_dim * heads != embed:
        raise AssertionError(f"embed_dim {embed} not divisible by num_heads {heads}")
    if key.shape[:2] != value.shape[:2]:
        raise AssertionError(f"key's sequence and batch dims {tuple(key.shape[:2])} do not match value's "
                             f"{tuple(value.shape[:2])}")
    if is_causal and attn_mask is None:
        raise RuntimeError("Need attn_mask if specifying the is_causal hint. You may use the Transformer module "
                           "method `generate_square_subsequent_mask` to create this mask.")
    if key_padding_mask is not None and tuple(key_padding_mask.shape) != (batch, source):
        raise AssertionError(f"expecting key_padding_mask shape of {(batch, source)}, but got "
                             f"{tuple(key_padding_mask.shape)}")
    if attn_mask is not None:
        if attn_mask.ndim == 2:
            if tuple(attn_mask.shape) != (length, source):
                raise RuntimeError(f"The shape of the 2D attn_mask is {attn_mask.shape}, but should be "
                                   f"{(length, source)}.")
        elif attn_mask.ndim == 3:
            if tuple(attn_mask.shape) != (batch * heads, length, source):
                raise RuntimeError(f"The shape of the 3D attn_mask is {attn_mask.shape}, but should be "
                                   f"{(batch * heads, length, source)}.")
            attn_mask = attn_mask.reshape(batch, heads, length, source)
        else:
            raise RuntimeError(f"attn_mask's dimension {attn_mask.ndim} is not supported")
    if use_separate_proj_weight:
        if q_proj_weight is None or k_proj_weight is None or v_proj_weight is None:
            raise AssertionError("use_separate_proj_weight is True but q_proj_weight, k_proj_weight or "
                                 "v_proj_weight is None")
        w_q, w_k, w_v = q_proj_weight, k_proj_weight, v_proj_weight
    else:
        if in_proj_weight is None:
            raise AssertionError("use_separate_proj_weight is False but in_proj_weight is None")
        w_q, w_k, w_v = in_proj_weight.chunk(3)
    b_q, b_k, b_v = in_proj_bias.chunk(3) if in_proj_bias is not None else (None, None, None)
    q = linear(query, w_q, b_q)
    k = linear(key, w_k, b_k) if static_k is None else None
    v = linear(value, w_v, b_v) if static_v is None else None
    if bias_k is not None and bias_v is not None:
        if static_k is not None or static_v is not None:
            raise AssertionError("bias cannot be added to static key." if static_k is not None
                                 else "bias cannot be added to static value.")
        k = corenn.cat([k, bias_k.repeat(1, batch, 1)])
        v = corenn.cat([v, bias_v.repeat(1, batch, 1)])
        attn_mask, key_padding_mask = _extend_key_masks(attn_mask, key_padding_mask)
        source += 1
    elif (bias_k is None) != (bias_v is None):
        raise AssertionError("bias_k and bias_v must both be given or both be None")

    def split_heads(t, size):  # (S, N, E) -> (N, H, S, D)
        return t.reshape(size, batch, heads, head_dim).permute(1, 2, 0, 3)

    q = split_heads(q, length)
    k = split_heads(k, source) if static_k is None else _static(static_k, "static_k", batch, heads, head_dim)
    v = split_heads(v, source) if static_v is None else _static(static_v, "static_v", batch, heads, head_dim)
    source = k.shape[2]
    if add_zero_attn:  # one all-zero key and value, so every query can attend to "nothing"
        zeros = corenn.zeros((batch, heads, 1, head_dim), dtype=k.dtype, device=k.device)
        k, v = corenn.cat([k, zeros], dim=2), corenn.cat([v, zeros], dim=2)
        attn_mask, key_padding_mask = _extend_key_masks(attn_mask, key_padding_mask)
        source += 1
    scores = corenn.matmul(q * math.sqrt(1.0 / head_dim), k.transpose(-2, -1))
    if attn_mask is not None:
        scores = _masked_scores(scores, attn_mask)
    if key_padding_mask is not None:
        scores = _masked_scores(scores, key_padding_mask.reshape(batch, 1, 1, source))
    weights = _softmax(scores, -1)
    if dropout_p > 0.0 and training:
        weights = dropout(weights, dropout_p)
    out = corenn.matmul(weights, v).permute(2, 0, 1, 3).reshape(length * batch, embed)  # (L, N, E) rows
    out = linear(out, out_proj_weight, out_proj_bias).reshape(length, batch, -1)
    if not batched:
        out = out.squeeze(1)
    if not need_weights:
        return out, None
    if average_attn_weights:
        weights = weights.mean(dim=1)
    return out, (weights if batched else weights.squeeze(0))


def _static(tensor, name, batch, heads, head_dim):
    """``static_k`` / ``static_v`` (N * num_heads, S, head_dim) as (N, H, S, D)."""
    if tensor.ndim != 3 or tensor.shape[0] != batch * heads or tensor.shape[2] != head_dim:
        raise AssertionError(f"expecting {name} of shape ({batch * heads}, S, {head_dim}), but got "
                             f"{tuple(tensor.shape)}")
    return tensor.reshape(batch, heads, tensor.shape[1], head_dim)


# ---------------------------------------------------------------------------------------------------------
# Fractional max pooling (the kernel: corenn/ops/pooling.py)
# ---------------------------------------------------------------------------------------------------------

from corenn.ops.pooling import _fractional_max_poolnd  # noqa: E402


def fractional_max_pool2d(input, kernel_size, output_size=None, output_ratio=None, return_indices=False,
                          _random_samples=None):
    """Max pooling over windows at pseudo-random starts that shrink (N, C, H, W) to ``output_size`` (or
    ``output_ratio`` of the input). ``_random_samples`` (N, C, 2), uniform in [0, 1), fixes the windows.

        >>> F.fractional_max_pool2d(corenn.randn(1, 2, 9, 9), 2, output_size=5).shape
        corenn.Size([1, 2, 5, 5])
    """
    return _fractional_max_poolnd(input, kernel_size, output_size, output_ratio, return_indices, _random_samples, 2)


def fractional_max_pool2d_with_indices(input, kernel_size, output_size=None, output_ratio=None, return_indices=False,
                                       _random_samples=None):
    """:func:`fractional_max_pool2d` that always returns ``(output, indices)``.

        >>> F.fractional_max_pool2d_with_indices(corenn.randn(1, 1, 6, 6), 2, output_ratio=0.5)[1].shape
        corenn.Size([1, 1, 3, 3])
    """
    return _fractional_max_poolnd(input, kernel_size, output_size, output_ratio, True, _random_samples, 2)


def fractional_max_pool3d(input, kernel_size, output_size=None, output_ratio=None, return_indices=False,
                          _random_samples=None):
    """:func:`fractional_max_pool2d` over (N, C, T, H, W); ``_random_samples`` is (N, C, 3).

        >>> F.fractional_max_pool3d(corenn.randn(1, 1, 6, 6, 6), 2, output_size=4).shape
        corenn.Size([1, 1, 4, 4, 4])
    """
    return _fractional_max_poolnd(input, kernel_size, output_size, output_ratio, return_indices, _random_samples, 3)


def fractional_max_pool3d_with_indices(input, kernel_size, output_size=None, output_ratio=None, return_indices=False,
                                       _random_samples=None):
    """:func:`fractional_max_pool3d` that always returns ``(output, indices)``.

        >>> F.fractional_max_pool3d_with_indices(corenn.randn(1, 1, 6, 6, 6), 2, output_size=3)[0].shape
        corenn.Size([1, 1, 3, 3, 3])
    """
    return _fractional_max_poolnd(input, kernel_size, output_size, output_ratio, True, _random_samples, 3)


# ---------------------------------------------------------------------------------------------------------
# Linear layer and cross entropy in one call
# ---------------------------------------------------------------------------------------------------------

def linear_cross_entropy(input, linear_weight, target, *, linear_bias=None, weight=None, reduction="mean",
                         ignore_index=None, label_smoothing=0.0, options=None):
    """``cross_entropy(linear(input, linear_weight, linear_bias), target, ...)``; a ``linear_weight`` of shape
    (C, d_1, ..., d_K, in_features) gives the K-dimensional loss's logits (N, C, d_1, ..., d_K).

    ``options`` (PyTorch's chunked evaluation, a memory saving with the same values) is not implemented.

        >>> F.linear_cross_entropy(corenn.randn(3, 4), corenn.randn(5, 4), corenn.tensor([0, 4, 2])).shape
        corenn.Size([])
    """
    if options is not None:
        raise NotImplementedError("linear_cross_entropy: options (the chunked path) is not implemented; pass "
                                  "options=None")
    check_tensor(input, "input", "linear_cross_entropy")
    check_tensor(linear_weight, "linear_weight", "linear_cross_entropy")
    check_tensor(target, "target", "linear_cross_entropy")
    if not input.dtype.is_floating_point or linear_weight.dtype != input.dtype:
        raise RuntimeError(f"linear_cross_entropy(): expected a floating point input and a linear_weight of its "
                           f"dtype, got {input.dtype} and {linear_weight.dtype}")
    if input.ndim < 1 or input.ndim > 2:
        raise RuntimeError(f"expected input with dimensionality 1 or 2, got {input.ndim}")
    if linear_weight.ndim < 2:
        raise RuntimeError(f"expected linear_weight with dimensionality at least 2, got {linear_weight.ndim}")
    batches, in_features = tuple(input.shape[:-1]), input.shape[-1]
    if in_features != linear_weight.shape[-1]:
        raise RuntimeError(f"expected equal input and linear_weight last dimensions (in_features), got "
                           f"{input.shape[-1]} and {linear_weight.shape[-1]}, respectively")
    classes, out_features = linear_weight.shape[0], tuple(linear_weight.shape[1:-1])
    if linear_bias is not None and tuple(linear_bias.shape) != (classes, *out_features):
        raise RuntimeError(f"expected linear_bias shape {(classes, *out_features)}, got {tuple(linear_bias.shape)}")
    if out_features and not batches:
        raise RuntimeError(f"K-dimensional loss defined by linear_weight shape {tuple(linear_weight.shape)} requires "
                           f"batched input, (N, {in_features}), got unbatched input with shape {tuple(input.shape)}")
    logits_shape = (*batches, classes, *out_features)
    if tuple(target.shape) == logits_shape and ignore_index is not None:
        raise RuntimeError("ignore_index cannot be specified when target contains probabilities")
    if out_features:
        linear_weight = linear_weight.reshape(math.prod(out_features, start=classes), in_features)
        if linear_bias is not None:
            linear_bias = linear_bias.reshape(math.prod(out_features, start=classes))
    logits = linear(input, linear_weight, linear_bias).reshape(logits_shape)
    return cross_entropy(logits, target, weight=weight, reduction=reduction,
                         ignore_index=-100 if ignore_index is None else ignore_index, label_smoothing=label_smoothing)

