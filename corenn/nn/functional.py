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
        [[-0.9999950528144836, 0.9999950528144836]]
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
