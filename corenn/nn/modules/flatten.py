"""Flatten and Unflatten layers."""
from __future__ import annotations

from corenn.module.module import Module


class Flatten(Module):
    """Flatten dims ``start_dim..end_dim`` into one (default: all but the batch dim).

        >>> nn.Flatten()(corenn.ones(2, 3, 4)).shape
        corenn.Size([2, 12])
    """

    def __init__(self, start_dim: int = 1, end_dim: int = -1):
        super().__init__()
        self.start_dim, self.end_dim = start_dim, end_dim

    def forward(self, input):
        return input.flatten(self.start_dim, self.end_dim)

    def extra_repr(self) -> str:
        return f"start_dim={self.start_dim}, end_dim={self.end_dim}"


class Unflatten(Module):
    """Split dim ``dim`` into ``unflattened_size``.

        >>> nn.Unflatten(1, (2, 6))(corenn.ones(3, 12)).shape
        corenn.Size([3, 2, 6])
    """

    def __init__(self, dim: int, unflattened_size):
        super().__init__()
        if isinstance(dim, str):
            raise TypeError("Unflatten: named dimensions are not supported; dim must be an int")
        if not isinstance(unflattened_size, (tuple, list)):
            raise TypeError(f"unflattened_size must be tuple of ints, but found type {type(unflattened_size).__name__}")
        self.dim, self.unflattened_size = dim, unflattened_size

    def forward(self, input):
        return input.unflatten(self.dim, self.unflattened_size)

    def extra_repr(self) -> str:
        return f"dim={self.dim}, unflattened_size={self.unflattened_size}"
