"""``corenn.amp.autocast``: a context manager (and decorator) opening an autocast region (``torch.autocast``)."""
from __future__ import annotations

import functools
import warnings

from corenn import _autocast, _dtype, dispatch

__all__ = ["autocast", "is_autocast_available", "custom_fwd", "custom_bwd"]

# PyTorch's default lower-precision dtype per device type.
_DEFAULT_DTYPES = {"cpu": "bfloat16", "cuda": "float16"}
_SUPPORTED = {"cpu": ("bfloat16", "float16"), "cuda": ("bfloat16", "float16")}


def is_autocast_available(device_type: str) -> bool:
    """Whether autocast supports ``device_type`` (cpu, and cuda and other registered accelerators)."""
    return device_type == "cpu" or device_type in dispatch.backends


def _resolve_dtype(name_or_dtype):
    if isinstance(name_or_dtype, str):
        return _dtype.low_precision_dtype(name_or_dtype) if name_or_dtype in _dtype.LOW_PRECISION_NAMES \
            else _dtype._by_name[name_or_dtype]
    return name_or_dtype


class autocast:
    """Run the ops of the block in mixed precision on ``device_type`` (``torch.autocast``).

    Args:
        device_type: "cpu" or "cuda" (or another registered accelerator's type).
        dtype: the lower precision; default ``corenn.bfloat16`` on cpu, ``corenn.float16`` on cuda.
        enabled: ``False`` turns autocast off inside the block (nested regions may re-enable it).
        cache_enabled: accepted for PyTorch's signature (corenn does not cache casts).

    A region for "cuda" without a cuda device warns and is disabled, as in PyTorch. Settings are
    per thread. As a decorator, ``@autocast("cpu")`` runs the function inside a region.
    """

    def __init__(self, device_type: str, dtype=None, enabled: bool = True, cache_enabled=None):
        if not isinstance(device_type, str):
            raise ValueError(f"autocast(): expected `device_type` of type `str`, got: `{type(device_type)}`")
        self.device = device_type
        self.fast_dtype = _resolve_dtype(dtype if dtype is not None
                                         else _DEFAULT_DTYPES.get(device_type, "float16"))
        self._enabled = bool(enabled)
        if self._enabled and device_type != "cpu" and device_type not in dispatch.backends:
            warnings.warn(f"User provided device_type of '{device_type}', but {device_type.upper()} is not "
                          f"available. Disabling", UserWarning, stacklevel=2)
            self._enabled = False
        if self._enabled and device_type in _SUPPORTED and self.fast_dtype.name not in _SUPPORTED[device_type]:
            warnings.warn(f"In {device_type} autocast, but the target dtype {self.fast_dtype} is not supported. "
                          f"Disabling autocast.\n{device_type} Autocast only supports dtypes of "
                          f"{', '.join('corenn.' + n for n in _SUPPORTED[device_type])} currently.", UserWarning,
                          stacklevel=2)
            self._enabled = False
        self._previous = []

    def __enter__(self):
        settings = _autocast.regions()
        self._previous.append(settings.get(self.device))
        settings[self.device] = (self._enabled, self.fast_dtype)
        _autocast.active_regions += 1
        return self

    def __exit__(self, *exc_info):
        settings = _autocast.regions()
        previous = self._previous.pop()
        if previous is None:
            settings.pop(self.device, None)
        else:
            settings[self.device] = previous
        _autocast.active_regions -= 1
        return False

    def __call__(self, function):
        @functools.wraps(function)
        def in_region(*args, **kwargs):
            with autocast(self.device, self.fast_dtype, self._enabled):
                return function(*args, **kwargs)
        return in_region


def custom_fwd(fwd=None, *, device_type: str = "cuda", cast_inputs=None):
    """Decorator for a custom Function's forward: with ``cast_inputs``, run it with autocast off and floating
    tensor inputs cast to ``cast_inputs`` (``torch.amp.custom_fwd``)."""
    if fwd is None:
        return functools.partial(custom_fwd, device_type=device_type, cast_inputs=cast_inputs)

    @functools.wraps(fwd)
    def forward(*args, **kwargs):
        if cast_inputs is None or not _autocast.regions().get(device_type, (False,))[0]:
            return fwd(*args, **kwargs)
        from corenn.tensor.tensor import Tensor

        def cast(v):
            return v.to(cast_inputs) if isinstance(v, Tensor) and v.dtype.is_floating_point else v
        with autocast(device_type, enabled=False):
            return fwd(*[cast(a) for a in args], **{k: cast(v) for k, v in kwargs.items()})
    return forward


def custom_bwd(bwd=None, *, device_type: str = "cuda"):
    """Decorator for a custom Function's backward (``torch.amp.custom_bwd``): runs it as written."""
    if bwd is None:
        return functools.partial(custom_bwd, device_type=device_type)
    return bwd
