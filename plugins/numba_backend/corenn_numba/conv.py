"""conv (1-d and 2-d) and conv_transpose (1-d and 2-d), compiled with numba.

conv runs on the register-blocked microkernel of ``_gemm_jit`` (LLVM vector FMAs at the
machine's full width, where numpy's OpenBLAS may use half of it), without an im2col matrix:

- forward, stride 1 (every 'same' and 'valid' 3x3 conv): an implicit GEMM whose B operand
  is read in place from each image zero-padded in cache, its tiles stored straight from
  registers (``microkernel_store``); a 3x3 conv with 32 or more channels each way, whose rows
  of tiles fill the transforms' vectors, runs as Winograd's F(2x2, 3x3) instead
  (``_winograd_jit``: 2.25x fewer multiply-adds), falling back to the direct product where an
  output is inf or nan;
- forward, other strides: the im2col columns of a few output pixels are packed straight into
  the panel the microkernel reads, and consumed while in cache;
- backward, stride 1: the input gradient is itself a stride-1 conv (of the output gradient
  with the kernel flipped and the channels swapped; Winograd where the forward would be), and
  the weight gradient is a
  microkernel product per (tap, channel blocks) of the output gradient and each image laid
  out on the padded grid, the input or the output channels on the tile's rows, whichever
  pads less (``_stride1_rows``).

Work items (image, group, pixel block) are split over threads by ``_threads.split``.

``conv_transpose`` is the same pair run the other way: its forward is a conv's input
gradient, its backward that conv's forward and weight gradient.

Every other weight gradient (strided convs; stride 1 with so few channels per group that
either layout would compute mostly padding) packs each image's im2col columns for the
microkernel, or with at most ``DOTS_MAX_ROWS`` rows per group (one input channel under a 3x3
kernel) takes dot products of image-long rows.

The input gradient of a strided conv (and the forward of a strided ``conv_transpose``) is
col2im of W.T @ grad: a compiled im2col/col2im over a chunk of a few images at a time (about
``CHUNK_BYTES``, so that it stays in cache) and the product on the microkernel.

No path calls numpy's BLAS: OpenBLAS's idle threads keep spinning after each call and took
the second core from the compiled kernels that followed (on the shared 2-core machine under
load, a conv weight gradient measured 4-80 ms through BLAS and 1-4 ms on the microkernel).

Handled: float32/float64 inputs with 1 or 2 spatial dims, any stride, padding
(asymmetric 'same' included), dilation, groups and output_padding. 3-d
convolutions, other dtypes and empty tensors run the core kernel.

Example (nothing changes for the user; the dispatcher picks these kernels)::

    >>> import corenn
    >>> conv = corenn.nn.Conv2d(3, 8, 3, padding=1)
    >>> conv(corenn.randn(2, 3, 16, 16)).shape
    corenn.Size([2, 8, 16, 16])
"""
from __future__ import annotations

import numpy as np

from corenn.kernels import KernelOverride, recompute_overflow
from corenn.ops import conv as core_conv

from corenn_numba._base import LazyModule, handles
from corenn_numba._threads import split, split_sum
from corenn_numba.linear import matmul

jit = LazyModule("corenn_numba._conv_jit")
gemm = LazyModule("corenn_numba._gemm_jit")
winograd = LazyModule("corenn_numba._winograd_jit")

#: Bytes of im2col columns per chunk: a few images' worth that stay in the 1 MB L2 / shared L3 while
#: the matmul reads them. Measured on the 64->64 3x3 conv (2.4 MB of columns per image): 1 image per
#: chunk was fastest; the demo CNN's second conv (113 KB per image) takes ~35 images per chunk.
CHUNK_BYTES = 4 << 20

#: Weight gradients with at most this many rows per group (C/g*kh*kw: one input channel under a 3x3
#: kernel) are dot products of image-long rows (``_conv_jit.weight_grad_by_dots``): on the demo CNN's
#: first conv (1 -> 16, 3x3, batch 64) 0.50 ms, where packing 9 rows for the microkernel took 0.94 ms.
DOTS_MAX_ROWS = 16


