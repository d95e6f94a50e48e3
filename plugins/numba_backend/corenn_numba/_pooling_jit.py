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

Average pooling, fixed and adaptive, is separable, and runs as row sums, then window sums
along those rows (backward: the same transposed), each a loop LLVM vectorises; 2- and
3-wide windows with stride 2 (border ones included) take the same "virtual windows" loop
as max pooling, other windows a sum each, global pooling one sum per plane (see the
comment above ``_MEAN_BLOCK``).

Serial loops, like the rest of this plugin's memory-bound kernels: pooling reads each
input element once or a few times and runs at memory speed on one core, while a
parallel region on the shared 2-core machines stalls whenever another process holds
the second core.
"""
from __future__ import annotations

import numba
import numpy as np

from corenn.kernels import pool_output_size
from corenn_numba._checks import INT64, array, entry, fail, floats, integers

_jit = numba.njit(cache=True)


# ---------------------------------------------------------------------------------------------------------
# Argument checks (see corenn_numba._checks): the planes, the output size the geometry gives (with or
# without ceil_mode) and, for average pooling, PyTorch's limit on the padding (no window is all padding)
# ---------------------------------------------------------------------------------------------------------

def _check_planes(function, planes, pooled, backward):
    """The input-sized planes (N, C, H, W), H, W >= 1, and the pooled ones (N, C, OH, OW) of their dtype;
    forward writes the pooled ones (``out``), backward the planes (``grad_x``)."""
    planes_name, pooled_name = ("grad_x", "grad") if backward else ("x", "out")
    dtype = floats(function, planes_name, planes, ndim=4, writeable=backward)
    if planes.shape[2] < 1 or planes.shape[3] < 1:
        fail(function, f"argument '{planes_name}' must not have empty planes, got shape {planes.shape}")
    array(function, pooled_name, pooled, dtype, ndim=4, writeable=not backward)
    if pooled.shape[:2] != planes.shape[:2]:
        fail(function, f"argument '{pooled_name}' of shape {pooled.shape} does not match the planes of "
                       f"'{planes_name}', {planes.shape}")


def _check_window(function, size, out_size, k, stride, pad, dilation, axis):
    """``out_size`` is what the window gives along ``axis`` (floor or ceil mode)."""
    sizes = {pool_output_size(size, k, stride, pad, dilation, ceil) for ceil in (False, True)}
    if out_size not in sizes or out_size < 1:
        fail(function, f"an output {axis} of {out_size} does not match a window of {k} (stride {stride}, padding "
                       f"{pad}, dilation {dilation}) over {size}: expected one of {sorted(sizes)}")


def _check_max_pool(x, out, indices, kh, kw, sh, sw, ph, pw, dh, dw):
    _check_planes("max_pool", x, out, backward=False)
    array("max_pool", "indices", indices, INT64, out.shape, writeable=True)
    integers("max_pool", "kh kw sh sw dh dw", (kh, kw, sh, sw, dh, dw), 1)
    integers("max_pool", "ph pw", (ph, pw), 0)
    _check_window("max_pool", x.shape[2], out.shape[2], kh, sh, ph, dh, "height")
    _check_window("max_pool", x.shape[3], out.shape[3], kw, sw, pw, dw, "width")


def _check_max_pool_backward(grad, indices, grad_x):
    _check_planes("max_pool_backward", grad_x, grad, backward=True)
    array("max_pool_backward", "indices", indices, INT64, grad.shape)


def _check_avg_geometry(function, x, out, kh, kw, sh, sw, ph, pw, count_include_pad, divisor_override):
    integers(function, "kh kw sh sw", (kh, kw, sh, sw), 1)
    integers(function, "ph pw", (ph, pw), 0)
    if 2 * ph > kh or 2 * pw > kw:
        fail(function, f"padding ({ph}, {pw}) must be at most half the kernel ({kh}, {kw})")
    _check_window(function, x.shape[2], out.shape[2], kh, sh, ph, 1, "height")
    _check_window(function, x.shape[3], out.shape[3], kw, sw, pw, 1, "width")
    if type(count_include_pad) is not bool:
        raise TypeError(f"{function}(): argument 'count_include_pad' must be a bool")
    if not isinstance(divisor_override, float) or not divisor_override >= 0:
        raise TypeError(f"{function}(): argument 'divisor_override' must be a float >= 0 (0: none), got "
                        f"{divisor_override!r}")


def _check_avg_pool(x, out, kh, kw, sh, sw, ph, pw, count_include_pad, divisor_override):
    _check_planes("avg_pool", x, out, backward=False)
    _check_avg_geometry("avg_pool", x, out, kh, kw, sh, sw, ph, pw, count_include_pad, divisor_override)


def _check_avg_pool_backward(grad, grad_x, kh, kw, sh, sw, ph, pw, count_include_pad, divisor_override):
    _check_planes("avg_pool_backward", grad_x, grad, backward=True)
    _check_avg_geometry("avg_pool_backward", grad_x, grad, kh, kw, sh, sw, ph, pw, count_include_pad,
                        divisor_override)


def _check_adaptive_avg_pool(x, out):
    _check_planes("adaptive_avg_pool", x, out, backward=False)
    if out.shape[2] < 1 or out.shape[3] < 1:
        fail("adaptive_avg_pool", f"argument 'out' must not be empty, got shape {out.shape}")


def _check_adaptive_avg_pool_backward(grad, grad_x):
    _check_planes("adaptive_avg_pool_backward", grad_x, grad, backward=True)
    if grad.shape[2] < 1 or grad.shape[3] < 1:
        fail("adaptive_avg_pool_backward", f"argument 'grad' must not be empty, got shape {grad.shape}")


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


@entry(_check_max_pool)
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


@entry(_check_max_pool_backward)
@_jit
def max_pool_backward(grad, indices, grad_x):
    """``grad_x`` (N, C, H, W): ``grad`` summed at the saved argmax positions, zero elsewhere.

    Returns the flat position of the first index past its plane (``grad_x`` is then partly
    written), or -1.
    """
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
            at = where[k]
            if at >= 0:  # -1: a window that missed the input has no gradient to give
                if at >= plane_size:
                    return k
                plane[at] += source[k]
    return -1


# Average pooling, fixed and adaptive, is separable: a window's sum is the sum over its columns of
# its rows' sums, and its divisor a row count times a column count (or the override). Forward first
# adds up each output row's input rows ("vertical sums": loops across the whole width, which LLVM
# vectorises), then sums the windows along those rows. Backward runs the same two steps transposed:
# it spreads each output's share (gradient over divisor) along its row, then writes every input row
# once, as the sum of the spread rows whose windows hold it: a gather, with no zeroing of grad_x
# and no read-modify-write of it.
#
# The vertical sums of a block of planes lie in one scratch buffer with a row pitch that leaves
# zeros before and after each row's data, as many as the padding. For 2- or 3-wide windows with
# stride 2 (the usual CNN pools) every window of the block, border ones included, is then the
# virtual window starting at 2*j (as in max pooling above): one long loop over the block, the
# padding adding zeros, the slots between one row's last window and the next row's first computed
# and dropped. Other widths and strides, and adaptive windows, take a sum per window over the same
# rows (running sums of each window width across the whole block, vectorised, measured 40% slower
# on AdaptiveAvgPool2d(7)). Global pooling sums each plane in one loop.
#
# Sums are accumulated in the input's dtype (as PyTorch and the core do) and start from +0.0 like
# PyTorch's, so that a window of -0.0 gives +0.0.

_MEAN_BLOCK = 4096  # vertical sums per block: a block's sums, means, shares and spread rows stay in cache


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
def _avg_windows(out_size, k, stride, pad, size, count_include_pad):
    """Every avg-pool window along one dim: ``lo``, ``hi`` and ``count`` arrays."""
    lo, hi, count = np.empty(out_size, np.int64), np.empty(out_size, np.int64), np.empty(out_size, np.int64)
    for i in range(out_size):
        lo[i], hi[i], count[i] = _avg_window(i, k, stride, pad, size, count_include_pad)
    return lo, hi, count


@_jit
def _adaptive_window(i, size, out):
    """Window ``[floor(i*size/out), ceil((i+1)*size/out))``, as PyTorch and the core compute it."""
    return (i * size) // out, -((-(i + 1) * size) // out)


@_jit
def _adaptive_windows(out_size, size):
    """Every adaptive window along one dim: ``lo``, ``hi`` and ``count`` arrays."""
    lo, hi = np.empty(out_size, np.int64), np.empty(out_size, np.int64)
    for i in range(out_size):
        lo[i], hi[i] = _adaptive_window(i, size, out_size)
    return lo, hi, hi - lo


@_jit
def _covering(lo, hi, size):
    """For each input position: the outputs ``[first, last)`` whose windows ``[lo, hi)`` hold it.

    Both bounds grow with the output index, so the windows holding a position are a run, and the
    runs move forward with the position.
    """
    first, last = np.empty(size, np.int64), np.empty(size, np.int64)
    y_first = y_last = 0
    for i in range(size):
        while y_first < lo.shape[0] and hi[y_first] <= i:
            y_first += 1
        while y_last < lo.shape[0] and lo[y_last] <= i:
            y_last += 1
        first[i], last[i] = y_first, y_last
    return first, last


@_jit
def _is_global(h_lo, h_hi, w_lo, w_hi, height, width):
    """One window over the whole plane."""
    return (h_lo.shape[0] == 1 and w_lo.shape[0] == 1 and h_lo[0] == 0 and h_hi[0] == height and w_lo[0] == 0
            and w_hi[0] == width)


@_jit
def _layout(width, out_w, stride_2_k, pad):
    """``lead`` zeros before the first row's sums, the row ``pitch`` of the sums, and the window
    ``slots`` of a row in the means and shares buffers.

    For the stride-2 loops (``stride_2_k`` 2 or 3, the window width) window q of row i starts
    ``i*pitch + 2*q`` into the buffer: the pitch is even, leaves ``pad`` zeros between one row's data
    and the next, and holds the last window; a row has ``pitch / 2`` slots, the ones past its last
    window unused. Otherwise (0) the rows are packed.
    """
    if stride_2_k == 0:
        return 0, width, out_w
    pitch = max(width + pad, 2 * (out_w - 1) + stride_2_k - pad)
    pitch += pitch % 2
    return pad, pitch, pitch // 2


@_jit
def _block_divisors(h_count, w_count, divisor_override, block_rows, slots, like):
    """The divisor of each window slot of a block of rows (1 in the unused slots), in ``like``'s dtype."""
    out_h, out_w = h_count.shape[0], w_count.shape[0]
    divisors = np.ones(block_rows * slots, dtype=like.dtype)
    for i in range(block_rows):
        for q in range(out_w):
            if divisor_override > 0:
                divisors[i * slots + q] = divisor_override
            else:
                divisors[i * slots + q] = h_count[i % out_h] * w_count[q]
    return divisors


