"""Compiled loops behind corenn_numba.pooling.

Imported on first use (through ``LazyModule``), so ``import corenn`` does not import numba.
All work on 2-d planes (1-d pooling arrives with a height of 1) of C-contiguous
(N, C, H, W) arrays, and follow PyTorch's CPU kernels window for window: the same
window bounds at padded and ceil-mode borders, the same divisors, the first maximum
winning ties and a NaN winning over numbers.

Max pooling has a fast path for the windows of the usual CNN pools (2x2 or 3x3, stride 2)
that lie inside the input, laid out so that LLVM vectorises it (see the comment above
``_virtual_windows_2x2``); border windows and every other geometry take one general loop
that checks each element against the plane's bounds.

Serial loops, like the rest of this plugin's memory-bound kernels: pooling reads each
input element once or a few times and runs at memory speed on one core, while a
parallel region on the shared 2-core machines stalls whenever another process holds
the second core.
"""
from __future__ import annotations

import numba
import numpy as np

_jit = numba.njit(cache=True)


@_jit
def _inside(out_size, size, k, stride, pad, dilation):
    """Outputs ``[lo, hi)`` along one dim whose windows lie wholly inside the input (no padding, no overhang)."""
    lo = min(-(-pad // stride), out_size)
    hi = (size - 1 - dilation * (k - 1) + pad) // stride + 1
    return lo, min(max(hi, lo), out_size)


@_jit
def _max_pool_general(plane, out, indices, y_lo, y_hi, q_lo, q_hi, kh, kw, sh, sw, ph, pw, dh, dw):
    """Every output of one plane outside ``[y_lo, y_hi) x [q_lo, q_hi)``, any geometry: elements bounds-checked."""
    height, width = plane.shape
    out_h, out_w = out.shape
    for y in range(out_h):
        h0 = y * sh - ph
        row_in_block = y_lo <= y < y_hi
        for q in range(out_w):
            if row_in_block and q_lo <= q < q_hi:
                continue
            w0 = q * sw - pw
            best = plane[0, 0]  # a placeholder of the right type: the first element in the window replaces it
            best_index = -1
            for i in range(kh):
                ih = h0 + i * dh
                if ih < 0 or ih >= height:
                    continue
                for j in range(kw):
                    iw = w0 + j * dw
                    if iw < 0 or iw >= width:
                        continue
                    value = plane[ih, iw]
                    # PyTorch's rule: strictly greater wins (first maximum on ties), NaN always wins.
                    if best_index < 0 or value > best or value != value:
                        best = value
                        best_index = ih * width + iw
            # A dilated window can miss the input entirely: -inf and index -1, as the core gives.
            out[y, q] = best if best_index >= 0 else -np.inf
            indices[y, q] = best_index


# The fast path: a 2x2 or 3x3 window with stride 2 and dilation 1, for the windows that lie inside
# the input. Window (y, q) of a block of window rows starts 2*(y*width + q) elements after the
# block's first window, so the block is one loop over "virtual" windows j starting at 2*j: the real
# ones are j = y*width + q with q < cols; the rest straddle two rows, and are computed and dropped
# when the real ones are copied to the output rows. That doubles the arithmetic, but the loop is
# long: LLVM's vectorised loop here only runs past 16 iterations, and an output row of the demo CNN
# has 7 or 14 windows (measured ~0.5 ns a window in long loops against ~3.5 ns row by row). The
# rows are zero-based views (``top[2*j]``, not ``x[start + 2*j]``): indexing with a runtime offset
# makes numba check every index for negative wraparound, which stops the vectorisation (see
# _conv_jit). Each window's elements are compared in row-major order with the general loop's rule,
# so ties, NaN and -inf windows come out the same.

_BLOCK = 1024  # virtual windows per block: the maxima and positions of a block stay in L1


@_jit
def _virtual_windows_2x2(top, bottom, best_out, at_out, width):
    """Maximum and position (from ``top[0]``) of the 2x2 window starting at ``2*j``, for every j."""
    for j in range(best_out.shape[0]):
        w = 2 * j
        best = top[w]
        at = w
        value = top[w + 1]
        if (value > best) | (value != value):
            best, at = value, w + 1
        value = bottom[w]
        if (value > best) | (value != value):
            best, at = value, w + width
        value = bottom[w + 1]
        if (value > best) | (value != value):
            best, at = value, w + width + 1
        best_out[j] = best
        at_out[j] = at


@_jit
def _virtual_windows_3x3(top, top_1, middle, middle_1, bottom, bottom_1, best_out, at_out, width):
    """Maximum and position (from ``top[0]``) of the 3x3 window starting at ``2*j``, for every j.

    ``*_1`` are the same rows one element on. A window's third column is read as ``row_1[2*j + 1]``
    after ``row_1[2*j]``, which repeats the second column: re-comparing an element is a no-op (it
    is not greater than itself, and a NaN there already won at the same position), but with every
    strided load in a pair LLVM vectorises them with shuffles, where a lone ``row[2*j + 2]`` became
    a gather: 1.6 against 2.4 ns a window.
    """
    for j in range(best_out.shape[0]):
        w = 2 * j
        best = top[w]
        at = w
        value = top[w + 1]
        if (value > best) | (value != value):
            best, at = value, w + 1
        value = top_1[w]
        if (value > best) | (value != value):
            best, at = value, w + 1
        value = top_1[w + 1]
        if (value > best) | (value != value):
            best, at = value, w + 2
        value = middle[w]
        if (value > best) | (value != value):
            best, at = value, w + width
        value = middle[w + 1]
        if (value > best) | (value != value):
            best, at = value, w + width + 1
        value = middle_1[w]
        if (value > best) | (value != value):
            best, at = value, w + width + 1
        value = middle_1[w + 1]
        if (value > best) | (value != value):
            best, at = value, w + width + 2
        value = bottom[w]
        if (value > best) | (value != value):
            best, at = value, w + 2 * width
        value = bottom[w + 1]
        if (value > best) | (value != value):
            best, at = value, w + 2 * width + 1
        value = bottom_1[w]
        if (value > best) | (value != value):
            best, at = value, w + 2 * width + 1
        value = bottom_1[w + 1]
        if (value > best) | (value != value):
            best, at = value, w + 2 * width + 2
        best_out[j] = best
        at_out[j] = at


@_jit
def _max_pool_inside(rows, out, indices, y_lo, y_hi, q_lo, q_hi, k, ph, pw, plane_size, best, at):
    """Outputs ``[y_lo, y_hi) x [q_lo, q_hi)`` of a stack of planes, windows k x k, stride 2, all inside.

    ``rows`` (planes*H, W) and ``out``/``indices`` (planes*OH, OW), C-contiguous; indices come out
    relative to each output row's plane of ``plane_size`` elements. ``best``/``at`` are scratch of
    at least ``max(_BLOCK, q_hi - q_lo)`` elements.
    """
    width, out_w = rows.shape[1], out.shape[1]
    out_h = out.shape[0] // (rows.size // plane_size)
    flat, out_flat, index_flat = rows.reshape(-1), out.reshape(-1), indices.reshape(-1)
    cols = q_hi - q_lo
    block_rows = max(1, (best.shape[0] - cols) // width + 1)
    for block_lo in range(y_lo, y_hi, block_rows):
        block_hi = min(block_lo + block_rows, y_hi)
        start = (2 * block_lo - ph) * width + 2 * q_lo - pw
        count = (block_hi - block_lo - 1) * width + cols
        if k == 2:
            _virtual_windows_2x2(flat[start:], flat[start + width:], best[:count], at[:count], width)
        else:
            _virtual_windows_3x3(flat[start:], flat[start + 1:], flat[start + width:], flat[start + width + 1:],
                                 flat[start + 2 * width:], flat[start + 2 * width + 1:], best[:count], at[:count],
                                 width)
        for y in range(block_lo, block_hi):
            shift = start - (y // out_h) * plane_size
            # Unsigned offsets: numba then drops the negative-index wraparound on every element of
            # these short row copies (2x faster).
            source = np.uint64((y - block_lo) * width)
            target = np.uint64(y * out_w + q_lo)
            for t in range(np.uint64(cols)):
                out_flat[target + t] = best[source + t]
                index_flat[target + t] = at[source + t] + shift


@_jit
def max_pool(x, out, indices, kh, kw, sh, sw, ph, pw, dh, dw):
    """``out``/``indices`` (N, C, OH, OW): window maxima of ``x`` and their flat positions in the plane."""
    n, channels, height, width = x.shape
    out_h, out_w = out.shape[2], out.shape[3]
    y_lo, y_hi = _inside(out_h, height, kh, sh, ph, dh)
    q_lo, q_hi = _inside(out_w, width, kw, sw, pw, dw)
    fast = (kh == kw and (kh == 2 or kh == 3) and sh == 2 and sw == 2 and dh == 1 and dw == 1
            and y_lo < y_hi and q_lo < q_hi and width < 2 ** 28)  # positions in a block fit the int32 scratch
    if not fast:
        y_hi = y_lo  # no block for the fast path: the general loop takes every window
    best = np.empty(max(_BLOCK, q_hi - q_lo), dtype=x.dtype)
    at = np.empty(best.shape[0], dtype=np.int32)  # as wide as float32 lanes: 0.45 against 0.63 ns a window
    if fast and y_lo == 0 and y_hi == out_h and q_lo == 0 and q_hi == out_w and 2 * out_h == height:
        # Every window inside and the planes' window rows evenly spaced across plane boundaries: the
        # whole batch is one stack, so small planes (7x7 outputs) still give long loops. y_lo, q_lo,
        # ph and pw are all 0 here; passing literal 0s instead would compile a second specialisation.
        _max_pool_inside(x.reshape(n * channels * height, width), out.reshape(n * channels * out_h, out_w),
                         indices.reshape(n * channels * out_h, out_w), y_lo, n * channels * out_h, q_lo, out_w, kh,
                         ph, pw, height * width, best, at)
        return
    border = y_lo > 0 or y_hi < out_h or q_lo > 0 or q_hi < out_w
    for b in range(n):
        for c in range(channels):
            plane, out_plane, index_plane = x[b, c], out[b, c], indices[b, c]
            if border:
                _max_pool_general(plane, out_plane, index_plane, y_lo, y_hi, q_lo, q_hi, kh, kw, sh, sw, ph, pw, dh,
                                  dw)
            if fast:
                _max_pool_inside(plane, out_plane, index_plane, y_lo, y_hi, q_lo, q_hi, kh, ph, pw, height * width,
                                 best, at)


@_jit
def max_pool_backward(grad, indices, grad_x):
    """``grad_x`` (N, C, H, W): ``grad`` summed at the saved argmax positions, zero elsewhere."""
    planes = grad.shape[0] * grad.shape[1]
    out_size = grad.shape[2] * grad.shape[3]
    plane_size = grad_x.shape[2] * grad_x.shape[3]
    source, where, target = grad.reshape(-1), indices.reshape(-1), grad_x.reshape(-1)
    for p in range(planes):
        # Zeroed here, a plane at a time, rather than by np.zeros: the plane is then in L1 for the
        # scatter (141 against 182 us with np.zeros at the demo CNN's first pool).
        plane = target[p * plane_size:(p + 1) * plane_size]
        for k in range(plane_size):
            plane[k] = 0
        for k in range(p * out_size, (p + 1) * out_size):
            if where[k] >= 0:  # -1: a window that missed the input has no gradient to give
                plane[where[k]] += source[k]


@_jit
def _avg_window(start, k, stride, pad, size, count_include_pad):
    """PyTorch's avg-pool window along one dim: clipped ``[lo, hi)`` and the count it divides by."""
    lo = start * stride - pad
    hi = min(lo + k, size + pad)
    span = hi - lo
    lo = max(lo, 0)
    hi = min(hi, size)
    return lo, hi, span if count_include_pad else hi - lo


@_jit
def avg_pool(x, out, kh, kw, sh, sw, ph, pw, count_include_pad, divisor_override):
    """``out`` (N, C, OH, OW): window means of ``x``; ``divisor_override`` > 0 replaces the count."""
    n, channels, height, width = x.shape
    out_h, out_w = out.shape[2], out.shape[3]
    for b in range(n):
        for c in range(channels):
            plane = x[b, c]
            for y in range(out_h):
                h_lo, h_hi, h_count = _avg_window(y, kh, sh, ph, height, count_include_pad)
                for q in range(out_w):
                    w_lo, w_hi, w_count = _avg_window(q, kw, sw, pw, width, count_include_pad)
                    total = 0.0
                    for ih in range(h_lo, h_hi):
                        for iw in range(w_lo, w_hi):
                            total += plane[ih, iw]
                    divisor = divisor_override if divisor_override > 0 else h_count * w_count
                    out[b, c, y, q] = total / divisor


@_jit
def avg_pool_backward(grad, grad_x, kh, kw, sh, sw, ph, pw, count_include_pad, divisor_override):
    """``grad_x`` (N, C, H, W), zeroed by the caller, += each output's gradient spread over its window."""
    n, channels, height, width = grad_x.shape
    out_h, out_w = grad.shape[2], grad.shape[3]
    for b in range(n):
        for c in range(channels):
            plane = grad_x[b, c]
            for y in range(out_h):
                h_lo, h_hi, h_count = _avg_window(y, kh, sh, ph, height, count_include_pad)
                for q in range(out_w):
                    w_lo, w_hi, w_count = _avg_window(q, kw, sw, pw, width, count_include_pad)
                    divisor = divisor_override if divisor_override > 0 else h_count * w_count
                    share = grad[b, c, y, q] / divisor
                    for ih in range(h_lo, h_hi):
                        for iw in range(w_lo, w_hi):
                            plane[ih, iw] += share


@_jit
def _adaptive_window(i, size, out):
    """Window ``[floor(i*size/out), ceil((i+1)*size/out))``, as PyTorch and the core compute it."""
    return (i * size) // out, -((-(i + 1) * size) // out)


@_jit
def adaptive_avg_pool(x, out):
    """``out`` (N, C, OH, OW): means of ``x`` over the adaptive windows."""
    n, channels, height, width = x.shape
    out_h, out_w = out.shape[2], out.shape[3]
    for b in range(n):
        for c in range(channels):
            plane = x[b, c]
            for y in range(out_h):
                h_lo, h_hi = _adaptive_window(y, height, out_h)
                for q in range(out_w):
                    w_lo, w_hi = _adaptive_window(q, width, out_w)
                    total = 0.0
                    for ih in range(h_lo, h_hi):
                        for iw in range(w_lo, w_hi):
                            total += plane[ih, iw]
                    out[b, c, y, q] = total / ((h_hi - h_lo) * (w_hi - w_lo))


@_jit
def adaptive_avg_pool_backward(grad, grad_x):
    """``grad_x`` (N, C, H, W), zeroed by the caller, += each output's gradient spread over its window."""
    n, channels, height, width = grad_x.shape
    out_h, out_w = grad.shape[2], grad.shape[3]
    for b in range(n):
        for c in range(channels):
            plane = grad_x[b, c]
            for y in range(out_h):
                h_lo, h_hi = _adaptive_window(y, height, out_h)
                for q in range(out_w):
                    w_lo, w_hi = _adaptive_window(q, width, out_w)
                    share = grad[b, c, y, q] / ((h_hi - h_lo) * (w_hi - w_lo))
                    for ih in range(h_lo, h_hi):
                        for iw in range(w_lo, w_hi):
                            plane[ih, iw] += share
