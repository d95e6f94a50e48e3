"""Connectionist temporal classification loss (Graves et al. 2006): the alpha-beta recursion in log space.

The kernel gives each sample's negative log likelihood; ``nn.functional.ctc_loss`` reduces them as
PyTorch does (``mean`` divides each by its target length, then averages). The recursion runs over
time and is vectorized over the batch and over the extended label sequence ``l'`` (the targets
with a blank before, between and after them: ``2 * S + 1`` states).
"""
from __future__ import annotations

import numbers

from corenn._argcheck import check_int, type_name
from corenn.ops._kernel import Op, check_tensor, kernel, run


def _log_add(xp, *terms):
    """``log(sum(exp(terms)))`` the way PyTorch's CTC kernel writes it: shifted by the max, 0 when all are -inf."""
    top = terms[0]
    for term in terms[1:]:
        top = xp.maximum(top, term)
    top = xp.where(top == -xp.inf, 0.0, top)
    total = 0.0
    for term in terms:
        total = total + xp.exp(term - top)
    return xp.log(total) + top


def _shifted(xp, states, by):
    """``states[..., s - by]``, -inf where ``s < by``."""
    out = xp.full(states.shape, -xp.inf, dtype=states.dtype)
    out[..., by:] = states[..., :-by]
    return out


def _unshifted(xp, states, by):
    """``states[..., s + by]``, -inf past the end."""
    out = xp.full(states.shape, -xp.inf, dtype=states.dtype)
    out[..., :-by] = states[..., by:]
    return out


