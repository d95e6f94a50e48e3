"""Arrangements built on movement's primitives: rotations, stacks and splits, diagonals, scatters and puts,
sliding windows, index grids, and the ``*_copy`` forms of the views.

Only ``scatter_reduce`` has a kernel of its own; everything else composes ops whose backward is known
(``index_select``, ``index_put``, ``gather``, ``cat``, ...), so their gradients follow from those.
"""
from __future__ import annotations

import builtins
import itertools
import math
import numbers
import warnings

from corenn import _dtype
from corenn._argcheck import check_int, check_ints, named, not_tensors, type_name
from corenn.kernels import full_index
from corenn.ops._kernel import Op, kernel, run
from corenn.ops.movement import (_check_index, _check_in_range, _check_scatter, _promote_all, _sizes,
                                 _tensor_sequence, cat, chunk, clone, diagonal, expand, flip, index_put, index_select,
                                 movedim, narrow, permute, reshape, select, split, squeeze, t, tensor_split, transpose,
                                 unbind, unsqueeze, view)
from corenn.tensor.tensor import Tensor, _normalize_dim


def _int_tensor(array, device):
    return Tensor._wrap(array.astype("int64", copy=False), device)


# ---------------------------------------------------------------------------------------------------------
# Rotations, stacks and splits
# ---------------------------------------------------------------------------------------------------------

def rot90(input, k=1, dims=(0, 1)):
    """Rotate by 90 degrees ``k`` times in the plane of ``dims``, from the first towards the second.

    Example::

        >>> corenn.rot90(corenn.tensor([[1, 2], [3, 4]]))
        tensor([[2, 4],
                [1, 3]])
    """
    if not isinstance(input, Tensor):
        raise not_tensors(input=input)
    dims = check_ints(dims, "dims")
    k = check_int(k, "k")
    if len(dims) != 2:
        raise RuntimeError(named(f"expected total rotation dims == 2, but got dims = {len(dims)}"))
    if input.ndim < 2:
        raise RuntimeError(named(f"expected total dims >= 2, but got total dims = {input.ndim}"))
    first, second = (_normalize_dim(d, input.ndim) for d in dims)
    if first == second:
        raise RuntimeError(named(f"expected rotation dims to be different, but got dim0 = {first} and dim1 = {second}"))
    k %= 4
    if k == 1:
        return transpose(flip(input, (second,)), first, second)
    if k == 2:
        return flip(input, (first, second))
    if k == 3:
        return flip(transpose(input, first, second), (second,))
    return clone(input)


def atleast_3d(*tensors):
    """Views with at least three dimensions: (n,) becomes (1, n, 1), (m, n) becomes (m, n, 1)."""
    if len(tensors) == 1 and isinstance(tensors[0], (list, tuple)):
        return tuple(atleast_3d(t) for t in tensors[0])
    if len(tensors) != 1:
        return tuple(atleast_3d(t) for t in tensors)
    (input,) = tensors
    if not isinstance(input, Tensor):
        raise not_tensors(input=input)
    if input.ndim == 0:
        return reshape(input, (1, 1, 1))
    if input.ndim == 1:
        return reshape(input, (1, input.shape[0], 1))
    if input.ndim == 2:
        return unsqueeze(input, -1)
    return input


def column_stack(tensors):
    """Stack as columns: 0-d and 1-D tensors become (n, 1) columns, then ``hstack`` (``torch.column_stack``)."""
    from corenn.ops.movement import hstack
    tensors = _tensor_sequence(tensors, "column_stack")
    return hstack([reshape(x, (x.numel(), 1)) if x.ndim <= 1 else x for x in tensors])


def row_stack(tensors):
    """The same as ``vstack`` (``torch.row_stack``)."""
    from corenn.ops.movement import vstack
    return vstack(tensors)


def dstack(tensors):
    """Join along the third dimension after ``atleast_3d`` (``torch.dstack``)."""
    return cat([atleast_3d(x) for x in _tensor_sequence(tensors, "dstack")], 2)


def _directional_split(op, input, indices_or_sections, axis, minimum):
    if not isinstance(input, Tensor):
        raise not_tensors(input=input)
    if input.ndim < minimum:
        raise RuntimeError(named(f"torch.{op} requires a tensor with at least {minimum} dimension, but got a tensor "
                                 f"with {input.ndim} dimensions!"))
    if isinstance(indices_or_sections, numbers.Integral):
        sections = int(indices_or_sections)
        size = input.shape[axis]
        if sections == 0 or size % sections:
            raise RuntimeError(named(f"torch.{op} attempted to split along dimension {axis}, but the size of the "
                                     f"dimension {size} is not divisible by the split_size {sections}!"))
    return tensor_split(input, indices_or_sections, axis)


def hsplit(input, indices_or_sections):
    """Split along the columns (dim 1; dim 0 for 1-D input) into equal sections or at indices."""
    axis = 0 if isinstance(input, Tensor) and input.ndim == 1 else 1
    return _directional_split("hsplit", input, indices_or_sections, axis, 1)


def vsplit(input, indices_or_sections):
    """Split along dim 0 into equal sections or at indices (``torch.vsplit``)."""
    return _directional_split("vsplit", input, indices_or_sections, 0, 2)


def dsplit(input, indices_or_sections):
    """Split along dim 2 into equal sections or at indices (``torch.dsplit``)."""
    return _directional_split("dsplit", input, indices_or_sections, 2, 3)


def split_with_sizes(input, split_sizes, dim=0):
    """Pieces of the given sizes along ``dim``; the sizes must add up to that dimension."""
    if not isinstance(split_sizes, (list, tuple)):
        raise TypeError(named(f"argument 'split_sizes' must be tuple of ints, not {type_name(split_sizes)}"))
    return split(input, list(split_sizes), dim)


def unsafe_split(tensor, split_size_or_sections, dim=0):
    """``split`` (PyTorch's version skips a view check that corenn does not have)."""
    return split(tensor, split_size_or_sections, dim)


def unsafe_split_with_sizes(input, split_sizes, dim=0):
    """``split_with_sizes`` (see :func:`unsafe_split`)."""
    return split_with_sizes(input, split_sizes, dim)


def unsafe_chunk(input, chunks, dim=0):
    """``chunk`` (see :func:`unsafe_split`)."""
    return chunk(input, chunks, dim)


def ravel(input):
    """The elements as a 1-D tensor, in row-major order (``torch.ravel``)."""
    if not isinstance(input, Tensor):
        raise not_tensors(input=input)
    return reshape(input, -1)


