"""``corenn.cuda.amp``: PyTorch's older spellings, ``corenn.cuda.amp.autocast(...)`` and ``GradScaler(...)``.

They are ``corenn.amp``'s with ``device_type="cuda"``; on a machine without a cuda device both warn and
disable themselves (``GradScaler(enabled=False)`` is silent), as PyTorch's do.
"""
from __future__ import annotations

import functools

from corenn import amp as _amp

__all__ = ["autocast", "GradScaler", "custom_fwd", "custom_bwd"]


class autocast(_amp.autocast):
    """``corenn.amp.autocast("cuda", ...)``."""

    def __init__(self, enabled: bool = True, dtype=None, cache_enabled: bool = True):
        import corenn
        super().__init__("cuda", dtype=corenn.float16 if dtype is None else dtype, enabled=enabled,
                         cache_enabled=cache_enabled)


class GradScaler(_amp.GradScaler):
    """``corenn.amp.GradScaler("cuda", ...)``."""

    def __init__(self, init_scale: float = 2.0 ** 16, growth_factor: float = 2.0, backoff_factor: float = 0.5,
                 growth_interval: int = 2000, enabled: bool = True):
        super().__init__("cuda", init_scale, growth_factor, backoff_factor, growth_interval, enabled)


custom_fwd = functools.partial(_amp.custom_fwd, device_type="cuda")
custom_bwd = functools.partial(_amp.custom_bwd, device_type="cuda")
