"""A register-blocked matrix-multiply microkernel for numba, and the convolution built on it.

Imported on first use (through ``LazyModule``), so ``import corenn`` does not import numba.

Why not numpy's BLAS: the OpenBLAS inside numpy picks its kernels by CPU model and falls
back to its AVX2 ("Haswell") kernels on CPUs it does not know yet -- on the development
machine's AMD Zen 5 that is half the machine's floating-point width, and no environment
variable set after numpy is imported changes it. LLVM (under numba) knows the CPU it
compiles for, so a kernel written here runs at the width the machine has.

Why not a plain numba loop: LLVM keeps an accumulator in a register only if it is an SSA
value, and numba's arrays live on the heap, so ``acc[i, j] += a * b`` loads and stores
memory on every step (measured 7 GFLOP/s). ``microkernel`` is therefore written directly
as LLVM IR through ``numba.extending.intrinsic``: ``MR x NR`` accumulators as vector
values, one ``llvm.fma`` per vector per step of the shared dimension -- the BLIS design,
in which everything else (packing the operands into the order the kernel reads them,
edges, threads) is ordinary numba code (figures in docs/numba.md). Variants share that loop:
``microkernel_add`` adds to a tile, and ``microkernel_store`` (``microkernel_store_row`` for a
single row, ``microkernel_store_partial`` for a short last block of rows) stores the tile
straight from registers into the output, run by run.

The convolution does not build an im2col matrix at all: stride 1 reads B in place from each
image padded in cache (``conv_forward_stride1``); other strides have ``_pack_columns`` write
the im2col columns of ``NR`` output pixels straight into the packed panel the kernel reads, a
panel that stays in the core's cache while every block of output channels is computed from it.
Work items (image, group, block of pixels) are split over threads by ``corenn_numba._threads``;
each item owns its output tiles, so no locks are needed.
"""
from __future__ import annotations

import llvmlite.binding as llvm
import numba
import numpy as np
from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.core.errors import TypingError
from numba.extending import intrinsic, register_jitable

from corenn_numba._checks import array, entry, fail, floats, integer, integers, work_range
from corenn_numba._conv_jit import (_add, _copy, _copy_strided, _im2col, _inside, _zero, check_groups as
                                    _check_groups, check_weight_grad_inputs, check_windows_fit)


def _target_features() -> str:
    """The CPU features numba compiles for: ``NUMBA_CPU_FEATURES`` when set (portable caches), else the host's."""
    return numba.config.CPU_FEATURES or llvm.get_host_cpu_features().flatten()


#: Bytes in one vector register: 64 with AVX-512, else 32 (AVX2 / lower: LLVM splits wider vectors).
VECTOR_BYTES = 64 if "+avx512f" in _target_features() else 32
#: Rows of the output tile: with 32 vector registers 8 rows x 2 vectors of accumulators fit beside the
#: operands; with 16 registers (AVX2) 6 rows do (BLIS's Haswell kernel is 6 x 16 too).
MR = 8 if VECTOR_BYTES == 64 else 6
#: Vectors per tile row: two, so that each broadcast of an element of A feeds two FMAs.
VECTORS_PER_ROW = 2


def nr(dtype) -> int:
    """Columns of the output tile for ``dtype``: two vector registers of it."""
    return VECTORS_PER_ROW * VECTOR_BYTES // np.dtype(dtype).itemsize


def _check_float_arrays(floats, others=()):
    """The microkernels' typing: contiguous 1-d arrays, the float ones of one dtype (float32 or float64)."""
    if not all(isinstance(a, types.Array) and a.ndim == 1 and a.layout == "C" for a in floats + others):
        raise TypingError("microkernel takes contiguous 1-d arrays")
    if len({a.dtype for a in floats}) != 1 or floats[0].dtype not in (types.float32, types.float64):
        raise TypingError("microkernel takes float32 or float64 arrays of one dtype")
    if any(a.dtype != types.int64 for a in others):
        raise TypingError("microkernel's index arrays must be int64")


def _check_integers(*values):
    if not all(isinstance(v, types.Integer) for v in values):
        raise TypingError("microkernel's offsets, counts and strides must be integers")


class _Kernel:
    """What both microkernels generate: the tile's accumulation as LLVM IR, for one float dtype."""

    def __init__(self, context, builder, float_dtype, tile_rows=MR):
        self.builder = builder
        self.tile_rows = tile_rows
        self.float_type = ir.FloatType() if float_dtype == types.float32 else ir.DoubleType()
        self.item = 4 if float_dtype == types.float32 else 8
        self.lanes = VECTOR_BYTES // self.item
        self.vector = ir.VectorType(self.float_type, self.lanes)
        self.index = ir.IntType(64)
        self.suffix = f"v{self.lanes}{'f32' if self.item == 4 else 'f64'}"

    def const(self, k):
        return ir.Constant(self.index, k)

    def as_index(self, value):
        return self.builder.sext(value, self.index) if value.type.width < 64 else value

    def vector_at(self, base, offset):
        return self.builder.bitcast(self.builder.gep(base, [offset]), self.vector.as_pointer())

    def splat(self, scalar, vector_type=None):
        vector_type = vector_type or self.vector
        lanes = vector_type.count
        single = self.builder.insert_element(ir.Constant(vector_type, ir.Undefined), scalar,
                                             ir.Constant(ir.IntType(32), 0))
        return self.builder.shuffle_vector(single, ir.Constant(vector_type, ir.Undefined),
                                           ir.Constant(ir.VectorType(ir.IntType(32), lanes), [0] * lanes))

    def begin_loop(self, count, name):
        """Open a loop of ``count`` iterations (none when ``count`` <= 0) whose body is one block: returns the
        block before it, that block, the block after it and the iteration index (a phi, from 0)."""
        builder = self.builder
        entry = builder.block
        loop = builder.append_basic_block(f"{name}_loop")
        done = builder.append_basic_block(f"{name}_done")
        builder.cbranch(builder.icmp_signed(">", count, self.const(0)), loop, done)
        builder.position_at_end(loop)
        index = builder.phi(self.index)
        index.add_incoming(self.const(0), entry)
        return entry, loop, done, index

    def end_loop(self, index, count, loop, done):
        """Close :meth:`begin_loop`'s loop; the builder continues after it."""
        builder = self.builder
        following = builder.add(index, self.const(1))
        index.add_incoming(following, loop)
        builder.cbranch(builder.icmp_signed("<", following, count), loop, done)
        builder.position_at_end(done)

    def accumulate(self, a_ptr, b_ptr, rows_ptr, b_start, depth, initial=None):
        """``initial`` (default zero) plus the ``tile_rows`` x NR tile of A @ B, ``tile_rows * VECTORS_PER_ROW``
        vector values (row-major), see ``microkernel``."""
        builder, const = self.builder, self.const
        fma = cgutils.get_or_insert_function(builder.module, ir.FunctionType(self.vector, [self.vector] * 3),
                                             f"llvm.fma.{self.suffix}")
        rows = self.tile_rows
        initial = initial or [ir.Constant(self.vector, [0.0] * self.lanes)] * (rows * VECTORS_PER_ROW)

        # One iteration per step p of the shared dimension; the accumulators are loop-carried values.
        entry, loop, done, p = self.begin_loop(depth, "depth")
        accumulators = [builder.phi(self.vector) for _ in range(rows * VECTORS_PER_ROW)]
        for phi, value in zip(accumulators, initial):
            phi.add_incoming(value, entry)
        b_row = builder.add(b_start, builder.load(builder.gep(rows_ptr, [p])))
        b_vectors = [builder.load(self.vector_at(b_ptr, builder.add(b_row, const(v * self.lanes))), align=self.item)
                     for v in range(VECTORS_PER_ROW)]
        a_column = builder.mul(p, const(rows))
        updated = []
        for i in range(rows):
            broadcast = self.splat(builder.load(builder.gep(a_ptr, [builder.add(a_column, const(i))])))
            for v in range(VECTORS_PER_ROW):
                updated.append(builder.call(fma, [broadcast, b_vectors[v], accumulators[i * VECTORS_PER_ROW + v]]))
        for phi, value in zip(accumulators, updated):
            phi.add_incoming(value, loop)
        self.end_loop(p, depth, loop, done)
        results = [builder.phi(self.vector) for _ in range(rows * VECTORS_PER_ROW)]  # LLVM wants every phi first
        for k, result in enumerate(results):
            result.add_incoming(initial[k], entry)
            result.add_incoming(updated[k], loop)
        return results


