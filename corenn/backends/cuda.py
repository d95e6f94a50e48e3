"""``corenn.backends.cuda``: PyTorch's CUDA flags (TF32 matmul, reduced-precision reductions, SDPA kernels).

The flags are real attributes that keep their values; the core's cpu kernels read none of them
(they compute float32 matmuls in float32 whatever ``allow_tf32`` says, which is what the flag
permits). A cuda plugin reads them here. ``is_built()`` says whether a ``cuda`` backend is installed.

    >>> import corenn
    >>> corenn.backends.cuda.matmul.allow_tf32 = True
    >>> corenn.backends.cuda.matmul.allow_tf32
    True
"""
from __future__ import annotations

import contextlib
import types

from corenn.backends import _flags

__all__ = ["is_built", "matmul", "cufft_plan_cache", "preferred_linalg_library", "preferred_blas_library",
           "enable_flash_sdp", "flash_sdp_enabled", "enable_mem_efficient_sdp", "mem_efficient_sdp_enabled",
           "enable_math_sdp", "math_sdp_enabled", "enable_cudnn_sdp", "cudnn_sdp_enabled", "sdp_kernel"]


def is_built() -> bool:
    """Whether a ``cuda`` backend is installed (corenn-cuda), whether or not it sees a GPU."""
    from corenn import dispatch
    return "cuda" in dispatch.backends


class _MatmulFlags:
    """``corenn.backends.cuda.matmul``: ``allow_tf32`` and the reduced-precision reduction flags."""

    __slots__ = ()
    _values = {"allow_tf32": False, "allow_fp16_reduced_precision_reduction": True,
               "allow_bf16_reduced_precision_reduction": True}

    def __getattr__(self, name):
        try:
            return _MatmulFlags._values[name]
        except KeyError:
            raise AttributeError(f"Unknown attribute {name}") from None

    def __setattr__(self, name, value):
        if name not in _MatmulFlags._values:
            raise AttributeError(f"Unknown attribute {name}")
        if not isinstance(value, bool):
            raise TypeError(f"corenn.backends.cuda.matmul.{name} must be a bool, got {type(value).__name__}")
        _MatmulFlags._values[name] = value
        if name == "allow_tf32":  # the one switch PyTorch ties to set_float32_matmul_precision
            _precision[0] = "high" if value else "highest"

    def __repr__(self):
        return f"corenn.backends.cuda.matmul({_MatmulFlags._values})"


matmul = _MatmulFlags()
_precision = ["highest"]


def set_float32_matmul_precision(precision: str) -> None:
    """``corenn.set_float32_matmul_precision``: "highest" (default), "high" or "medium" (allow TF32 on cuda)."""
    if precision not in ("highest", "high", "medium"):
        raise RuntimeError(f"set_float32_matmul_precision(): invalid precision {precision!r}; expected 'highest', "
                           f"'high' or 'medium'")
    _MatmulFlags._values["allow_tf32"] = precision != "highest"
    _precision[0] = precision


def get_float32_matmul_precision() -> str:
    return _precision[0]


class _PlanCache:
    size = 0
    max_size = 0

    def clear(self):
        pass


cufft_plan_cache = _PlanCache()

_sdp = {"flash": True, "mem_efficient": True, "math": True, "cudnn": True}


def _check_bool(function, value):
    if not isinstance(value, bool):
        raise TypeError(f"corenn.backends.cuda.{function}(): argument 'enabled' must be a bool, got "
                        f"{type(value).__name__}")


def enable_flash_sdp(enabled: bool) -> None:
    _check_bool("enable_flash_sdp", enabled)
    _sdp["flash"] = enabled


def flash_sdp_enabled() -> bool:
    return _sdp["flash"]


def enable_mem_efficient_sdp(enabled: bool) -> None:
    _check_bool("enable_mem_efficient_sdp", enabled)
    _sdp["mem_efficient"] = enabled


def mem_efficient_sdp_enabled() -> bool:
    return _sdp["mem_efficient"]


def enable_math_sdp(enabled: bool) -> None:
    _check_bool("enable_math_sdp", enabled)
    _sdp["math"] = enabled


def math_sdp_enabled() -> bool:
    return _sdp["math"]


def enable_cudnn_sdp(enabled: bool) -> None:
    _check_bool("enable_cudnn_sdp", enabled)
    _sdp["cudnn"] = enabled


def cudnn_sdp_enabled() -> bool:
    return _sdp["cudnn"]


@contextlib.contextmanager
def sdp_kernel(enable_flash=True, enable_math=True, enable_mem_efficient=True, enable_cudnn=True):
    """Context manager choosing the SDPA kernels a cuda plugin may use (the core's one kernel is "math")."""
    previous = dict(_sdp)
    _sdp.update(flash=enable_flash, math=enable_math, mem_efficient=enable_mem_efficient, cudnn=enable_cudnn)
    try:
        yield
    finally:
        _sdp.update(previous)


_linalg = ["default"]
_blas = ["cublas"]


def preferred_linalg_library(backend=None) -> str:
    """The linalg library a cuda plugin should prefer: "default", "cusolver" or "magma"."""
    if backend is not None:
        if backend not in ("default", "cusolver", "magma"):
            raise RuntimeError(f"preferred_linalg_library(): unknown backend {backend!r}")
        _linalg[0] = backend
    return _linalg[0]


def preferred_blas_library(backend=None) -> str:
    """The BLAS library a cuda plugin should prefer: "cublas" or "cublaslt"."""
    if backend is not None:
        if backend not in ("cublas", "cublaslt"):
            raise RuntimeError(f"preferred_blas_library(): unknown backend {backend!r}")
        _blas[0] = backend
    return _blas[0]


del types, _flags