def broadcast_shapes(*shapes):
    """The shape that tensors of ``shapes`` broadcast to, without making tensors (``torch.broadcast_shapes``)."""
    from corenn.ops._kernel import broadcast_shapes as common_shape
    from corenn.tensor.tensor import Size
    normalized = []
    for shape in shapes:
        if isinstance(shape, numbers.Integral) and not isinstance(shape, bool):
            shape = (int(shape),)
        elif isinstance(shape, (list, tuple)):
            shape = check_ints(shape, "shape")
        else:
            raise RuntimeError(named("Input shapes should be of type ints, a tuple of ints, or a list of ints, got "
                                     f"{shape}"))
        if builtins.any(s < 0 for s in shape):
            raise RuntimeError(named(f"Trying to create tensor with negative dimension {builtins.min(shape)}: "
                                     f"{list(shape)}"))
        normalized.append(tuple(shape))
    return Size(common_shape(*normalized) if normalized else ())


# ---------------------------------------------------------------------------------------------------------
# Repeats, grids and index generators
# ---------------------------------------------------------------------------------------------------------

def repeat_interleave(input, repeats=None, dim=None, *, output_size=None):
    """Repeat each element (or slice along ``dim``) ``repeats`` times, in place, not tiled.

    With a tensor alone, ``repeat_interleave(repeats)`` gives ``[0]*repeats[0] + [1]*repeats[1] + ...``.

    Example::

        >>> corenn.repeat_interleave(corenn.tensor([1, 2]), 2)
        tensor([1, 1, 2, 2])
    """
    if not isinstance(input, Tensor):
        raise not_tensors(input=input)
    xp = input._device._xp
    if repeats is None:
        if dim is not None:
            raise TypeError(named("received dim without repeats: repeat_interleave(repeats) takes the counts alone"))
        if input.ndim > 1 or input.dtype.is_floating_point:
            raise RuntimeError(named("repeat_interleave only accept 1D vector as repeat"))
        counts = input._data.reshape(-1)
        if counts.size and counts.min().item() < 0:
            raise RuntimeError(named("repeats can not be negative"))
        return _int_tensor(xp.repeat(xp.arange(counts.shape[0]), counts), input._device)
    if dim is None:
        input, axis = reshape(input, -1), 0
    else:
        axis = _normalize_dim(dim, input.ndim)
    size = input.shape[axis] if input.ndim else 1
    if isinstance(repeats, Tensor):
        if repeats.dtype.is_floating_point or repeats.dtype is _dtype.bool_:
            raise RuntimeError(named(f"repeats has to be Long or Int tensor, got {repeats.dtype}"))
        if repeats.ndim > 1:
            raise RuntimeError(named("repeat_interleave only accept 1D vector as repeat"))
        counts = repeats._data.reshape(-1)
        if counts.shape[0] == 1:
            counts = xp.full(size, counts[0])
        elif counts.shape[0] != size:
            raise RuntimeError(named("repeats must have the same size as input along dim, but got repeats.size(0) = "
                                     f"{counts.shape[0]} and input.size({axis}) = {size}"))
    else:
        counts = xp.full(size, check_int(repeats, "repeats"))
    if counts.size and counts.min().item() < 0:
        raise RuntimeError(named("repeats can not be negative"))
    if output_size is not None and int(counts.sum()) != output_size:
        raise RuntimeError(named("allocated size does not match required size"))
    index = _int_tensor(xp.repeat(xp.arange(size), counts), input._device)
    if input.ndim == 0:
        input = reshape(input, 1)
    return index_select(input, axis, index)


def meshgrid(*tensors, indexing=None):
    """Coordinate grids from 1-D tensors; ``indexing='ij'`` (matrix) or ``'xy'`` (Cartesian) (``torch.meshgrid``)."""
    if len(tensors) == 1 and isinstance(tensors[0], (list, tuple)):
        tensors = tuple(tensors[0])
    if indexing is None:
        warnings.warn("torch.meshgrid: in an upcoming release, it will be required to pass the indexing argument.",
                      UserWarning, stacklevel=2)
        indexing = "ij"
    if indexing not in ("ij", "xy"):
        raise RuntimeError(named(f"torch.meshgrid: indexing must be one of \"xy\" or \"ij\", but received: {indexing}"))
    tensors = _tensor_sequence(list(tensors), "meshgrid")
    for i, x in enumerate(tensors):
        if x.ndim > 1:
            raise RuntimeError(named(f"torch.meshgrid: Expected 0D or 1D tensor in the tensor list but got: {x.ndim}D "
                                     f"tensor at index {i}"))
    sizes = [x.numel() for x in tensors]
    swap = indexing == "xy" and len(tensors) >= 2
    if swap:
        sizes[0], sizes[1] = sizes[1], sizes[0]
    grids = []
    for i, x in enumerate(tensors):
        position = {0: 1, 1: 0}.get(i, i) if swap else i
        shape = [1] * len(tensors)
        shape[position] = x.numel()
        grids.append(expand(reshape(x, shape), sizes))
    return tuple(grids)


def cartesian_prod(*tensors):
    """Every combination of one element from each 1-D tensor, as rows (``torch.cartesian_prod``)."""
    from corenn.ops.movement import stack
    tensors = _tensor_sequence(list(tensors), "cartesian_prod")
    for x in tensors:
        if x.ndim != 1:
            raise RuntimeError(named(f"Expect a 1D vector, but got shape {list(x.shape)}"))
    if len(tensors) == 1:
        return tensors[0]
    return stack([reshape(g, -1) for g in meshgrid(*tensors, indexing="ij")], 1)


def combinations(input, r=2, with_replacement=False):
    """The length-``r`` combinations of a 1-D tensor's elements, as rows (``itertools.combinations``)."""
    from corenn.tensor.creation import empty
    if not isinstance(input, Tensor):
        raise not_tensors(input=input)
    if input.ndim != 1:
        raise RuntimeError(named(f"Expect a 1D vector, but got shape {list(input.shape)}"))
    r = check_int(r, "r")
    if r < 0:
        raise RuntimeError(named(f"Expect a non-negative number, but got {r}"))
    if r == 0:
        return empty(0, dtype=input.dtype, device=input.device)
    pick = itertools.combinations_with_replacement if with_replacement else itertools.combinations
    chosen = list(pick(range(input.shape[0]), r))
    xp = input._device._xp
    index = xp.asarray(chosen, dtype="int64").reshape(len(chosen), r)
    return reshape(index_select(input, 0, _int_tensor(index.reshape(-1), input._device)), (len(chosen), r))


