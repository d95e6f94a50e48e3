"""The compiled int8 kernels (imported by ``kernels`` only when numba imports; see its docstring).

Weights are packed as ``[n / 16][k / 4][16][4]`` (``pack_vnni``), so that one 64-byte load
holds four input features of sixteen output features, exactly what ``vpdpbusd`` multiplies
against four activation bytes broadcast to every lane. Activations come in a buffer whose rows
are padded to whole tiles and to groups of four with zeros (the packed weights are padded the
same way). Two kinds of tile, written in LLVM IR, compute the same int32 sums:

- **VNNI** (x86 with AVX-512 VNNI, when numba compiles for the host CPU): around the
  ``llvm.x86.avx512.vpdpbusd.512`` intrinsic. LLVM turns numba's scalar ``u8 * s8`` loops into
  ``vpdpwssd`` (pairs of 16-bit products, half the work per instruction), never ``vpdpbusd``.
- **portable** (any CPU): the multiply-add in plain vector IR, 16-bit products summed in pairs
  (what x86 selects ``pmaddwd`` for) and then in fours.

Each driver runs serially or in parallel over output features (``parallel`` in the name);
``kernels`` picks one by the amount of work. The drivers check shapes, strides and lengths
before any load, since the tiles read through raw pointers.
"""
from __future__ import annotations

import llvmlite.binding
import numba
import numpy as np
from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic

_options = dict(nogil=True, cache=True, fastmath=False)

BLOCK = 16  # output features per packed block: one zmm of int32 sums
GROUP = 4   # input features per vpdpbusd lane


def host_has_vnni() -> bool:
    """Whether numba compiles for this host and the host has AVX-512 VNNI (and AVX-512 BW/F)."""
    if numba.config.CPU_NAME not in (None, "host") or numba.config.CPU_FEATURES is not None:
        return False  # compiling for another (or generic) CPU: the intrinsic may not exist there
    features = llvmlite.binding.get_host_cpu_features()
    return all(features.get(name, False) for name in ("avx512f", "avx512bw", "avx512vnni"))


VNNI = host_has_vnni()


