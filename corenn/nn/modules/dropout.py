"""Dropout layer."""
from __future__ import annotations

from corenn.module.module import Module
from corenn.nn import functional as F


class Dropout(Module):
    """Zero elements with probability ``p`` in training (scaling the rest by ``1/(1-p)``); identity in eval.

        >>> nn.Dropout(0.5).eval()(corenn.ones(3)).tolist()
        [1.0, 1.0, 1.0]
    """

    def __init__(self, p: float = 0.5, inplace: bool = False):
        super().__init__()
        if p < 0 or p > 1:
            raise ValueError(f"dropout probability has to be between 0 and 1, but got {p}")
        self.p, self.inplace = p, inplace

    def forward(self, input):
        return F.dropout(input, self.p, self.training, self.inplace)

    def extra_repr(self) -> str:
        return f"p={self.p}, inplace={self.inplace}"
