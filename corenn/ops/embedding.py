"""Embedding lookup: rows of a weight matrix picked by integer indices; backward scatters into those rows."""
from __future__ import annotations

from corenn.ops._kernel import Op, kernel


@kernel("embedding", "EmbeddingBackward0")
class Embedding(Op):
    """``weight[indices]``; the gradient of row ``padding_idx`` stays zero."""

    @staticmethod
    def forward(ctx, weight, indices, *, padding_idx=None):
        ctx.save_for_backward(indices)
        ctx.weight_shape, ctx.padding_idx = weight.shape, padding_idx
        return weight[indices]

    @staticmethod
    def backward(ctx, grad):
        xp = ctx.xp
        (indices,) = ctx.saved
        grad_weight = xp.zeros(ctx.weight_shape, dtype=grad.dtype)
        # add.at, not fancy-index assignment: repeated indices must accumulate
        xp.add.at(grad_weight, indices.reshape(-1), grad.reshape(-1, ctx.weight_shape[1]))
        if ctx.padding_idx is not None:
            grad_weight[ctx.padding_idx] = 0
        return grad_weight, None


# No public op functions: the front end is ``corenn.nn.functional.embedding(input, weight, ...)``
# (``torch.embedding`` takes its arguments in the other order; it is not mirrored).
__all__ = [name for name, value in list(globals().items())
           if not name.startswith("_") and callable(value) and not isinstance(value, type)
           and getattr(value, "__module__", None) == __name__]
