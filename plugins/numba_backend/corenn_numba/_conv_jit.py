"""Compiled loops behind corenn_numba.conv: im2col and col2im over a chunk of images.

Imported on first use (through ``LazyModule``), so ``import corenn`` does not import numba.

Both work on 2-d planes (1-d convolutions arrive with a height of 1) and take the
padding as the offset of the first window, so no padded copy of the input is made:
window positions outside the input read as zero (im2col) or are dropped (col2im).
Columns hold the images of a chunk side by side: ``cols[(c, i, j), b * L + y * out_w + x]``
with ``L = out_h * out_w``, which is what one matrix product per group wants.

Also here: ``weight_grad_by_dots``, the weight gradient of convs with very few input
channels. The loops are serial; ``corenn_numba._threads.split`` runs the nogil ones on
several threads (see that module for why not numba's ``parallel=True``).
"""
from __future__ import annotations

import numba
import numpy as np

from corenn_numba._checks import array, entry, fail, floats, integer, integers, work_range

_jit = numba.njit(cache=True)


# Argument checks (see corenn_numba._checks): the loops below index the images and columns with the
# geometry they are given, so the arrays' shapes must agree with it.

def check_windows_fit(function, height, width, kh, kw, ph, pw, dh, dw):
    """A (dilated) kernel no larger than the padded image: what bounds every buffer sized by the kernel.

    The padding after may exceed the one before by 1 (``'same'`` with an even kernel).
    """
    if dh * (kh - 1) > height + 2 * ph or dw * (kw - 1) > width + 2 * pw:
        fail(function, f"a {kh}x{kw} kernel (dilation {dh}, {dw}) does not fit the {height}x{width} image padded "
                       f"by ({ph}, {pw})")


def _check_col2im(cols, n0, n1, out, kh, kw, sh, sw, ph, pw, dh, dw, out_h, out_w):
    f = "col2im"
    dtype = floats(f, "out", out, ndim=4, writeable=True)
    integers(f, "kh kw sh sw dh dw", (kh, kw, sh, sw, dh, dw), 1)
    integers(f, "ph pw out_h out_w", (ph, pw, out_h, out_w), 0)
    check_windows_fit(f, out.shape[2], out.shape[3], kh, kw, ph, pw, dh, dw)
    integer(f, "n0", n0, 0, out.shape[0])
    integer(f, "n1", n1, n0, out.shape[0])
    array(f, "cols", cols, dtype, ndim=2, writeable=True)  # scratch: the stride-1 path zeroes parts of it
    if cols.shape[0] != out.shape[1] * kh * kw or cols.shape[1] < (n1 - n0) * out_h * out_w:
        fail(f, f"argument 'cols' must have {out.shape[1] * kh * kw} rows of at least {(n1 - n0) * out_h * out_w} "
                f"columns, got shape {cols.shape}")


def _check_to_chunk(src, n0, n1, dst):
    dtype = floats("to_chunk", "src", src, ndim=3)
    integer("to_chunk", "n0", n0, 0, src.shape[0])
    integer("to_chunk", "n1", n1, n0, src.shape[0])
    array("to_chunk", "dst", dst, dtype, (src.shape[1], (n1 - n0) * src.shape[2]), writeable=True)


def check_groups(function, channels, out_channels, groups):
    """``groups`` as an int >= 1 that splits both channel counts; ValueError naming ``function`` otherwise."""
    groups = integer(function, "groups", groups, 1)
    if channels % groups or out_channels % groups:
        fail(function, f"{channels} input and {out_channels} output channels do not split into {groups} groups")
    return groups


def check_weight_grad_inputs(f, first, last, x, grad, groups, kh, kw, sh, sw, ph, pw, dh, dw, out_h, out_w):
    """What both weight-gradient paths (dots here, im2col in ``_gemm_jit``) read; returns the dtype."""
    dtype = floats(f, "x", x, ndim=4)
    integers(f, "kh kw sh sw dh dw", (kh, kw, sh, sw, dh, dw), 1)
    integers(f, "ph pw out_h out_w", (ph, pw, out_h, out_w), 0)
    check_windows_fit(f, x.shape[2], x.shape[3], kh, kw, ph, pw, dh, dw)
    array(f, "grad", grad, dtype, ndim=3)
    if grad.shape != (x.shape[0], grad.shape[1], out_h * out_w):
        fail(f, f"argument 'grad' must have shape ({x.shape[0]}, O, {out_h * out_w}), got {grad.shape}")
    check_groups(f, x.shape[1], grad.shape[1], groups)
    work_range(f, first, last, x.shape[0])
    return dtype


