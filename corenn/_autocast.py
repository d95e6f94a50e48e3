"""The op side of ``corenn.amp.autocast``: which front ends run in lower precision, which in float32.

Front ends on PyTorch's autocast lists carry ``@autocast_op(LOWER)`` or ``@autocast_op(FLOAT32)``.
With no autocast region open anywhere, the wrapper costs one test of a module global before the
op's own front end runs; elementwise ops, which dominate small-tensor programs, carry no wrapper
at all. Inside a region (``corenn.amp.autocast``) a listed op casts its floating tensor arguments
on the region's device type -- to the region's dtype for ``LOWER``, to float32 for ``FLOAT32`` --
through ``Tensor.to``, so the casts are recorded and gradients reach float32 parameters in float32.

The lists are PyTorch's (``aten/src/ATen/autocast_mode.cpp``) restricted to the ops corenn has,
checked op by op against ``torch.autocast`` in tests/test_amp.py.
"""
from __future__ import annotations

import functools
import threading

LOWER = "lower"
FLOAT32 = "float32"

# How many autocast regions are open in the whole process: the one number the wrappers read.
active_regions = 0
# Per thread, as in PyTorch: {device_type: (enabled, dtype)} of the innermost region.
_local = threading.local()

# PyTorch's lists, per device type, for the ops corenn has (names are corenn's front ends).
OP_LISTS = {
    "cpu": {
        LOWER: {"conv1d", "conv2d", "conv3d", "bmm", "mm", "baddbmm", "addmm", "linear", "matmul",
                "conv_transpose1d", "conv_transpose2d", "conv_transpose3d", "prelu", "scaled_dot_product_attention",
                "einsum"},
        FLOAT32: {"mse_loss", "l1_loss", "smooth_l1_loss", "huber_loss", "cross_entropy", "nll_loss", "kl_div",
                  "binary_cross_entropy", "binary_cross_entropy_with_logits", "prod"},
    },
    "cuda": {
        LOWER: {"conv1d", "conv2d", "conv3d", "conv_transpose1d", "conv_transpose2d", "conv_transpose3d", "prelu",
                "addmm", "matmul", "einsum", "mm", "linear", "baddbmm", "bmm", "scaled_dot_product_attention"},
        FLOAT32: {"mse_loss", "l1_loss", "smooth_l1_loss", "huber_loss", "cross_entropy", "nll_loss", "kl_div",
                  "binary_cross_entropy_with_logits", "prod", "exp", "log", "log2", "log10", "log1p", "expm1",
                  "pow", "softmax", "log_softmax", "layer_norm", "group_norm", "cumsum", "cumprod", "sum",
                  "softplus", "rsqrt", "reciprocal", "tan", "cosine_similarity"},
    },
}


def regions() -> dict:
    """This thread's autocast settings: ``{device_type: (enabled, dtype)}``."""
    settings = getattr(_local, "settings", None)
    if settings is None:
        settings = _local.settings = {}
    return settings


def autocast_op(kind: str):
    """Mark a front end as on PyTorch's autocast ``kind`` list (``LOWER`` or ``FLOAT32``)."""
    def decorate(function):
        name = function.__name__

        @functools.wraps(function)
        def wrapper(*args, **kwargs):
            if active_regions:
                args, kwargs = _cast_arguments(name, args, kwargs)
            return function(*args, **kwargs)
        wrapper.autocast_kind = kind
        return wrapper
    return decorate


def _cast_arguments(name, args, kwargs):
    settings = regions()
    if not settings:
        return args, kwargs
    from corenn.tensor.tensor import Tensor
    from corenn import _dtype

    device_type = None
    for value in (*args, *kwargs.values()):
        if isinstance(value, Tensor):
            device_type = value._device.type
            break
    region = settings.get(device_type)
    if region is None or not region[0]:
        return args, kwargs
    lists = OP_LISTS.get(device_type, OP_LISTS["cuda"])  # other accelerators: CUDA's lists, as PyTorch's
    if name in lists[LOWER]:
        target = region[1]
    elif name in lists[FLOAT32]:
        target = _dtype.float32
    else:
        return args, kwargs

    def cast(value):
        # float64 stays float64 (PyTorch casts only "eligible" float32/16/bf16 tensors).
        if isinstance(value, Tensor) and value._device.type == device_type and value.dtype.is_floating_point \
                and value.dtype is not _dtype.float64 and value.dtype is not target:
            return value.to(target)
        return value
    return tuple(cast(a) for a in args), {k: cast(v) for k, v in kwargs.items()}