def _triangle_indices(which, row, col, offset, dtype, device):
    from corenn.tensor.creation import _make, _place
    row, col, offset = check_int(row, "row"), check_int(col, "col"), check_int(offset, "offset")
    if row < 0 or col < 0:
        raise RuntimeError(named(f"{which}_indices expects row and col to be non-negative, got row = {row}, col = "
                                 f"{col}"))
    target, xp = _place(device)
    dtype = _dtype.int64 if dtype is None else dtype
    if dtype not in (_dtype.int64, _dtype.int32):
        raise RuntimeError(named(f"\"{which}_indices\" not implemented for '{dtype}'"))
    mask = xp.tri(row, col, offset, dtype=bool) if which == "tril" else ~xp.tri(row, col, offset - 1, dtype=bool)
    rows, cols = xp.nonzero(mask)
    return _make(xp.stack([rows, cols]).astype(dtype.numpy).reshape(2, -1), target, False)


def tril_indices(row, col, offset=0, *, dtype=None, device=None, layout=None):
    """The (2, N) coordinates of the lower triangle of a ``row x col`` matrix, row by row.

    Example::

        >>> corenn.tril_indices(2, 2)
        tensor([[0, 1, 1],
                [0, 0, 1]])
    """
    return _triangle_indices("tril", row, col, offset, dtype, device)


def triu_indices(row, col, offset=0, *, dtype=None, device=None, layout=None):
    """The (2, N) coordinates of the upper triangle of a ``row x col`` matrix, row by row."""
    return _triangle_indices("triu", row, col, offset, dtype, device)


def unravel_index(indices, shape):
    """The coordinates of flat ``indices`` in a tensor of ``shape``, one tensor per dimension."""
    if not isinstance(indices, Tensor):
        raise not_tensors(indices=indices)
    if indices.dtype.is_floating_point or indices.dtype is _dtype.bool_:
        raise TypeError(named(f"expected 'indices' to be integer dtype, but got {indices.dtype}"))
    shape = (check_int(shape, "shape"),) if isinstance(shape, numbers.Integral) else check_ints(shape, "shape")
    if builtins.any(s < 0 for s in shape):
        raise ValueError(named("'shape' cannot have negative values, but got " + str(tuple(shape))))
    remaining = indices._data.astype("int64")
    coordinates = []
    for size in reversed(shape):  # each coordinate modulo its size, as PyTorch computes them
        coordinates.append(remaining % size if size else remaining * 0)
        remaining = remaining // size if size else remaining
    return tuple(_int_tensor(c, indices._device) for c in reversed(coordinates))


def vander(x, N=None, increasing=False):
    """The Vandermonde matrix of a 1-D ``x``: columns ``x**(N-1), ..., x, 1`` (reversed with ``increasing``).

    Example::

        >>> corenn.vander(corenn.tensor([1, 2, 3]))
        tensor([[1, 1, 1],
                [4, 2, 1],
                [9, 3, 1]])
    """
    from corenn.ops.reduce import cumprod
    from corenn.tensor.creation import ones
    if not isinstance(x, Tensor):
        raise not_tensors(x=x)
    if x.ndim != 1:
        raise RuntimeError(named("x must be a one-dimensional tensor."))
    n = x.shape[0] if N is None else check_int(N, "N")
    if n < 0:
        raise RuntimeError(named("N must be non-negative."))
    if not x.dtype.is_floating_point:
        x = x.to(_dtype.int64)
    column = reshape(x, (-1, 1))
    if n == 0:
        result = expand(column, (x.shape[0], 0)) * 1
    else:
        first = ones(x.shape[0], 1, dtype=x.dtype, device=x.device)
        result = cat([first, cumprod(expand(column, (x.shape[0], n - 1)), 1)], 1) if n > 1 else first
    return result if increasing else flip(result, (1,))


def block_diag(*tensors):
    """The block-diagonal matrix of 0-, 1- or 2-D tensors (``torch.block_diag``).

    Example::

        >>> corenn.block_diag(corenn.tensor([[1, 2]]), corenn.tensor([[3]]))
        tensor([[1, 2, 0],
                [0, 0, 3]])
    """
    from corenn.ops.movement import pad
    from corenn.tensor.creation import empty
    if not tensors:
        return empty(1, 0)
    blocks = []
    for i, x in enumerate(tensors):
        if not isinstance(x, Tensor):
            raise TypeError(named(f"expected Tensor as element {i} in argument 'tensors', but got {type_name(x)}"))
        if x.ndim > 2:
            raise RuntimeError(named(f"torch.block_diag: Input tensors must have 2 or fewer dimensions. Input {i} has "
                                     f"{x.ndim} dimensions"))
        blocks.append(reshape(x, (1, x.numel())) if x.ndim == 1 else reshape(x, (1, 1)) if x.ndim == 0 else x)
    blocks = _promote_all(blocks)
    width = builtins.sum(b.shape[1] for b in blocks)
    rows, left = [], 0
    for b in blocks:
        rows.append(pad(b, (left, width - left - b.shape[1])))
        left += b.shape[1]
    return cat(rows, 0)


# ---------------------------------------------------------------------------------------------------------
# Diagonals and scatters into views
# ---------------------------------------------------------------------------------------------------------

def _scatter_into(input, src, index, op, slice_shape):
    """A copy of ``input`` with ``src`` written at the basic index ``index`` (PyTorch's ``*_scatter`` rule)."""
    if not (isinstance(input, Tensor) and isinstance(src, Tensor)):
        raise not_tensors(input=input, src=src)
    if tuple(src.shape) != tuple(slice_shape):
        raise RuntimeError(named(f"expected src to have a size equal to the slice of self. src size = "
                                 f"{list(src.shape)}, slice size = {list(slice_shape)}", op))
    return index_put(input, index, src.to(input.dtype) if src.dtype is not input.dtype else src)


def select_scatter(input, src, dim, index):
    """A copy of ``input`` with ``src`` written at ``input.select(dim, index)`` (``torch.select_scatter``)."""
    if not isinstance(input, Tensor):
        raise not_tensors(input=input)
    axis = _normalize_dim(dim, input.ndim)
    position = check_int(index, "index")
    size = input.shape[axis]
    if not -size <= position < size:
        raise IndexError(named(f"select(): index {position} out of range for tensor of size {list(input.shape)} at "
                               f"dimension {axis}"))
    target = (slice(None),) * axis + (position % size,)
    return _scatter_into(input, src, target, "select_scatter", input.shape[:axis] + input.shape[axis + 1:])


