"""Winograd's F(2x2, 3x3) for stride-1 3x3 convolutions: 2.25 times fewer multiply-adds than the direct product.

Lavin and Gray, "Fast Algorithms for Convolutional Neural Networks" (CVPR 2016). Each 2x2 block
of outputs (a *tile*) comes from the 4x4 patch ``d`` of the padded input under it::

    Y = A^T [ (G g G^T) * (B^T d B) ] A        (* elementwise, g the 3x3 kernel)

Summed over input channels, the elementwise product is, for each of the 16 positions ``xi`` of
a transformed tile, one matrix product ``M[xi] (O x tiles) = U[xi] (O x C) @ V[xi] (C x tiles)``
with ``U = G g G^T`` (the weight, transformed once per call) and ``V = B^T d B`` (the input).
Those 16 products, C deep, run on the microkernel: 16 multiply-adds per output and input channel
for a 2x2 tile, where the direct product takes 36.

The transforms are additions, written as LLVM IR like the microkernel (``_input_tiles``,
``_output_tiles``): a vector holds ``LANES`` consecutive tiles of a row (64 bytes, 16 float32
tiles; or 32 bytes, 8 of them, for short rows), whose patches are two vectors of the input row
deinterleaved into even and odd columns. A row of tiles is cut into such chunks (the last one
partly outside the image: computed, not stored), so it runs where at most one tile in 8 is wasted
that way (``lanes``, ``worthwhile``). The weight's transform is a compiled loop per call: the
weights change every step.

Where it is not exact: the transforms add and subtract a tile's values, so an inf in the input
can turn neighbouring outputs into nan (inf - inf) where the direct product gives numbers, and a
float32 sum can overflow in a transform where the direct one does not. The driver reports whether
every output it stored is finite, and the caller runs the direct kernel where one is not, so
those cases keep the direct product's values. Finite results differ from the direct sum by
rounding, as any reordering of a float sum does (a few units in the last place of the products'
magnitude).

Work items are (image, block of tile rows), sized so that an item's transformed input and its
products stay in the core's L2 (``tile_rows_per_item``).
"""
from __future__ import annotations

import math

import numba
import numpy as np
from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.core.errors import TypingError
from numba.extending import intrinsic, register_jitable

from corenn_numba._checks import array, entry, fail, floats, integer, integers, work_range
from corenn_numba._gemm_jit import (MR, SINGLE_ROWS_MAX, _check_bias, _check_columns, _Kernel, _pad_image, _store,
                                    nr, pack_weight)

_jit_nogil = numba.njit(cache=True, nogil=True)

#: Bytes of the vectors of tiles the transforms work on (64: one AVX-512 register; two on AVX2).
VECTOR_BYTES = 64

#: Bytes of an item's transformed input and products together. Measured on the 64->64 conv on 32x32 (AVX-512,
#: one core): 8.3 ms at 256 KB, 6.9 at 512 KB, 7.1 at 1 and 2 MB.
ITEM_BYTES = 1 << 19