def _tile_codegen(accumulate):
    def codegen(context, builder, signature, args):
        kernel = _Kernel(context, builder, signature.args[0].dtype)
        a_ptr, b_ptr, rows_ptr, tile_ptr = (context.make_array(signature.args[k])(context, builder, args[k]).data
                                            for k in (0, 1, 2, 4))
        tile_vectors = [kernel.vector_at(tile_ptr, kernel.const(k * kernel.lanes))
                        for k in range(MR * VECTORS_PER_ROW)]
        initial = [builder.load(at, align=kernel.item) for at in tile_vectors] if accumulate else None
        results = kernel.accumulate(a_ptr, b_ptr, rows_ptr, kernel.as_index(args[3]), kernel.as_index(args[5]),
                                    initial)
        for result, at in zip(results, tile_vectors):
            builder.store(result, at, align=kernel.item)
        return context.get_dummy_value()

    return codegen


@intrinsic
def microkernel(typingctx, a_panel, b_data, b_rows, b_start, tile, depth):
    """``tile`` (MR*NR, row-major) = A (MR x depth) @ B (depth x NR).

    ``a_panel[p*MR + i]`` is A[i, p] (A packed: each step of the shared dimension reads MR
    consecutive scalars). Row p of B is the NR contiguous elements at
    ``b_data[b_start + b_rows[p]:]``: a packed panel (``b_rows[p] = p*NR``) or rows read in
    place from a larger array -- the padded input of an implicit-GEMM convolution. Float
    arrays share one dtype (float32 or float64) and are contiguous and 1-d; the caller
    guarantees that every row read lies inside ``b_data``.
    """
    _check_float_arrays((a_panel, b_data, tile), (b_rows,))
    _check_integers(b_start, depth)
    return types.void(a_panel, b_data, b_rows, b_start, tile, depth), _tile_codegen(accumulate=False)


@intrinsic
def microkernel_add(typingctx, a_panel, b_data, b_rows, b_start, tile, depth):
    """``tile += A @ B``: ``microkernel`` starting from the tile's values, for sums over several calls."""
    _check_float_arrays((a_panel, b_data, tile), (b_rows,))
    _check_integers(b_start, depth)
    return types.void(a_panel, b_data, b_rows, b_start, tile, depth), _tile_codegen(accumulate=True)