@kernel("ctc_loss", "CtcLossBackward0")
class CTCLoss(Op):
    """Per-sample CTC negative log likelihood of (T, N, C) log probabilities; backward is PyTorch's.

    PyTorch's gradient with respect to ``log_probs`` is ``exp(log_probs) - posterior`` (its eq. 16),
    the gradient with respect to the logits when ``log_probs`` comes from ``log_softmax``: the
    ``exp(log_probs)`` term cancels in log_softmax's backward, so networks train identically.
    """

    @staticmethod
    def forward(ctx, log_probs, targets, input_lengths, target_lengths, blank, zero_infinity):
        xp = ctx.xp
        T, N, C = log_probs.shape
        width = 2 * targets.shape[1] + 1
        # l': blank at even states, target k at state 2k + 1; states past 2 * target_length stay masked
        labels = xp.full((N, width), blank, dtype=xp.int64)
        labels[:, 1::2] = targets
        state = xp.arange(width)
        valid = state[None, :] <= 2 * target_lengths[:, None]
        skip = xp.zeros((N, width), dtype=bool)
        skip[:, 2:] = labels[:, 2:] != labels[:, :-2]  # l'(s) may follow l'(s - 2): two different labels
        emit = xp.take_along_axis(log_probs, xp.broadcast_to(labels[None], (T, N, width)), axis=2)  # (T, N, L)
        with xp.errstate(divide="ignore", invalid="ignore"):  # log(0): states no path reaches are -inf
            return CTCLoss._forward(ctx, xp, log_probs, emit, labels, valid, skip, input_lengths, target_lengths,
                                    zero_infinity)

    @staticmethod
    def _forward(ctx, xp, log_probs, emit, labels, valid, skip, input_lengths, target_lengths, zero_infinity):
        T, N, width = emit.shape
        alpha = xp.full((T, N, width), -xp.inf, dtype=log_probs.dtype)
        if T:
            alpha[0, :, 0] = emit[0, :, 0]
            if width > 1:
                alpha[0, :, 1] = xp.where(target_lengths > 0, emit[0, :, 1], -xp.inf)
        for t in range(1, T):
            previous = alpha[t - 1]
            reach = _log_add(xp, previous, _shifted(xp, previous, 1),
                             xp.where(skip, _shifted(xp, previous, 2), -xp.inf))
            alpha[t] = xp.where(valid & (t < input_lengths[:, None]), reach + emit[t], -xp.inf)
        rows = xp.arange(N)
        last = xp.maximum(input_lengths - 1, 0)
        end_blank = alpha[last, rows, 2 * target_lengths]
        end_label = xp.where(target_lengths > 0, alpha[last, rows, xp.maximum(2 * target_lengths - 1, 0)], -xp.inf)
        nll = -_log_add(xp, end_blank, end_label)
        # no frame: the empty target has likelihood 1 (PyTorch's -0.0), any other target 0
        nll = xp.where(input_lengths == 0, xp.where(target_lengths == 0, -0.0, xp.inf), nll).astype(log_probs.dtype)
        ctx.save_for_backward(log_probs, alpha, emit, labels, valid, skip, nll, input_lengths)
        ctx.zero_infinity = zero_infinity
        if zero_infinity:
            return xp.where(nll == xp.inf, 0.0, nll).astype(log_probs.dtype)
        return nll

    @staticmethod
    def backward(ctx, grad):
        xp = ctx.xp
        log_probs, alpha, emit, labels, valid, skip, nll, input_lengths = ctx.saved
        T, N, C = log_probs.shape
        width = labels.shape[1]
        beta = xp.full(alpha.shape, -xp.inf, dtype=alpha.dtype)
        # the last frame of each sample: beta is the emission at its two final states (blank, last label)
        last_state = valid.sum(1) - 1  # 2 * target_length
        final = (xp.arange(width)[None, :] >= last_state[:, None] - 1) & valid
        skip_ahead = xp.zeros((N, width), dtype=bool)
        skip_ahead[:, :-2] = skip[:, 2:]  # l'(s + 2) may follow l'(s)
        with xp.errstate(divide="ignore", invalid="ignore", over="ignore"):  # -inf states, inf losses
            for t in range(T - 1, -1, -1):
                at_end = (t == input_lengths - 1)[:, None]
                if t + 1 < T:
                    following = beta[t + 1]
                    reach = _log_add(xp, following, _unshifted(xp, following, 1),
                                     xp.where(skip_ahead, _unshifted(xp, following, 2), -xp.inf)) + emit[t]
                else:
                    reach = xp.full((N, width), -xp.inf, dtype=alpha.dtype)
                inside = (t < input_lengths - 1)[:, None] & valid
                beta[t] = xp.where(at_end & final, emit[t], xp.where(inside, reach, -xp.inf))
            joint = alpha + beta  # (T, N, L): log of the probability mass through state s at frame t
            top = joint.max(axis=2, keepdims=True)
            top = xp.where(xp.isfinite(top), top, 0.0)
            one_hot = (labels[:, :, None] == xp.arange(C)[None, None, :]).astype(alpha.dtype)  # (N, L, C)
            mass = xp.einsum("tnl,nlc->tnc", xp.exp(joint - top), one_hot)
            per_class = xp.log(mass) + top  # (T, N, C), -inf where no state emits c
            result = (xp.exp(log_probs) - xp.exp(per_class + nll[None, :, None] - log_probs)) * grad[None, :, None]
        frames = xp.arange(T)[:, None] < input_lengths[None, :]
        result = xp.where(frames[:, :, None], result, 0.0)
        if ctx.zero_infinity:
            result = xp.where((nll == xp.inf)[None, :, None], 0.0, result)
        return result.astype(log_probs.dtype, copy=False), None, None, None


def _lengths(value, name, batch, op):
    """A tuple of ints, or an integer tensor, as a list of ints (PyTorch takes either)."""
    from corenn.tensor.tensor import Tensor
    if isinstance(value, Tensor):
        if value.dtype.is_floating_point or value.dtype.name == "bool":
            raise RuntimeError(f"{op}(): '{name}' must be an integer tensor, got {value.dtype}")
        values = [int(v) for v in value.reshape(-1).tolist()]
    elif isinstance(value, (tuple, list)):
        values = [check_int(v, name) for v in value]
    else:
        raise TypeError(f"{op}(): argument '{name}' must be tuple of ints or Tensor, not {type_name(value)}")
    if len(values) != batch:
        raise RuntimeError(f"{name} must be of size batch_size")
    return values


def ctc_loss(log_probs, targets, input_lengths, target_lengths, blank=0, reduction=0, zero_infinity=False):
    """``torch.ctc_loss``: CTC loss with ``reduction`` as ATen's int (0 none, 1 mean, 2 sum).

    The default is 0: ATen's schema says Mean, but PyTorch's Python binding reads that default as 0.

        >>> lp = corenn.randn(6, 2, 4).log_softmax(2)
        >>> corenn.ctc_loss(lp, corenn.tensor([[1, 2], [3, 0]]), [6, 5], [2, 1], reduction=0).shape
        corenn.Size([2])
    """
    reductions = {0: "none", 1: "mean", 2: "sum"}
    if check_int(reduction, "reduction") not in reductions:
        raise ValueError(f"ctc_loss(): reduction must be 0 (none), 1 (mean) or 2 (sum), got {reduction}")
    return _ctc_loss(log_probs, targets, input_lengths, target_lengths, blank, reductions[reduction], zero_infinity)