def lanes(out_w, dtype) -> int | None:
    """Tiles per vector for rows of ``ceil(out_w / 2)`` tiles: a whole register's worth (16 float32, 8 float64),
    or half of one where that fills the vectors better; None where neither wastes at most one tile in 8."""
    for count in (VECTOR_BYTES // np.dtype(dtype).itemsize, VECTOR_BYTES // 2 // np.dtype(dtype).itemsize):
        padded = padded_tiles(out_w, count)
        if 8 * (padded - (out_w + 1) // 2) <= padded:
            return count
    return None


def transform_weight(weight):
    """(O, C, 3, 3) -> the 16 matrices U[xi] = (G g G^T)[xi] (O x C) packed for the microkernel
    (``pack_weight``)."""
    u = np.empty((16,) + weight.shape[:2], dtype=weight.dtype)
    weight_transform(np.ascontiguousarray(weight).reshape(weight.shape[0], weight.shape[1], 9), u)
    return pack_weight(u)


def _check_weight_transform(weight, u):
    dtype = floats("weight_transform", "weight", weight, ndim=3)
    if weight.shape[2] != 9:
        fail("weight_transform", f"argument 'weight' must hold 3x3 kernels, (O, C, 9), got shape {weight.shape}")
    array("weight_transform", "u", u, dtype, (16,) + weight.shape[:2], writeable=True)


@entry(_check_weight_transform)
@numba.njit(cache=True)
def weight_transform(weight, u):
    """``u[xi, o, c]`` = (G g G^T)[xi] for the 3x3 kernel g = ``weight[o, c]`` (row-major, 9 values), in float64
    then rounded once. G = [[1, 0, 0], [1/2, 1/2, 1/2], [1/2, -1/2, 1/2], [0, 0, 1]]: G g G^T is g's rows
    times G^T, then G times the result's columns."""
    for o in range(weight.shape[0]):
        for c in range(weight.shape[1]):
            g = weight[o, c]
            top = _times_g(np.float64(g[0]), np.float64(g[1]), np.float64(g[2]))
            middle = _times_g(np.float64(g[3]), np.float64(g[4]), np.float64(g[5]))
            bottom = _times_g(np.float64(g[6]), np.float64(g[7]), np.float64(g[8]))
            for j in range(4):
                column = _times_g(top[j], middle[j], bottom[j])
                for i in range(4):
                    u[4 * i + j, o, c] = column[i]
    return u


@numba.njit(inline="always")
def _times_g(a, b, c):
    """G @ (a, b, c)."""
    return a, (a + b + c) * 0.5, (a - b + c) * 0.5, c


@register_jitable  # plain Python here, inlined in the driver
def padded_tiles(out_w, per_vector):
    """Tiles per row as the transforms compute them: ``ceil(out_w / 2)`` rounded up to whole vectors."""
    return -(-((out_w + 1) // 2) // per_vector) * per_vector


def worthwhile(channels, out_channels, out_w, dtype) -> bool:
    """Whether the Winograd path should beat the direct one: both channel counts deep enough for the 16 products
    to run near the microkernel's peak, and rows of tiles that fill their vectors (``lanes``)."""
    return min(channels, out_channels) >= 32 and lanes(out_w, dtype) is not None


def tile_rows_per_item(channels, out_channels, out_w, per_vector, dtype) -> int:
    """Rows of tiles per work item: as many as keep ``16 * (C + O)`` values per tile within ``ITEM_BYTES``, in
    steps that make whole blocks of the microkernel's columns (a half-empty block costs a whole one)."""
    row_tiles = padded_tiles(out_w, per_vector)
    step = nr(dtype) // math.gcd(nr(dtype), row_tiles)
    rows = ITEM_BYTES // (row_tiles * 16 * (channels + out_channels) * np.dtype(dtype).itemsize)
    return max(step, rows // step * step)


# ---------------------------------------------------------------------------------------------------------
# The transforms, as LLVM IR on vectors of LANES tiles
# ---------------------------------------------------------------------------------------------------------

class _Operands:
    """What both transforms' code starts from: the vector types for the arrays' dtype (a vector of LANES
    tiles, and a pair of them), the data pointers of two arrays and some integer arguments as i64."""

    def __init__(self, context, builder, signature, args, arrays, integers, vector_bytes):
        dtype = signature.args[arrays[0]].dtype
        float_type = ir.FloatType() if dtype == types.float32 else ir.DoubleType()
        self.item = 4 if dtype == types.float32 else 8
        self.count = vector_bytes // self.item
        self.vector = ir.VectorType(float_type, self.count)
        self.pair = ir.VectorType(float_type, 2 * self.count)
        self.kernel = _Kernel(context, builder, dtype)  # the microkernel's IR helpers: as_index, splat
        self.source, self.target = (context.make_array(signature.args[k])(context, builder, args[k]).data
                                    for k in arrays)
        self.integers = [self.kernel.as_index(args[k]) for k in integers]


def _check_transform_arrays(*arrays):
    if not all(isinstance(a, types.Array) and a.ndim == 1 and a.layout == "C" for a in arrays):
        raise TypingError("the Winograd transforms take contiguous 1-d arrays")
    if len({a.dtype for a in arrays}) != 1 or arrays[0].dtype not in (types.float32, types.float64):
        raise TypingError("the Winograd transforms take float32 or float64 arrays of one dtype")


def _load(builder, vector_type, data, at, item):
    pointer = builder.bitcast(builder.gep(data, [at]), vector_type.as_pointer())
    return builder.load(pointer, align=item)



def _input_tiles_kernel(vector_bytes: int):
    """``_input_tiles`` on vectors of ``vector_bytes`` (LANES tiles: as many as fit)."""
    @intrinsic
    def _input_tiles(typingctx, padded, row_start, row_stride, v, v_start, v_stride):
        """``v[v_start + xi*v_stride + t]`` = (B^T d_t B)[xi] for t < LANES, d_t the 4x4 patch whose top left is
        ``padded[row_start + 2t]`` (rows ``row_stride`` apart).

        B^T = [[1, 0, -1, 0], [0, 1, 1, 0], [0, -1, 1, 0], [0, 1, 0, -1]]. Each patch row is two
        vectors of the input row (from ``2t`` and from ``2t + 2``) split into even and odd columns;
        the caller guarantees that all of them lie inside ``padded`` and the 16 stores inside ``v``.
        """
        _check_transform_arrays(padded, v)

        def codegen(context, builder, signature, args):
            operands = _Operands(context, builder, signature, args, (0, 3), (1, 2, 4, 5), vector_bytes)
            vector, pair, count, item = operands.vector, operands.pair, operands.count, operands.item
            source, target = operands.source, operands.target
            start, stride, v_start, v_stride = operands.integers
            mask = ir.VectorType(ir.IntType(32), count)
            even = ir.Constant(mask, [2 * k for k in range(count)])
            odd = ir.Constant(mask, [2 * k + 1 for k in range(count)])
            undefined = ir.Constant(pair, ir.Undefined)
            across = []  # across[k][j]: row k of the patches times B
            for k in range(4):
                row = builder.add(start, builder.mul(stride, ir.Constant(ir.IntType(64), k)))
                here = _load(builder, pair, source, row, item)
                on = _load(builder, pair, source, builder.add(row, ir.Constant(ir.IntType(64), 2)), item)
                d0, d1 = builder.shuffle_vector(here, undefined, even), builder.shuffle_vector(here, undefined, odd)
                d2, d3 = builder.shuffle_vector(on, undefined, even), builder.shuffle_vector(on, undefined, odd)
                across.append([builder.fsub(d0, d2), builder.fadd(d1, d2), builder.fsub(d2, d1), builder.fsub(d1, d3)])
            for j in range(4):
                a0, a1, a2, a3 = (across[k][j] for k in range(4))
                for i, value in enumerate((builder.fsub(a0, a2), builder.fadd(a1, a2), builder.fsub(a2, a1),
                                           builder.fsub(a1, a3))):
                    at = builder.add(v_start, builder.mul(v_stride, ir.Constant(ir.IntType(64), 4 * i + j)))
                    builder.store(value, builder.bitcast(builder.gep(target, [at]), vector.as_pointer()), align=item)
            return context.get_dummy_value()

        return types.void(padded, row_start, row_stride, v, v_start, v_stride), codegen

    return _input_tiles


def _output_tiles_kernel(vector_bytes: int):
    """``_output_tiles`` on vectors of ``vector_bytes`` (LANES tiles: as many as fit)."""
    @intrinsic
    def _output_tiles(typingctx, m, m_start, m_stride, shift, out, out_start, out_stride, columns, rows):
        """The 2x2 outputs of LANES tiles: A^T M_t A + ``shift``, M_t[xi] = ``m[m_start + xi*m_stride + t]``, stored as
        ``rows`` (1 or 2) output rows of ``columns`` (at most 2*LANES) values from ``out[out_start]``, rows
        ``out_stride`` apart. A^T = [[1, 1, 1, 0], [0, 1, -1, -1]]. Returns whether every stored value is finite.
        The caller guarantees that the loads lie inside ``m`` and the stores inside ``out``."""
        _check_transform_arrays(m, out)

        def codegen(context, builder, signature, args):
            operands = _Operands(context, builder, signature, args, (0, 4), (1, 2, 5, 6, 7, 8), vector_bytes)
            vector, pair, count, item = operands.vector, operands.pair, operands.count, operands.item
            source, target = operands.source, operands.target
            m_start, m_stride, out_start, out_stride, columns, rows = operands.integers
            index = ir.IntType(64)
            splat = operands.kernel.splat
            products = [_load(builder, vector, source,
                              builder.add(m_start, builder.mul(m_stride, ir.Constant(index, k))), item)
                        for k in range(16)]
            shift = splat(args[3], vector)
            m_ = [[products[4 * i + j] for j in range(4)] for i in range(4)]
            down = [[builder.fadd(builder.fadd(m_[0][j], m_[1][j]), m_[2][j]) for j in range(4)],
                    [builder.fsub(builder.fsub(m_[1][j], m_[2][j]), m_[3][j]) for j in range(4)]]
            interleave = ir.Constant(ir.VectorType(ir.IntType(32), 2 * count),
                                     [k // 2 + (k % 2) * count for k in range(2 * count)])
            lane_type = ir.VectorType(index, 2 * count)
            in_row = builder.icmp_signed("<", ir.Constant(lane_type, list(range(2 * count))), splat(columns, lane_type))
            mask_type = ir.VectorType(ir.IntType(1), 2 * count)
            suffix = f"v{2 * count}{'f32' if item == 4 else 'f64'}"
            store = cgutils.get_or_insert_function(builder.module, ir.FunctionType(ir.VoidType(), [
                pair, pair.as_pointer(), ir.IntType(32), mask_type]), f"llvm.masked.store.{suffix}.p0")
            bad = ir.Constant(mask_type, [0] * (2 * count))
            for r in range(2):
                s0, s1, s2, s3 = down[r]
                left = builder.fadd(builder.fadd(builder.fadd(s0, s1), s2), shift)
                right = builder.fadd(builder.fsub(builder.fsub(s1, s2), s3), shift)
                values = builder.shuffle_vector(left, right, interleave)
                wanted = builder.select(builder.icmp_signed(">", rows, ir.Constant(index, r)), in_row,
                                        ir.Constant(mask_type, [0] * (2 * count)))
                at = builder.add(out_start, builder.mul(out_stride, ir.Constant(index, r)))
                builder.call(store, [values, builder.bitcast(builder.gep(target, [at]), pair.as_pointer()),
                                     ir.Constant(ir.IntType(32), item), wanted])
                difference = builder.fsub(values, values)  # nan exactly where a value is inf or nan
                bad = builder.or_(bad, builder.and_(wanted, builder.fcmp_unordered("uno", difference, difference)))
            reduce_or = cgutils.get_or_insert_function(builder.module, ir.FunctionType(ir.IntType(1), [mask_type]),
                                                       f"llvm.vector.reduce.or.v{2 * count}i1")
            return builder.not_(builder.call(reduce_or, [bad]))

        return types.boolean(m, m_start, m_stride, shift, out, out_start, out_stride, columns, rows), codegen

    return _output_tiles


#: The transforms on a whole register's worth of tiles, and on half of one for shorter rows (``lanes``).
_input_tiles, _input_tiles_half = _input_tiles_kernel(VECTOR_BYTES), _input_tiles_kernel(VECTOR_BYTES // 2)
_output_tiles, _output_tiles_half = _output_tiles_kernel(VECTOR_BYTES), _output_tiles_kernel(VECTOR_BYTES // 2)


# ---------------------------------------------------------------------------------------------------------
# The driver
# ---------------------------------------------------------------------------------------------------------

def _check_winograd(first, last, x, top, left, height_p, width_p, u_panels, bias, has_bias, out, columns, per_vector,
                    rows_per_item, out_h, out_w):
    f = "winograd_forward"
    dtype = floats(f, "x", x, ndim=4)
    n, channels, height, width = x.shape
    integers(f, "top left height_p width_p", (top, left, height_p, width_p), 0)
    integers(f, "out_h out_w", (out_h, out_w), 1)
    integer(f, "rows_per_item", rows_per_item, 1, (out_h + 1) // 2)  # the buffers are sized by it
    _check_columns(f, columns, dtype)
    whole = VECTOR_BYTES // dtype.itemsize
    if integer(f, "per_vector", per_vector, whole // 2, whole) not in (whole, whole // 2):
        fail(f, f"argument 'per_vector' must be {whole} or {whole // 2} tiles for {dtype}, got {per_vector}")
    if height + top > height_p or width + left > width_p:
        fail(f, f"the padded grid {height_p}x{width_p} does not hold the {height}x{width} input at ({top}, {left})")
    if out_h + 2 != height_p or out_w + 2 != width_p:
        fail(f, f"an {out_h}x{out_w} output is not a stride-1 3x3 conv of the padded input's {height_p}x{width_p}")
    array(f, "out", out, dtype, ndim=3, writeable=True)
    if out.shape != (n, out.shape[1], out_h * out_w):
        fail(f, f"argument 'out' must have shape ({n}, O, {out_h * out_w}), got {out.shape}")
    rows = out.shape[1]
    expected = (16, rows, channels) if rows <= SINGLE_ROWS_MAX else (16, -(-rows // MR), channels * MR)
    array(f, "u_panels", u_panels, dtype, expected)
    _check_bias(f, bias, has_bias, dtype, rows)
    work_range(f, first, last, n * -(-((out_h + 1) // 2) // rows_per_item))


@entry(_check_winograd)
@_jit_nogil
def winograd_forward(first, last, x, top, left, height_p, width_p, u_panels, bias, has_bias, out, columns, per_vector,
                     rows_per_item, out_h, out_w):
    """``out`` (N, O, out_h*out_w) = the stride-1 3x3 conv of ``x`` (N, C, H, W), zero-padded at (``top``,
    ``left``) to ``height_p x width_p``, plus ``bias`` when ``has_bias``; ``u_panels`` is
    ``transform_weight(weight)``; the transforms take ``per_vector`` tiles at a time (``lanes``).
    Runs work items ``first .. last`` of the ``N * ceil(tile rows / rows_per_item)`` (image, block
    of tile rows). Returns whether every stored value is finite.

    Tile (ty, tx) of an item is column ``(ty - ty0)*row_tiles + tx`` of its transformed input and
    products, ``row_tiles`` the tiles per row rounded up to whole vectors.
    """
    channels, out_channels = x.shape[1], out.shape[1]
    whole = per_vector == VECTOR_BYTES // x.itemsize
    tiles_h = (out_h + 1) // 2
    row_tiles = padded_tiles(out_w, per_vector)
    grid_h, grid_w = 2 * tiles_h + 2, 2 * row_tiles + 2  # the padded input, and zeros under the rounded-up tiles
    items_per_image = (tiles_h + rows_per_item - 1) // rows_per_item
    wide = (rows_per_item * row_tiles + columns - 1) // columns * columns
    plane = grid_h * grid_w
    padded = np.zeros(channels * plane, dtype=x.dtype)
    v = np.zeros(16 * channels * wide, dtype=x.dtype)
    m = np.zeros(16 * out_channels * wide, dtype=x.dtype)
    v_rows = np.arange(channels) * wide
    row_blocks = u_panels.shape[1]
    tile_rows = 1 if u_panels.shape[2] == channels else MR
    no_bias = np.zeros(tile_rows, dtype=x.dtype)  # the bias is added by the output transform
    runs = np.zeros(3, dtype=np.int64)
    flat = out.reshape(-1)
    zero = x.dtype.type(0)
    finite = True
    image = -1
    for item in range(first, last):
        b = item // items_per_image
        ty0 = (item - b * items_per_image) * rows_per_item
        ty1 = min(ty0 + rows_per_item, tiles_h)
        if b != image:
            image = b
            _pad_image(x, b, 0, channels, top, left, padded, grid_h, grid_w)
        for c in range(channels):
            for ty in range(ty0, ty1):
                for tx in range(0, row_tiles, per_vector):
                    at, to = c * plane + 2 * ty * grid_w + 2 * tx, c * wide + (ty - ty0) * row_tiles + tx
                    if whole:
                        _input_tiles(padded, at, grid_w, v, to, channels * wide)
                    else:
                        _input_tiles_half(padded, at, grid_w, v, to, channels * wide)
        count = (ty1 - ty0) * row_tiles
        for xi in range(16):
            for q0 in range(0, count, columns):
                runs[1], runs[2] = q0, min(columns, count - q0)
                for block in range(row_blocks):
                    o0 = block * tile_rows
                    _store(u_panels[xi, block], v, v_rows, (xi * channels) * wide + q0, channels, m,
                           (xi * out_channels + o0) * wide, wide, min(tile_rows, out_channels - o0), runs, 1, no_bias)
        for o in range(out_channels):
            shift = bias[o] if has_bias else zero
            for ty in range(ty0, ty1):
                for tx in range(0, row_tiles, per_vector):
                    at = o * wide + (ty - ty0) * row_tiles + tx
                    to = ((b * out_channels + o) * out_h + 2 * ty) * out_w + 2 * tx
                    columns_here, rows_here = min(2 * per_vector, out_w - 2 * tx), min(2, out_h - 2 * ty)
                    if whole:
                        finite &= _output_tiles(m, at, out_channels * wide, shift, flat, to, out_w, columns_here,
                                                rows_here)
                    else:
                        finite &= _output_tiles_half(m, at, out_channels * wide, shift, flat, to, out_w, columns_here,
                                                     rows_here)
    return finite