def _check_weight_grad_by_dots(first, last, x, grad, groups, kh, kw, sh, sw, ph, pw, dh, dw, out_h, out_w):
    check_weight_grad_inputs("weight_grad_by_dots", first, last, x, grad, groups, kh, kw, sh, sw, ph, pw, dh, dw,
                             out_h, out_w)


@_jit
def _inside(offset, stride, size, count):
    """Output positions ``[lo, hi)`` whose input index ``q * stride + offset`` lies in ``[0, size)``."""
    lo = 0
    if offset < 0:
        lo = (-offset + stride - 1) // stride
    last = size - 1 - offset
    hi = 0 if last < 0 else min(count, last // stride + 1)
    if lo > count:
        lo = count
    if hi < lo:
        hi = lo
    return lo, hi


# Inner loops run over zero-based views (``_copy(dst[a:b], src[c:d])``): indexing with a runtime
# offset (``dst[t] = src[t + shift]``) makes numba check every index for negative wraparound, which
# stops LLVM from vectorising -- measured 17x slower on 1024-element rows.

@_jit
def _copy(dst, src):
    for k in range(dst.shape[0]):
        dst[k] = src[k]


@_jit
def _copy_strided(dst, src, stride):
    for k in range(dst.shape[0]):
        dst[k] = src[k * stride]


@_jit
def _add(dst, src):
    for k in range(src.shape[0]):
        dst[k] += src[k]


@_jit
def _add_strided(dst, src, stride):
    for k in range(src.shape[0]):
        dst[k * stride] += src[k]


@_jit
def _zero(dst):
    for k in range(dst.shape[0]):
        dst[k] = 0


@_jit
def _valid_rows(off_h, height, out_h):
    """Output rows ``[y_lo, y_hi)`` whose input row ``y + off_h`` lies in ``[0, height)``."""
    y_lo = min(max(0, -off_h), out_h)
    y_hi = max(min(out_h, height - off_h), y_lo)
    return y_lo, y_hi


# Stride 1 with the output as wide as the input (every 'same' convolution): a kernel offset's
# columns are the input plane shifted by one flat offset, so the copy is one long contiguous loop
# instead of out_h short ones; the few elements that wrapped around a row edge are fixed up after.

@_jit
def _shifted_copy(src, dst, off_h, off_w, height, width, out_h, lo, hi):
    """``dst[y*width + q] = src[(y + off_h)*width + q + off_w]``, zero where that leaves the plane."""
    y_lo, y_hi = _valid_rows(off_h, height, out_h)
    shift = off_h * width + off_w
    start = max(y_lo * width, -shift)
    stop = max(min(y_hi * width, height * width - shift), start)
    _zero(dst[:start])
    _copy(dst[start:stop], src[start + shift:stop + shift])
    _zero(dst[stop:])
    for y in range(y_lo, y_hi):
        _zero(dst[y * width:y * width + lo])
        _zero(dst[y * width + hi:(y + 1) * width])


@_jit
def _shifted_add(src, dst, off_h, off_w, height, width, out_h, lo, hi):
    """Adjoint of ``_shifted_copy``: ``dst[(y + off_h)*width + q + off_w] += src[y*width + q]`` inside the plane.

    ``src`` is a scratch column row: its wrapped-around elements are zeroed first so that one
    contiguous add can run over the whole range.
    """
    y_lo, y_hi = _valid_rows(off_h, height, out_h)
    for y in range(y_lo, y_hi):
        _zero(src[y * width:y * width + lo])
        _zero(src[y * width + hi:(y + 1) * width])
    shift = off_h * width + off_w
    start = max(y_lo * width, -shift)
    stop = max(min(y_hi * width, height * width - shift), start)
    _add(dst[start + shift:stop + shift], src[start:stop])


@_jit
def _im2col(x, n0, n1, cols, kh, kw, sh, sw, ph, pw, dh, dw, out_h, out_w):
    """Images ``x[n0:n1]`` (N, C, H, W) -> ``cols`` (C*kh*kw, (n1-n0)*out_h*out_w), zeros outside x."""
    channels, height, width = x.shape[1], x.shape[2], x.shape[3]
    plane = out_h * out_w
    shifted = sh == 1 and sw == 1 and out_w == width
    for c in range(channels):
        for i in range(kh):
            for j in range(kw):
                row = cols[(c * kh + i) * kw + j]
                off_w = j * dw - pw
                lo, hi = _inside(off_w, sw, width, out_w)
                for b in range(n1 - n0):
                    image = x[n0 + b, c]
                    block = row[b * plane:(b + 1) * plane]
                    if shifted:
                        _shifted_copy(image.reshape(-1), block, i * dh - ph, off_w, height, width, out_h, lo, hi)
                        continue
                    for y in range(out_h):
                        dst = block[y * out_w:(y + 1) * out_w]
                        ih = y * sh - ph + i * dh
                        if ih < 0 or ih >= height:
                            _zero(dst)
                            continue
                        _zero(dst[:lo])
                        _zero(dst[hi:])
                        _copy_strided(dst[lo:hi], image[ih, lo * sw + off_w:], sw)


@entry(_check_col2im)
@_jit
def col2im(cols, n0, n1, out, kh, kw, sh, sw, ph, pw, dh, dw, out_h, out_w):
    """Adjoint of ``_im2col``: add ``cols`` back into ``out[n0:n1]`` (N, C, H, W); ``out`` is not zeroed here.

    ``cols`` is scratch: the stride-1 path zeroes its wrapped-around elements.
    """
    channels, height, width = out.shape[1], out.shape[2], out.shape[3]
    plane = out_h * out_w
    shifted = sh == 1 and sw == 1 and out_w == width
    for b in range(n1 - n0):
        for c in range(channels):
            image = out[n0 + b, c]
            for i in range(kh):
                for j in range(kw):
                    block = cols[(c * kh + i) * kw + j, b * plane:(b + 1) * plane]
                    off_w = j * dw - pw
                    lo, hi = _inside(off_w, sw, width, out_w)
                    if shifted:
                        _shifted_add(block, image.reshape(-1), i * dh - ph, off_w, height, width, out_h, lo, hi)
                        continue
                    for y in range(out_h):
                        ih = y * sh - ph + i * dh
                        if ih < 0 or ih >= height:
                            continue
                        _add_strided(image[ih, lo * sw + off_w:], block[y * out_w + lo:y * out_w + hi], sw)


@entry(_check_to_chunk)
@_jit
def to_chunk(src, n0, n1, dst):
    """(N, O, L) images ``src[n0:n1]`` -> ``dst`` (O, (n1-n0)*L): the layout BLAS gives and takes."""
    channels, plane = src.shape[1], src.shape[2]
    for b in range(n1 - n0):
        for o in range(channels):
            _copy(dst[o, b * plane:(b + 1) * plane], src[n0 + b, o])


@numba.njit(cache=True, fastmath={"reassoc", "contract"})
def _dot(a, b):
    """Sum of ``a * b``; reassociation lets LLVM keep several vector partial sums."""
    total = a[0] * 0
    for k in range(a.shape[0]):
        total += a[k] * b[k]
    return total


@entry(_check_weight_grad_by_dots)
@numba.njit(cache=True, nogil=True)
def weight_grad_by_dots(first, last, x, grad, groups, kh, kw, sh, sw, ph, pw, dh, dw, out_h, out_w):
    """The weight gradient from images ``first .. last`` as dot products: (groups, O/g, C/g*kh*kw).

    For convs with few input channels (a network's first layer, on 1 or 3 channels) the
    product grad (O, L) @ cols.T (L, C*kh*kw) has a handful of columns: one dot product of
    two image-long rows per (output channel, kernel tap) beats packing it for a matrix
    kernel or handing it to BLAS. Each image's columns are built by ``_im2col`` into a buffer
    that stays in cache. Returns this slice's partial sum; the caller adds the slices.
    """
    channels = x.shape[1]
    out_channels = grad.shape[1]
    rows = channels * kh * kw
    rows_per_group, o_per_group = rows // groups, out_channels // groups
    cols = np.empty((rows, out_h * out_w), dtype=x.dtype)
    result = np.zeros((groups, o_per_group, rows_per_group), dtype=x.dtype)
    for b in range(first, last):
        _im2col(x, b, b + 1, cols, kh, kw, sh, sw, ph, pw, dh, dw, out_h, out_w)
        for g in range(groups):
            for o in range(o_per_group):
                gradient = grad[b, g * o_per_group + o]
                for r in range(rows_per_group):
                    result[g, o, r] += _dot(gradient, cols[g * rows_per_group + r])
    return result


def _check_channel_sums(grad):
    floats("channel_sums", "grad", grad, ndim=3)


@entry(_check_channel_sums)
@numba.njit(cache=True, fastmath={"reassoc", "contract"})
def channel_sums(grad):
    """The bias gradient: ``grad`` (N, O, L) summed over images and positions, (O,), accumulated in float64.

    numpy's ``grad.sum(axis=(0, 2))`` reduces over a non-contiguous pair of axes (0.12 ms on the demo
    CNN's 64x16x784 float32 gradient, where this loop takes a third of that)."""
    images, channels, plane = grad.shape
    totals = np.zeros(channels, dtype=np.float64)
    for b in range(images):
        for o in range(channels):
            row = grad[b, o]
            total = 0.0
            for k in range(plane):
                total += row[k]
            totals[o] += total
    return totals.astype(grad.dtype)
