"""int8 kernels: u8 x s8 matrix products with int32 accumulation, dequantized or requantized as they are stored.

One contract, three implementations, chosen once per process:

- **numba + VNNI** (numba imports and the host has AVX-512 VNNI): weights packed once into
  ``vpdpbusd``'s layout (``LinearWeights``, made when a module is converted or loaded), a tile
  of 4 rows x 64 output features (1 x 128 for a single row) accumulated in registers, and
  zero-point correction, scale, bias and (for static quantization) requantization to uint8 in
  the store of each output, so no int32 matrix is ever written out;
- **numba, portable** (numba imports, any CPU): the same stores after a plain loop over the
  ``(N, K)`` weights that LLVM vectorises for the host;
- **numpy** (always available): the same arithmetic through float32 BLAS on chunks of at
  most ``EXACT_CHUNK`` input features. Activations are at most 255 and weights at most 128 in
  magnitude, so a chunk's partial sums stay below 2**24 and float32 holds them exactly:
  the result is the int32 accumulation, bit for bit.

All three give the same numbers, bit for bit (the tests check it). Whether a compiled product
runs on one thread or in parallel over output features is measured, per shape, while the program
runs (``ThreadChooser``): the second thread pays only when a core is free for it, which on a small
machine shared with other work it often is not. Products under ``PARALLEL_MIN_MACS``
multiply-adds always run on one thread.

These are functions of the plugin, not overrides of core kernels: corenn has no quantized
op for a kernel registration to name (``corenn_register_kernels`` overrides existing core
ops). ``CORENN_QUANTIZE_KERNELS=numpy`` forces the numpy kernels, ``=portable`` the portable
numba loop; ``backend()`` and ``uses_vnni()`` say which run.
"""
from __future__ import annotations

import os
import time

import numpy as np

from .qtensor import quantize_array

__all__ = ["backend", "uses_vnni", "EXACT_CHUNK", "PARALLEL_MIN_MACS", "ThreadChooser", "threads", "LinearWeights",
           "linear_dequantized",
           "linear_requantized", "linear_dynamic", "quantize_rows_dynamic"]

EXACT_CHUNK = 512  # 512 * 255 * 128 < 2**24: float32 sums of that many u8 x s8 products are exact
# Below this many multiply-accumulates a product runs on one thread: starting the pool costs more.
PARALLEL_MIN_MACS = 1 << 20
_numba_kernels = None
_use_vnni = None


def backend() -> str:
    """``"numba"`` or ``"numpy"``: which int8 GEMM runs in this process."""
    return "numba" if _compiled() is not None else "numpy"


def uses_vnni() -> bool:
    """Whether the numba kernels use AVX-512 VNNI (``vpdpbusd``) on this host."""
    global _use_vnni
    kernels = _compiled()
    if kernels is None:
        return False
    if _use_vnni is None:
        _use_vnni = kernels.VNNI and os.environ.get("CORENN_QUANTIZE_KERNELS", "").lower() != "portable"
    return _use_vnni


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


class ThreadChooser:
    """Serial or parallel, per product shape, by timing both while the program runs.

    The first ``trials`` calls of a shape alternate between the serial and the parallel kernel;
    then the one with the smaller median time runs, until ``recheck`` calls later the two are
    timed again (the load of the machine changes). Both give the same numbers, so the choice
    changes only the time.
    """

    def __init__(self, trials: int = 5, recheck: int = 1000):
        self.trials, self.recheck = trials, recheck
        self.shapes: dict = {}

    def parallel(self, key) -> bool:
        """Whether the next call of shape ``key`` runs in parallel."""
        state = self.shapes.setdefault(key, {"serial": [], "parallel": [], "choice": None, "calls": 0})
        if state["choice"] is None:
            return len(state["parallel"]) < len(state["serial"])
        state["calls"] += 1
        if state["calls"] >= self.recheck:
            self.shapes[key] = {"serial": [], "parallel": [], "choice": None, "calls": 0}
        return state["choice"]

    def record(self, key, parallel: bool, seconds: float) -> None:
        state = self.shapes[key]
        if state["choice"] is not None:
            return
        state["parallel" if parallel else "serial"].append(seconds)
        if min(len(state["serial"]), len(state["parallel"])) >= self.trials:
            state["choice"] = float(np.median(state["parallel"])) < float(np.median(state["serial"]))

    def choices(self) -> dict:
        """``{shape: True (parallel) / False (serial) / None (still timing)}``."""
        return {key: state["choice"] for key, state in self.shapes.items()}


