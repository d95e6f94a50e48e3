"""``corenn.amp.GradScaler``: dynamic loss scaling for float16 training (``torch.amp.GradScaler``)."""
from __future__ import annotations

import math
import warnings

from corenn import dispatch

__all__ = ["GradScaler"]

_READY, _UNSCALED, _STEPPED = 0, 1, 2


class GradScaler:
    """Scale the loss before backward, unscale gradients before the step, skip steps with inf/nan gradients.

    ``scale(loss).backward()``, then ``step(optimizer)`` (which unscales, unless ``unscale_`` was
    called, e.g. to clip gradients) and ``update()``. The scale is multiplied by ``backoff_factor``
    after a step whose gradients hold inf or nan (the step is skipped), and by ``growth_factor``
    after ``growth_interval`` steps without. ``device="cuda"`` without a cuda device warns and
    disables the scaler, as PyTorch does; ``enabled=False`` makes every method a pass-through.

    Example::

        >>> scaler = corenn.amp.GradScaler("cpu")
        >>> model = corenn.nn.Linear(2, 1)
        >>> optimizer = corenn.optim.SGD(model.parameters(), lr=0.1)
        >>> scaler.scale(model(corenn.ones(1, 2)).sum()).backward()
        >>> scaler.step(optimizer)
        >>> scaler.update()
    """

    def __init__(self, device: str = "cuda", init_scale: float = 2.0 ** 16, growth_factor: float = 2.0,
                 backoff_factor: float = 0.5, growth_interval: int = 2000, enabled: bool = True):
        self._device = str(device)
        device_type = self._device.split(":")[0]
        if enabled and device_type != "cpu" and device_type not in dispatch.backends:
            warnings.warn(f"corenn.amp.GradScaler is enabled, but {device_type.upper()} is not available. "
                          f"Disabling.", UserWarning, stacklevel=2)
            enabled = False
        if growth_factor <= 1.0:
            raise ValueError(f"GradScaler(): growth_factor should be > 1, got {growth_factor}")
        if not 0.0 < backoff_factor < 1.0:
            raise ValueError(f"GradScaler(): backoff_factor should be in (0, 1), got {backoff_factor}")
        self._enabled = enabled
        self._scale = float(init_scale)
        self._growth_factor = float(growth_factor)
        self._backoff_factor = float(backoff_factor)
        self._growth_interval = int(growth_interval)
        self._growth_tracker = 0
        self._per_optimizer: dict[int, dict] = {}

    def is_enabled(self) -> bool:
        return self._enabled

    def get_scale(self) -> float:
        """The current scale (1.0 when disabled)."""
        return self._scale if self._enabled else 1.0

    def get_growth_factor(self) -> float:
        return self._growth_factor

    def set_growth_factor(self, new_factor: float) -> None:
        self._growth_factor = float(new_factor)

    def get_backoff_factor(self) -> float:
        return self._backoff_factor

    def set_backoff_factor(self, new_factor: float) -> None:
        self._backoff_factor = float(new_factor)

    def get_growth_interval(self) -> int:
        return self._growth_interval

    def set_growth_interval(self, new_interval: int) -> None:
        self._growth_interval = int(new_interval)

    def scale(self, outputs):
        """``outputs`` (a tensor, or a list/tuple of them, nested) multiplied by the scale."""
        if not self._enabled:
            return outputs
        from corenn.tensor.tensor import Tensor
        if isinstance(outputs, Tensor):
            return outputs * self._scale
        if isinstance(outputs, (list, tuple)):
            return type(outputs)(self.scale(o) for o in outputs)
        raise ValueError("GradScaler.scale(): outputs must be a Tensor or an iterable of Tensors")

    def _state(self, optimizer) -> dict:
        return self._per_optimizer.setdefault(id(optimizer), {"stage": _READY, "found_inf": False})

    def unscale_(self, optimizer) -> None:
        """Divide ``optimizer``'s gradients by the scale in place, noting whether any is inf or nan.

        Once per optimizer between ``update()`` calls (RuntimeError otherwise, as in PyTorch).
        float16 gradients are refused (ValueError): keep float32 parameters and autocast the forward.
        """
        if not self._enabled:
            return
        state = self._state(optimizer)
        if state["stage"] is _UNSCALED:
            raise RuntimeError("unscale_() has already been called on this optimizer since the last update().")
        if state["stage"] is _STEPPED:
            raise RuntimeError("unscale_() is being called after step().")
        import corenn
        inverse = 1.0 / self._scale
        found_inf = False
        with corenn.no_grad():
            for group in optimizer.param_groups:
                for param in group["params"]:
                    grad = param.grad
                    if grad is None:
                        continue
                    if grad.dtype is corenn.float16:
                        raise ValueError("Attempting to unscale FP16 gradients.")
                    grad.mul_(inverse)
                    if not found_inf and not bool(corenn.isfinite(grad).all()):
                        found_inf = True
        state["found_inf"] = found_inf
        state["stage"] = _UNSCALED

    def step(self, optimizer, *args, **kwargs):
        """Unscale (if not done) and run ``optimizer.step()`` unless a gradient is inf or nan; returns its result."""
        if not self._enabled:
            return optimizer.step(*args, **kwargs)
        if "closure" in kwargs:
            raise RuntimeError("Closure use is not currently supported if GradScaler is enabled.")
        state = self._state(optimizer)
        if state["stage"] is _STEPPED:
            raise RuntimeError("step() has already been called since the last update().")
        if state["stage"] is _READY:
            self.unscale_(optimizer)
        result = None if state["found_inf"] else optimizer.step(*args, **kwargs)
        state["stage"] = _STEPPED
        return result

    def update(self, new_scale=None) -> None:
        """Adapt the scale after this iteration's steps (or set ``new_scale``), and start the next iteration."""
        if not self._enabled:
            return
        if new_scale is not None:
            self._scale = float(new_scale.item() if hasattr(new_scale, "item") else new_scale)
        else:
            if not self._per_optimizer:
                raise AssertionError("No inf checks were recorded prior to update.")
            if any(state["found_inf"] for state in self._per_optimizer.values()):
                self._scale *= self._backoff_factor
                self._growth_tracker = 0
            else:
                self._growth_tracker += 1
                if self._growth_tracker == self._growth_interval:
                    grown = self._scale * self._growth_factor
                    if math.isfinite(grown):
                        self._scale = grown
                    self._growth_tracker = 0
        self._per_optimizer = {}

    def state_dict(self) -> dict:
        """PyTorch's keys: scale, growth_factor, backoff_factor, growth_interval, _growth_tracker ({} when disabled)."""
        if not self._enabled:
            return {}
        return {"scale": self._scale, "growth_factor": self._growth_factor, "backoff_factor": self._backoff_factor,
                "growth_interval": self._growth_interval, "_growth_tracker": self._growth_tracker}

    def load_state_dict(self, state_dict: dict) -> None:
        if not self._enabled:
            return
        if len(state_dict) == 0:
            raise RuntimeError("The source state dict is empty, possibly because it was saved from a disabled "
                               "instance of GradScaler.")
        self._scale = float(state_dict["scale"])
        self._growth_factor = float(state_dict["growth_factor"])
        self._backoff_factor = float(state_dict["backoff_factor"])
        self._growth_interval = int(state_dict["growth_interval"])
        self._growth_tracker = int(state_dict["_growth_tracker"])
