"""``corenn.cpu.amp``: PyTorch's older spelling ``corenn.cpu.amp.autocast(...)`` of ``corenn.amp.autocast("cpu")``."""
from __future__ import annotations

from corenn import amp as _amp

__all__ = ["autocast", "GradScaler"]


class autocast(_amp.autocast):
    """``corenn.amp.autocast("cpu", ...)``; bfloat16 by default."""

    def __init__(self, enabled: bool = True, dtype=None, cache_enabled: bool = True):
        import corenn
        super().__init__("cpu", dtype=corenn.bfloat16 if dtype is None else dtype, enabled=enabled,
                         cache_enabled=cache_enabled)


class GradScaler(_amp.GradScaler):
    """``corenn.amp.GradScaler("cpu", ...)``."""

    def __init__(self, init_scale: float = 2.0 ** 16, growth_factor: float = 2.0, backoff_factor: float = 0.5,
                 growth_interval: int = 2000, enabled: bool = True):
        super().__init__("cpu", init_scale, growth_factor, backoff_factor, growth_interval, enabled)