def slice_scatter(input, src, dim=0, start=None, end=None, step=1):
    """A copy of ``input`` with ``src`` written at ``input[..., start:end:step, ...]`` along ``dim``."""
    if not isinstance(input, Tensor):
        raise not_tensors(input=input)
    axis = _normalize_dim(dim, input.ndim)
    step = check_int(step, "step")
    if step <= 0:
        raise RuntimeError(named("slice step must be positive"))
    start, end = (None if v is None else check_int(v, name) for v, name in ((start, "start"), (end, "end")))
    window = slice(start, end, step)
    length = len(range(*window.indices(input.shape[axis])))
    target = (slice(None),) * axis + (window,)
    shape = input.shape[:axis] + (length,) + input.shape[axis + 1:]
    return _scatter_into(input, src, target, "slice_scatter", shape)


def diagonal_scatter(input, src, offset=0, dim1=0, dim2=1):
    """A copy of ``input`` with ``src`` written on ``input.diagonal(offset, dim1, dim2)``."""
    if not isinstance(input, Tensor):
        raise not_tensors(input=input)
    offset = check_int(offset, "offset")
    first, second = _normalize_dim(dim1, input.ndim), _normalize_dim(dim2, input.ndim)
    if first == second:
        raise RuntimeError(named(f"diagonal dimensions cannot be identical {dim1}, {dim2}"))
    n1, n2 = input.shape[first], input.shape[second]
    xp = input._device._xp
    rows = xp.arange(builtins.max(0, -offset), builtins.max(0, builtins.min(n1, n2 - offset)))
    moved = movedim(input, (first, second), (-2, -1))
    shape = moved.shape[:-2] + (rows.shape[0],)
    written = _scatter_into(moved, src, (Ellipsis, _int_tensor(rows, input._device),
                                          _int_tensor(rows + offset, input._device)), "diagonal_scatter", shape)
    return movedim(written, (-2, -1), (first, second))


def diag_embed(input, offset=0, dim1=-2, dim2=-1):
    """Matrices whose ``offset`` diagonal (in ``dim1``, ``dim2`` of the result) holds ``input``'s last dimension.

    Example::

        >>> corenn.diag_embed(corenn.tensor([1, 2]))
        tensor([[1, 0],
                [0, 2]])
    """
    from corenn.tensor.creation import zeros
    if not isinstance(input, Tensor):
        raise not_tensors(input=input)
    offset = check_int(offset, "offset")
    ndim = input.ndim + 1
    first, second = _normalize_dim(dim1, ndim, "dim1"), _normalize_dim(dim2, ndim, "dim2")
    if first == second:
        raise RuntimeError(named(f"diagonal dimensions cannot be identical {dim1}, {dim2}"))
    n = (input.shape[-1] if input.ndim else 1) + builtins.abs(offset)
    rest = list(input.shape[:-1])
    shape = []
    for d in range(ndim):
        shape.append(n if d in (first, second) else rest.pop(0))
    base = zeros(shape, dtype=input.dtype, device=input.device)
    return diagonal_scatter(base, input if input.ndim else reshape(input, 1), offset, first, second)


def diagflat(input, offset=0):
    """A 2-D matrix with ``input``'s elements on its ``offset`` diagonal (``torch.diagflat``)."""
    from corenn.ops.movement import diag
    if not isinstance(input, Tensor):
        raise not_tensors(input=input)
    return diag(reshape(input, -1), check_int(offset, "offset"))


# ---------------------------------------------------------------------------------------------------------
# Flat and indexed reads and writes
# ---------------------------------------------------------------------------------------------------------

def _flat_positions(input, index, op):
    _check_index(index, op)
    total = input.numel()
    if index.numel():
        low, high = index._data.min().item(), index._data.max().item()
        bad = low if low < -total else high if high >= total else None
        if bad is not None:
            raise IndexError(named(f"out of range: tried to access index {bad} on a tensor of {total} elements."))
    return index + (index < 0).to(index.dtype) * total if index.numel() and index._data.min().item() < 0 else index


def take(input, index):
    """``input`` read as 1-D at ``index`` (negative indices count from the end); the result has index's shape.

    Example::

        >>> corenn.take(corenn.tensor([[1, 2], [3, 4]]), corenn.tensor([0, 3]))
        tensor([1, 4])
    """
    from corenn.ops.movement import getitem
    if not (isinstance(input, Tensor) and isinstance(index, Tensor)):
        raise not_tensors(input=input, index=index)
    return getitem(reshape(input, -1), _flat_positions(input, index, "take"))


def put(input, index, source, accumulate=False):
    """A copy of ``input`` with ``source`` written (or added) at the flat positions ``index`` (``torch.put``)."""
    if not (isinstance(input, Tensor) and isinstance(index, Tensor) and isinstance(source, Tensor)):
        raise not_tensors(input=input, index=index, source=source)
    if index.numel() != source.numel():
        raise RuntimeError(named(f"Expected source and index to have the same number of elements, but got "
                                 f"source.numel() = {source.numel()}, index.numel() = {index.numel()}", "put"))
    positions = reshape(_flat_positions(input, index, "put"), -1)
    values = reshape(source, -1)
    written = index_put(reshape(input, -1), (positions,), values.to(input.dtype), accumulate=bool(accumulate))
    return reshape(written, input.shape)


def index_copy(input, dim, index, source):
    """A copy of ``input`` with the slices of ``source`` written at ``index`` along ``dim`` (``torch.index_copy``)."""
    if not (isinstance(input, Tensor) and isinstance(index, Tensor) and isinstance(source, Tensor)):
        raise not_tensors(input=input, index=index, source=source)
    _check_index(index, "index_copy")
    if index.ndim > 1:
        raise IndexError(named("index_copy_(): Index should have dimension 1 or 0 (got " + str(index.ndim) + ")"))
    axis = _normalize_dim(dim, input.ndim)
    if input.dtype is not source.dtype:
        raise RuntimeError(named("index_copy_(): self and source expected to have the same dtype, but got (self) "
                                 f"{input.dtype} and (source) {source.dtype}"))
    count = index.numel()
    if input.ndim == 0:
        _check_in_range(index, 1, axis, "index_copy")
        return reshape(index_copy(reshape(input, 1), 0, reshape(index, 1), reshape(source, 1)), ())
    expected = input.shape[:axis] + (count,) + input.shape[axis + 1:]
    if tuple(source.shape) != expected and not (source.ndim == 0 and count == 1):
        raise RuntimeError(named("index_copy_(): Source/destination tensor must have same slice shapes. Destination "
                                 f"slice shape: {list(input.shape[:axis] + input.shape[axis + 1:])} at dimension "
                                 f"{axis} and source slice shape: {list(source.shape)} at dimension 0."))
    _check_in_range(index, input.shape[axis], axis, "index_copy")
    return index_put(input, (slice(None),) * axis + (reshape(index, -1),), reshape(source, expected))


