"""Loss layers: each holds its ``reduction`` (and weights) and calls the ``corenn.nn.functional`` form."""
from __future__ import annotations

from corenn.module.module import Module
from corenn.nn import functional as F
from corenn.nn.modules.distance import PairwiseDistance


class _Loss(Module):
    def __init__(self, size_average=None, reduce=None, reduction: str = "mean"):
        super().__init__()
        self.reduction = F._reduction(size_average, reduce, reduction) if reduction != "batchmean" else reduction


class _WeightedLoss(_Loss):
    def __init__(self, weight=None, size_average=None, reduce=None, reduction: str = "mean"):
        super().__init__(size_average, reduce, reduction)
        self.register_buffer("weight", weight)


class MSELoss(_Loss):
    """Mean squared error.

        >>> nn.MSELoss()(corenn.tensor([1., 2.]), corenn.tensor([1., 4.])).item()
        2.0
    """

    def forward(self, input, target):
        return F.mse_loss(input, target, reduction=self.reduction)


class L1Loss(_Loss):
    """Mean absolute error.

        >>> nn.L1Loss(reduction="sum")(corenn.tensor([1., 2.]), corenn.tensor([1., 4.])).item()
        2.0
    """

    def forward(self, input, target):
        return F.l1_loss(input, target, reduction=self.reduction)


class SmoothL1Loss(_Loss):
    """Quadratic for ``|d| < beta``, linear above.

        >>> nn.SmoothL1Loss()(corenn.tensor([0.]), corenn.tensor([3.])).item()
        2.5
    """

    def __init__(self, size_average=None, reduce=None, reduction: str = "mean", beta: float = 1.0):
        super().__init__(size_average, reduce, reduction)
        self.beta = beta

    def forward(self, input, target):
        return F.smooth_l1_loss(input, target, reduction=self.reduction, beta=self.beta)


class HuberLoss(_Loss):
    """Quadratic for ``|d| < delta``, ``delta``-linear above.

        >>> nn.HuberLoss(delta=2.)(corenn.tensor([0.]), corenn.tensor([3.])).item()
        4.0
    """

    def __init__(self, reduction: str = "mean", delta: float = 1.0):
        super().__init__(reduction=reduction)
        self.delta = delta

    def forward(self, input, target):
        return F.huber_loss(input, target, reduction=self.reduction, delta=self.delta)


class CrossEntropyLoss(_WeightedLoss):
    """Cross-entropy of logits vs class indices or class probabilities (fused log_softmax + nll).

        >>> loss = nn.CrossEntropyLoss(label_smoothing=0.1)
        >>> loss(corenn.randn(4, 10), corenn.tensor([1, 0, 9, 3])).shape
        corenn.Size([])
    """

    def __init__(self, weight=None, size_average=None, ignore_index: int = -100, reduce=None,
                 reduction: str = "mean", label_smoothing: float = 0.0):
        super().__init__(weight, size_average, reduce, reduction)
        self.ignore_index, self.label_smoothing = ignore_index, label_smoothing

    def forward(self, input, target):
        return F.cross_entropy(input, target, weight=self.weight, ignore_index=self.ignore_index,
                               reduction=self.reduction, label_smoothing=self.label_smoothing)


class NLLLoss(_WeightedLoss):
    """Negative log-likelihood of log-probabilities at class indices.

        >>> nn.NLLLoss()(corenn.tensor([[-1., -2.]]), corenn.tensor([0])).item()
        1.0
    """

    def __init__(self, weight=None, size_average=None, ignore_index: int = -100, reduce=None,
                 reduction: str = "mean"):
        super().__init__(weight, size_average, reduce, reduction)
        self.ignore_index = ignore_index

    def forward(self, input, target):
        return F.nll_loss(input, target, weight=self.weight, ignore_index=self.ignore_index, reduction=self.reduction)


class BCELoss(_WeightedLoss):
    """Binary cross-entropy of probabilities.

        >>> round(nn.BCELoss()(corenn.tensor([0.5]), corenn.tensor([0.])).item(), 4)
        0.6931
    """

    def forward(self, input, target):
        return F.binary_cross_entropy(input, target, weight=self.weight, reduction=self.reduction)