def pack_vnni(wq: np.ndarray) -> np.ndarray:
    """int8 ``(N, K)`` -> ``(ceil(N/16), ceil(K/4), 64)``: ``packed[b, g, 4*j + q] = wq[16*b + j, 4*g + q]``, zero padded."""
    n_features, k_depth = wq.shape
    blocks, groups = -(-n_features // BLOCK), -(-k_depth // GROUP)
    padded = np.zeros((blocks * BLOCK, groups * GROUP), np.int8)
    padded[:n_features, :k_depth] = wq
    packed = padded.reshape(blocks, BLOCK, groups, GROUP).transpose(0, 2, 1, 3)
    return np.ascontiguousarray(packed).reshape(blocks, groups, BLOCK * GROUP)


# -- the tiles, in LLVM IR ----------------------------------------------------------------------------------------

_i8, _i32, _i64 = ir.IntType(8), ir.IntType(32), ir.IntType(64)
_v16 = ir.VectorType(_i32, BLOCK)


def _generic_dot(builder, acc, broadcast, weights):
    """``acc`` plus what ``vpdpbusd(broadcast, weights)`` adds, in plain vector IR, for any CPU.

    u8 x s8 products fit in 16 bits; each pair of them summed into 32 bits is the pattern x86
    selects ``pmaddwd`` (or ``vpdpwssd``) for, then the pairs of pairs are added.
    """
    bytes64, halves64 = ir.VectorType(_i8, 64), ir.VectorType(ir.IntType(16), 64)
    wide32 = ir.VectorType(_i32, 32)
    x = builder.zext(builder.bitcast(broadcast, bytes64), halves64)
    w = builder.sext(builder.bitcast(weights, bytes64), halves64)

    def lanes(vector, first, count, step=2):
        mask = ir.Constant(ir.VectorType(_i32, count), [first + step * i for i in range(count)])
        return builder.shuffle_vector(vector, ir.Constant(vector.type, ir.Undefined), mask)

    def product(first):
        return builder.mul(builder.sext(lanes(x, first, 32), wide32), builder.sext(lanes(w, first, 32), wide32))

    pairs = builder.add(product(0), product(1))                     # sums of two, as pmaddwd
    quads = builder.add(lanes(pairs, 0, 16), lanes(pairs, 1, 16))   # sums of four: one per output feature
    return builder.add(acc, quads)


def _make_tile(rows: int, blocks: int, prefetch: int = 0, vnni: bool = True):
    """An intrinsic: ``acc[(r * blocks + c) * 16 + j] = sum_k x[row0 + r, k] * w[block0 + c][k][j]`` over all k.

    ``vnni`` picks ``vpdpbusd`` or the portable multiply-add; ``prefetch`` (in groups) asks for
    the weights that far ahead, for the single-row tile that streams them once.

    ``tile(xq, x_offset, x_row_stride, packed, w_offset, w_block_stride, groups, acc)``: offsets
    and strides in elements of the (uint8 / int8) arrays. The ``rows * blocks`` accumulators
    live in registers across the loop over the ``groups`` groups of four input features.
    """
    @intrinsic
    def tile(typingctx, xq, x_offset, x_row_stride, packed, w_offset, w_block_stride, groups, acc):
        # Offsets count bytes of uint8 / int8 arrays: any other array type does not compile.
        arrays = ((xq, types.uint8), (packed, types.int8), (acc, types.int32))
        if not all(isinstance(array, types.Array) and array.dtype == dtype for array, dtype in arrays):
            raise TypeError(f"int8 tile: expected uint8 activations, int8 packed weights and int32 sums, got "
                            f"{xq}, {packed}, {acc}")
        signature = types.void(xq, x_offset, x_row_stride, packed, w_offset, w_block_stride, groups, acc)

        def codegen(context, builder, sig, args):
            xq_v, x_offset_v, x_stride_v, packed_v, w_offset_v, w_stride_v, groups_v, acc_v = args

            def data(position, value):
                return cgutils.create_struct_proxy(sig.args[position])(context, builder, value=value).data

            def as_i64(value):
                return builder.sext(value, _i64) if value.type.width < 64 else value

            x_base = builder.gep(data(0, xq_v), [as_i64(x_offset_v)])
            w_base = builder.gep(data(3, packed_v), [as_i64(w_offset_v)])
            acc_base = data(7, acc_v)
            x_stride, w_stride, groups_i64 = as_i64(x_stride_v), as_i64(w_stride_v), as_i64(groups_v)
            if vnni:  # declared only where it is called: other targets need not know the x86 intrinsic
                dot = cgutils.get_or_insert_function(builder.module, ir.FunctionType(_v16, [_v16, _v16, _v16]),
                                                     "llvm.x86.avx512.vpdpbusd.512")
            prefetch_hint = cgutils.get_or_insert_function(
                builder.module, ir.FunctionType(ir.VoidType(), [_i8.as_pointer(), _i32, _i32, _i32]),
                "llvm.prefetch.p0")
            zero = ir.Constant(_v16, None)
            entry = builder.basic_block
            loop = builder.append_basic_block("tile.loop")
            done = builder.append_basic_block("tile.done")
            builder.cbranch(builder.icmp_signed(">", groups_i64, ir.Constant(_i64, 0)), loop, done)

            builder.position_at_end(loop)
            group = builder.phi(_i64)
            group.add_incoming(ir.Constant(_i64, 0), entry)
            sums = []
            for _ in range(rows * blocks):
                phi = builder.phi(_v16)
                phi.add_incoming(zero, entry)
                sums.append(phi)
            weights = []
            for c in range(blocks):
                offset = builder.add(builder.mul(group, ir.Constant(_i64, BLOCK * GROUP)),
                                     builder.mul(w_stride, ir.Constant(_i64, c)))
                weights.append(builder.load(builder.bitcast(builder.gep(w_base, [offset]), _v16.as_pointer()),
                                            align=1))
                if prefetch:  # a hint only: prefetching past the end cannot fault
                    ahead = builder.gep(w_base, [builder.add(offset, ir.Constant(_i64, prefetch * BLOCK * GROUP))])
                    builder.call(prefetch_hint, [ahead, ir.Constant(_i32, 0), ir.Constant(_i32, 3),
                                                 ir.Constant(_i32, 1)])
            updated = []
            for r in range(rows):
                offset = builder.add(builder.mul(group, ir.Constant(_i64, GROUP)),
                                     builder.mul(x_stride, ir.Constant(_i64, r)))
                four_bytes = builder.load(builder.bitcast(builder.gep(x_base, [offset]), _i32.as_pointer()), align=1)
                lane = builder.insert_element(ir.Constant(_v16, ir.Undefined), four_bytes, ir.Constant(_i32, 0))
                broadcast = builder.shuffle_vector(lane, ir.Constant(_v16, ir.Undefined), ir.Constant(_v16, None))
                for c in range(blocks):
                    if vnni:
                        updated.append(builder.call(dot, [sums[r * blocks + c], broadcast, weights[c]]))
                    else:
                        updated.append(_generic_dot(builder, sums[r * blocks + c], broadcast, weights[c]))
            following = builder.add(group, ir.Constant(_i64, 1))
            group.add_incoming(following, loop)
            for phi, value in zip(sums, updated):
                phi.add_incoming(value, loop)
            builder.cbranch(builder.icmp_signed("<", following, groups_i64), loop, done)

            builder.position_at_end(done)
            results = []
            for value in updated:
                phi = builder.phi(_v16)
                phi.add_incoming(zero, entry)
                phi.add_incoming(value, loop)
                results.append(phi)
            for index, value in enumerate(results):
                target = builder.gep(acc_base, [ir.Constant(_i64, BLOCK * index)])
                builder.store(value, builder.bitcast(target, _v16.as_pointer()), align=4)
            return context.get_dummy_value()

        return signature, codegen

    return tile


# Tiles: 4 rows x 4 blocks for products, 1 row x 8 blocks for a single row (eight independent
# accumulators hide the multiply-add's latency), and narrower ones for the leftovers.
ROWS = 4


def _make_tiles(vnni: bool):
    """``tile(xq, row, rows, packed, block, blocks, acc)``: the sums of ``rows`` x ``blocks`` into ``acc``."""
    tile_4x4, tile_4x1 = _make_tile(4, 4, vnni=vnni), _make_tile(4, 1, vnni=vnni)
    tile_1x8, tile_1x4 = _make_tile(1, 8, 16, vnni=vnni), _make_tile(1, 4, vnni=vnni)
    tile_1x1 = _make_tile(1, 1, vnni=vnni)

    def tile(xq, row, rows, packed, block, blocks, acc):
        groups, row_length = packed.shape[1], xq.shape[1]
        x_offset, w_offset, w_stride = row * row_length, block * groups * BLOCK * GROUP, groups * BLOCK * GROUP
        if rows == 4 and blocks == 4:
            tile_4x4(xq, x_offset, row_length, packed, w_offset, w_stride, groups, acc)
        elif rows == 4:
            tile_4x1(xq, x_offset, row_length, packed, w_offset, w_stride, groups, acc)
        elif blocks == 8:
            tile_1x8(xq, x_offset, row_length, packed, w_offset, w_stride, groups, acc)
        elif blocks == 4:
            tile_1x4(xq, x_offset, row_length, packed, w_offset, w_stride, groups, acc)
        else:
            tile_1x1(xq, x_offset, row_length, packed, w_offset, w_stride, groups, acc)
    return numba.njit(**_options)(tile)


_vnni_tile = _make_tiles(vnni=True)        # compiled on first use: only where VNNI is
_portable_tile = _make_tiles(vnni=False)


# -- stores: what happens to each int32 sum ------------------------------------------------------------------------

def _stores():
    """The dequantizing and the requantizing store of one int32 sum.

    numba computes ``acc - x_zero_point * sums[n]`` in int64; it fits in int32 (products are
    limited to ``MAX_DEPTH`` input features so that it does), and converting from int32 gives
    the same float and vectorises sixteen to a register.
    """
    @numba.njit(inline="always", **_options)
    def corrected(acc, x_zero_point, sums, n):
        return np.float32(np.int32(acc - x_zero_point * sums[n]))

    @numba.njit(inline="always", **_options)
    def dequantized(out, m, n, acc, x_zero_point, sums, epilogue):
        scales, bias = epilogue
        out[m, n] = corrected(acc, x_zero_point, sums, n) * scales[n] + bias[n]

    @numba.njit(inline="always", **_options)
    def requantized(out, m, n, acc, x_zero_point, sums, epilogue):
        scales, bias, inverse_out_scale, out_zero_point, lower = epilogue
        real = corrected(acc, x_zero_point, sums, n) * scales[n] + bias[n]
        q = np.rint(real * inverse_out_scale) + np.float32(out_zero_point)
        out[m, n] = np.uint8(min(max(q, np.float32(lower)), np.float32(255.0)))

    return dequantized, requantized


# |acc| and |x_zero_point * sums| are each at most 255 * 128 per input feature: with at most this
# many, the int32 sums of vpdpbusd and their correction never overflow.
MAX_DEPTH = 32768


# -- drivers --------------------------------------------------------------------------------------------------------

def _packed_driver(store, tile_sums):
    """``driver(xq, m_rows, packed, n_features, sums, x_zero_point, epilogue, out)`` over padded activations.

    ``xq`` is ``(M', 4 * ceil(K / 4))`` uint8 with ``M' >= m_rows`` rounded up to whole tiles
    of rows (``ROWS``) when ``m_rows >= ROWS``; padding rows and columns hold zeros.
    """
    def driver(xq, m_rows, packed, n_features, sums, x_zero_point, epilogue, out):
        blocks_total, groups = packed.shape[0], packed.shape[1]
        rows_per_tile = ROWS if m_rows >= ROWS else 1
        padded_rows = -(-m_rows // rows_per_tile) * rows_per_tile
        if (packed.shape[2] != BLOCK * GROUP or xq.shape[1] != groups * GROUP or xq.shape[0] < padded_rows
                or blocks_total * BLOCK < n_features or n_features <= (blocks_total - 1) * BLOCK
                or sums.shape[0] != n_features or out.shape[0] != m_rows or out.shape[1] != n_features
                or groups * GROUP > MAX_DEPTH):
            raise ValueError("int8 kernel: inconsistent shapes of activations, packed weights, sums or output, "
                             "or more than MAX_DEPTH input features")
        if xq.strides[1] != 1 or xq.strides[0] != xq.shape[1] or packed.strides[2] != 1 or \
                packed.strides[1] != BLOCK * GROUP or packed.strides[0] != groups * BLOCK * GROUP:
            raise ValueError("int8 kernel: activations and packed weights must be C-contiguous")
        blocks_per_group = 8 if rows_per_tile == 1 else 4
        tiles = -(-blocks_total // blocks_per_group)
        for tile in numba.prange(tiles):
            acc = np.empty(ROWS * 8 * BLOCK, np.int32)
            first = tile * blocks_per_group
            blocks = min(blocks_per_group, blocks_total - first)
            for row in range(0, padded_rows, rows_per_tile):
                if blocks == blocks_per_group:
                    tile_sums(xq, row, rows_per_tile, packed, first, blocks, acc)
                    width = blocks
                else:  # the last, narrower tile: one block at a time
                    width = 1
                for start in range(first, first + blocks, width):
                    if width == 1:
                        tile_sums(xq, row, rows_per_tile, packed, start, 1, acc)
                    # a row's sums are contiguous in acc, as its outputs are in out: one loop, vectorised
                    column = start * BLOCK
                    columns = min(width * BLOCK, n_features - column)
                    for r in range(min(rows_per_tile, m_rows - row)):
                        at = r * width * BLOCK
                        for j in range(columns):
                            # unsigned indices: numba drops its negative-index fix-up, and LLVM vectorises
                            store(out, np.uintp(row + r), np.uintp(column + j), acc[np.uintp(at + j)],
                                  x_zero_point, sums, epilogue)
    return driver


def _compile(store, tile_sums, parallel):
    return numba.njit(parallel=parallel, **_options)(_packed_driver(store, tile_sums))


_store_dequantized, _store_requantized = _stores()
vnni_dequantized = _compile(_store_dequantized, _vnni_tile, False)
vnni_dequantized_parallel = _compile(_store_dequantized, _vnni_tile, True)
vnni_requantized = _compile(_store_requantized, _vnni_tile, False)
vnni_requantized_parallel = _compile(_store_requantized, _vnni_tile, True)
portable_dequantized = _compile(_store_dequantized, _portable_tile, False)
portable_dequantized_parallel = _compile(_store_dequantized, _portable_tile, True)
portable_requantized = _compile(_store_requantized, _portable_tile, False)
portable_requantized_parallel = _compile(_store_requantized, _portable_tile, True)


# -- activations ----------------------------------------------------------------------------------------------------

@numba.njit(**_options)
def dynamic_qparams(low, high, quant_max):
    """quint8 ``(scale, zero_point)`` for values from ``low`` to ``high`` (float32) and 0 (``MinMaxObserver``'s arithmetic).

    The caller takes ``low`` / ``high`` with numpy's ``min`` / ``max``, which are vectorised
    (a numba loop is not: LLVM keeps a floating min / max reduction scalar).
    """
    low = min(low, np.float32(0.0))
    high = max(high, np.float32(0.0))
    # high - low rounded to float32 once, as float(high) - float(low) then float32 is
    span = np.float32(np.float64(high) - np.float64(low))
    scale = max(span / np.float32(quant_max), np.float32(np.finfo(np.float32).eps))
    zero_point = np.float32(0.0) - np.rint(low / scale)
    return scale, np.int32(min(max(zero_point, np.float32(0.0)), np.float32(quant_max)))


@numba.njit(**_options)
def quantize_rows_padded(x, inverse_scale, zero_point, quant_max, out):
    """uint8 ``out[:M, :K]`` = ``x`` quantized; the rest of ``out`` (padding) is set to 0."""
    m_rows, k_depth = x.shape
    if out.shape[0] < m_rows or out.shape[1] < k_depth:
        raise ValueError("int8 kernel: the quantized activation buffer is smaller than the activations")
    # x * inverse + zero_point rounded once (fbgemm's FMA), as qtensor.quantize_array: exact in float64
    offset, top, inverse = np.float64(zero_point), np.float32(quant_max), np.float64(inverse_scale)
    for m in range(m_rows):
        for k in range(k_depth):
            q = np.rint(np.float32(np.float64(x[m, k]) * inverse + offset))
            out[m, k] = np.uint8(min(max(q, np.float32(0.0)), top))
        out[m, k_depth:] = 0
    out[m_rows:] = 0


def _dynamic_driver(product):
    """``driver(x, low, high, quant_max, packed, n_features, sums, weight_scales, bias)`` -> float32 (M, N).

    The dynamic Linear in one call: qparams from the range ``low``..``high`` of ``x``, ``x``
    quantized into a buffer padded for ``product`` (a VNNI driver), and the product itself.
    """
    def driver(x, low, high, quant_max, packed, n_features, sums, weight_scales, bias):
        m_rows = x.shape[0]
        scale, zero_point = dynamic_qparams(low, high, quant_max)
        rows_per_tile = ROWS if m_rows >= ROWS else 1
        xq = np.empty((-(-m_rows // rows_per_tile) * rows_per_tile, packed.shape[1] * GROUP), np.uint8)
        quantize_rows_padded(x, np.float32(1.0) / scale, zero_point, quant_max, xq)
        scales = (weight_scales * scale).astype(np.float32)
        out = np.empty((m_rows, n_features), np.float32)
        product(xq, m_rows, packed, n_features, sums, zero_point, (scales, bias), out)
        return out
    return driver


vnni_dynamic = numba.njit(**_options)(_dynamic_driver(vnni_dequantized))
vnni_dynamic_parallel = numba.njit(**_options)(_dynamic_driver(vnni_dequantized_parallel))
portable_dynamic = numba.njit(**_options)(_dynamic_driver(portable_dequantized))
portable_dynamic_parallel = numba.njit(**_options)(_dynamic_driver(portable_dequantized_parallel))