_SCATTER_REDUCTIONS = ("sum", "prod", "mean", "amax", "amin")


@kernel("scatter_reduce", "ScatterReduceBackward0")
class ScatterReduce(Op):
    @staticmethod
    def forward(ctx, a, index, src, axis, reduce, include_self=True):
        xp = ctx.xp
        coords = full_index(xp, index, axis)
        values = src[tuple(slice(0, s) for s in index.shape)]
        out = a.copy()
        if not include_self:  # scattered positions start from the reduction's identity
            out[coords] = _identity(xp, reduce, a.dtype)
        if reduce in ("sum", "mean"):
            xp.add.at(out, coords, values)
        elif reduce == "prod":
            xp.multiply.at(out, coords, values)
        elif reduce == "amax":
            xp.maximum.at(out, coords, values)
        else:
            xp.minimum.at(out, coords, values)
        counts = None
        if reduce == "mean":
            counts = xp.ones(a.shape, dtype=a.dtype) if include_self else xp.zeros(a.shape, dtype=a.dtype)
            xp.add.at(counts, coords, 1)
            counts = xp.maximum(counts, 1)
            out = out / counts if a.dtype.kind in "fV" else out // counts
        ctx.save_for_backward(a, index, src, out, counts)
        ctx.axis, ctx.reduce, ctx.include_self = axis, reduce, include_self
        return out.astype(a.dtype, copy=False)

    @staticmethod
    def backward(ctx, grad):
        # PyTorch's scatter_reduce_backward, case by case.
        a, index, src, out, counts = ctx.saved
        xp = ctx.xp
        coords = full_index(xp, index, ctx.axis)
        region = tuple(slice(0, s) for s in index.shape)
        values = src[region]
        reduce = ctx.reduce
        if reduce == "sum":
            grad_self, grad_values = grad, grad[coords]
        elif reduce == "mean":
            grad_self = grad / counts
            grad_values = grad_self[coords]
        elif reduce == "prod":
            # Products of the others, without dividing by zero: zeros are taken out and put back.
            masked_self = xp.where(a == 0, 1, a)
            grad_self = grad * _scatter_product(xp, masked_self, coords, values, ctx.include_self) / masked_self
            zero = values == 0
            zeros_per_slot = xp.zeros(a.shape, dtype=a.dtype)
            xp.add.at(zeros_per_slot, coords, zero.astype(a.dtype))
            single_zero = zero & (zeros_per_slot[coords] == 1)
            masked_values = xp.where(single_zero, 1, values)
            without_zero = _scatter_product(xp, a, coords, masked_values, ctx.include_self)
            grad_values = xp.where(single_zero, (grad * without_zero)[coords],
                                   (grad * out)[coords] / xp.where(zero, 1, values))
        else:  # amax, amin: ties share the gradient evenly
            reached = out[coords]
            self_hits = (a == out).astype(grad.dtype)
            if not ctx.include_self:
                self_hits[coords] = 0
            value_hits = (values == reached).astype(grad.dtype)
            shares = self_hits.copy()
            xp.add.at(shares, coords, value_hits)
            distributed = grad / xp.where(shares == 0, 1, shares)
            grad_self = self_hits * distributed
            grad_values = value_hits * distributed[coords]
        if not ctx.include_self:
            grad_self = grad_self.copy()
            grad_self[coords] = 0
        grad_src = xp.zeros(src.shape, dtype=grad.dtype)
        grad_src[region] = grad_values
        return grad_self, None, grad_src


def _identity(xp, reduce, dtype):
    if reduce in ("sum", "mean"):
        return 0
    if reduce == "prod":
        return 1
    if dtype.kind in "fV":
        return -xp.inf if reduce == "amax" else xp.inf
    info = xp.iinfo(dtype)
    return info.min if reduce == "amax" else info.max


def _scatter_product(xp, base, coords, values, include_self):
    out = base.copy()
    if not include_self:
        out[coords] = 1
    xp.multiply.at(out, coords, values)
    return out


def scatter_reduce(input, dim, index, src, reduce, *, include_self=True):
    """Reduce ``src`` into a copy of ``input`` at ``index`` along ``dim``: sum, prod, mean, amax or amin.

    ``include_self=False`` leaves ``input``'s own values out of the positions that receive ``src``
    (``torch.scatter_reduce``).

    Example::

        >>> corenn.scatter_reduce(corenn.zeros(2), 0, corenn.tensor([0, 0, 1]), corenn.tensor([1.0, 5.0, 2.0]), 'amax')
        tensor([5., 2.])
    """
    if not (isinstance(input, Tensor) and isinstance(index, Tensor) and isinstance(src, Tensor)):
        raise not_tensors(input=input, index=index, src=src)
    _check_index(index, "scatter_reduce")
    if not isinstance(reduce, str):
        raise TypeError(named(f"argument 'reduce' must be str, not {type_name(reduce)}"))
    reduce = {"max": "amax", "min": "amin"}.get(reduce, reduce)  # PyTorch takes scatter's names too
    if reduce not in _SCATTER_REDUCTIONS:
        raise RuntimeError(named(f"reduce argument must be either sum, prod, mean, amax or amin, got {reduce}"))
    axis = _normalize_dim(dim, input.ndim)
    if src.dtype is not input.dtype:
        raise RuntimeError(named("scatter(): Expected self.dtype to be equal to src.dtype"))
    _check_scatter("scatter_reduce", input, axis, index, src)
    if not index.numel():
        return clone(input)
    if input.ndim == 0 or index.ndim == 0:
        one = [reshape(x, 1) if x.ndim == 0 else x for x in (input, index, src)]
        return reshape(scatter_reduce(one[0], axis, one[1], one[2], reduce, include_self=include_self), input.shape)
    return run("scatter_reduce", input, index, src, axis=axis, reduce=reduce, include_self=bool(include_self))


