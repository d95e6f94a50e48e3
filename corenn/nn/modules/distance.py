"""Distance layers: CosineSimilarity and PairwiseDistance."""
from __future__ import annotations

from corenn.module.module import Module
from corenn.nn import functional as F


class CosineSimilarity(Module):
    """Cosine similarity of ``x1`` and ``x2`` along ``dim``.

        >>> nn.CosineSimilarity(dim=0)(corenn.tensor([1., 0.]), corenn.tensor([2., 0.])).item()
        1.0
    """

    def __init__(self, dim: int = 1, eps: float = 1e-8):
        super().__init__()
        self.dim, self.eps = dim, eps

    def forward(self, x1, x2):
        return F.cosine_similarity(x1, x2, self.dim, self.eps)


class PairwiseDistance(Module):
    """The p-norm of ``x1 - x2 + eps`` over the last dim.

        >>> nn.PairwiseDistance(eps=0.)(corenn.tensor([[0., 0.]]), corenn.tensor([[3., 4.]])).tolist()
        [5.0]
    """

    def __init__(self, p: float = 2.0, eps: float = 1e-6, keepdim: bool = False):
        super().__init__()
        self.norm, self.eps, self.keepdim = p, eps, keepdim

    def forward(self, x1, x2):
        return F.pairwise_distance(x1, x2, self.norm, self.eps, self.keepdim)