threads = ThreadChooser()


def _timed(name: str, m_rows: int, n_features: int, k_depth: int, call):
    """``call(kernel)`` with the serial or parallel kernel ``name`` that ``threads`` picks for this shape."""
    kernels = _compiled()
    if m_rows * n_features * k_depth < PARALLEL_MIN_MACS:
        return call(getattr(kernels, name))
    # the row count in buckets (exact up to a tile, then powers of two): LSTM steps vary it call by call
    rows = m_rows if m_rows <= kernels.ROWS else 1 << (m_rows - 1).bit_length()
    key = (name, rows, n_features, k_depth)
    parallel = threads.parallel(key)
    start = time.perf_counter()
    result = call(getattr(kernels, name + "_parallel" if parallel else name))
    threads.record(key, parallel, time.perf_counter() - start)
    return result


class LinearWeights:
    """int8 ``(N, K)`` weights with what the kernels need: row sums and the backend's layout of them.

    ``LinearWeights(wq)`` prepares the layout of the kernels this process runs (the packed
    blocks of the numba kernels, or the numpy kernels' float32 transposed copy); another
    backend's layout is made on its first use. The weights are read, never written: ``wq`` is kept as given.
    """

    def __init__(self, wq: np.ndarray):
        if not isinstance(wq, np.ndarray) or wq.dtype != np.int8 or wq.ndim != 2:
            raise TypeError(f"LinearWeights: expected a 2-d int8 array, got "
                            f"{getattr(wq, 'dtype', type(wq).__name__)} {getattr(wq, 'shape', '')}")
        self.wq = np.ascontiguousarray(wq)
        self.sums = self.wq.sum(axis=1, dtype=np.int64).astype(np.int32)
        self._packed = None
        self._transposed_float = None
        if backend() == "numba":
            self.packed()
        else:
            self.transposed_float()

    @property
    def shape(self):
        return self.wq.shape

    def packed(self) -> np.ndarray:
        """The weights as ``(ceil(N/16), ceil(K/4), 64)`` int8 blocks (``numba_kernels.pack_vnni``)."""
        if self._packed is None:
            self._packed = _compiled().pack_vnni(self.wq)
        return self._packed

    def transposed_float(self) -> np.ndarray:
        """float32 ``wq.T``, the numpy kernels' operand."""
        if self._transposed_float is None:
            self._transposed_float = self.wq.T.astype(np.float32)
        return self._transposed_float


def _check(xq: np.ndarray, weights: LinearWeights, scales, bias) -> None:
    # Compiled loops check shapes again; dtypes are checked here, once, before anything runs.
    if not isinstance(weights, LinearWeights):
        raise TypeError(f"int8 linear: expected LinearWeights, got {type(weights).__name__}")
    n_features, k_depth = weights.shape
    if not isinstance(xq, np.ndarray) or xq.dtype != np.uint8 or xq.ndim != 2 or xq.shape[1] != k_depth:
        raise RuntimeError(f"int8 linear: expected uint8 (M, K) activations and int8 (N, K) weights, got "
                           f"{getattr(xq, 'dtype', type(xq).__name__)} {getattr(xq, 'shape', '')} and int8 "
                           f"{weights.shape}")
    _check_per_feature("int8 linear", "float32 scales", scales, n_features)
    _check_per_feature("int8 linear", "a float32 bias", bias, n_features)