def index_reduce(input, dim, index, source, reduce, *, include_self=True):
    """Reduce the slices of ``source`` into a copy of ``input`` at ``index`` along ``dim``: prod, mean, amax, amin."""
    if not (isinstance(input, Tensor) and isinstance(index, Tensor) and isinstance(source, Tensor)):
        raise not_tensors(input=input, index=index, source=source)
    _check_index(index, "index_reduce")
    if reduce not in ("prod", "mean", "amax", "amin"):
        raise RuntimeError(named("index_reduce(): Expected reduce to be one of prod, mean, amax or amin but got "
                                 f"{reduce}."))
    if index.ndim > 1:
        raise IndexError(named("index_reduce_(): Index is supposed to be a vector"))
    axis = _normalize_dim(dim, input.ndim)
    if input.dtype is not source.dtype:
        raise RuntimeError(named(f"index_reduce_(): self ({input.dtype}) and source ({source.dtype}) must have the "
                                 "same scalar type"))
    if input.ndim == 0:
        return reshape(index_reduce(reshape(input, 1), 0, reshape(index, 1), reshape(source, 1), reduce,
                                    include_self=include_self), ())
    count = index.numel()
    source_axis_size = source.shape[axis] if source.ndim else 1
    if source_axis_size != count:
        raise RuntimeError(named(f"index_reduce_(): Number of indices ({count}) should be equal to source.size(dim) "
                                 f"({source_axis_size})"))
    expected = input.shape[:axis] + (count,) + input.shape[axis + 1:]
    if tuple(source.shape) != expected:
        raise RuntimeError(named("index_reduce_(): Source/destination tensor must have same slice shapes. Destination "
                                 f"slice shape: {list(input.shape[:axis] + input.shape[axis + 1:])} at dimension "
                                 f"{axis} and source slice shape: {list(source.shape)}"))
    _check_in_range(index, input.shape[axis], axis, "index_reduce")
    shape = [1] * input.ndim
    shape[axis] = count
    spread = expand(reshape(index, shape), expected)  # one index per source element: a scatter along dim
    return scatter_reduce(input, axis, spread.contiguous(), source, reduce, include_self=include_self)


# ---------------------------------------------------------------------------------------------------------
# Windows and strides
# ---------------------------------------------------------------------------------------------------------

def unfold(input, dimension, size, step):
    """Every window of ``size`` elements along ``dimension``, ``step`` apart, in a new last dimension.

    ``Tensor.unfold``; a copy in corenn (PyTorch returns a view), with the same values and gradient.

    Example::

        >>> corenn.arange(5.0).unfold(0, 2, 2)
        tensor([[0., 1.],
                [2., 3.]])
    """
    if not isinstance(input, Tensor):
        raise not_tensors(input=input)
    size, step = check_int(size, "size"), check_int(step, "step")
    if input.ndim == 0:
        axis = _normalize_dim(dimension, 1)
        if size > 1:
            raise RuntimeError(named(f"maximum size for tensor at dimension {axis} is 1 but size is {size}"))
        return reshape(input, 1)
    axis = _normalize_dim(dimension, input.ndim)
    length = input.shape[axis]
    if size > length:
        raise RuntimeError(named(f"maximum size for tensor at dimension {axis} is {length} but size is {size}"))
    if step <= 0:
        raise RuntimeError(named(f"step is {step} but must be > 0"))
    if size < 0:
        raise RuntimeError(named(f"size is {size} but must be >= 0"))
    xp = input._device._xp
    windows = (length - size) // step + 1
    index = (xp.arange(windows)[:, None] * step + xp.arange(size)[None, :]).reshape(-1)
    picked = index_select(input, axis, _int_tensor(index, input._device))
    shape = input.shape[:axis] + (windows, size) + input.shape[axis + 1:]
    return movedim(reshape(picked, shape), axis + 1, -1)


def _strided_positions(input, size, stride, storage_offset, op):
    """Where ``as_strided`` reads: positions among ``input``'s own elements, or NotImplementedError."""
    size, stride = check_ints(size, "size"), check_ints(stride, "stride")
    if len(size) != len(stride):
        raise RuntimeError(named("mismatch in length of strides and shape"))
    if builtins.any(s < 0 for s in size) or builtins.any(s < 0 for s in stride):
        raise RuntimeError(named(f"as_strided: Negative strides are not supported at the moment, got strides: "
                                 f"{list(stride)}" if builtins.any(s < 0 for s in stride) else
                                 f"Trying to create tensor with negative dimension: {list(size)}"))
    if not input.is_contiguous():
        raise NotImplementedError(named(f"{op}(): corenn reads strides over the tensor's own elements in row-major "
                                        "order, which needs a contiguous input (call .contiguous() first)"))
    if storage_offset is None:  # PyTorch's default, the tensor's own offset: position 0 is its first element
        own_offset, start = 0, 0
    else:
        own_offset = _own_storage_offset(input, op)
        start = check_int(storage_offset, "storage_offset") - own_offset
    xp = input._device._xp
    positions = xp.full(size, start, dtype="int64")
    for axis, (n, s) in enumerate(zip(size, stride)):
        shape = [1] * len(size)
        shape[axis] = n
        positions = positions + (xp.arange(n) * s).reshape(shape)
    if positions.size and (positions.min().item() < 0 or positions.max().item() >= input.numel()):
        raise NotImplementedError(named(f"{op}(): the strides reach storage outside the tensor's own elements "
                                        f"[{own_offset}, {own_offset + input.numel()}); corenn has no separate storage "
                                        "to read there"))
    return positions


def _own_storage_offset(input, op):
    try:
        return input.storage_offset()
    except AttributeError:  # an array library without numpy's array interface
        raise NotImplementedError(named(f"{op}(): storage_offset= on a {input.device.type} tensor: corenn can't tell "
                                        "where its elements sit in their storage")) from None


def as_strided(input, size, stride, storage_offset=None):
    """The elements at ``storage_offset + sum(i_k * stride[k])`` (``torch.as_strided``), as a copy.

    corenn's storage is the tensor's own elements in row-major order: a contiguous input
    and positions within it are supported (NotImplementedError otherwise), and the result is a
    new tensor, not a view, so writing to it leaves ``input`` unchanged. Values and gradients
    (overlapping windows accumulate) are PyTorch's.
    """
    from corenn.ops.movement import getitem
    if not isinstance(input, Tensor):
        raise not_tensors(input=input)
    positions = _strided_positions(input, size, stride, storage_offset, "as_strided")
    return getitem(reshape(input, -1), _int_tensor(positions, input._device))


def as_strided_copy(input, size, stride, storage_offset=None):
    """:func:`as_strided` (already a copy in corenn)."""
    return as_strided(input, size, stride, storage_offset)


