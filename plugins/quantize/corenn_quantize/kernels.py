"""int8 kernels: u8 x s8 matrix products with int32 accumulation, dequantized or requantized as they are stored.

Two implementations of one contract, chosen once per process:

- **numba** (when ``numba`` imports): a compiled loop, parallel over output features, that
  accumulates ``int32(x) * int32(w)`` and applies scale, zero-point correction, bias and (for
  static quantization) requantization to uint8 in the store of each output, so no int32
  matrix is ever written out;
- **numpy** (always available): the same arithmetic through float32 BLAS on chunks of at
  most ``EXACT_CHUNK`` input features. Activations are at most 255 and weights at most 128 in
  magnitude, so a chunk's partial sums stay below 2**24 and float32 holds them exactly:
  the result is the int32 accumulation, bit for bit.

These are functions of the plugin, not overrides of core kernels: corenn has no quantized
op for a kernel registration to name (``corenn_register_kernels`` overrides existing core
ops). ``CORENN_QUANTIZE_KERNELS=numpy`` forces the numpy kernels; ``backend()`` says which run.
"""
from __future__ import annotations

import os

import numpy as np

__all__ = ["backend", "EXACT_CHUNK", "linear_dequantized", "linear_requantized", "quantize_rows_dynamic"]

EXACT_CHUNK = 512  # 512 * 255 * 128 < 2**24: float32 sums of that many u8 x s8 products are exact
_numba_kernels = None


def backend() -> str:
    """``"numba"`` or ``"numpy"``: which int8 GEMM runs in this process."""
    return "numba" if _compiled() is not None else "numpy"


def _compiled():
    global _numba_kernels
    if _numba_kernels is None:
        if os.environ.get("CORENN_QUANTIZE_KERNELS", "").lower() == "numpy":
            _numba_kernels = False
        else:
            try:
                from . import numba_kernels
                _numba_kernels = numba_kernels
            except ImportError:
                _numba_kernels = False
    return _numba_kernels or None


def _check(xq: np.ndarray, wq: np.ndarray) -> None:
    # Compiled loops trust their inputs; check them here, once, before the first load.
    if xq.dtype != np.uint8 or wq.dtype != np.int8 or xq.ndim != 2 or wq.ndim != 2 or xq.shape[1] != wq.shape[1]:
        raise RuntimeError(f"int8 linear: expected uint8 (M, K) activations and int8 (N, K) weights, got "
                           f"{xq.dtype} {xq.shape} and {wq.dtype} {wq.shape}")


def _accumulate_numpy(xq: np.ndarray, wq_t_float: np.ndarray) -> np.ndarray:
    """``xq @ wq.T`` with exact int32 sums, through float32 BLAS on chunks of K (see the module docstring)."""
    k = xq.shape[1]
    x = xq.astype(np.float32)
    if k <= EXACT_CHUNK:
        return (x @ wq_t_float).astype(np.int64)
    total = np.zeros((xq.shape[0], wq_t_float.shape[1]), dtype=np.int64)
    for start in range(0, k, EXACT_CHUNK):
        total += (x[:, start:start + EXACT_CHUNK] @ wq_t_float[start:start + EXACT_CHUNK]).astype(np.int64)
    return total


def linear_dequantized(xq, x_zero_point: int, wq, weight_sums, scales, bias, weight_t_float=None):
    """float32 ``(M, N)``: ``(xq @ wq.T - x_zero_point * weight_sums) * scales + bias``.

    ``scales`` is ``x_scale * weight_scale`` per output feature (float32, (N,)); ``weight_sums``
    the int32 row sums of ``wq``; ``bias`` float32 (N,) or None. ``weight_t_float`` is the numpy
    kernels' float32 copy of ``wq.T`` (the module keeps one), ignored by the numba kernel.
    """
    _check(xq, wq)
    kernels = _compiled()
    if kernels is not None:
        out = np.empty((xq.shape[0], wq.shape[0]), dtype=np.float32)
        zero = np.zeros(wq.shape[0], np.float32)
        kernels.gemm_u8s8_dequant(np.ascontiguousarray(xq), wq, weight_sums, np.int32(x_zero_point), scales,
                                  zero if bias is None else bias, out)
        return out
    if weight_t_float is None:
        weight_t_float = wq.T.astype(np.float32)
    acc = _accumulate_numpy(xq, weight_t_float) - np.int64(x_zero_point) * weight_sums.astype(np.int64)
    out = acc.astype(np.float32) * scales
    if bias is not None:
        out += bias
    return out


def linear_requantized(xq, x_zero_point: int, wq, weight_sums, scales, bias, out_scale: float,
                       out_zero_point: int, relu: bool = False, weight_t_float=None):
    """uint8 ``(M, N)``: the dequantized product requantized to ``out_scale`` / ``out_zero_point`` in its store.

    With ``relu`` the lower clamp is the zero point, which fuses ReLU for free.
    """
    _check(xq, wq)
    kernels = _compiled()
    lower = out_zero_point if relu else 0
    if kernels is not None:
        out = np.empty((xq.shape[0], wq.shape[0]), dtype=np.uint8)
        zero = np.zeros(wq.shape[0], np.float32)
        kernels.gemm_u8s8_requant(np.ascontiguousarray(xq), wq, weight_sums, np.int32(x_zero_point), scales,
                                  zero if bias is None else bias, np.float32(1.0 / out_scale),
                                  np.int32(out_zero_point), np.int32(lower), out)
        return out
    real = linear_dequantized(xq, x_zero_point, wq, weight_sums, scales, bias, weight_t_float)
    q = np.rint(real * np.float32(1.0 / out_scale)) + np.float32(out_zero_point)
    return np.clip(q, lower, 255).astype(np.uint8)


def quantize_rows_dynamic(x: np.ndarray, reduce_range: bool = True):
    """Quantize float activations at run time to quint8: ``(xq, scale, zero_point)`` over the whole tensor.

    The range includes 0 and uses 7 bits with ``reduce_range`` (PyTorch's x86/fbgemm dynamic
    quantization does the same), computed like ``MinMaxObserver``.
    """
    quant_max = 127 if reduce_range else 255
    low = min(float(x.min()), 0.0) if x.size else 0.0
    high = max(float(x.max()), 0.0) if x.size else 0.0
    scale = np.float32(max(np.float32(high - low) / np.float32(quant_max), np.finfo(np.float32).eps))
    zero_point = int(np.clip(0 - np.rint(np.float32(low) / scale), 0, quant_max))
    kernels = _compiled()
    if kernels is not None and x.dtype == np.float32 and x.flags.c_contiguous:
        xq = np.empty(x.shape, dtype=np.uint8)
        kernels.quantize_u8(x.reshape(-1), np.float32(1.0 / scale), np.int32(zero_point), np.int32(quant_max),
                            xq.reshape(-1))
        return xq, float(scale), zero_point
    q = np.rint(x.astype(np.float32) * np.float32(1.0 / scale)) + np.float32(zero_point)
    return np.clip(q, 0, quant_max).astype(np.uint8), float(scale), zero_point