def _ctc_loss(log_probs, targets, input_lengths, target_lengths, blank, reduction, zero_infinity, op="ctc_loss"):
    """Argument checks (PyTorch's messages), the targets as a padded (N, S) array, the kernel, the reduction."""
    import numpy

    import corenn
    check_tensor(log_probs, "log_probs", op)
    check_tensor(targets, "targets", op)
    if not log_probs.dtype.is_floating_point:
        raise RuntimeError(f"{op}(): expected floating point log_probs, got {log_probs.dtype}")
    if log_probs.ndim not in (2, 3):
        raise RuntimeError(f"{op}(): expected log_probs of 2 (unbatched) or 3 dimensions (T, N, C), got "
                           f"{log_probs.ndim}")
    unbatched = log_probs.ndim == 2
    if targets.ndim not in ((1,) if unbatched else (1, 2)):
        raise RuntimeError(f"{op}(): expected targets of 1 dimension (concatenated) or 2 (N, S, padded), got "
                           f"{targets.ndim}")
    if unbatched:
        log_probs, targets = log_probs.unsqueeze(1), targets.unsqueeze(0)
    T, N, C = log_probs.shape
    blank = check_int(blank, "blank")
    if not 0 <= blank < C:
        raise RuntimeError("blank must be in label range")
    if isinstance(input_lengths, numbers.Integral) or isinstance(target_lengths, numbers.Integral):
        raise TypeError(f"{op}(): argument 'input_lengths' and 'target_lengths' must be tuple of ints or Tensor, "
                        f"not int")
    inputs = _lengths(input_lengths, "input_lengths", N, op)
    lengths = _lengths(target_lengths, "target_lengths", N, op)
    for name, values in (("input_lengths", inputs), ("target_lengths", lengths)):
        for value in values:
            if value < 0:
                raise RuntimeError(f"Expected {name} to have value at least 0, but got value {value} (while "
                                   f"checking arguments for ctc_loss_allocate_outputs)")
    for value in inputs:
        if value > T:
            raise RuntimeError(f"Expected input_lengths to have value at most {T}, but got value {value} (while "
                               f"checking arguments for ctc_loss_allocate_outputs)")
    target_values = targets.detach().to(corenn.int64).numpy()
    if targets.ndim == 1:  # the targets of every sample, one after the other
        if target_values.shape[0] != sum(lengths):
            raise RuntimeError(f"Expected tensor to have size {sum(lengths)} at dimension 0, but got size "
                               f"{target_values.shape[0]} for argument #2 'targets' (while checking arguments for "
                               f"ctc_loss_allocate_outputs)")
        padded = numpy.zeros((N, max(lengths, default=0)), dtype=numpy.int64)
        start = 0
        for row, length in enumerate(lengths):
            padded[row, :length] = target_values[start:start + length]
            start += length
    else:
        if max(lengths, default=0) > target_values.shape[1]:
            raise RuntimeError(f"Expected tensor to have size at least {max(lengths)} at dimension 1, but got size "
                               f"{target_values.shape[1]} for argument #2 'targets' (while checking arguments for "
                               f"ctc_loss_allocate_outputs)")
        padded = numpy.where(numpy.arange(target_values.shape[1])[None, :] < numpy.array(lengths)[:, None],
                             target_values, 0)
    if padded.size and (padded.min() < 0 or padded.max() >= C):
        raise IndexError(f"{op}(): target index out of range for {C} classes")
    device = log_probs.device
    padded_targets = corenn.tensor(padded, device=device)
    input_lengths = corenn.tensor(inputs, dtype=corenn.int64, device=device)
    target_lengths = corenn.tensor(lengths, dtype=corenn.int64, device=device)
    loss = run("ctc_loss", log_probs, padded_targets, input_lengths, target_lengths, blank=blank,
               zero_infinity=bool(zero_infinity))
    if reduction == "mean":
        divisor = corenn.tensor([max(length, 1) for length in lengths], dtype=loss.dtype, device=device)
        return (loss / divisor).mean()
    if reduction == "sum":
        return loss.sum()
    return loss.squeeze(0) if unbatched else loss


__all__ = ["ctc_loss"]