def _store_kernel(tile_rows: int, name: str):
    def microkernel_store(typingctx, a_panel, b_data, b_rows, b_start, depth, out, out_start, row_stride, rows, runs,
                          run_count, row_bias):
        """``microkernel``'s tile plus ``row_bias[i]`` on each row i, stored straight into ``out`` in runs of columns.

        Tile row i (for i < ``rows``) goes to ``out[out_start + i*row_stride + ...]``, one run k at a
        time: tile columns ``runs[3k] .. runs[3k] + runs[3k+2]`` to the ``runs[3k+2]`` elements from
        offset ``runs[3k+1]``. Each run is one masked vector store per register, so a tile that
        covers the end of one output row and the start of the next (an implicit-GEMM convolution's
        grid) is stored without a round trip through memory. ``row_bias`` holds a value per tile row.
        Returns whether every stored value is finite (checked in registers, so that a float32
        overflow needs no second pass over the output). The caller guarantees that every run lies
        inside ``out`` and inside the tile.
        """
        _check_float_arrays((a_panel, b_data, out, row_bias), (b_rows, runs))
        _check_integers(b_start, depth, out_start, row_stride, rows, run_count)

        def codegen(context, builder, signature, args):
            kernel = _Kernel(context, builder, signature.args[0].dtype, tile_rows)
            a_ptr, b_ptr, rows_ptr, out_ptr, runs_ptr, bias_ptr = (
                context.make_array(signature.args[k])(context, builder, args[k]).data for k in (0, 1, 2, 5, 9, 11))
            b_start_value, depth_value, out_start_value, stride_value, rows_value, run_count_value = (
                kernel.as_index(args[k]) for k in (3, 4, 6, 7, 8, 10))
            results = kernel.accumulate(a_ptr, b_ptr, rows_ptr, b_start_value, depth_value)
            const, lanes = kernel.const, kernel.lanes
            biased = [[builder.fadd(results[i * VECTORS_PER_ROW + v],
                                    kernel.splat(builder.load(builder.gep(bias_ptr, [const(i)]))))
                       for v in range(VECTORS_PER_ROW)] for i in range(tile_rows)]
            mask_type = ir.VectorType(ir.IntType(1), lanes)
            lane_type = ir.VectorType(ir.IntType(64), lanes)
            store = cgutils.get_or_insert_function(
                builder.module, ir.FunctionType(ir.VoidType(), [kernel.vector, kernel.vector.as_pointer(), ir.IntType(32),
                                                                mask_type]), f"llvm.masked.store.{kernel.suffix}.p0")
            columns = [ir.Constant(lane_type, [v * lanes + k for k in range(lanes)]) for v in range(VECTORS_PER_ROW)]
            row_wanted = [kernel.splat(builder.icmp_signed("<", const(i), rows_value), mask_type) for i in range(tile_rows)]

            # One iteration per run: the masks pick its tile columns, the base pointer shifts them onto its output.
            # ``bad`` collects, lane by lane, the stored values that are inf or nan (v - v is nan only for those).
            no_lanes = ir.Constant(mask_type, [0] * lanes)
            entry, loop, done, k = kernel.begin_loop(run_count_value, "run")
            bad = builder.phi(mask_type)
            bad.add_incoming(no_lanes, entry)
            bad_now = bad
            first, offset, length = (builder.load(builder.gep(runs_ptr, [builder.add(builder.mul(k, const(3)), const(f))]))
                                     for f in range(3))
            first_lanes = kernel.splat(first, lane_type)
            end_lanes = kernel.splat(builder.add(first, length), lane_type)
            in_run = [builder.and_(builder.icmp_signed(">=", c, first_lanes), builder.icmp_signed("<", c, end_lanes))
                      for c in columns]
            shift = builder.sub(builder.add(out_start_value, offset), first)
            for i in range(tile_rows):
                row_start = builder.add(shift, builder.mul(const(i), stride_value))
                for v in range(VECTORS_PER_ROW):
                    mask = builder.and_(in_run[v], row_wanted[i])
                    builder.call(store, [biased[i][v], kernel.vector_at(out_ptr, builder.add(row_start, const(v * lanes))),
                                         ir.Constant(ir.IntType(32), kernel.item), mask])
                    difference = builder.fsub(biased[i][v], biased[i][v])
                    bad_now = builder.or_(bad_now, builder.and_(mask, builder.fcmp_unordered("uno", difference,
                                                                                               difference)))
            bad.add_incoming(bad_now, loop)
            kernel.end_loop(k, run_count_value, loop, done)
            bad_lanes = builder.phi(mask_type)
            bad_lanes.add_incoming(no_lanes, entry)
            bad_lanes.add_incoming(bad_now, loop)
            reduce_or = cgutils.get_or_insert_function(builder.module, ir.FunctionType(ir.IntType(1), [mask_type]),
                                                       f"llvm.vector.reduce.or.v{lanes}i1")
            return builder.not_(builder.call(reduce_or, [bad_lanes]))

        return (types.boolean(a_panel, b_data, b_rows, b_start, depth, out, out_start, row_stride, rows, runs, run_count,
                           row_bias), codegen)

    microkernel_store.__name__ = microkernel_store.__qualname__ = name
    return intrinsic(microkernel_store)


#: ``microkernel_store`` for MR x NR tiles (``a_panel`` packed by ``pack_weight``).
microkernel_store = _store_kernel(MR, "microkernel_store")
#: ``microkernel_store`` for a single row, 1 x NR: ``a_panel`` is that row itself. For outputs with fewer channels
#: than half a tile (a conv's input gradient on 1 or 3 channels), where MR rows would mostly compute padding: per
#: step of the shared dimension it loads as much of B and does a MR-th of the multiply-adds.
microkernel_store_row = _store_kernel(1, "microkernel_store_row")
#: Rows of the tile for a weight's last block when it has at most this many rows (``pack_weight``).
PARTIAL_ROWS = 4
#: ``microkernel_store`` for ``PARTIAL_ROWS`` x NR tiles: the last block of a weight whose row count leaves a short
#: remainder, so that it does not cost a whole tile. With AVX2's 6-row tiles that is most channel counts: 64
#: rows are ten tiles and one of 4 rows (not eleven of 6), 16 are two and one of 4 (not three).
microkernel_store_partial = _store_kernel(PARTIAL_ROWS, "microkernel_store_partial")


_jit = numba.njit(cache=True)
# The drivers release the GIL: corenn_numba._threads runs slices of their work items on Python threads.
_jit_nogil = numba.njit(cache=True, nogil=True)


# ---------------------------------------------------------------------------------------------------------
# Argument checks (see corenn_numba._checks). The microkernel reads its operands through raw pointers, so
# what the drivers below index with -- every array's shape, the packed panels' sizes, the tile width
# ``columns`` (the kernel stores MR x nr(dtype) elements) and the geometry of the padded input that the
# implicit GEMM reads in place -- is checked against the arrays before a driver runs.
# ---------------------------------------------------------------------------------------------------------

def _flag(function, name, value):
    if type(value) is not bool:
        raise TypeError(f"{function}(): argument '{name}' must be a bool, not {type(value).__name__}")


def _check_columns(function, columns, dtype):
    integer(function, "columns", columns, nr(dtype), nr(dtype))


def _check_bias(function, bias, has_bias, dtype, size):
    _flag(function, "has_bias", has_bias)
    array(function, "bias", bias, dtype, (size,) if has_bias else None, ndim=1)


