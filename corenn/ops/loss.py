"""Loss kernels: fused cross-entropy, nll, the regression losses and binary cross-entropy.

Each kernel reduces itself (``reduction`` = 'none' | 'mean' | 'sum'), so backward
broadcasts one upstream gradient instead of running a separate reduction node.
"""
from __future__ import annotations

from corenn.kernels import check_targets
from corenn.ops._kernel import Op, kernel, sum_to_shape


def _reduce(loss, reduction, denominator=None):
    if reduction == "none":
        return loss
    total = loss.sum()
    if reduction == "sum":
        return total
    return total / (loss.size if denominator is None else denominator)


def _upstream(grad, reduction, denominator):
    """The per-element factor of the upstream gradient (broadcastable to the unreduced loss)."""
    if reduction == "mean":
        # Every target ignored (or weighted 0): the loss is nan, as in PyTorch, yet nothing
        # contributed to it, so the gradient is 0 rather than 0/0. The denominator may be a
        # device array: chosen without reading it on the host.
        nonzero = denominator != 0
        if nonzero.__class__ is bool:
            return grad / denominator if nonzero else grad * 0
        return grad / (denominator + ~nonzero) * nonzero
    return grad


def _class_shape(ndim, classes):
    return (1, classes) + (1,) * (ndim - 2)


# ---------------------------------------------------------------------------------------------------------
# Cross-entropy: log_softmax + nll in one node
# ---------------------------------------------------------------------------------------------------------

@kernel("cross_entropy", "LogSoftmaxBackward0")
class CrossEntropy(Op):
    """``logits`` (N, C, *d); ``target`` class indices (N, *d) or probabilities (N, C, *d).

    The loss per sample is ``-sum_c q_c * log_softmax(logits)_c`` with coefficients
    ``q = weight * ((1 - label_smoothing) * target_one_hot + label_smoothing / C)``, so
    its gradient is ``softmax * sum(q) - q`` -- stable for any logits.
    """

    @staticmethod
    def forward(ctx, logits, target, weight=None, *, ignore_index, label_smoothing, reduction, prob_target):
        xp = ctx.xp
        classes = logits.shape[1]
        shifted = logits - logits.max(axis=1, keepdims=True)
        exp = xp.exp(shifted)
        sum_exp = exp.sum(axis=1, keepdims=True)
        log_probs = shifted - xp.log(sum_exp)
        weight_b = None if weight is None else weight.reshape(_class_shape(logits.ndim, classes))
        if prob_target:
            q = target * (1 - label_smoothing) + label_smoothing / classes if label_smoothing else target
            denominator = logits.size // classes
        else:
            valid = target != ignore_index
            check_targets(xp, target, valid, classes)
            index = xp.where(valid, target, 0)
            one_hot = xp.expand_dims(index, 1) == xp.arange(classes).reshape(_class_shape(logits.ndim, classes))
            q = one_hot * (1 - label_smoothing) + label_smoothing / classes if label_smoothing else one_hot
            q = q * xp.expand_dims(valid, 1)
            if weight is None:
                denominator = valid.sum()
            else:
                denominator = (weight[index] * valid).sum()
        if weight_b is not None:
            q = q * weight_b
        q = q.astype(logits.dtype, copy=False)
        loss = -(q * log_probs).sum(axis=1)
        if not prob_target and xp.isnan(loss).any().item():
            # A -inf logit (a masked class) has log-probability -inf and, unless it is the target or label
            # smoothing spreads onto it, coefficient 0: its 0 * -inf must count as 0, as in PyTorch. Checked on
            # the (N, *d) losses, so finite logits pay one small test; nan logits stay nan.
            loss = -xp.where(q != 0, q * log_probs, 0).sum(axis=1)
        ctx.save_for_backward(exp / sum_exp, q, log_probs if prob_target else None, weight_b, denominator)
        ctx.reduction, ctx.label_smoothing = reduction, label_smoothing
        return _reduce(loss, reduction, denominator).astype(logits.dtype, copy=False)

    @staticmethod
    def backward(ctx, grad):
        probs, q, log_probs, weight_b, denominator = ctx.saved
        xp = ctx.xp
        scale = _upstream(grad, ctx.reduction, denominator)
        if ctx.reduction == "none":
            scale = xp.expand_dims(scale, 1)
        grad_logits = None
        if ctx.needs_input_grad[0]:
            grad_logits = ((probs * q.sum(axis=1, keepdims=True) - q) * scale).astype(probs.dtype, copy=False)
        grad_target = None
        if log_probs is not None and ctx.needs_input_grad[1]:
            grad_target = -log_probs * (1 - ctx.label_smoothing) * scale
            if weight_b is not None:
                grad_target = grad_target * weight_b
        return grad_logits, grad_target, None