def _float64(x, weight, bias):
    """The operands in float64, to compute again the outputs that overflowed float32 (``recompute_overflow``:
    the core does the same, so both give the same values there)."""
    return x.astype(np.float64), weight.astype(np.float64), None if bias is None else bias.astype(np.float64)


def _finite(weight_g) -> bool:
    """Whether the stride-1 input gradient (and conv_transpose) may run as a conv of the zero-padded gradient:
    its padding multiplies every weight by zeros, and 0 * inf or 0 * nan would put nan where the core's
    col2im (and PyTorch) give a number. One pass over the weight, which is small next to the data."""
    return bool(np.isfinite(weight_g).all())


def _chunk(n, bytes_per_image):
    return max(1, min(n, CHUNK_BYTES // max(bytes_per_image, 1)))


def _handled(x, weight, bias):
    """float32/float64 with 1 or 2 spatial dims, not empty (any stride, padding, dilation, groups)."""
    return (x.ndim in (3, 4) and handles(x, weight, bias)
            and x.size > 0 and weight.size > 0)


def _lift(x, weight, stride, dilation):
    """1-d arrays and parameters seen as 2-d with a height of 1 (one set of compiled loops serves both)."""
    if x.ndim == 4:
        return x, weight, tuple(stride), tuple(dilation)
    return x[:, :, None, :], weight[:, :, None, :], (1,) + tuple(stride), (1,) + tuple(dilation)


class Conv(KernelOverride, core_conv.Conv):
    """``conv`` for 1-d and 2-d float32/float64 inputs on the microkernel (im2col + BLAS for what it leaves)."""

    holds_blas = True  # its threaded kernels hold numpy's OpenBLAS to one thread (corenn_numba._blas)

    @staticmethod
    def handles(x, weight, bias=None, *, stride, padding, dilation, groups):
        return _handled(x, weight, bias)

    @staticmethod
    def forward(ctx, x, weight, bias=None, *, stride, padding, dilation, groups):
        one_d = x.ndim == 3
        pairs = (((0, 0),) if one_d else ()) + tuple(padding)
        x4, w4, stride, dilation = _lift(x, weight, stride, dilation)
        x4 = np.ascontiguousarray(x4)
        n, channels, height, width = x4.shape
        out_channels, kh, kw = w4.shape[0], w4.shape[2], w4.shape[3]
        out_h = (height + pairs[0][0] + pairs[0][1] - dilation[0] * (kh - 1) - 1) // stride[0] + 1
        out_w = (width + pairs[1][0] + pairs[1][1] - dilation[1] * (kw - 1) - 1) // stride[1] + 1
        geometry = (kh, kw, stride[0], stride[1], pairs[0][0], pairs[1][0], dilation[0], dilation[1], out_h, out_w)
        weight_g = np.ascontiguousarray(w4).reshape(groups, out_channels // groups, -1)

        def conv(*arrays):
            out = np.empty((n, out_channels, out_h * out_w), dtype=arrays[0].dtype)
            return out, _gemm_conv(*arrays, out, pairs, stride, dilation, (kh, kw), (out_h, out_w))

        out, finite = conv(x4, weight_g, bias)
        if not finite:  # the kernel checked what it stored: only then a pass over the output
            out = recompute_overflow(np, out, lambda: conv(*_float64(x4, weight_g, bias))[0])
        ctx.save_for_backward(x4, weight_g)
        ctx.params = (weight.shape, geometry, pairs, bias is not None)
        return out.reshape((n, out_channels, out_w) if one_d else (n, out_channels, out_h, out_w))

    @staticmethod
    def backward(ctx, grad):
        x4, weight_g = ctx.saved
        weight_shape, geometry, pairs, has_bias = ctx.params
        n = x4.shape[0]
        grad3 = np.ascontiguousarray(grad).reshape(n, weight_shape[0], -1)
        need_x, need_w, *need_bias = ctx.needs_input_grad
        stride, dilation, kernel = geometry[2:4], geometry[6:8], geometry[0:2]
        grad_x4 = grad_w = None
        if need_x and stride == (1, 1) and _finite(weight_g):
            grad_x4 = _input_grad_stride1(grad3, weight_g, x4.shape, pairs, dilation, kernel, geometry[8:10])
        elif need_x:
            grad_x4 = np.zeros(x4.shape, dtype=x4.dtype)
            _add_input_grad_im2col(grad_x4, grad3, weight_g, geometry)
        if need_w:
            grad_w = _weight_grad(x4, grad3, weight_g, pairs, geometry)
        grad_x = grad_x4
        if grad_x4 is not None and len(weight_shape) == 3:
            grad_x = grad_x4[:, :, 0, :]
        grad_weight = None if grad_w is None else grad_w.reshape(weight_shape)
        grad_bias = None
        if has_bias and need_bias[0]:
            grad_bias = jit.channel_sums(grad3)
        return (grad_x, grad_weight, grad_bias) if has_bias else (grad_x, grad_weight)


def _gemm_conv(x4, weight_g, bias, out, pads, stride, dilation, kernel, out_size) -> bool:
    """``out`` (N, O, L) = conv of ``x4`` with ``weight_g`` (g, O/g, C/g*kh*kw) plus ``bias``, on the microkernel.

    Stride 1 runs as an implicit GEMM over each image zero-padded in cache; other strides pack
    im2col panels as they go (see ``_gemm_jit``). Returns whether every output is finite.
    """
    columns = gemm.nr(x4.dtype)
    has_bias = bias is not None
    bias = np.ascontiguousarray(bias) if has_bias else np.zeros(1, dtype=x4.dtype)
    n, groups = x4.shape[0], weight_g.shape[0]
    work = out.size * weight_g.shape[2]
    if tuple(stride) == (1, 1):
        cropped, ((top, bottom), (left, right)) = gemm.crop_negative_pads(x4, pads)
        x4 = np.ascontiguousarray(cropped)
        height_p, width_p = x4.shape[2] + top + bottom, x4.shape[3] + left + right
        if (tuple(kernel) == (3, 3) and tuple(dilation) == (1, 1) and groups == 1
                and winograd.worthwhile(x4.shape[1], out.shape[1], out_size[1], x4.dtype)
                and _winograd_conv(x4, weight_g, bias, has_bias, out, top, left, height_p, width_p, out_size, work)):
            return True
        # Otherwise, or where Winograd left an inf or nan among the outputs, the direct product: it gives the
        # values the core does (see _winograd_jit), and reports them for the float32 overflow check as ever.
        panels = gemm.pack_weight(weight_g)
        line_blocks = gemm.stride1_line_blocks(columns, width_p, *out_size)
        tiles = gemm.image_blocks(line_blocks, columns, width_p, *out_size)
        return all(split(gemm.conv_forward_stride1, n * groups * tiles, work, x4, top, left, height_p, width_p,
                         panels, bias, has_bias, out, columns, line_blocks, *kernel, *dilation, *out_size,
                         hold_blas=True))
    panels = gemm.pack_weight(weight_g)
    return all(split(gemm.conv_forward, n * groups * -(-out.shape[2] // columns), work, x4, panels, bias, has_bias,
                     out, columns, *kernel, *stride, pads[0][0], pads[1][0], *dilation, *out_size, hold_blas=True))


def _winograd_conv(x4, weight_g, bias, has_bias, out, top, left, height_p, width_p, out_size, work) -> bool:
    """``_gemm_conv``'s stride-1 3x3 conv as Winograd's F(2x2, 3x3) (``_winograd_jit``); whether every output is
    finite."""
    channels, out_channels = x4.shape[1], out.shape[1]
    u_panels = winograd.transform_weight(weight_g.reshape(out_channels, channels, 3, 3))
    per_vector = winograd.lanes(out_size[1], x4.dtype)
    tile_rows = (out_size[0] + 1) // 2
    rows = min(winograd.tile_rows_per_item(channels, out_channels, out_size[1], per_vector, x4.dtype), tile_rows)
    return all(split(winograd.winograd_forward, x4.shape[0] * -(-tile_rows // rows), work * 4 // 9, x4, top, left,
                     height_p, width_p, u_panels, bias, has_bias, out, gemm.nr(x4.dtype), per_vector, rows,
                     *out_size, hold_blas=True))


def _stride1_rows(x4, weight_g):
    """Which side of the stride-1 weight gradient's products the input channels take, or None: the tile's rows
    (blocks of ``MR``) or its columns (blocks of ``nr``, 32 float32s), whichever pads the channel counts less.
    None where even that computes more than twice the useful products (few channels per group, such as a
    network's first layer on 1 or 3 channels): ``_weight_grad_im2col`` is faster there."""
    groups, out_per_group = weight_g.shape[:2]
    in_per_group, columns = x4.shape[1] // groups, gemm.nr(x4.dtype)

    def padded(count, block):
        return -(-count // block) * block

    output_rows = padded(out_per_group, gemm.MR) * padded(in_per_group, columns)
    input_rows = padded(in_per_group, gemm.MR) * padded(out_per_group, columns)
    if min(output_rows, input_rows) > 2 * in_per_group * out_per_group:
        return None
    return input_rows < output_rows


def _weight_grad(x4, grad3, weight_g, pads, geometry):
    """The weight gradient (groups, O/g, C/g*kh*kw) of the conv with input ``x4`` and output gradient ``grad3``."""
    if geometry[2:4] == (1, 1) and (input_rows := _stride1_rows(x4, weight_g)) is not None:
        return _weight_grad_stride1(x4, grad3, weight_g, pads, geometry[6:8], geometry[0:2], geometry[8:10],
                                    input_rows)
    return _weight_grad_im2col(x4, grad3, weight_g, geometry)


def _weight_grad_im2col(x4, grad3, weight_g, geometry):
    """The weight gradient (groups, O/g, C/g*kh*kw) of any conv: dot products for a few rows per group, else
    im2col packed for the microkernel (``_gemm_jit.conv_weight_grad_im2col``), split over images.

    Neither calls numpy's BLAS: its idle threads keep spinning after a call and, measured on the shared
    2-core machine under load, slowed the compiled kernels that followed in the training step 2-3x.
    """
    n, rows_per_group = x4.shape[0], weight_g.shape[2]
    work = grad3.size * rows_per_group
    if rows_per_group <= DOTS_MAX_ROWS:
        return split_sum(jit.weight_grad_by_dots, n, work, x4, grad3, weight_g.shape[0], *geometry, hold_blas=True)
    total = split_sum(gemm.conv_weight_grad_im2col, n, work, x4, grad3, weight_g.shape[0], gemm.nr(x4.dtype),
                      *geometry, hold_blas=True)
    return np.ascontiguousarray(total.transpose(0, 2, 1))  # (groups, taps, channels) -> (groups, channels, taps)


def _weight_grad_stride1(x4, grad3, weight_g, pads, dilation, kernel, out_size, input_rows):
    """The weight gradient of a stride-1 conv, (groups, O/g, C/g*kh*kw), on the microkernel (see ``_gemm_jit``)."""
    n, channels = x4.shape[:2]
    groups, out_per_group = weight_g.shape[:2]
    in_per_group = channels // groups
    columns = gemm.nr(x4.dtype)
    rows, cols = (in_per_group, out_per_group) if input_rows else (out_per_group, in_per_group)
    x4, ((top, bottom), (left, right)) = gemm.crop_negative_pads(x4, pads)
    padded_size = (x4.shape[2] + top + bottom, x4.shape[3] + left + right)
    grad4 = grad3.reshape(grad3.shape[:2] + tuple(out_size))
    total = split_sum(gemm.conv_weight_grad_stride1, n, grad3.size * weight_g.shape[2], x4, grad4, groups, input_rows,
                      -(-rows // gemm.MR), -(-cols // columns) * columns, columns, *kernel, *dilation, top, left,
                      *padded_size, *out_size, hold_blas=True)
    # tiles (groups, taps, column blocks, row blocks, MR, columns) -> (groups, rows, taps, cols) -> (groups, O/g, C/g, taps)
    total = total.reshape(total.shape[:4] + (gemm.MR, columns)).transpose(0, 3, 4, 1, 2, 5).reshape(
        groups, total.shape[3] * gemm.MR, total.shape[1], total.shape[2] * columns)[:, :rows, :, :cols]
    return total.transpose((0, 3, 1, 2) if input_rows else (0, 1, 3, 2)).reshape(weight_g.shape)


def _input_grad_stride1(grad3, weight_g, x_shape, pads, dilation, kernel, out_size):
    """The input gradient of a stride-1 conv: itself a stride-1 conv of the output gradient.

    grad_x[c, h, w] = sum over (o, i, j) of grad[o, h + top - i*dh, w + left - j*dw] * W[o, c, i, j],
    which is a conv of ``grad`` with the kernel flipped in space, input and output channels
    swapped within each group, and padding ``d*(k-1) - pad`` on each side.
    """
    groups, out_per_group = weight_g.shape[:2]
    kh, kw = kernel
    in_per_group = x_shape[1] // groups
    flipped = (weight_g.reshape(groups, out_per_group, in_per_group, kh, kw)[:, :, :, ::-1, ::-1]
               .transpose(0, 2, 1, 3, 4).reshape(groups, in_per_group, out_per_group * kh * kw))
    reach = (dilation[0] * (kh - 1), dilation[1] * (kw - 1))
    grad_pads = tuple((r - before, r - after) for r, (before, after) in zip(reach, pads))
    grad4 = grad3.reshape(grad3.shape[:2] + tuple(out_size))
    grad_x = np.empty((x_shape[0], x_shape[1], x_shape[2] * x_shape[3]), dtype=grad3.dtype)
    _gemm_conv(grad4, np.ascontiguousarray(flipped), None, grad_x, grad_pads, (1, 1), dilation, kernel,
               x_shape[2:])
    return grad_x.reshape(x_shape)


class ConvTranspose(KernelOverride, core_conv.ConvTranspose):
    """``conv_transpose`` for 1-d and 2-d float32/float64 inputs: the conv kernels run the other way."""

    holds_blas = True

    @staticmethod
    def handles(x, weight, bias=None, *, stride, padding, output_padding, dilation, groups):
        return _handled(x, weight, bias)

    @staticmethod
    def forward(ctx, x, weight, bias=None, *, stride, padding, output_padding, dilation, groups):
        one_d = x.ndim == 3
        padding = ((0,) if one_d else ()) + tuple(padding)
        output_padding = ((0,) if one_d else ()) + tuple(output_padding)
        x4, w4, stride, dilation = _lift(x, weight, stride, dilation)
        x4 = np.ascontiguousarray(x4)
        n, in_channels, in_h, in_w = x4.shape
        out_per_group, kh, kw = w4.shape[1], w4.shape[2], w4.shape[3]
        out_channels = out_per_group * groups
        full = [(s - 1) * st - 2 * p + d * (k - 1) + op + 1
                for s, st, p, d, k, op in zip((in_h, in_w), stride, padding, dilation, (kh, kw), output_padding)]
        # The conv whose input gradient this is: its input is our output, its output our input.
        geometry = (kh, kw, stride[0], stride[1], padding[0], padding[1], dilation[0], dilation[1], in_h, in_w)
        weight_g = np.ascontiguousarray(w4).reshape(groups, in_channels // groups, -1)
        # That conv's padding: ours before, ours less output_padding after (negative: it ignores those rows).
        pads = tuple((p, p - op) for p, op in zip(padding, output_padding))

        def conv_transpose(x4, weight_g, bias):
            if stride == (1, 1) and _finite(weight_g):
                out = _input_grad_stride1(x4.reshape(n, in_channels, -1), weight_g, (n, out_channels, *full), pads,
                                          dilation, (kh, kw), (in_h, in_w))
            else:
                out = np.zeros((n, out_channels, full[0], full[1]), dtype=x4.dtype)
                _add_input_grad_im2col(out, x4.reshape(n, in_channels, -1), weight_g, geometry)
            if bias is not None:
                out += bias.reshape(-1, 1, 1)
            return out

        out = recompute_overflow(np, conv_transpose(x4, weight_g, bias),
                                 lambda: conv_transpose(*_float64(x4, weight_g, bias)))
        ctx.save_for_backward(x4, weight_g)
        ctx.params = (weight.shape, geometry, pads, bias is not None)
        return out[:, :, 0, :] if one_d else out

    @staticmethod
    def backward(ctx, grad):
        x4, weight_g = ctx.saved
        weight_shape, geometry, pads, has_bias = ctx.params
        one_d = len(weight_shape) == 3
        grad4 = np.ascontiguousarray(grad[:, :, None, :] if one_d else grad)
        need_x, need_w, *need_bias = ctx.needs_input_grad
        # Our backward is that conv's forward (for x) and its weight gradient, with the roles of input and
        # output gradient swapped.
        kernel, stride, dilation, in_size = geometry[0:2], geometry[2:4], geometry[6:8], geometry[8:10]
        x3 = x4.reshape(x4.shape[0], x4.shape[1], -1)
        grad_x = grad_w = None
        if need_x:
            grad_x = np.empty(x3.shape, dtype=x4.dtype)
            _gemm_conv(grad4, weight_g, None, grad_x, pads, stride, dilation, kernel, in_size)
        if need_w:
            grad_w = _weight_grad(grad4, x3, weight_g, pads, geometry)
        if grad_x is not None:
            grad_x = grad_x.reshape(x4.shape[:2] + ((x4.shape[3],) if one_d else x4.shape[2:]))
        grad_weight = None if grad_w is None else grad_w.reshape(weight_shape)
        grad_bias = None
        if has_bias and need_bias[0]:
            grad_bias = jit.channel_sums(grad4.reshape(grad4.shape[0], grad4.shape[1], -1))
        return (grad_x, grad_weight, grad_bias) if has_bias else (grad_x, grad_weight)


def _add_input_grad_im2col(out, grad3, weight_g, geometry):
    """``out`` (N, C, H, W) += the input gradient of a conv: col2im of W.T @ grad, a chunk of images at a time.

    ``grad3`` (N, O, L) is the conv's output gradient and ``weight_g`` (g, O/g, C/g*kh*kw) its
    weight; a strided conv's backward and a strided ``conv_transpose``'s forward. The product
    runs on the microkernel (``corenn_numba.linear.matmul``), not numpy's BLAS.
    """
    n, out_channels, plane = grad3.shape
    groups, out_per_group, rows_per_group = weight_g.shape
    rows = groups * rows_per_group
    step = _chunk(n, rows * plane * grad3.itemsize)
    cols_buffer = np.empty(rows * step * plane, dtype=grad3.dtype)
    grad_buffer = np.empty(out_channels * step * plane, dtype=grad3.dtype) if step > 1 else None
    for n0 in range(0, n, step):
        n1 = min(n, n0 + step)
        width = (n1 - n0) * plane
        if step == 1:
            grad_chunk = grad3[n0]
        else:
            grad_chunk = grad_buffer[:out_channels * width].reshape(out_channels, width)
            jit.to_chunk(grad3, n0, n1, grad_chunk)
        cols = cols_buffer[:rows * width].reshape(rows, width)
        for g in range(groups):
            matmul(weight_g[g].T, grad_chunk[g * out_per_group:(g + 1) * out_per_group],
                   out=cols[g * rows_per_group:(g + 1) * rows_per_group])
        jit.col2im(cols, n0, n1, out, *geometry)


OVERRIDES = [("conv", Conv), ("conv_transpose", ConvTranspose)]