class BCEWithLogitsLoss(_Loss):
    """Sigmoid + binary cross-entropy, stable for any logits; ``pos_weight`` weights the positive class.

        >>> round(nn.BCEWithLogitsLoss()(corenn.tensor([0.]), corenn.tensor([1.])).item(), 4)
        0.6931
    """

    def __init__(self, weight=None, size_average=None, reduce=None, reduction: str = "mean", pos_weight=None):
        super().__init__(size_average, reduce, reduction)
        self.register_buffer("weight", weight)
        self.register_buffer("pos_weight", pos_weight)

    def forward(self, input, target):
        return F.binary_cross_entropy_with_logits(input, target, self.weight, reduction=self.reduction,
                                                  pos_weight=self.pos_weight)


class KLDivLoss(_Loss):
    """KL divergence of log-probabilities ``input`` from ``target``; prefer ``reduction='batchmean'``.

        >>> nn.KLDivLoss(reduction="batchmean")(corenn.tensor([[0.]]), corenn.tensor([[1.]])).item()
        0.0
    """

    def __init__(self, size_average=None, reduce=None, reduction: str = "mean", log_target: bool = False):
        super().__init__(size_average, reduce, reduction)
        self.log_target = log_target

    def forward(self, input, target):
        return F.kl_div(input, target, reduction=self.reduction, log_target=self.log_target)


class PoissonNLLLoss(_Loss):
    """Poisson negative log-likelihood (``log_input``: the input is the log-rate).

        >>> nn.PoissonNLLLoss()(corenn.tensor([0.]), corenn.tensor([1.])).item()
        1.0
    """

    def __init__(self, log_input: bool = True, full: bool = False, size_average=None, eps: float = 1e-8,
                 reduce=None, reduction: str = "mean"):
        super().__init__(size_average, reduce, reduction)
        self.log_input, self.full, self.eps = log_input, full, eps

    def forward(self, log_input, target):
        return F.poisson_nll_loss(log_input, target, log_input=self.log_input, full=self.full, eps=self.eps,
                                  reduction=self.reduction)


class GaussianNLLLoss(_Loss):
    """Gaussian negative log-likelihood of ``target`` given a predicted mean ``input`` and variance ``var``.

        >>> nn.GaussianNLLLoss()(corenn.tensor([0.]), corenn.tensor([2.]), corenn.tensor([1.])).item()
        2.0
    """

    def __init__(self, *, full: bool = False, eps: float = 1e-6, reduction: str = "mean"):
        super().__init__(None, None, reduction)
        self.full, self.eps = full, eps

    def forward(self, input, target, var):
        return F.gaussian_nll_loss(input, target, var, full=self.full, eps=self.eps, reduction=self.reduction)


class MarginRankingLoss(_Loss):
    """``max(0, -y * (x1 - x2) + margin)``.

        >>> nn.MarginRankingLoss()(corenn.tensor([1.]), corenn.tensor([2.]), corenn.tensor([1.])).item()
        1.0
    """

    def __init__(self, margin: float = 0.0, size_average=None, reduce=None, reduction: str = "mean"):
        super().__init__(size_average, reduce, reduction)
        self.margin = margin

    def forward(self, input1, input2, target):
        return F.margin_ranking_loss(input1, input2, target, margin=self.margin, reduction=self.reduction)


class HingeEmbeddingLoss(_Loss):
    """``x`` for ``y == 1``, ``max(0, margin - x)`` for ``y == -1``.

        >>> nn.HingeEmbeddingLoss()(corenn.tensor([0.5]), corenn.tensor([-1.])).item()
        0.5
    """

    def __init__(self, margin: float = 1.0, size_average=None, reduce=None, reduction: str = "mean"):
        super().__init__(size_average, reduce, reduction)
        self.margin = margin

    def forward(self, input, target):
        return F.hinge_embedding_loss(input, target, margin=self.margin, reduction=self.reduction)


class SoftMarginLoss(_Loss):
    """Two-class logistic loss ``log(1 + exp(-y x))``.

        >>> round(nn.SoftMarginLoss()(corenn.tensor([0.]), corenn.tensor([1.])).item(), 4)
        0.6931
    """

    def forward(self, input, target):
        return F.soft_margin_loss(input, target, reduction=self.reduction)


