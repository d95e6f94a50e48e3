"""``corenn.amp``: automatic mixed precision (``torch.amp``): ``autocast`` and ``GradScaler``.

    >>> import corenn
    >>> model = corenn.nn.Linear(4, 2)
    >>> with corenn.amp.autocast(device_type="cpu", dtype=corenn.bfloat16):
    ...     y = model(corenn.randn(3, 4))
    >>> y.dtype
    corenn.bfloat16

Inside a region, ops on PyTorch's lists (``corenn._autocast.OP_LISTS``) run in the region's dtype
(matmuls, convolutions, ``linear``) or in float32 (losses, ``prod``); every other op runs in the
dtype of its inputs. ``GradScaler`` scales the loss so that float16 gradients do not underflow,
skips steps whose gradients hold inf or nan, and adapts the scale.
"""
from corenn.amp.autocast_mode import autocast, custom_bwd, custom_fwd, is_autocast_available
from corenn.amp.grad_scaler import GradScaler

__all__ = ["autocast", "GradScaler", "is_autocast_available", "custom_fwd", "custom_bwd"]