def as_strided_scatter(input, src, size, stride, storage_offset=None):
    """A copy of ``input`` with ``src`` written where ``as_strided(input, size, stride, ...)`` reads."""
    if not (isinstance(input, Tensor) and isinstance(src, Tensor)):
        raise not_tensors(input=input, src=src)
    positions = _strided_positions(input, size, stride, storage_offset, "as_strided_scatter")
    if tuple(src.shape) != tuple(positions.shape):
        raise RuntimeError(named("expected src to have a size equal to the slice of self. src size = "
                                 f"{list(src.shape)}, slice size = {list(positions.shape)}"))
    flat = index_put(reshape(input, -1), (_int_tensor(positions.reshape(-1), input._device),),
                     reshape(src, -1).to(input.dtype))
    return reshape(flat, input.shape)


# ---------------------------------------------------------------------------------------------------------
# The ``*_copy`` forms of the views: the same values in new memory, connected to the graph
# ---------------------------------------------------------------------------------------------------------

def _copied(result):
    if isinstance(result, (tuple, list)):
        return tuple(clone(r) for r in result)
    return clone(result)


def _tensor_input(input):
    if not isinstance(input, Tensor):
        raise not_tensors(input=input)
    return input


def view_copy(input, size):
    """``input.view(size)`` in new memory (``torch.view_copy``); ``size`` may be a dtype."""
    return _copied(view(_tensor_input(input), size))


def permute_copy(input, dims):
    """``input.permute(dims)`` in new memory (``torch.permute_copy``)."""
    return _copied(permute(_tensor_input(input), dims))


def t_copy(input):
    """``input.t()`` in new memory (``torch.t_copy``)."""
    if _tensor_input(input).ndim > 2:
        raise RuntimeError(named(f"t() expects a tensor with <= 2 dimensions, but self is {input.ndim}D"))
    return _copied(t(input))


def transpose_copy(input, dim0, dim1):
    """``input.transpose(dim0, dim1)`` in new memory (``torch.transpose_copy``)."""
    return _copied(transpose(_tensor_input(input), dim0, dim1))


def squeeze_copy(input, dim=None):
    """``input.squeeze(dim)`` in new memory (``torch.squeeze_copy``)."""
    return _copied(squeeze(_tensor_input(input), dim))


def unsqueeze_copy(input, dim):
    """``input.unsqueeze(dim)`` in new memory (``torch.unsqueeze_copy``)."""
    return _copied(unsqueeze(_tensor_input(input), dim))


def expand_copy(input, size, *, implicit=False):
    """``input.expand(size)`` in new memory (``torch.expand_copy``)."""
    return _copied(expand(_tensor_input(input), size))


def diagonal_copy(input, offset=0, dim1=0, dim2=1):
    """``input.diagonal(offset, dim1, dim2)`` in new memory (``torch.diagonal_copy``)."""
    return _copied(diagonal(_tensor_input(input), offset, dim1, dim2))


def select_copy(input, dim, index):
    """``input.select(dim, index)`` in new memory (``torch.select_copy``)."""
    return _copied(select(_tensor_input(input), dim, index))


def slice_copy(input, dim=0, start=None, end=None, step=1):
    """``input[..., start:end:step]`` along ``dim`` in new memory (``torch.slice_copy``)."""
    from corenn.ops.movement import getitem
    axis = _normalize_dim(dim, _tensor_input(input).ndim)
    bounds = [None if v is None else check_int(v, name) for v, name in ((start, "start"), (end, "end"))]
    step = check_int(step, "step")
    if step <= 0:
        raise RuntimeError(named("slice step must be positive"))
    return _copied(getitem(input, (slice(None),) * axis + (slice(bounds[0], bounds[1], step),)))


def unbind_copy(input, dim=0):
    """``input.unbind(dim)`` in new memory (``torch.unbind_copy``)."""
    return _copied(unbind(_tensor_input(input), dim))


def split_copy(input, split_size, dim=0):
    """``input.split(split_size, dim)`` in new memory (``torch.split_copy``)."""
    return _copied(split(_tensor_input(input), split_size, dim))


def split_with_sizes_copy(input, split_sizes, dim=0):
    """``input.split_with_sizes(split_sizes, dim)`` in new memory (``torch.split_with_sizes_copy``)."""
    return _copied(split_with_sizes(_tensor_input(input), split_sizes, dim))


def narrow_copy(input, dim, start, length):
    """``input.narrow(dim, start, length)`` in new memory (``torch.narrow_copy``)."""
    return _copied(narrow(_tensor_input(input), dim, start, length))


def unfold_copy(input, dimension, size, step):
    """``input.unfold(dimension, size, step)`` (already new memory in corenn; ``torch.unfold_copy``)."""
    return unfold(_tensor_input(input), dimension, size, step)


def detach_copy(input):
    """``input.detach()`` in new memory (``torch.detach_copy``)."""
    return _tensor_input(input).detach().clone()


def alias_copy(input):
    """A copy of ``input`` in new memory, still on the graph (``torch.alias_copy``)."""
    return clone(_tensor_input(input))


def detach(input):
    """A new tensor sharing ``input``'s data, cut from the graph (``torch.detach``)."""
    if not isinstance(input, Tensor):
        raise not_tensors(input=input)
    return input.detach()


def detach_(input):
    """Cut ``input`` from the graph in place (``torch.detach_``)."""
    if not isinstance(input, Tensor):
        raise not_tensors(input=input)
    return input.detach_()


def resize_(input, *sizes, memory_format=None):
    """Give ``input`` the shape ``sizes`` in place, keeping its first elements in row-major order.

    ``Tensor.resize_``: growing adds uninitialised elements; a tensor that requires grad can't be resized.
    """
    if not isinstance(input, Tensor):
        raise not_tensors(input=input)
    if input.requires_grad:
        raise RuntimeError(named("cannot resize variables that require grad"))
    if memory_format is not None:
        raise NotImplementedError(named("resize_(): memory_format is not supported in corenn (tensors are row-major)"))
    shape = _sizes(sizes)
    if builtins.any(s < 0 for s in shape):
        raise RuntimeError(named(f"Trying to create tensor with negative dimension {builtins.min(shape)}: "
                                 f"{list(shape)}"))
    xp = input._device._xp
    count = math.prod(shape)
    flat = input._data.reshape(-1)  # a view of a contiguous tensor: the kept elements stay shared
    if count <= flat.shape[0]:
        input._data = flat[:count].reshape(shape)
    else:
        grown = xp.empty(count, dtype=flat.dtype)
        grown[:flat.shape[0]] = flat
        input._data = grown.reshape(shape)
    return input