class CosineEmbeddingLoss(_Loss):
    """``1 - cos(x1, x2)`` for ``y == 1``, ``max(0, cos(x1, x2) - margin)`` for ``y == -1``.

        >>> nn.CosineEmbeddingLoss()(corenn.tensor([[1., 0.]]), corenn.tensor([[1., 0.]]), corenn.tensor([1.])).item()
        0.0
    """

    def __init__(self, margin: float = 0.0, size_average=None, reduce=None, reduction: str = "mean"):
        super().__init__(size_average, reduce, reduction)
        self.margin = margin

    def forward(self, input1, input2, target):
        return F.cosine_embedding_loss(input1, input2, target, margin=self.margin, reduction=self.reduction)


class TripletMarginLoss(_Loss):
    """``max(0, d(a, p) - d(a, n) + margin)`` with the p-norm pairwise distance.

        >>> nn.TripletMarginLoss(margin=1.0, p=2)
        TripletMarginLoss()
    """

    def __init__(self, margin: float = 1.0, p: float = 2.0, eps: float = 1e-6, swap: bool = False,
                 size_average=None, reduce=None, reduction: str = "mean"):
        super().__init__(size_average, reduce, reduction)
        if margin <= 0:
            raise ValueError(f"TripletMarginLoss: expected margin to be greater than 0, got {margin} instead")
        self.margin, self.p, self.eps, self.swap = margin, p, eps, swap

    def forward(self, anchor, positive, negative):
        return F.triplet_margin_loss(anchor, positive, negative, margin=self.margin, p=self.p, eps=self.eps,
                                     swap=self.swap, reduction=self.reduction)


class TripletMarginWithDistanceLoss(_Loss):
    """:class:`TripletMarginLoss` with any ``distance_function``.

        >>> nn.TripletMarginWithDistanceLoss(margin=0.5)
        TripletMarginWithDistanceLoss(
          (distance_function): PairwiseDistance()
        )
    """

    def __init__(self, *, distance_function=None, margin: float = 1.0, swap: bool = False,
                 reduction: str = "mean"):
        super().__init__(None, None, reduction)
        if margin <= 0:
            raise ValueError(f"TripletMarginWithDistanceLoss: expected margin to be greater than 0, got {margin} "
                             f"instead")
        # a PairwiseDistance child by default, as PyTorch (it shows in the repr and the module tree)
        self.distance_function = distance_function if distance_function is not None else PairwiseDistance()
        self.margin, self.swap = margin, swap

    def forward(self, anchor, positive, negative):
        return F.triplet_margin_with_distance_loss(anchor, positive, negative,
                                                   distance_function=self.distance_function, margin=self.margin,
                                                   swap=self.swap, reduction=self.reduction)


class MultiLabelSoftMarginLoss(_WeightedLoss):
    """Per-class logistic loss for multi-label {0, 1} targets, averaged over the classes.

        >>> round(nn.MultiLabelSoftMarginLoss()(corenn.tensor([[0., 0.]]), corenn.tensor([[1., 0.]])).item(), 4)
        0.6931
    """

    def forward(self, input, target):
        return F.multilabel_soft_margin_loss(input, target, weight=self.weight, reduction=self.reduction)


class MultiMarginLoss(_WeightedLoss):
    """Multi-class hinge loss (``p`` 1 or 2), optionally weighted per class.

        >>> nn.MultiMarginLoss()(corenn.tensor([[0.1, 0.2, 0.4, 0.8]]), corenn.tensor([3])).item()
        0.32499998807907104
    """

    def __init__(self, p: int = 1, margin: float = 1.0, weight=None, size_average=None, reduce=None,
                 reduction: str = "mean"):
        super().__init__(weight, size_average, reduce, reduction)
        if p not in (1, 2):
            raise ValueError("MultiMarginLoss: only p == 1 and p == 2 supported")
        if weight is not None and weight.ndim != 1:
            raise ValueError(f"MultiMarginLoss: weight must be one-dimensional, got {weight.ndim}D")
        self.p, self.margin = p, margin

    def forward(self, input, target):
        return F.multi_margin_loss(input, target, p=self.p, margin=self.margin, weight=self.weight,
                                   reduction=self.reduction)


class MultiLabelMarginLoss(_Loss):
    """Multi-label hinge loss; each target row lists class indices, ended by -1.

        >>> nn.MultiLabelMarginLoss()(corenn.tensor([[0.1, 0.2, 0.4, 0.8]]), corenn.tensor([[3, 0, -1, 1]])).item()
        0.8500000238418579
    """

    def forward(self, input, target):
        return F.multilabel_margin_loss(input, target, reduction=self.reduction)