def _check_per_feature(function: str, what: str, values, n_features: int) -> None:
    """RuntimeError unless ``values`` (None passes: no bias) is float32 of shape (n_features,); ``what`` names it."""
    if values is not None and (values.dtype != np.float32 or values.shape != (n_features,)):
        raise RuntimeError(f"{function}: expected {what} of shape ({n_features},), got {values.dtype} {values.shape}")


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


def _compiled_kind(k_depth: int):
    """``"vnni"`` or ``"portable"``: the compiled kernels for products over ``k_depth`` inputs; None for numpy's."""
    kernels = _compiled()
    if kernels is None or k_depth > kernels.MAX_DEPTH:  # int32 sums could overflow: numpy's exact int64 path
        return None
    return "vnni" if uses_vnni() else "portable"


def _padded_activations(xq: np.ndarray) -> np.ndarray:
    """``xq`` with rows rounded up to whole tiles and columns to groups of four, zero padded (a copy if needed)."""
    kernels = _compiled()
    m_rows, k_depth = xq.shape
    rows = m_rows if m_rows < kernels.ROWS else -(-m_rows // kernels.ROWS) * kernels.ROWS
    columns = -(-k_depth // kernels.GROUP) * kernels.GROUP
    if (rows, columns) == xq.shape and xq.flags.c_contiguous:
        return xq
    padded = np.zeros((rows, columns), np.uint8)
    padded[:m_rows, :k_depth] = xq
    return padded


def _run(kind: str, xq, x_zero_point, weights, epilogue, out, requantize: bool):
    """The compiled product of this process, on one thread or in parallel (see ``ThreadChooser``)."""
    n_features, k_depth = weights.shape
    m_rows = xq.shape[0]
    padded = _padded_activations(xq)
    _timed(f"{kind}_{'requantized' if requantize else 'dequantized'}", m_rows, n_features, k_depth,
           lambda kernel: kernel(padded, m_rows, weights.packed(), n_features, weights.sums, np.int32(x_zero_point),
                                 epilogue, out))
    return out


def _zero_bias(bias, n_features: int) -> np.ndarray:
    return np.zeros(n_features, np.float32) if bias is None else bias


def linear_dequantized(xq, x_zero_point: int, weights: LinearWeights, scales, bias):
    """float32 ``(M, N)``: ``(xq @ wq.T - x_zero_point * weight_sums) * scales + bias``.

    ``scales`` is ``x_scale * weight_scale`` per output feature (float32, (N,)); ``bias``
    float32 (N,) or None.
    """
    _check(xq, weights, scales, bias)
    n_features, k_depth = weights.shape
    kind = _compiled_kind(k_depth)
    if kind is not None:
        out = np.empty((xq.shape[0], n_features), dtype=np.float32)
        return _run(kind, xq, x_zero_point, weights, (scales, _zero_bias(bias, n_features)), out, requantize=False)
    acc = _accumulate_numpy(xq, weights.transposed_float()) - np.int64(x_zero_point) * weights.sums.astype(np.int64)
    out = acc.astype(np.float32) * scales
    if bias is not None:
        out += bias
    return out


def linear_requantized(xq, x_zero_point: int, weights: LinearWeights, scales, bias, out_scale: float,
                       out_zero_point: int, relu: bool = False):
    """uint8 ``(M, N)``: the dequantized product requantized to ``out_scale`` / ``out_zero_point`` in its store.

    With ``relu`` the lower clamp is the zero point, which fuses ReLU for free.
    """
    _check(xq, weights, scales, bias)
    n_features, k_depth = weights.shape
    lower = out_zero_point if relu else 0
    kind = _compiled_kind(k_depth)
    if kind is not None:
        out = np.empty((xq.shape[0], n_features), dtype=np.uint8)
        epilogue = (scales, _zero_bias(bias, n_features), np.float32(1.0 / out_scale), np.int32(out_zero_point),
                    np.int32(lower))
        return _run(kind, xq, x_zero_point, weights, epilogue, out, requantize=True)
    real = linear_dequantized(xq, x_zero_point, weights, scales, bias)
    q = np.rint(real * np.float32(1.0 / out_scale)) + np.float32(out_zero_point)
    return np.clip(q, lower, 255).astype(np.uint8)


def _dynamic_qparams_numpy(x: np.ndarray, quant_max: int):
    low = min(float(x.min()), 0.0) if x.size else 0.0
    high = max(float(x.max()), 0.0) if x.size else 0.0
    scale = np.float32(max(np.float32(high - low) / np.float32(quant_max), np.finfo(np.float32).eps))
    zero_point = int(np.clip(0 - np.rint(np.float32(low) / scale), 0, quant_max))
    return scale, zero_point


def _dynamic_qparams_compiled(x: np.ndarray, quant_max: int):
    if x.size == 0:
        return _compiled().dynamic_qparams(np.float32(0), np.float32(0), np.int32(quant_max))
    return _compiled().dynamic_qparams(x.min(), x.max(), np.int32(quant_max))


def quantize_rows_dynamic(x: np.ndarray, reduce_range: bool = True):
    """Quantize float activations at run time to quint8: ``(xq, scale, zero_point)`` over the whole tensor.

    The range includes 0 and uses 7 bits with ``reduce_range`` (PyTorch's x86/fbgemm dynamic
    quantization does the same), computed like ``MinMaxObserver``.
    """
    quant_max = 127 if reduce_range else 255
    x = np.asarray(x, dtype=np.float32)
    kernels = _compiled()
    if kernels is not None and x.ndim == 2:
        x = np.ascontiguousarray(x)
        scale, zero_point = _dynamic_qparams_compiled(x, quant_max)
        xq = np.empty(x.shape, dtype=np.uint8)
        kernels.quantize_rows_padded(x, np.float32(1.0) / scale, zero_point, np.int32(quant_max), xq)
        return xq, float(scale), int(zero_point)
    scale, zero_point = _dynamic_qparams_numpy(x, quant_max)
    return quantize_array(x, scale, zero_point, 0, quant_max, np.uint8), float(scale), zero_point


def linear_dynamic(x: np.ndarray, weights: LinearWeights, weight_scales, bias, reduce_range: bool = True):
    """float32 ``(M, N)`` from float32 ``(M, K)`` rows: quantized together over their range, then the int8 product.

    What ``quantize_rows_dynamic`` then ``linear_dequantized`` compute, with the activations
    quantized straight into the kernel's padded buffer. ``weight_scales`` is float32 (N,).
    """
    if not isinstance(x, np.ndarray) or x.dtype != np.float32 or x.ndim != 2:
        raise RuntimeError(f"int8 dynamic linear: expected float32 (M, K) rows, got "
                           f"{getattr(x, 'dtype', type(x).__name__)} {getattr(x, 'shape', '')}")
    n_features, k_depth = weights.shape
    m_rows = x.shape[0]
    if x.shape[1] != k_depth:
        raise RuntimeError(f"int8 dynamic linear: expected rows of {k_depth} features, got {x.shape[1]}")
    _check_per_feature("int8 dynamic linear", "float32 weight scales", weight_scales, n_features)
    _check_per_feature("int8 dynamic linear", "a float32 bias", bias, n_features)
    kind = _compiled_kind(k_depth)
    if kind is None:
        xq, x_scale, x_zero_point = quantize_rows_dynamic(x, reduce_range)
        return linear_dequantized(xq, x_zero_point, weights, weight_scales * np.float32(x_scale), bias)
    x = np.ascontiguousarray(x)
    low, high = (x.min(), x.max()) if x.size else (np.float32(0), np.float32(0))
    # one compiled call: qparams, quantization into the padded buffer, the product (its checks included)
    quant_max, bias = np.int32(127 if reduce_range else 255), _zero_bias(bias, n_features)
    return _timed(f"{kind}_dynamic", m_rows, n_features, k_depth,
                  lambda kernel: kernel(x, low, high, quant_max, weights.packed(), n_features, weights.sums,
                                        weight_scales, bias))
