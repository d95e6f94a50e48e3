"""Dropout: multiply by a random keep-mask scaled by ``1 / (1 - p)``; the mask comes from corenn's RNG."""
from __future__ import annotations

from corenn.ops._kernel import Op, kernel


@kernel("dropout", "NativeDropoutBackward0")
class Dropout(Op):
    """``x * mask``: ``mask`` (already scaled, broadcastable to ``x``) is drawn by the front end."""

    @staticmethod
    def forward(ctx, x, *, mask):
        ctx.save_for_backward(mask)
        return (x * mask).astype(x.dtype, copy=False)

    @staticmethod
    def backward(ctx, grad):
        (mask,) = ctx.saved
        return (grad * mask).astype(grad.dtype, copy=False)


def _keep_mask(like, p, shape=None):
    """Scaled keep-mask for tensor ``like``: 0 with probability ``p``, else ``1 / (1 - p)``."""
    from corenn.tensor.random import _generator
    rng = _generator(like._device, None)
    dtype = like._data.dtype
    shape = like._data.shape if shape is None else shape
    if p >= 1:
        return like._device._xp.zeros(shape, dtype=dtype)
    keep = rng.random(shape, dtype=dtype if dtype.kind == "f" and dtype.itemsize >= 4 else None) >= p
    return keep.astype(dtype) * dtype.type(1.0 / (1.0 - p))


# No public op functions: the front end is ``corenn.nn.functional.dropout``.
__all__ = [name for name, value in list(globals().items())
           if not name.startswith("_") and callable(value) and not isinstance(value, type)
           and getattr(value, "__module__", None) == __name__]