def _check_weight_panels(function, weight_panels, dtype, channels, out_channels, kh, kw):
    """``weight_panels`` as ``pack_weight`` makes them: (groups, row blocks, depth*MR), or single rows (groups, O/g,
    depth) for fewer than ``SINGLE_ROWS_MAX`` output channels per group; returns groups."""
    array(function, "weight_panels", weight_panels, dtype, ndim=3)
    groups = _check_groups(function, channels, out_channels, weight_panels.shape[0])
    rows, depth = out_channels // groups, channels // groups * kh * kw
    expected = (groups, rows, depth) if rows <= SINGLE_ROWS_MAX else (groups, -(-rows // MR), depth * MR)
    if weight_panels.shape != expected:
        fail(function, f"argument 'weight_panels' must have shape {expected} for {channels} input and "
                       f"{out_channels} output channels under a {kh}x{kw} kernel, got {weight_panels.shape}")
    return groups


def _check_conv_forward(first, last, x, weight_panels, bias, has_bias, out, columns, kh, kw, sh, sw, ph, pw, dh, dw,
                        out_h, out_w):
    f = "conv_forward"
    dtype = floats(f, "x", x, ndim=4)
    integers(f, "kh kw sh sw dh dw", (kh, kw, sh, sw, dh, dw), 1)
    integers(f, "ph pw out_h out_w", (ph, pw, out_h, out_w), 0)
    check_windows_fit(f, x.shape[2], x.shape[3], kh, kw, ph, pw, dh, dw)
    array(f, "out", out, dtype, ndim=3, writeable=True)
    if out.shape != (x.shape[0], out.shape[1], out_h * out_w):
        fail(f, f"argument 'out' must have shape (N, O, out_h*out_w) = ({x.shape[0]}, O, {out_h * out_w}), "
                f"got {out.shape}")
    groups = _check_weight_panels(f, weight_panels, dtype, x.shape[1], out.shape[1], kh, kw)
    _check_bias(f, bias, has_bias, dtype, out.shape[1])
    _check_columns(f, columns, dtype)
    work_range(f, first, last, x.shape[0] * groups * -(-out.shape[2] // columns))


def _check_conv_forward_stride1(first, last, x, top, left, height_p, width_p, weight_panels, bias, has_bias, out,
                                columns, line_blocks, kh, kw, dh, dw, out_h, out_w):
    f = "conv_forward_stride1"
    dtype = floats(f, "x", x, ndim=4)
    n, channels, height, width = x.shape
    integers(f, "top left height_p width_p", (top, left, height_p, width_p), 0)
    integers(f, "kh kw dh dw out_h out_w", (kh, kw, dh, dw, out_h, out_w), 1)
    _check_columns(f, columns, dtype)
    if height + top > height_p or width + left > width_p:
        fail(f, f"the padded grid {height_p}x{width_p} does not hold the {height}x{width} input at ({top}, {left})")
    if out_h + (kh - 1) * dh != height_p or out_w + (kw - 1) * dw != width_p:
        fail(f, f"an {out_h}x{out_w} output of a {kh}x{kw} kernel (dilation {dh}, {dw}) is not a stride-1 conv of "
                f"the padded input's {height_p}x{width_p}")
    array(f, "out", out, dtype, ndim=3, writeable=True)
    if out.shape != (n, out.shape[1], out_h * out_w):
        fail(f, f"argument 'out' must have shape ({n}, O, {out_h * out_w}), got {out.shape}")
    groups = _check_weight_panels(f, weight_panels, dtype, channels, out.shape[1], kh, kw)
    _check_bias(f, bias, has_bias, dtype, out.shape[1])
    integer(f, "line_blocks", line_blocks, 0)
    if line_blocks not in (0, -(-out_w // columns)):
        fail(f, f"argument 'line_blocks' must be 0 (blocks along the grid) or {-(-out_w // columns)} (blocks of "
                f"{columns} along each of the {out_w}-pixel output rows), got {line_blocks}")
    work_range(f, first, last, n * groups * image_blocks(line_blocks, columns, width_p, out_h, out_w))


def _check_conv_weight_grad_stride1(first, last, x, grad, groups, input_rows, row_blocks, wide, columns, kh, kw, dh,
                                    dw, top, left, height_p, width_p, out_h, out_w):
    f = "conv_weight_grad_stride1"
    dtype = floats(f, "x", x, ndim=4, contiguous=False)  # a view, cropped by crop_negative_pads
    n, channels, height, width = x.shape
    integers(f, "kh kw dh dw out_h out_w", (kh, kw, dh, dw, out_h, out_w), 1)
    integers(f, "row_blocks wide top left height_p width_p", (row_blocks, wide, top, left, height_p, width_p), 0)
    _flag(f, "input_rows", input_rows)
    array(f, "grad", grad, dtype, ndim=4)
    if grad.shape != (n, grad.shape[1], out_h, out_w):
        fail(f, f"argument 'grad' must have shape ({n}, O, {out_h}, {out_w}), got {grad.shape}")
    groups = _check_groups(f, channels, grad.shape[1], groups)
    _check_columns(f, columns, dtype)
    rows, cols = channels // groups, grad.shape[1] // groups
    if not input_rows:
        rows, cols = cols, rows
    if wide != -(-cols // columns) * columns or row_blocks != -(-rows // MR):
        fail(f, f"wide={wide} and row_blocks={row_blocks} must be {cols} channels rounded up to {columns} and "
                f"{rows} rounded up to blocks of {MR}")
    if height + top > height_p or width + left > width_p or out_h + (kh - 1) * dh != height_p or \
            out_w + (kw - 1) * dw != width_p:
        fail(f, f"the padded grid {height_p}x{width_p} does not hold the {height}x{width} input at ({top}, {left}) "
                f"or is not where the {out_h}x{out_w} output's windows end")
    work_range(f, first, last, n)


def _check_conv_weight_grad_im2col(first, last, x, grad, groups, columns, kh, kw, sh, sw, ph, pw, dh, dw, out_h,
                                   out_w):
    f = "conv_weight_grad_im2col"
    dtype = check_weight_grad_inputs(f, first, last, x, grad, groups, kh, kw, sh, sw, ph, pw, dh, dw, out_h, out_w)
    _check_columns(f, columns, dtype)


def _check_pack_rows(a, panels):
    dtype = floats("pack_rows", "a", a, ndim=2, contiguous=False)
    array("pack_rows", "panels", panels, dtype, (-(-a.shape[0] // MR), a.shape[1] * MR), writeable=True)


def _check_matmul_columns(first, last, a_panels, m, b, out, bias, has_bias, columns):
    f = "matmul_columns"
    dtype = floats(f, "b", b, ndim=2, contiguous=False)
    depth, n = b.shape
    m = integer(f, "m", m)
    array(f, "a_panels", a_panels, dtype, (-(-m // MR), depth * MR))
    array(f, "out", out, dtype, (m, n), contiguous=False, writeable=True)
    _check_bias(f, bias, has_bias, dtype, n)
    _check_columns(f, columns, dtype)
    work_range(f, first, last, -(-n // columns))


@_jit
def _pack_columns(image, c0, channels, panel, q0, count, columns, kh, kw, sh, sw, ph, pw, dh, dw, out_w):
    """The im2col columns of output pixels ``q0 .. q0+count`` of ``image`` (C, H, W), packed for ``microkernel``.

    ``panel[p*columns + j]`` is the input under kernel tap ``p = (c*kh + i)*kw + j_k`` (input
    channels ``c0 .. c0+channels``) for output pixel ``q0 + j``; taps outside the input and
    pixels past ``count`` are zero. The pixels are cut into runs along output rows, so each
    (tap, run) is one contiguous (or strided) copy.
    """
    height, width = image.shape[1], image.shape[2]
    for c in range(channels):
        plane = image[c0 + c]
        for i in range(kh):
            for j in range(kw):
                row = panel[((c * kh + i) * kw + j) * columns:((c * kh + i) * kw + j + 1) * columns]
                off_w = j * dw - pw
                lo, hi = _inside(off_w, sw, width, out_w)
                filled = 0
                while filled < count:
                    y = (q0 + filled) // out_w
                    x0 = q0 + filled - y * out_w
                    run = min(out_w - x0, count - filled)
                    dst = row[filled:filled + run]
                    ih = y * sh - ph + i * dh
                    if ih < 0 or ih >= height:
                        _zero(dst)
                    else:
                        a = min(max(lo - x0, 0), run)
                        b = min(max(hi - x0, a), run)
                        _zero(dst[:a])
                        if sw == 1:
                            _copy(dst[a:b], plane[ih, x0 + a + off_w:])
                        else:
                            _copy_strided(dst[a:b], plane[ih, (x0 + a) * sw + off_w:], sw)
                        _zero(dst[b:])
                    filled += run
                _zero(row[count:])


@_jit
def _put_strided(dst, src, stride):
    for k in range(src.shape[0]):
        dst[k * stride] = src[k]


@entry(_check_conv_forward)
@_jit_nogil
def conv_forward(first, last, x, weight_panels, bias, has_bias, out, columns, kh, kw, sh, sw, ph, pw, dh, dw,
                 out_h, out_w):
    """``out`` (N, O, out_h*out_w) = conv of ``x`` (N, C, H, W), plus ``bias`` (O,) when ``has_bias``.

    Any stride, padding and dilation: each block of ``columns`` (``nr(dtype)``) output pixels
    is packed by ``_pack_columns``. ``weight_panels`` (groups, row_blocks, depth*MR) is the
    weight packed by ``pack_weight``. Runs work items ``first .. last`` of the
    ``N * groups * ceil(out_h*out_w / columns)`` (image, group, pixel block), so that
    threads can split them. Returns whether every stored value is finite.
    """
    groups, row_blocks = weight_panels.shape[0], weight_panels.shape[1]
    c_per_group = x.shape[1] // groups
    o_per_group = out.shape[1] // groups
    depth = c_per_group * kh * kw
    plane = out_h * out_w
    col_blocks = (plane + columns - 1) // columns
    panel_rows = np.arange(depth) * columns
    panel = np.empty(depth * columns, dtype=x.dtype)
    tile_rows = 1 if weight_panels.shape[2] == depth else MR
    row_bias = _bias_blocks(bias, has_bias, groups, row_blocks, o_per_group, tile_rows)
    flat = out.reshape(-1)
    run = np.zeros(3, dtype=np.int64)
    finite = True
    for item in range(first, last):
        b = item // (groups * col_blocks)
        g = item // col_blocks - b * groups
        q0 = (item - (b * groups + g) * col_blocks) * columns
        count = min(columns, plane - q0)
        _pack_columns(x[b], g * c_per_group, c_per_group, panel, q0, count, columns,
                     kh, kw, sh, sw, ph, pw, dh, dw, out_w)
        run[1], run[2] = q0, count
        for block in range(row_blocks):
            o0 = g * o_per_group + block * tile_rows
            finite &= _store(weight_panels[g, block], panel, panel_rows, 0, depth, flat,
                             (b * out.shape[1] + o0) * plane, plane, min(tile_rows, o_per_group - block * tile_rows),
                             run, 1, row_bias[g, block])
    return finite


@_jit
def _bias_blocks(bias, has_bias, groups, row_blocks, o_per_group, tile_rows):
    """``bias`` (O,) as (groups, row_blocks, tile_rows): each block of tile rows' values, zero past the group's."""
    blocks = np.zeros((groups, row_blocks, tile_rows), dtype=bias.dtype)
    if has_bias:
        for g in range(groups):
            for o in range(o_per_group):
                blocks[g, o // tile_rows, o % tile_rows] = bias[g * o_per_group + o]
    return blocks


@numba.njit(cache=True, inline="always")  # a call per tile: inlined, it costs nothing (measured 4% as a call)
def _store(weight_panel, b_data, b_rows, b_start, depth, out, out_start, row_stride, rows, runs, run_count, row_bias):
    """``microkernel_store``, or as ``pack_weight`` laid the block out: ``microkernel_store_row`` for a weight of
    single rows, ``microkernel_store_partial`` for a last block of at most ``PARTIAL_ROWS`` rows."""
    if weight_panel.shape[0] == depth:
        return microkernel_store_row(weight_panel, b_data, b_rows, b_start, depth, out, out_start, row_stride, 1,
                                     runs, run_count, row_bias)
    if rows <= PARTIAL_ROWS < MR:
        return microkernel_store_partial(weight_panel, b_data, b_rows, b_start, depth, out, out_start, row_stride,
                                         rows, runs, run_count, row_bias)
    return microkernel_store(weight_panel, b_data, b_rows, b_start, depth, out, out_start, row_stride, rows, runs,
                             run_count, row_bias)


@_jit
def _grid_runs(q0, columns, grid_width, out_h, out_w, runs):
    """The runs (``microkernel_store``) of tile columns ``j`` at grid positions ``q0 + j = y*grid_width + x`` that
    are output pixels (x < out_w, y < out_h), each to offset ``y*out_w + x``; returns how many."""
    count = 0
    j = 0
    while j < columns:
        y = (q0 + j) // grid_width
        x = q0 + j - y * grid_width
        if y >= out_h:
            break
        if x >= out_w:  # the padding columns of the grid: computed, not wanted
            j += grid_width - x
            continue
        length = min(out_w - x, columns - j)
        runs[3 * count], runs[3 * count + 1], runs[3 * count + 2] = j, y * out_w + x, length
        count += 1
        j += length
    return count


@_jit
def _pad_image(x, b, c0, channels, top, left, padded, height_p, width_p):
    """Channels ``c0 .. c0+channels`` of image ``b`` into ``padded`` (channels, Hp, Wp, flat) at (top, left).

    Only the image's own elements are written: the borders stay as they were (zero: the
    buffer is zeroed once and reused for every image of a slice)."""
    height, width = x.shape[2], x.shape[3]
    for c in range(channels):
        plane = x[b, c0 + c]
        base = (c * height_p + top) * width_p + left
        for y in range(height):
            row, at = plane[y], base + y * width_p
            destination = padded[at:at + width]
            for k in range(width):
                destination[k] = row[k]


def stride1_line_blocks(columns, width_p, out_h, out_w):
    """``conv_forward_stride1``'s ``line_blocks``: tiles along the padded grid (0) or along each output row
    (``ceil(out_w / columns)``), whichever computes fewer tiles per image.

    Along the grid a tile's columns run on across the ``Wp - out_w`` padding columns into the next row, so the
    padding is computed too (2 of every 34 columns for a 3x3 'same' conv on 32x32). Along rows nothing is
    computed past an output row's end but what rounds it up to whole tiles: none where ``out_w`` is a multiple
    of ``columns`` (32x32 images), much where rows are short (16 pixels in tiles of 32).
    """
    along_rows = -(-out_w // columns)
    return along_rows if out_h * along_rows < image_blocks(0, columns, width_p, out_h, out_w) else 0


@register_jitable  # plain Python for conv.py and the checks, inlined in the driver
def image_blocks(line_blocks, columns, width_p, out_h, out_w):
    """Tiles of ``columns`` output positions per image and group (see ``stride1_line_blocks``)."""
    if line_blocks:
        return out_h * line_blocks
    return -(-((out_h - 1) * width_p + out_w) // columns)  # grid positions up to the last wanted pixel


@entry(_check_conv_forward_stride1)
@_jit_nogil
def conv_forward_stride1(first, last, x, top, left, height_p, width_p, weight_panels, bias, has_bias, out, columns,
                         line_blocks, kh, kw, dh, dw, out_h, out_w):
    """Stride-1 ``conv_forward`` as an implicit GEMM: B is read in place from the zero-padded input.

    ``x`` (N, C, H, W) sits at (``top``, ``left``) of a zero grid ``Hp x Wp``; each work item
    pads its image's channels into a buffer of this slice (once per image: it stays in the
    core's cache while the microkernel reads it). With stride 1 the input under kernel tap
    (c, i, j) for output pixel (y, x) is at flat offset ``c*Hp*Wp + i*dh*Wp + j*dw + y*Wp + x``
    of that buffer: for consecutive grid positions ``y*Wp + x`` the rows of B are contiguous
    runs of it, so nothing is packed. A tile is ``columns`` consecutive grid positions: along
    the grid (``line_blocks`` 0), or ``line_blocks`` tiles per output row
    (``stride1_line_blocks`` picks); the positions that are not output pixels are computed
    and not stored. Runs work items ``first .. last`` of the (image, group, tile) items.
    Returns whether every stored value is finite.
    """
    n, channels = x.shape[0], x.shape[1]
    groups, row_blocks = weight_panels.shape[0], weight_panels.shape[1]
    c_per_group = channels // groups
    o_per_group = out.shape[1] // groups
    depth = c_per_group * kh * kw
    col_blocks = image_blocks(line_blocks, columns, width_p, out_h, out_w)
    tap_rows = np.empty(depth, dtype=np.int64)
    for c in range(c_per_group):
        for i in range(kh):
            for j in range(kw):
                tap_rows[(c * kh + i) * kw + j] = (c * height_p + i * dh) * width_p + j * dw
    tile_rows = 1 if weight_panels.shape[2] == depth else MR
    row_bias = _bias_blocks(bias, has_bias, groups, row_blocks, o_per_group, tile_rows)
    padded = np.zeros(c_per_group * height_p * width_p + columns, dtype=x.dtype)  # + a tile's reach past the end
    flat = out.reshape(-1)
    plane = out_h * out_w
    runs = np.zeros(3 * (columns + 1), dtype=np.int64)
    finite = True
    image = -1
    for item in range(first, last):
        b = item // (groups * col_blocks)
        g = item // col_blocks - b * groups
        if b * groups + g != image:
            image = b * groups + g
            _pad_image(x, b, g * c_per_group, c_per_group, top, left, padded, height_p, width_p)
        tile = item - (b * groups + g) * col_blocks
        if line_blocks:  # the tile's positions end with its output row
            y = tile // line_blocks
            x0 = (tile - y * line_blocks) * columns
            q0, span = y * width_p + x0, min(columns, out_w - x0)
        else:
            q0, span = tile * columns, columns
        run_count = _grid_runs(q0, span, width_p, out_h, out_w, runs)
        for block in range(row_blocks):
            o0 = g * o_per_group + block * tile_rows
            finite &= _store(weight_panels[g, block], padded, tap_rows, q0, depth, flat,
                             (b * out.shape[1] + o0) * plane, plane, min(tile_rows, o_per_group - block * tile_rows),
                             runs, run_count, row_bias[g, block])
    return finite


#: Up to this many output channels per group, a conv's weight is used one row at a time
#: (``microkernel_store_row``): MR rows would mostly compute padding.
SINGLE_ROWS_MAX = MR // 2


def pack_weight(weight_g):
    """(groups, O/g, depth) -> (groups, row_blocks, depth*MR): ``[g, blk, p*MR + i] = weight_g[g, blk*MR + i, p]``.

    A last block of at most ``PARTIAL_ROWS`` rows is laid out for ``microkernel_store_partial``:
    ``[g, last, p*PARTIAL_ROWS + i]``, in the first ``depth*PARTIAL_ROWS`` elements. Rows past O/g
    (the last block's padding) are zero; their results are never stored. With at most
    ``SINGLE_ROWS_MAX`` rows per group the weight is returned as it is (contiguous): single rows.
    """
    groups, rows, depth = weight_g.shape
    if rows <= SINGLE_ROWS_MAX:
        return np.ascontiguousarray(weight_g)
    blocks = -(-rows // MR)
    padded = np.zeros((groups, blocks * MR, depth), dtype=weight_g.dtype)
    padded[:, :rows] = weight_g
    panels = np.ascontiguousarray(padded.reshape(groups, blocks, MR, depth).transpose(0, 1, 3, 2)).reshape(
        groups, blocks, depth * MR)
    last = rows - (blocks - 1) * MR
    if last <= PARTIAL_ROWS < MR:
        panels[:, -1] = 0
        panels[:, -1, :depth * PARTIAL_ROWS] = padded[:, -MR:-MR + PARTIAL_ROWS].transpose(0, 2, 1).reshape(groups, -1)
    return panels


def crop_negative_pads(x, pads):
    """``x`` (N, C, H, W) without the rows and columns a negative pad drops, and the pads with those set to 0.

    The input gradient of a conv padded by more than its kernel's reach runs as a conv with
    negative padding, and a ``conv_transpose`` with output_padding above its padding is the
    gradient of a conv that ignores its input's last rows.
    """
    (top, bottom), (left, right) = pads
    x = x[:, :, max(-top, 0):x.shape[2] - max(-bottom, 0), max(-left, 0):x.shape[3] - max(-right, 0)]
    return x, ((max(top, 0), max(bottom, 0)), (max(left, 0), max(right, 0)))


#: Grid positions per microkernel call of the weight gradient: the B rows of one call (128 bytes each for
#: float32) then stay in the 48 KB L1 while every block of A rows reads them.
WEIGHT_GRAD_STEPS = 128


@intrinsic
def _transpose8(typingctx, planes, k0, y, x, out, start, stride):
    """``out[start + c*stride + r] = planes[k0 + r, y, x + c]`` for r, c < 8: an 8 x 8 block transposed in registers.

    ``planes`` is a 3-d float array whose last axis is contiguous; ``out`` a contiguous 1-d one of
    the same dtype. The caller guarantees that every element lies inside both.
    """
    if not (isinstance(planes, types.Array) and planes.ndim == 3 and isinstance(out, types.Array) and out.ndim == 1
            and out.layout == "C" and planes.dtype == out.dtype and out.dtype in (types.float32, types.float64)):
        raise TypingError("_transpose8 takes a 3-d and a contiguous 1-d float array of one dtype")
    _check_integers(k0, y, x, start, stride)

    def codegen(context, builder, signature, args):
        planes_type, out_type = signature.args[0], signature.args[4]
        kernel = _Kernel(context, builder, out_type.dtype)
        row_type = ir.VectorType(kernel.float_type, 8)
        source = context.make_array(planes_type)(context, builder, args[0])
        out_ptr = context.make_array(out_type)(context, builder, args[4]).data
        k0_value, y_value, x_value, start_value, stride_value = (kernel.as_index(args[k]) for k in (1, 2, 3, 5, 6))
        rows = []
        for r in range(8):
            at = cgutils.get_item_pointer(context, builder, planes_type, source,
                                          [builder.add(k0_value, kernel.const(r)), y_value, x_value])
            rows.append(builder.load(builder.bitcast(at, row_type.as_pointer()), align=kernel.item))
        for c in range(8):
            column = ir.Constant(row_type, ir.Undefined)
            for r in range(8):
                column = builder.insert_element(column, builder.extract_element(rows[r], ir.Constant(ir.IntType(32), c)),
                                                ir.Constant(ir.IntType(32), r))
            at = builder.gep(out_ptr, [builder.add(start_value, builder.mul(kernel.const(c), stride_value))])
            builder.store(column, builder.bitcast(at, row_type.as_pointer()), align=kernel.item)
        return context.get_dummy_value()

    return types.void(planes, k0, y, x, out, start, stride), codegen


@_jit
def _put_on_grid(planes, buffer, lanes, top, left, width_p):
    """Channels ``planes`` (K, h, w) onto a grid ``width_p`` wide, ``lanes`` channels interleaved per block:
    ``buffer[k // lanes, ((y + top)*width_p + x + left)*lanes + k % lanes] = planes[k, y, x]``.

    Blocks of 8 channels by 8 positions are transposed in registers (``_transpose8``: 2-4x faster
    than element by element); the channels and positions left over, and any layout where 8
    channels do not sit together in a block, go element by element.
    """
    channels, height, width = planes.shape
    first_left = 0
    if lanes % 8 == 0 and planes.strides[2] == planes.itemsize:
        first_left = channels - channels % 8
        for k0 in range(0, first_left, 8):
            block, lane = buffer[k0 // lanes], k0 % lanes
            for y in range(height):
                start = ((y + top) * width_p + left) * lanes + lane
                for x in range(0, width - width % 8, 8):
                    _transpose8(planes, k0, y, x, block, start + x * lanes, lanes)
                for x in range(width - width % 8, width):
                    for k in range(8):
                        block[start + x * lanes + k] = planes[k0 + k, y, x]
    for k in range(first_left, channels):
        block, lane = k // lanes, k % lanes
        for y in range(height):
            start = ((y + top) * width_p + left) * lanes + lane
            for x in range(width):
                buffer[block, start + x * lanes] = planes[k, y, x]


@entry(_check_conv_weight_grad_stride1)
@_jit_nogil
def conv_weight_grad_stride1(first, last, x, grad, groups, input_rows, row_blocks, wide, columns, kh, kw, dh, dw, top,
                             left, height_p, width_p, out_h, out_w):
    """The weight gradient of a stride-1 conv from images ``first .. last`` as microkernel tiles: (groups, kh*kw,
    wide/columns, row_blocks, MR*columns).

    grad_w[o, c, i, j] = sum over images and output pixels (y, x) of
    grad[o, y, x] * x_padded[c, y + i*dh, x + j*dw]: for each kernel tap (i, j), a product
    whose shared dimension is the padded grid (``Wp`` wide; the output gradient is zero at its
    padding columns) and in which the input is read ``i*dh*Wp + j*dw`` positions further on.
    Per image, one operand is laid out on the grid ``MR`` channels interleaved per block (the
    microkernel's A, rows of the tile) and the other channels-last, ``wide`` (a multiple of
    ``columns``) channels per position (B, read in place). With ``input_rows`` False the
    rows are output channels and the tap's shift moves B's start; with True the rows are
    input channels and it moves A's: the caller picks the one that pads the channel counts
    less. The sum over grid positions runs ``WEIGHT_GRAD_STEPS`` at a time, each tile accumulating in
    place. Returns this slice's partial sum; the caller adds the slices.
    """
    channels = x.shape[1]
    c_per_group = channels // groups
    o_per_group = grad.shape[1] // groups
    grid = (out_h - 1) * width_p + out_w
    positions = height_p * width_p
    x_lanes, grad_lanes = (MR, wide) if input_rows else (wide, MR)
    image = np.zeros((groups, -(-c_per_group // x_lanes), positions * x_lanes), dtype=x.dtype)
    gradient = np.zeros((groups, -(-o_per_group // grad_lanes), grid * grad_lanes), dtype=x.dtype)
    taps = kh * kw
    tiles = np.zeros((groups, taps, wide // columns, row_blocks, MR * columns), dtype=x.dtype)
    b_rows = np.arange(WEIGHT_GRAD_STEPS) * wide
    for b in range(first, last):
        for g in range(groups):
            _put_on_grid(x[b, g * c_per_group:(g + 1) * c_per_group], image[g], x_lanes, top, left, width_p)
            _put_on_grid(grad[b, g * o_per_group:(g + 1) * o_per_group], gradient[g], grad_lanes, 0, 0, width_p)
            for q0 in range(0, grid, WEIGHT_GRAD_STEPS):
                steps = min(WEIGHT_GRAD_STEPS, grid - q0)
                for tap in range(taps):
                    shift = tap // kw * dh * width_p + tap % kw * dw
                    for c in range(wide // columns):
                        for block in range(row_blocks):
                            tile = tiles[g, tap, c, block]
                            if input_rows:
                                microkernel_add(image[g, block, (shift + q0) * MR:(shift + q0 + steps) * MR],
                                                gradient[g, 0], b_rows, q0 * wide + c * columns, tile, steps)
                            else:
                                microkernel_add(gradient[g, block, q0 * MR:(q0 + steps) * MR], image[g, 0], b_rows,
                                                (shift + q0) * wide + c * columns, tile, steps)
    return tiles


# -- a general matrix product on the microkernel: out = a @ b (+ bias), any strides --------------------------

@_jit_nogil
def _pack_rows(a, panels):
    """``a`` (M, K), any strides -> ``panels`` (row_blocks, K*MR), zeroed by the caller:
    ``[blk, p*MR + i] = a[blk*MR + i, p]``."""
    m = a.shape[0]
    for block in range(panels.shape[0]):
        for i in range(min(MR, m - block * MR)):
            _put_strided(panels[block, i:], a[block * MR + i], MR)


#: ``_pack_rows`` behind its checks, for Python callers (compiled code calls ``_pack_rows`` itself).
pack_rows = entry(_check_pack_rows)(_pack_rows)


@_jit
def _pack_columns_of(b, j0, count, panel, columns):
    """``panel[p*columns + j] = b[p, j0 + j]`` for a column-major ``b`` (a transpose, in effect).

    Four columns per pass, each step writing four adjacent panel elements: 1.2x faster than one
    strided pass per column on the MLP's 512x512 weight (an 8 x 8 register block was slower).
    """
    depth = b.shape[0]
    j = 0
    while j + 4 <= count:
        first, second, third, fourth = b[:, j0 + j], b[:, j0 + j + 1], b[:, j0 + j + 2], b[:, j0 + j + 3]
        for p in range(depth):
            at = p * columns + j
            panel[at] = first[p]
            panel[at + 1] = second[p]
            panel[at + 2] = third[p]
            panel[at + 3] = fourth[p]
        j += 4
    for k in range(j, count):
        _put_strided(panel[k:], b[:, j0 + k], columns)


@_jit
def _pack_block(b, j0, count, panel, columns):
    """Columns ``j0 .. j0+count`` of ``b`` (K, N), any strides, packed as ``panel[p*columns + j]``; zero past ``count``."""
    depth = b.shape[0]
    if b.strides[0] < b.strides[1]:
        _pack_columns_of(b, j0, count, panel, columns)
    else:
        for p in range(depth):
            _copy(panel[p * columns:p * columns + count], b[p, j0:j0 + count])
    if count < columns:
        for p in range(depth):
            _zero(panel[p * columns + count:(p + 1) * columns])


@entry(_check_matmul_columns)
@_jit_nogil
def matmul_columns(first, last, a_panels, m, b, out, bias, has_bias, columns):
    """``out[:, j] = a @ b[:, j] (+ bias[j])`` for the column blocks ``first .. last`` of ``columns`` columns.

    ``a_panels`` is ``a`` (M, K) packed by ``pack_rows``; ``b`` (K, N) and ``out`` (M, N) may
    have any strides. Each block packs its columns of ``b`` once (reading along b's
    contiguous axis, whichever it is) and runs every row block of ``a`` against them.
    """
    depth, n = b.shape
    panel = np.empty(depth * columns, dtype=b.dtype)
    rows = np.arange(depth) * columns
    tile = np.empty(MR * columns, dtype=b.dtype)
    for block_j in range(first, last):
        j0 = block_j * columns
        count = min(columns, n - j0)
        _pack_block(b, j0, count, panel, columns)
        for block in range(a_panels.shape[0]):
            microkernel(a_panels[block], panel, rows, 0, tile, depth)
            for r in range(min(MR, m - block * MR)):
                dst = out[block * MR + r, j0:j0 + count]
                src = tile[r * columns:r * columns + count]
                if has_bias:
                    shift = bias[j0:j0 + count]
                    for k in range(count):
                        dst[k] = src[k] + shift[k]
                else:
                    _copy(dst, src)


@entry(_check_conv_weight_grad_im2col)
@_jit_nogil
def conv_weight_grad_im2col(first, last, x, grad, groups, columns, kh, kw, sh, sw, ph, pw, dh, dw, out_h, out_w):
    """The weight gradient of any conv from images ``first .. last``, transposed: (groups, C/g*kh*kw, O/g).

    Per image, the im2col columns (taps x pixels, built by ``_conv_jit._im2col`` into a buffer that stays
    in cache) are packed ``MR`` taps at a time as A, and the output gradient's rows,
    ``columns`` output channels at a time, as B: each tile is (taps x channels) summed over the
    image's pixels. For convs the channels-last kernel above does not take: strided ones, and
    those with few input channels per group (a network's first layer). Returns this slice's
    partial sum; the caller adds the slices.
    """
    channels, out_channels = x.shape[1], grad.shape[1]
    rows_per_group, o_per_group = channels * kh * kw // groups, out_channels // groups
    plane = out_h * out_w
    row_blocks = (rows_per_group + MR - 1) // MR
    cols = np.empty((channels * kh * kw, plane), dtype=x.dtype)
    a_panels = np.zeros((row_blocks, plane * MR), dtype=x.dtype)  # rows past the group's stay zero
    b_panel = np.empty(plane * columns, dtype=x.dtype)
    b_rows = np.arange(plane) * columns
    tile = np.empty(MR * columns, dtype=x.dtype)
    result = np.zeros((groups, rows_per_group, o_per_group), dtype=x.dtype)
    for b in range(first, last):
        _im2col(x, b, b + 1, cols, kh, kw, sh, sw, ph, pw, dh, dw, out_h, out_w)
        for g in range(groups):
            _pack_rows(cols[g * rows_per_group:(g + 1) * rows_per_group], a_panels)
            gradient_t = grad[b, g * o_per_group:(g + 1) * o_per_group].T  # (pixels, channels), column-major
            for j0 in range(0, o_per_group, columns):
                count = min(columns, o_per_group - j0)
                _pack_block(gradient_t, j0, count, b_panel, columns)
                for block in range(row_blocks):
                    microkernel(a_panels[block], b_panel, b_rows, 0, tile, plane)
                    for r in range(min(MR, rows_per_group - block * MR)):
                        _add(result[g, block * MR + r, j0:j0 + count], tile[r * columns:r * columns + count])
    return result