def resize_as_(input, the_template, *, memory_format=None):
    """``input.resize_(the_template.shape)`` (``torch.resize_as_``)."""
    if not (isinstance(input, Tensor) and isinstance(the_template, Tensor)):
        raise not_tensors(input=input, the_template=the_template)
    return resize_(input, the_template.shape, memory_format=memory_format)


def resize(input, *sizes):
    """``Tensor.resize``, deprecated in PyTorch: a reshape to ``sizes``, which must keep the element count."""
    warnings.warn("non-inplace resize is deprecated", UserWarning, stacklevel=2)
    shape = _sizes(sizes)
    if math.prod(shape) != input.numel():
        raise RuntimeError(named(f"You requested a tensor size of {math.prod(shape)}, but the tensor has "
                                 f"{input.numel()} elements"))
    return reshape(input, shape)


def resize_as(input, tensor):
    """``Tensor.resize_as``, deprecated in PyTorch: :func:`resize` to ``tensor``'s shape."""
    if not (isinstance(input, Tensor) and isinstance(tensor, Tensor)):
        raise not_tensors(input=input, tensor=tensor)
    warnings.warn("non-inplace resize_as is deprecated", UserWarning, stacklevel=2)
    if math.prod(tensor.shape) != input.numel():
        raise RuntimeError(named(f"You requested a tensor size of {math.prod(tensor.shape)}, but the tensor has "
                                 f"{input.numel()} elements"))
    return reshape(input, tensor.shape)


def as_strided_(input, size, stride, storage_offset=None):
    """``Tensor.as_strided_``: give ``input`` the geometry ``size``/``stride`` in place, over its own elements.

    The same limits as :func:`as_strided`; the tensor becomes a strided view of its former elements
    (so ``stride()`` reports ``stride``). A tensor that requires grad raises NotImplementedError.
    """
    if not isinstance(input, Tensor):
        raise not_tensors(input=input)
    if input.requires_grad:
        raise NotImplementedError(named("as_strided_(): corenn changes the geometry of tensors that don't require grad "
                                        "only; use as_strided (out of place) in a graph"))
    positions = _strided_positions(input, size, stride, storage_offset, "as_strided_")
    xp = input._device._xp
    flat = input._data.reshape(-1)
    start = int(positions.reshape(-1)[0]) if positions.size else 0
    itemsize = flat.dtype.itemsize
    input._data = xp.lib.stride_tricks.as_strided(flat[start:], tuple(check_ints(size, "size")),
                                                  tuple(s * itemsize for s in check_ints(stride, "stride")))
    return input


def index_put_(input, indices, values, accumulate=False):
    """In-place :func:`index_put` (``torch.index_put_``)."""
    if not isinstance(input, Tensor):
        raise not_tensors(input=input)
    return input._inplace_from(index_put(input, indices, values, accumulate))


def dim_order(input, *, ambiguity_check=False):
    """``Tensor.dim_order``: the dimensions from outermost to innermost in memory, by their strides.

    PyTorch's rules, ties included (``torch._prims_common``'s logical-to-physical permutation);
    ``ambiguity_check=True`` refuses layouts that more than one order describes. corenn has no
    memory-format objects, so a list of them raises NotImplementedError.

    Example::

        >>> corenn.zeros(2, 3, 4).permute(2, 0, 1).dim_order()
        (1, 2, 0)
    """
    if not isinstance(input, Tensor):
        raise not_tensors(input=input)
    if isinstance(ambiguity_check, list):
        raise NotImplementedError(named("dim_order(): ambiguity_check as a list of memory formats: corenn has no "
                                        "memory_format objects"))
    if not isinstance(ambiguity_check, bool):
        raise TypeError(named("ambiguity_check must be bool or list of memory formats"))
    sizes, strides = tuple(input.shape), input.stride()
    if ambiguity_check and (builtins.any(a == b for a, b in zip(strides, strides[1:])) or 1 in sizes):
        raise RuntimeError(named("The tensor does not have unique dim order, or cannot map to exact one of the given "
                                 "memory formats."))
    order, ambiguous = _logical_to_physical(sizes, strides, ambiguity_check)
    if ambiguous:
        raise RuntimeError(named("The tensor does not have unique dim order."))
    return tuple(order)


def _contiguous_in(order, sizes, strides):
    """Whether the strides are those of a dense layout with ``order``'s dimensions innermost first."""
    expected = 1
    for d in order:
        if sizes[d] == 1:
            continue
        if strides[d] != expected:
            return False
        expected *= sizes[d]
    return True


def _logical_to_physical(sizes, strides, ambiguity_check):
    ndim = len(sizes)
    if ndim == 0:
        return [], False
    if ndim == 1:
        return [0], False
    contiguous = math.prod(sizes) < 2 or _contiguous_in(range(ndim - 1, -1, -1), sizes, strides)
    channels_last = (ndim == 4 and _contiguous_in((1, 3, 2, 0), sizes, strides)) or \
        (ndim == 5 and _contiguous_in((1, 4, 3, 2, 0), sizes, strides))
    if contiguous and not channels_last:
        return list(range(ndim)), False
    if channels_last and not contiguous:
        return [0, *range(2, ndim), 1], False

    def at_least(a, b):
        return b == 0 or (a != 0 and (a >= b or a % b == 0))

    def should_swap(a, b):
        stride_a, stride_b = strides[a], strides[b]
        if stride_a == 0 or stride_b == 0:
            return 0
        if stride_a == stride_b:
            return 0 if at_least(sizes[b], sizes[a]) else 1
        if at_least(stride_b, stride_a):
            return -1
        if at_least(stride_a, stride_b):
            return 1
        return 0

    order = list(reversed(range(ndim)))  # sorted back to front, as PyTorch, then reversed
    for i in range(1, ndim):
        moving = i
        for earlier in reversed(range(i)):
            comparison = should_swap(order[earlier], order[moving])
            if comparison > 0:
                order[earlier], order[moving] = order[moving], order[earlier]
                moving = earlier
            elif comparison < 0:
                break
    ambiguous = ambiguity_check and builtins.any(should_swap(order[i], order[i + 1]) != -1
                                                 for i in range(ndim - 1))
    return list(reversed(order)), ambiguous


# The public op functions of this file (what ``from corenn.ops import *`` re-exports as ``corenn.X``).
__all__ = [name for name, value in list(globals().items())
           if not name.startswith("_") and callable(value) and not isinstance(value, type)
           and getattr(value, "__module__", None) == __name__
           and name not in ("unfold", "resize_", "resize", "resize_as", "dim_order")]  # Tensor methods only