class CTCLoss(_Loss):
    """Connectionist temporal classification loss: sums over every alignment of the targets to the frames.

        >>> loss = nn.CTCLoss()
        >>> lp = corenn.randn(6, 2, 4).log_softmax(2)
        >>> loss(lp, corenn.tensor([[1, 2], [3, 0]]), [6, 5], [2, 1]).shape
        corenn.Size([])
    """

    def __init__(self, blank: int = 0, reduction: str = "mean", zero_infinity: bool = False):
        super().__init__(reduction=reduction)
        self.blank, self.zero_infinity = blank, zero_infinity

    def forward(self, log_probs, targets, input_lengths, target_lengths):
        return F.ctc_loss(log_probs, targets, input_lengths, target_lengths, self.blank, self.reduction,
                          self.zero_infinity)


class LinearCrossEntropyLoss(_WeightedLoss):
    """A :class:`Linear` layer (``self.linear``, no bias by default) and cross entropy in one module
    (:func:`~corenn.nn.functional.linear_cross_entropy`); ``out_features`` gives a K-dimensional loss.

        >>> nn.LinearCrossEntropyLoss(4, 5)(corenn.randn(3, 4), corenn.tensor([0, 4, 2])).shape
        corenn.Size([])
    """

    def __init__(self, in_features: int, num_classes: int, *, out_features: tuple = (), bias: bool = False,
                 device=None, dtype=None, reduction: str = "mean", weight=None, ignore_index=None,
                 label_smoothing: float = 0.0, options=None):
        import math

        from corenn.nn.modules.linear import Linear
        if weight is not None and tuple(weight.shape) != (num_classes,):
            raise RuntimeError(f"expected weight shape to be {(num_classes,)}, got {tuple(weight.shape)}")
        if label_smoothing < 0 or label_smoothing > 1.0:
            raise RuntimeError(f"expected label_smoothing to be in range [0, 1], got {label_smoothing}")
        if options is not None:
            raise NotImplementedError("LinearCrossEntropyLoss: options (the chunked path) is not implemented; pass "
                                      "options=None")
        super().__init__(weight=weight, reduction=reduction)
        self.num_classes, self.out_features = num_classes, out_features
        self.ignore_index, self.label_smoothing, self.options = ignore_index, label_smoothing, options
        # the weight is stored 2-d (a Linear) and reshaped to (C, *out_features, in_features) in forward
        self.linear = Linear(in_features, math.prod(out_features, start=num_classes), bias=bias, device=device,
                             dtype=dtype)

    def forward(self, input, target):
        linear_weight = self.linear.weight.reshape((self.num_classes, *self.out_features, self.linear.in_features))
        linear_bias = (self.linear.bias.reshape((self.num_classes, *self.out_features))
                       if self.linear.bias is not None else None)
        return F.linear_cross_entropy(input, linear_weight, target, linear_bias=linear_bias, weight=self.weight,
                                      reduction=self.reduction, ignore_index=self.ignore_index,
                                      label_smoothing=self.label_smoothing, options=self.options)

    def extra_repr(self) -> str:
        return (f"in_features={self.linear.in_features}, num_classes={self.num_classes}, "
                f"out_features={self.out_features}, bias={self.linear.bias is not None}, "
                f"reduction={self.reduction}, ignore_index={self.ignore_index}, "
                f"label_smoothing={self.label_smoothing}, options={self.options}")


class NLLLoss2d(NLLLoss):
    """Deprecated: :class:`NLLLoss` under its old name for (N, C, H, W) input (warns, as PyTorch's does).

        >>> nn.NLLLoss2d()  # doctest: +SKIP
        NLLLoss2d()
    """

    def __init__(self, weight=None, size_average=None, ignore_index: int = -100, reduce=None,
                 reduction: str = "mean"):
        import warnings
        warnings.warn("`NLLLoss2d` has been deprecated. Please use `NLLLoss` instead as a drop-in replacement and see "
                      "https://pytorch.org/docs/main/nn.html#torch.nn.NLLLoss for more details.", FutureWarning,
                      stacklevel=2)
        super().__init__(weight, size_average, ignore_index, reduce, reduction)
