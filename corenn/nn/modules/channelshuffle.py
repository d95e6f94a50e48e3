"""ChannelShuffle: interleave channel groups (ShuffleNet)."""
from __future__ import annotations

from corenn.module.module import Module
from corenn.nn import functional as F


class ChannelShuffle(Module):
    """Split the channels in ``groups`` and interleave them.

        >>> nn.ChannelShuffle(2)(corenn.arange(4.).reshape(1, 4, 1)).flatten().tolist()
        [0.0, 2.0, 1.0, 3.0]
    """

    def __init__(self, groups: int):
        super().__init__()
        self.groups = groups

    def forward(self, input):
        return F.channel_shuffle(input, self.groups)

    def extra_repr(self) -> str:
        return f"groups={self.groups}"