@kernel("nll_loss", "NllLossBackward0")
class NllLoss(Op):
    """``-weight[t] * input[n, t]`` per sample for log-probabilities ``input`` (N, C, *d)."""

    @staticmethod
    def forward(ctx, log_probs, target, weight=None, *, ignore_index, reduction):
        xp = ctx.xp
        classes = log_probs.shape[1]
        valid = target != ignore_index
        check_targets(xp, target, valid, classes)
        index = xp.where(valid, target, 0)
        picked = xp.take_along_axis(log_probs, xp.expand_dims(index, 1), axis=1)[:, 0]
        per_sample = valid.astype(log_probs.dtype) if weight is None else weight[index] * valid
        loss = -picked * per_sample
        denominator = per_sample.sum()
        ctx.save_for_backward(index, per_sample, denominator)
        ctx.reduction, ctx.classes = reduction, classes
        return _reduce(loss, reduction, denominator).astype(log_probs.dtype, copy=False)

    @staticmethod
    def backward(ctx, grad):
        xp = ctx.xp
        index, per_sample, denominator = ctx.saved
        scale = -per_sample * _upstream(grad, ctx.reduction, denominator)
        one_hot = xp.expand_dims(index, 1) == xp.arange(ctx.classes).reshape(_class_shape(index.ndim + 1,
                                                                                          ctx.classes))
        return (one_hot * xp.expand_dims(scale, 1)).astype(per_sample.dtype, copy=False), None, None


# ---------------------------------------------------------------------------------------------------------
# Regression losses on ``d = input - target``
# ---------------------------------------------------------------------------------------------------------

def _regression_kernel(name, grad_fn_name, value, derivative, doc):
    @kernel(name, grad_fn_name)
    class RegressionLoss(Op):
        __doc__ = doc

        @staticmethod
        def forward(ctx, input, target, *, reduction, param=None):
            xp = ctx.xp
            diff = input - target
            ctx.save_for_backward(diff)
            ctx.reduction, ctx.param = reduction, param
            return _reduce(value(xp, diff, param), reduction).astype(input.dtype, copy=False)

        @staticmethod
        def backward(ctx, grad):
            (diff,) = ctx.saved
            grad_input = (derivative(ctx.xp, diff, ctx.param) * _upstream(grad, ctx.reduction, diff.size)).astype(
                diff.dtype, copy=False)
            return grad_input, -grad_input

    RegressionLoss.__name__ = RegressionLoss.__qualname__ = "".join(p.capitalize() for p in name.split("_"))
    return RegressionLoss


def _smooth_l1(xp, d, beta):
    a = xp.abs(d)
    if beta == 0:
        return a
    return xp.where(a < beta, 0.5 * d * d / beta, a - 0.5 * beta)


def _smooth_l1_grad(xp, d, beta):
    if beta == 0:
        return xp.sign(d)
    return xp.where(xp.abs(d) < beta, d / beta, xp.sign(d))


def _huber(xp, d, delta):
    a = xp.abs(d)
    return xp.where(a < delta, 0.5 * d * d, delta * (a - 0.5 * delta))


def _huber_grad(xp, d, delta):
    return xp.where(xp.abs(d) < delta, d, delta * xp.sign(d))


MseLoss = _regression_kernel("mse_loss", "MseLossBackward0", lambda xp, d, _: d * d, lambda xp, d, _: 2 * d,
                             "Squared error ``(input - target)**2``.")
L1Loss = _regression_kernel("l1_loss", "L1LossBackward0", lambda xp, d, _: xp.abs(d), lambda xp, d, _: xp.sign(d),
                            "Absolute error ``|input - target|`` (gradient 0 where they are equal).")
SmoothL1Loss = _regression_kernel("smooth_l1_loss", "SmoothL1LossBackward0", _smooth_l1, _smooth_l1_grad,
                                  "Quadratic below ``beta``, linear above (``param`` is beta).")
HuberLoss = _regression_kernel("huber_loss", "HuberLossBackward0", _huber, _huber_grad,
                               "``delta * smooth_l1(beta=delta)``: quadratic below ``delta`` (``param`` is delta).")


