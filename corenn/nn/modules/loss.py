"""Loss layers: each holds its ``reduction`` (and weights) and calls the ``corenn.nn.functional`` form."""
from __future__ import annotations

from corenn.module.module import Module
from corenn.nn import functional as F


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
