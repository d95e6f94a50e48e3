"""The compiled int8 kernels (imported by ``kernels`` only when numba imports; see its docstring)."""
from __future__ import annotations

import numba
import numpy as np

_options = dict(nogil=True, cache=True, fastmath=False)


@numba.njit(inline="always", **_options)
def _dot4(xq, wq, m, n, k_depth):
    # Four rows of activations against one weight row: each weight byte loaded once for four sums.
    a0 = np.int32(0)
    a1 = np.int32(0)
    a2 = np.int32(0)
    a3 = np.int32(0)
    for k in range(k_depth):
        w = np.int32(wq[n, k])
        a0 += np.int32(xq[m, k]) * w
        a1 += np.int32(xq[m + 1, k]) * w
        a2 += np.int32(xq[m + 2, k]) * w
        a3 += np.int32(xq[m + 3, k]) * w
    return a0, a1, a2, a3


@numba.njit(inline="always", **_options)
def _dot1(xq, wq, m, n, k_depth):
    acc = np.int32(0)
    for k in range(k_depth):
        acc += np.int32(xq[m, k]) * np.int32(wq[n, k])
    return acc


@numba.njit(parallel=True, **_options)
def gemm_u8s8_dequant(xq, wq, weight_sums, x_zero_point, scales, bias, out):
    m_rows, k_depth = xq.shape
    n_features = wq.shape[0]
    for n in numba.prange(n_features):
        correction = x_zero_point * weight_sums[n]
        m = 0
        while m + 4 <= m_rows:
            a0, a1, a2, a3 = _dot4(xq, wq, m, n, k_depth)
            out[m, n] = np.float32(a0 - correction) * scales[n] + bias[n]
            out[m + 1, n] = np.float32(a1 - correction) * scales[n] + bias[n]
            out[m + 2, n] = np.float32(a2 - correction) * scales[n] + bias[n]
            out[m + 3, n] = np.float32(a3 - correction) * scales[n] + bias[n]
            m += 4
        while m < m_rows:
            out[m, n] = np.float32(_dot1(xq, wq, m, n, k_depth) - correction) * scales[n] + bias[n]
            m += 1


@numba.njit(parallel=True, **_options)
def gemm_u8s8_requant(xq, wq, weight_sums, x_zero_point, scales, bias, inverse_out_scale, out_zero_point, lower,
                      out):
    m_rows, k_depth = xq.shape
    n_features = wq.shape[0]
    for n in numba.prange(n_features):
        correction = x_zero_point * weight_sums[n]
        for m in range(m_rows):
            acc = np.int32(0)
            for k in range(k_depth):
                acc += np.int32(xq[m, k]) * np.int32(wq[n, k])
            real = np.float32(acc - correction) * scales[n] + bias[n]
            q = np.rint(real * inverse_out_scale) + out_zero_point
            out[m, n] = np.uint8(min(max(q, lower), 255))


@numba.njit(parallel=True, **_options)
def quantize_u8(x, inverse_scale, zero_point, quant_max, out):
    for i in numba.prange(x.shape[0]):
        q = np.rint(x[i] * inverse_scale) + zero_point
        out[i] = np.uint8(min(max(q, 0), quant_max))