# Divisions in loops LLVM vectorises: numba's default error model checks each for a zero divisor,
# and that branch keeps the loop scalar. Divisors here are never zero: every window holds an input
# element, and the front end rejects a zero divisor_override.
_jit_dividing = numba.njit(cache=True, error_model="numpy")


@numba.njit(inline="always")
def _add_rows(source, first, stride, count, dest, at, width, zero):
    """``dest[at:at + width]``: ``zero`` and ``count`` rows of ``source``, ``stride`` apart from
    ``first``, added up in order.

    Flat arrays and unsigned offsets: numba then drops the negative-index wraparound on every
    element, where a view per row would cost two reference counts (3x slower). Inlined into the
    callers' row loops: as a call, it took 40% longer in avg_pool backward.
    """
    first, stride, at, width = np.uint64(first), np.uint64(stride), np.uint64(at), np.uint64(width)
    if count == 1:
        for w in range(width):
            dest[at + w] = zero + source[first + w]
    elif count == 2:
        second = first + stride
        for w in range(width):
            dest[at + w] = zero + source[first + w] + source[second + w]
    elif count >= 3:
        second = first + stride
        third = second + stride
        for w in range(width):
            dest[at + w] = zero + source[first + w] + source[second + w] + source[third + w]
        # Further rows two at a time: half the passes over dest.
        for _ in range((count - 3) // 2):
            second = third + stride
            third = second + stride
            for w in range(width):
                dest[at + w] = dest[at + w] + source[second + w] + source[third + w]
        if count % 2 == 0:
            third += stride
            for w in range(width):
                dest[at + w] += source[third + w]
    else:
        for w in range(width):
            dest[at + w] = zero


@numba.njit(cache=True, fastmath={"reassoc"}, error_model="numpy")
def _plane_means(flat, means, plane_size, divisor, zero):
    """``means[p]``: ``zero`` plus the sum of the p-th ``plane_size`` elements of ``flat``, over ``divisor``.

    Reassociation lets LLVM split each plane's one chain of dependent additions into vector lanes
    (5x faster on 7x7 planes); the sums differ from running totals by rounding only, and
    infinities and NaN come out the same.
    """
    for p in range(means.shape[0]):
        total = zero
        start = p * plane_size
        for k in range(plane_size):
            total += flat[start + k]
        means[p] = total / divisor


@numba.njit(cache=True, fastmath={"reassoc"})
def _range_sum(values, start, stop, zero):
    """``zero`` plus the sum of ``values[start:stop]``, in vector lanes as ``_plane_means`` (5x faster
    on AdaptiveAvgPool1d(2) of 30000 elements, no slower on windows of a few)."""
    total = zero
    for k in range(start, stop):
        total += values[k]
    return total


@_jit_dividing
def _window_means_2(top, divisors, means):
    """Mean of the 2-wide window starting at ``2*j``, for every j."""
    for j in range(means.shape[0]):
        w = 2 * j
        means[j] = (top[w] + top[w + 1]) / divisors[j]


@_jit_dividing
def _window_means_3(top, divisors, means):
    """Mean of the 3-wide window starting at ``2*j``, for every j."""
    for j in range(means.shape[0]):
        w = 2 * j
        means[j] = (top[w] + top[w + 1] + top[w + 2]) / divisors[j]


@_jit
def _spread_2(shares, spread):
    """``spread`` at 2*j and 2*j + 1: the share of the 2-wide window j, the only one holding them."""
    for j in range(shares.shape[0]):
        w = 2 * j
        spread[w] = shares[j]
        spread[w + 1] = shares[j]


@_jit
def _spread_3(shares, previous, spread):
    """``spread`` at 2*j: the shares of the 3-wide windows j and j - 1 (``previous[j]``); at 2*j + 1:
    window j's only."""
    for j in range(shares.shape[0]):
        w = 2 * j
        spread[w] = previous[j] + shares[j]
        spread[w + 1] = shares[j]


@_jit_dividing
def _mean_pool(x, out, h_lo, h_hi, h_count, w_lo, w_hi, w_count, divisor_override, stride_2_k, pad):
    """``out`` (N, C, OH, OW): the sums of ``x`` over windows ``[h_lo[y], h_hi[y]) x [w_lo[q], w_hi[q])``
    divided by ``h_count[y] * w_count[q]``, or by ``divisor_override`` when it is > 0.

    ``stride_2_k`` 2 or 3: the windows are that wide with stride 2 and ``pad`` columns of left padding,
    for the stride-2 loops; 0: any windows, summed one by one.
    """
    n, channels, height, width = x.shape
    out_h, out_w = out.shape[2], out.shape[3]
    planes, plane_size = n * channels, height * width
    flat, out_flat = x.reshape(-1), out.reshape(-1)
    zero = np.zeros(1, dtype=x.dtype)[0]
    if _is_global(h_lo, h_hi, w_lo, w_hi, height, width):
        divisor = divisor_override if divisor_override > 0 else h_count[0] * w_count[0]
        _plane_means(flat, out_flat, plane_size, divisor, zero)
        return
    lead, pitch, slots = _layout(width, out_w, stride_2_k, pad)
    block_planes = max(1, _MEAN_BLOCK // (out_h * pitch))
    # Zeros: the padding around the rows is never written.
    sums = np.zeros(lead + block_planes * out_h * pitch + 2, dtype=x.dtype)
    means = np.empty(block_planes * out_h * slots, dtype=x.dtype)
    divisors = _block_divisors(h_count, w_count, divisor_override, block_planes * out_h, slots, x)
    for p0 in range(0, planes, block_planes):
        rows = (min(p0 + block_planes, planes) - p0) * out_h
        for i in range(rows):
            y = i % out_h
            _add_rows(flat, (p0 + i // out_h) * plane_size + h_lo[y] * width, width, h_hi[y] - h_lo[y], sums,
                      lead + i * pitch, width, zero)
        # With no unused slots the block's means are its output rows, written in place.
        in_place = slots == out_w
        block_means = out_flat[p0 * out_h * out_w:(p0 * out_h + rows) * out_w] if in_place else means[:rows * slots]
        if stride_2_k == 2:
            _window_means_2(sums, divisors, block_means)
        elif stride_2_k == 3:
            _window_means_3(sums, divisors, block_means)
        else:
            for i in range(rows):
                row = np.uint64(i * pitch)
                for q in range(out_w):
                    total = _range_sum(sums, row + np.uint64(w_lo[q]), row + np.uint64(w_hi[q]), zero)
                    block_means[i * slots + q] = total / divisors[i * slots + q]
        if not in_place:
            for i in range(rows):
                source, target = np.uint64(i * slots), np.uint64((p0 * out_h + i) * out_w)
                for q in range(np.uint64(out_w)):
                    out_flat[target + q] = means[source + q]


@_jit_dividing
def _mean_pool_backward(grad, grad_x, h_lo, h_hi, h_count, w_lo, w_hi, w_count, divisor_override, stride_2_k,
                        pad):
    """``grad_x`` (N, C, H, W), every element written: the sum of the shares of the windows holding it,
    a share being an output's gradient over the divisor ``_mean_pool`` used (same arguments)."""
    n, channels, height, width = grad_x.shape
    out_h, out_w = grad.shape[2], grad.shape[3]
    planes, plane_size = n * channels, height * width
    grad_flat, grad_x_flat = grad.reshape(-1), grad_x.reshape(-1)
    zero = np.zeros(1, dtype=grad.dtype)[0]
    if _is_global(h_lo, h_hi, w_lo, w_hi, height, width):
        divisor = divisor_override if divisor_override > 0 else h_count[0] * w_count[0]
        for p in range(planes):
            share = zero + grad_flat[p] / divisor
            start = np.uint64(p * plane_size)
            for k in range(np.uint64(plane_size)):
                grad_x_flat[start + k] = share
        return
    lead, pitch, slots = _layout(width, out_w, stride_2_k, pad)
    block_planes = max(1, _MEAN_BLOCK // (out_h * pitch))
    # A zero before the first share (the window "before" the first) and in each row's unused slots.
    shares = np.zeros(1 + block_planes * out_h * slots, dtype=grad.dtype)
    spread = np.zeros(lead + block_planes * out_h * pitch + 2, dtype=grad.dtype)
    divisors = _block_divisors(h_count, w_count, divisor_override, block_planes * out_h, slots, grad)
    first, last = _covering(h_lo, h_hi, height)
    for p0 in range(0, planes, block_planes):
        p1 = min(p0 + block_planes, planes)
        rows = (p1 - p0) * out_h
        # Row by row into the slots, or the whole block in one loop when no slot is unused.
        copies, copy_width = (rows, out_w) if slots > out_w else (1, rows * out_w)
        for i in range(copies):
            source, target = np.uint64(p0 * out_h * out_w + i * out_w), np.uint64(i * slots)
            for q in range(np.uint64(copy_width)):
                shares[1 + target + q] = grad_flat[source + q] / divisors[target + q]
        if stride_2_k == 2:
            _spread_2(shares[1:1 + rows * slots], spread)
        elif stride_2_k == 3:
            _spread_3(shares[1:1 + rows * slots], shares, spread)
        else:
            for i in range(rows):
                row = np.uint64(i * pitch)
                for w in range(np.uint64(width)):
                    spread[row + w] = zero
                for q in range(out_w):
                    share = shares[1 + i * slots + q]
                    for w in range(np.uint64(w_lo[q]), np.uint64(w_hi[q])):
                        spread[row + w] += share
        for p in range(p0, p1):
            for i in range(height):
                _add_rows(spread, lead + ((p - p0) * out_h + first[i]) * pitch, pitch, last[i] - first[i],
                          grad_x_flat, p * plane_size + i * width, width, zero)


@_jit
def _avg_geometry(out, x, kh, kw, sh, sw, ph, pw, count_include_pad):
    """Window bounds and counts along both dims for (N, C, OH, OW) ``out`` over (N, C, H, W) ``x``,
    and the width of a stride-2 window that the virtual-window loops take (2 or 3; 0: none)."""
    h_lo, h_hi, h_count = _avg_windows(out.shape[2], kh, sh, ph, x.shape[2], count_include_pad)
    w_lo, w_hi, w_count = _avg_windows(out.shape[3], kw, sw, pw, x.shape[3], count_include_pad)
    stride_2_k = kw if sw == 2 and (kw == 2 or kw == 3) else 0
    return h_lo, h_hi, h_count, w_lo, w_hi, w_count, stride_2_k


@entry(_check_avg_pool)
@_jit
def avg_pool(x, out, kh, kw, sh, sw, ph, pw, count_include_pad, divisor_override):
    """``out`` (N, C, OH, OW): window means of ``x``; ``divisor_override`` > 0 replaces the count."""
    h_lo, h_hi, h_count, w_lo, w_hi, w_count, stride_2_k = _avg_geometry(out, x, kh, kw, sh, sw, ph, pw,
                                                                          count_include_pad)
    _mean_pool(x, out, h_lo, h_hi, h_count, w_lo, w_hi, w_count, divisor_override, stride_2_k, pw)


@entry(_check_avg_pool_backward)
@_jit
def avg_pool_backward(grad, grad_x, kh, kw, sh, sw, ph, pw, count_include_pad, divisor_override):
    """``grad_x`` (N, C, H, W), every element written: each output's gradient spread over its window."""
    h_lo, h_hi, h_count, w_lo, w_hi, w_count, stride_2_k = _avg_geometry(grad, grad_x, kh, kw, sh, sw, ph, pw,
                                                                          count_include_pad)
    _mean_pool_backward(grad, grad_x, h_lo, h_hi, h_count, w_lo, w_hi, w_count, divisor_override, stride_2_k, pw)


@entry(_check_adaptive_avg_pool)
@_jit
def adaptive_avg_pool(x, out):
    """``out`` (N, C, OH, OW): means of ``x`` over the adaptive windows."""
    h_lo, h_hi, h_count = _adaptive_windows(out.shape[2], x.shape[2])
    w_lo, w_hi, w_count = _adaptive_windows(out.shape[3], x.shape[3])
    _mean_pool(x, out, h_lo, h_hi, h_count, w_lo, w_hi, w_count, 0.0, 0, 0)


@entry(_check_adaptive_avg_pool_backward)
@_jit
def adaptive_avg_pool_backward(grad, grad_x):
    """``grad_x`` (N, C, H, W), every element written: each output's gradient spread over its window."""
    h_lo, h_hi, h_count = _adaptive_windows(grad.shape[2], grad_x.shape[2])
    w_lo, w_hi, w_count = _adaptive_windows(grad.shape[3], grad_x.shape[3])
    _mean_pool_backward(grad, grad_x, h_lo, h_hi, h_count, w_lo, w_hi, w_count, 0.0, 0, 0)