# ---------------------------------------------------------------------------------------------------------
# Binary cross-entropy
# ---------------------------------------------------------------------------------------------------------

@kernel("binary_cross_entropy", "BinaryCrossEntropyBackward0")
class BinaryCrossEntropy(Op):
    """``-w * (t * log(x) + (1 - t) * log(1 - x))`` with logs clamped at -100, as PyTorch."""

    @staticmethod
    def forward(ctx, input, target, weight=None, *, reduction):
        xp = ctx.xp
        if ((input < 0) | (input > 1)).any().item():  # .item(): an explicit device read, not bool()
            raise RuntimeError("all elements of input should be between 0 and 1")
        with xp.errstate(divide="ignore"):
            log_x = xp.maximum(xp.log(input), -100)
            log_1mx = xp.maximum(xp.log1p(-input), -100)
        loss = -(target * log_x + (1 - target) * log_1mx)
        if weight is not None:
            loss = loss * weight
        ctx.save_for_backward(input, target, weight, log_x, log_1mx)
        ctx.reduction = reduction
        return _reduce(loss, reduction).astype(input.dtype, copy=False)

    @staticmethod
    def backward(ctx, grad):
        xp = ctx.xp
        input, target, weight, log_x, log_1mx = ctx.saved
        scale = _upstream(grad, ctx.reduction, input.size)
        if weight is not None:
            scale = scale * weight
        grad_input = grad_target = None
        if ctx.needs_input_grad[0]:
            eps = 1e-12
            grad_input = (scale * (input - target) / xp.maximum((1 - input) * input, eps)).astype(input.dtype,
                                                                                                  copy=False)
        if ctx.needs_input_grad[1]:
            grad_target = (scale * (log_1mx - log_x)).astype(input.dtype, copy=False)
        return grad_input, grad_target, None


@kernel("binary_cross_entropy_with_logits", "BinaryCrossEntropyWithLogitsBackward0")
class BinaryCrossEntropyWithLogits(Op):
    """Sigmoid + BCE in one stable step: ``(1 - t) x + (1 + (p - 1) t) * log(1 + e^-x)``, times weight."""

    @staticmethod
    def forward(ctx, input, target, weight=None, pos_weight=None, *, reduction):
        xp = ctx.xp
        softplus_neg = xp.logaddexp(0, -input)  # log(1 + e^-x) without overflow
        log_weight = 1 if pos_weight is None else 1 + (pos_weight - 1) * target
        unweighted = (1 - target) * input + log_weight * softplus_neg
        loss = unweighted if weight is None else unweighted * weight
        ctx.save_for_backward(input, target, weight, pos_weight, softplus_neg, unweighted)
        ctx.reduction = reduction
        return _reduce(loss, reduction).astype(input.dtype, copy=False)

    @staticmethod
    def backward(ctx, grad):
        xp = ctx.xp
        input, target, weight, pos_weight, softplus_neg, unweighted = ctx.saved
        scale = xp.broadcast_to(_upstream(grad, ctx.reduction, unweighted.size), unweighted.shape)
        weighted_scale = scale if weight is None else scale * weight
        sigmoid_neg = xp.exp(-softplus_neg - input)  # sigmoid(-x) = e^-x / (1 + e^-x)
        log_weight = 1 if pos_weight is None else 1 + (pos_weight - 1) * target
        grads = [None, None, None, None]
        if ctx.needs_input_grad[0]:
            grads[0] = sum_to_shape(weighted_scale * ((1 - target) - log_weight * sigmoid_neg), input.shape)
        if ctx.needs_input_grad[1]:
            d_target = -input if pos_weight is None else (pos_weight - 1) * softplus_neg - input
            grads[1] = sum_to_shape(weighted_scale * d_target, target.shape)
        if weight is not None and ctx.needs_input_grad[2]:
            grads[2] = sum_to_shape(scale * unweighted, weight.shape)
        if pos_weight is not None and ctx.needs_input_grad[3]:
            grads[3] = sum_to_shape(weighted_scale * target * softplus_neg, pos_weight.shape)
        return tuple(g if g is None else g.astype(input.dtype, copy=False) for g in grads)


# No public op functions here: the front ends are in ``corenn.nn.functional`` (``F.cross_entropy`` ...).
__all__ = [name for name, value in list(globals().items())
           if not name.startswith("_") and callable(value) and not isinstance(value, type)
           and getattr(value, "__module__", None) == __name__]
