"""Shape, layout and indexing ops: views, joins and splits, gathers and scatters, indexing."""
from __future__ import annotations

import builtins
import math
import numbers

import numpy as np

from corenn import _dtype, dispatch
from corenn._argcheck import check_int, check_ints, named, not_tensors, type_name
from corenn.autograd import node as _node
from corenn.kernels import PAD_MODES, full_index
from corenn.ops._kernel import Op, kernel, promote_pair, run, sum_to_shape
from corenn.tensor.tensor import Tensor, _normalize_dim, tensor as _tensor


def _sizes(args, argument="size") -> tuple:
    """``f(2, 3)``, ``f((2, 3))`` and ``f([2, 3])`` all mean the sizes (2, 3)."""
    if len(args) == 1 and isinstance(args[0], (tuple, list)):
        args = tuple(args[0])
    out = []
    for s in args:
        if isinstance(s, Tensor) and s.numel() == 1:
            s = s.item()
        if not isinstance(s, numbers.Integral) or isinstance(s, bool):
            raise TypeError(named(f"argument '{argument}' must be a sequence of ints, got {type_name(s)} ({s!r})"))
        out.append(int(s))
    return tuple(out)


def _infer_shape(shape, numel):
    if shape.count(-1) > 1:
        raise RuntimeError(named("only one dimension can be inferred"))
    known = 1
    for s in shape:
        if s != -1:
            if s < 0:
                raise RuntimeError(named(f"invalid shape dimension {s}"))
            known *= s
    if -1 in shape:
        if known == 0 or numel % known:
            raise RuntimeError(named(f"shape '{list(shape)}' is invalid for input of size {numel}"))
        shape = tuple(numel // known if s == -1 else s for s in shape)
    elif known != numel:
        raise RuntimeError(named(f"shape '{list(shape)}' is invalid for input of size {numel}"))
    return shape


# ---------------------------------------------------------------------------------------------------------
# Views and layout
# ---------------------------------------------------------------------------------------------------------

@kernel("reshape", "ViewBackward0")
class Reshape(Op):
    @staticmethod
    def forward(ctx, a, shape, must_view=False):
        ctx.shape = a.shape
        if must_view:
            try:
                return a.reshape(shape, copy=False)
            except ValueError:
                raise RuntimeError("view size is not compatible with input tensor's size and stride (at least one "
                                   "dimension spans across two contiguous subspaces). Use .reshape(...) "
                                   "instead.") from None
            except TypeError:  # array libraries without copy= in reshape
                pass
        return a.reshape(shape)

    @staticmethod
    def backward(ctx, grad):
        return grad.reshape(ctx.shape)


def reshape(input, *shape):
    """Same data with a new shape; a view when the layout allows (``torch.reshape``)."""
    if not isinstance(input, Tensor):
        raise not_tensors(input=input)
    shape = _infer_shape(_sizes(shape, "shape"), input.numel())
    if shape == input._data.shape:
        return _alias(input)
    return run("reshape", input, shape=shape)


def view(input, *shape):
    """A view with a new shape; RuntimeError when the strides don't allow one (use ``reshape``)."""
    if not isinstance(input, Tensor):
        raise not_tensors(input=input)
    if len(shape) == 1 and isinstance(shape[0], _dtype.dtype):
        target = shape[0]
        return Tensor._wrap(input._data.view(target.numpy), input._device)
    shape = _infer_shape(_sizes(shape, "shape"), input.numel())
    return run("reshape", input, shape=shape, must_view=True)


def view_as(input, other):
    if not (isinstance(input, Tensor) and isinstance(other, Tensor)):
        raise not_tensors(input=input, other=other)
    return view(input, other.shape)


def reshape_as(input, other):
    if not (isinstance(input, Tensor) and isinstance(other, Tensor)):
        raise not_tensors(input=input, other=other)
    return reshape(input, other.shape)


@kernel("alias", "AliasBackward0")
class Alias(Op):
    @staticmethod
    def forward(ctx, a):
        return a.view()

    @staticmethod
    def backward(ctx, grad):
        return grad


def _alias(input):
    return run("alias", input)


def flatten(input, start_dim=0, end_dim=-1):
    if not isinstance(input, Tensor):
        raise not_tensors(input=input)
    ndim = input.ndim
    if ndim == 0:
        return reshape(input, 1)
    start, end = _normalize_dim(start_dim, ndim, "start_dim"), _normalize_dim(end_dim, ndim, "end_dim")
    if start > end:
        raise RuntimeError("flatten() has invalid args: start_dim cannot come after end_dim")
    shape = input._data.shape
    middle = 1
    for s in shape[start:end + 1]:
        middle *= s
    return reshape(input, shape[:start] + (middle,) + shape[end + 1:])


def unflatten(input, dim, sizes):
    if not isinstance(input, Tensor):
        raise not_tensors(input=input)
    dim = _normalize_dim(dim, input.ndim)
    shape = input._data.shape
    if not isinstance(sizes, (tuple, list)):
        raise TypeError(named(f"argument 'sizes' must be tuple of ints, not {type_name(sizes)}"))
    sizes = check_ints(sizes, "sizes")
    if -1 in sizes:
        sizes = _infer_shape(sizes, shape[dim])
    elif sizes and math.prod(sizes) != shape[dim]:
        raise RuntimeError(f"unflatten: Provided sizes {list(sizes)} don't multiply up to the size of dim {dim} "
                           f"({shape[dim]}) in the input tensor")
    return reshape(input, shape[:dim] + sizes + shape[dim + 1:])



def squeeze(input, dim=None):
    if not isinstance(input, Tensor):
        raise not_tensors(input=input)
    shape = input._data.shape
    if dim is None:
        dims = [i for i, s in enumerate(shape) if s == 1]
    else:
        dims = dim if isinstance(dim, (tuple, list)) else (dim,)
        dims = [d for d in (_normalize_dim(d, input.ndim) for d in dims) if input.ndim and shape[d] == 1]
    new_shape = tuple(s for i, s in enumerate(shape) if i not in dims)
    result = reshape(input, new_shape)
    if result._grad_fn is not None:
        result._grad_fn.grad_fn_name = "SqueezeBackward0" if dim is None else "SqueezeBackward1"
    return result


def unsqueeze(input, dim):
    if not isinstance(input, Tensor):
        raise not_tensors(input=input)
    dim = _normalize_dim(dim, input.ndim + 1)
    shape = input._data.shape
    result = reshape(input, shape[:dim] + (1,) + shape[dim:])
    if result._grad_fn is not None:
        result._grad_fn.grad_fn_name = "UnsqueezeBackward0"
    return result


@kernel("permute", "PermuteBackward0")
class Permute(Op):
    @staticmethod
    def forward(ctx, a, axes):
        ctx.axes = axes
        return a.transpose(axes)

    @staticmethod
    def backward(ctx, grad):
        inverse = [0] * len(ctx.axes)
        for i, axis in enumerate(ctx.axes):
            inverse[axis] = i
        return grad.transpose(inverse)


def permute(input, *dims):
    if not isinstance(input, Tensor):
        raise not_tensors(input=input)
    ndim = input.ndim
    dims = tuple(_normalize_dim(d, ndim) for d in _sizes(dims, "dims"))
    if sorted(dims) != list(range(ndim)):
        raise RuntimeError(f"permute(sparse_coo): number of dimensions in the tensor input does not match the length "
                           f"of the desired ordering of dimensions i.e. input.dim() = {ndim} is not equal to "
                           f"len(dims) = {len(dims)}" if len(dims) != ndim else f"permute(): duplicate dims in {dims}")
    return run("permute", input, axes=dims)


def transpose(input, dim0, dim1):
    if not isinstance(input, Tensor):
        raise not_tensors(input=input)
    ndim = input.ndim
    if ndim == 0:
        return _alias(input)
    d0, d1 = _normalize_dim(dim0, ndim, "dim0"), _normalize_dim(dim1, ndim, "dim1")
    axes = list(range(ndim))
    axes[d0], axes[d1] = axes[d1], axes[d0]
    result = run("permute", input, axes=tuple(axes))
    if result._grad_fn is not None:
        result._grad_fn.grad_fn_name = "TransposeBackward0"
    return result


swapaxes = swapdims = transpose


def t(input):
    if not isinstance(input, Tensor):
        raise not_tensors(input=input)
    if input.ndim > 2:
        raise RuntimeError(f"t() expects a tensor with <= 2 dimensions, but self is {input.ndim}D")
    if input.ndim < 2:
        return _alias(input)
    result = transpose(input, 0, 1)
    if result._grad_fn is not None:
        result._grad_fn.grad_fn_name = "TBackward0"
    return result


def movedim(input, source, destination):
    if not isinstance(input, Tensor):
        raise not_tensors(input=input)
    ndim = input.ndim
    source, destination = check_ints(source, "source"), check_ints(destination, "destination")
    if len(source) != len(destination):
        raise RuntimeError(named(f"Invalid source or destination dims: source ({list(source)} dims) should contain "
                                 f"the same number of dims as destination ({list(destination)} dims)"))
    source = [_normalize_dim(s, ndim) for s in source]
    destination = [_normalize_dim(d, ndim) for d in destination]
    order = [i for i in range(ndim) if i not in source]
    for dst, src in sorted(zip(destination, source)):
        order.insert(dst, src)
    return run("permute", input, axes=tuple(order))


moveaxis = movedim


def _T(self):
    return permute(self, *reversed(range(self.ndim)))


def _mT(self):
    if self.ndim < 2:
        raise RuntimeError(named("tensor.mT is only supported on matrices or batches of matrices. Got 1-D tensor."))
    return transpose(self, -2, -1)


@kernel("expand", "ExpandBackward0")
class Expand(Op):
    @staticmethod
    def forward(ctx, a, shape):
        ctx.shape = a.shape
        return ctx.xp.broadcast_to(a, shape)

    @staticmethod
    def backward(ctx, grad):
        return sum_to_shape(grad, ctx.shape)


def expand(input, *sizes):
    if not isinstance(input, Tensor):
        raise not_tensors(input=input)
    sizes = _sizes(sizes)
    shape = input._data.shape
    if len(sizes) < len(shape):
        raise RuntimeError(named(f"expand(torch.FloatTensor{{{list(shape)}}}, size={list(sizes)}): the number of sizes "
                                 f"provided ({len(sizes)}) must be greater or equal to the number of dimensions in the "
                                 f"tensor ({len(shape)})"))
    offset = len(sizes) - len(shape)
    target = []
    for i in range(len(sizes) - 1, -1, -1):  # last dimension first, as PyTorch checks (its error names the last)
        size = sizes[i]
        existing = shape[i - offset] if i >= offset else None
        if size == -1:
            if existing is None:
                raise RuntimeError(named("The expanded size of the tensor (-1) isn't allowed in a leading, "
                                         "non-existing dimension"))
            size = existing
        elif existing is not None and existing != 1 and existing != size:
            raise RuntimeError(named(f"The expanded size of the tensor ({size}) must match the existing size "
                                     f"({existing}) at non-singleton dimension {i}.  Target sizes: {list(sizes)}.  "
                                     "Tensor sizes: "
                                     f"{list(shape)}"))
        target.append(size)
    target = tuple(reversed(target))
    if target == shape:
        return _alias(input)
    return run("expand", input, shape=target)


def expand_as(input, other):
    if not (isinstance(input, Tensor) and isinstance(other, Tensor)):
        raise not_tensors(input=input, other=other)
    return expand(input, other.shape)


def broadcast_to(input, shape):
    if not isinstance(input, Tensor):
        raise not_tensors(input=input)
    return expand(input, shape)


def broadcast_tensors(*tensors):
    from corenn.ops._kernel import broadcast_shapes
    if not tensors:
        return ()
    tensors = _tensor_sequence(tensors, "broadcast_tensors")
    shape = broadcast_shapes(*[t.shape for t in tensors])
    return tuple(expand(t, shape) for t in tensors)


@kernel("repeat", "RepeatBackward0")
class Repeat(Op):
    @staticmethod
    def forward(ctx, a, repeats):
        padded = (1,) * (len(repeats) - a.ndim) + a.shape
        ctx.padded, ctx.repeats, ctx.shape = padded, repeats, a.shape
        return ctx.xp.tile(a.reshape(padded), repeats)

    @staticmethod
    def backward(ctx, grad):
        # Split every dimension into (repeat, size) and sum the repeats away.
        split = []
        for r, s in zip(ctx.repeats, ctx.padded):
            split += [r, s]
        grad = grad.reshape(split).sum(axis=tuple(range(0, len(split), 2)))
        return grad.reshape(ctx.shape)


def repeat(input, *sizes):
    if not isinstance(input, Tensor):
        raise not_tensors(input=input)
    sizes = _sizes(sizes, "sizes")
    if any(s < 0 for s in sizes):
        raise RuntimeError(named(f"Trying to create tensor with negative dimension {builtins.min(sizes)}: "
                                 f"{list(sizes)}"))
    if len(sizes) < input.ndim:
        raise RuntimeError(named("Number of dimensions of repeat dims can not be smaller than number of dimensions "
                                 "of tensor"))
    return run("repeat", input, repeats=sizes)


def tile(input, dims):
    if not isinstance(input, Tensor):
        raise not_tensors(input=input)
    dims = _sizes((dims,)) if isinstance(dims, (tuple, list)) else _sizes((dims,))
    if len(dims) < input.ndim:
        dims = (1,) * (input.ndim - len(dims)) + dims
    return repeat(input, dims)


@kernel("contiguous", "CloneBackward0")
class Contiguous(Op):
    @staticmethod
    def forward(ctx, a):
        return ctx.xp.ascontiguousarray(a)

    @staticmethod
    def backward(ctx, grad):
        return grad


def contiguous(input, memory_format=None):
    if not isinstance(input, Tensor):
        raise not_tensors(input=input)
    if input._data.flags.c_contiguous:
        return input
    return run("contiguous", input)


@kernel("clone", "CloneBackward0")
class Clone(Op):
    @staticmethod
    def forward(ctx, a):
        return a.copy()

    @staticmethod
    def backward(ctx, grad):
        return grad


def clone(input, *, memory_format=None):
    """A copy with its own memory, still connected to the graph (``torch.clone``)."""
    if not isinstance(input, Tensor):
        raise not_tensors(input=input)
    return run("clone", input)


@kernel("to_copy", "ToCopyBackward0")
class ToCopy(Op):
    @staticmethod
    def forward(ctx, a, dtype):
        ctx.dtype = a.dtype
        return a.astype(dtype)

    @staticmethod
    def backward(ctx, grad):
        return grad.astype(ctx.dtype, copy=False)


def _transfer(array, source, target):
    """Move an array between devices: within one backend by its ``to_device``, else through host memory."""
    if source.type == target.type:
        return dispatch.get_backend(target.type).to_device(array, target.index)
    if source.type != "cpu":
        array = dispatch.get_backend(source.type).to_host(array)
    if target.type != "cpu":
        array = dispatch.get_backend(target.type).to_device(array, target.index)
    return array


class _DeviceCopy(Op):
    """Moves a tensor between devices; built by hand because input and output devices differ."""

    grad_fn_name = "ToCopyBackward0"

    @staticmethod
    def backward(ctx, grad):
        return _transfer(grad, ctx.target, ctx.source)


def to_copy(input, device=None, dtype=None):
    result = input
    if dtype is not None and dtype is not input.dtype:
        if input._requires_grad and not dtype.is_floating_point and _node.grad_mode.enabled:
            with _no_grad():
                result = run("to_copy", input, dtype=dtype.numpy)
        else:
            result = run("to_copy", input, dtype=dtype.numpy)
    if device is not None and device != input._device:
        out = Tensor._wrap(_transfer(result._data, result._device, device), device)
        if result._requires_grad and _node.grad_mode.enabled:
            node = _DeviceCopy()
            node.source, node.target = result._device, device
            _node.attach(node, (result,))
            out._grad_fn, out._requires_grad = node, True
        result = out
    if result is input:
        result = clone(input)
    return result


def _no_grad():
    from corenn.autograd.grad_mode import no_grad
    return no_grad()


# ---------------------------------------------------------------------------------------------------------
# Joining and splitting
# ---------------------------------------------------------------------------------------------------------

@kernel("cat", "CatBackward0")
class Cat(Op):
    @staticmethod
    def forward(ctx, *arrays, axis=0):
        ctx.sizes, ctx.axis = [a.shape[axis] for a in arrays], axis
        return ctx.xp.concatenate(arrays, axis=axis)

    @staticmethod
    def backward(ctx, grad):
        bounds = []
        total = 0
        for size in ctx.sizes[:-1]:
            total += size
            bounds.append(total)
        return tuple(ctx.xp.split(grad, bounds, axis=ctx.axis))


def cat(tensors, dim=0, *, out=None):
    """Join tensors along an existing dimension (``torch.cat``)."""
    tensors = _tensor_sequence(tensors, "cat")
    # PyTorch skips legacy empty 1-D tensors of shape (0,) when joining others.
    kept = [t for t in tensors if not (t.ndim == 1 and t.shape[0] == 0)] or tensors[:1]
    tensors = _promote_all(kept)
    reference = tensors[0]
    axis = _normalize_dim(dim, reference.ndim)
    for i, t in enumerate(tensors):
        if t.ndim != reference.ndim:
            raise RuntimeError(named(f"Tensors must have same number of dimensions: got {reference.ndim} and {t.ndim}"))
        for d in range(reference.ndim):
            if d != axis and t.shape[d] != reference.shape[d]:
                raise RuntimeError(named(f"Sizes of tensors must match except in dimension {axis}. Expected size "
                                         f"{reference.shape[d]} but got size {t.shape[d]} for tensor number {i} in "
                                         "the list."))
    return run("cat", *tensors, axis=axis)


concat = concatenate = cat


def _tensor_sequence(tensors, op):
    if isinstance(tensors, Tensor) or not isinstance(tensors, (list, tuple)):
        raise TypeError(named(f"argument 'tensors' must be a tuple or list of Tensors, not {type_name(tensors)}", op))
    if not tensors:
        raise RuntimeError(named("expected a non-empty list of Tensors", op))
    for i, t in enumerate(tensors):
        if not isinstance(t, Tensor):
            raise TypeError(named(f"expected Tensor as element {i} in argument 'tensors', but got {type_name(t)}",
                                  op))
    return list(tensors)


def _promote_all(tensors):
    target = tensors[0].dtype
    for t in tensors[1:]:
        target = _dtype.promote_types(target, t.dtype)
    return [t if t.dtype is target else t.to(target) for t in tensors]


@kernel("stack", "StackBackward0")
class Stack(Op):
    @staticmethod
    def forward(ctx, *arrays, axis=0):
        ctx.axis, ctx.count = axis, len(arrays)
        return ctx.xp.stack(arrays, axis=axis)

    @staticmethod
    def backward(ctx, grad):
        xp = ctx.xp
        return tuple(xp.take(grad, i, axis=ctx.axis) for i in range(ctx.count))


def stack(tensors, dim=0, *, out=None):
    """Join tensors along a new dimension (``torch.stack``)."""
    tensors = _promote_all(_tensor_sequence(tensors, "stack"))
    shape = tensors[0].shape
    for i, t in enumerate(tensors):
        if t.shape != shape:
            raise RuntimeError(named(f"stack expects each tensor to be equal size, but got {list(shape)} at entry 0 "
                                     f"and {list(t.shape)} at entry {i}"))
    return run("stack", *tensors, axis=_normalize_dim(dim, len(shape) + 1))


def hstack(tensors):
    tensors = [atleast_1d(t) for t in _tensor_sequence(tensors, "hstack")]
    return cat(tensors, 0 if tensors[0].ndim == 1 else 1)


def vstack(tensors):
    return cat([atleast_2d(t) for t in _tensor_sequence(tensors, "vstack")], 0)


def atleast_1d(input):
    if not isinstance(input, Tensor):
        raise not_tensors(input=input)
    return reshape(input, 1) if input.ndim == 0 else input


def atleast_2d(input):
    if not isinstance(input, Tensor):
        raise not_tensors(input=input)
    return reshape(input, (1,) * (2 - input.ndim) + input.shape) if input.ndim < 2 else input


@kernel("split", "SplitWithSizesBackward0")
class Split(Op):
    num_outputs = -1  # as many as there are pieces

    @staticmethod
    def forward(ctx, a, sizes, axis):
        ctx.shape, ctx.sizes, ctx.axis = a.shape, sizes, axis
        ctx.num_outputs = len(sizes)
        pieces, start = [], 0
        index = [slice(None)] * a.ndim
        for size in sizes:
            index[axis] = slice(start, start + size)
            pieces.append(a[tuple(index)])
            start += size
        return tuple(pieces)

    @staticmethod
    def backward(ctx, grads):
        xp = ctx.xp
        if ctx.num_outputs == 1:  # one piece: the engine hands over its gradient alone, not in a tuple
            grads = (grads,)
        filled = []
        for size, g in zip(ctx.sizes, grads):
            if g is None:
                shape = list(ctx.shape)
                shape[ctx.axis] = size
                g = xp.zeros(shape, dtype=next(x for x in grads if x is not None).dtype)
            filled.append(g)
        return xp.concatenate(filled, axis=ctx.axis)


def split(tensor, split_size_or_sections, dim=0):
    """Split into pieces of ``split_size`` (the last may be smaller) or of the given sizes."""
    if not isinstance(tensor, Tensor):
        raise not_tensors(tensor=tensor)
    axis = _normalize_dim(dim, tensor.ndim)
    length = tensor.shape[axis]
    if isinstance(split_size_or_sections, numbers.Integral):
        step = int(split_size_or_sections)
        if step < 0:
            raise RuntimeError(named(f"split expects split_size be non-negative, but got split_size={step}"))
        if step == 0 and length:
            raise RuntimeError(named(f"split_size can only be 0 if dimension size is 0, but got dimension size of "
                                     f"{length}"))
        sizes = [builtins.min(step, length - start) for start in range(0, length, step)] if length else [0]
    else:
        sizes = list(check_ints(split_size_or_sections, "split_size_or_sections"))
        if builtins.sum(sizes) != length:
            raise RuntimeError(named(f"split_with_sizes expects split_sizes to sum exactly to {length} (input "
                                     f"tensor's size at dimension {axis}), but got split_sizes={sizes}"))
    return run("split", tensor, sizes=tuple(sizes), axis=axis)


def chunk(input, chunks, dim=0):
    """``chunks`` pieces of ``ceil(size / chunks)`` along ``dim`` (fewer when they run out), ``torch.chunk``.

    An empty dimension gives ``chunks`` empty pieces, as in PyTorch.
    """
    if not isinstance(input, Tensor):
        raise not_tensors(input=input)
    if input.ndim == 0:
        raise RuntimeError(named("chunk expects at least a 1-dimensional tensor"))
    chunks = check_int(chunks, "chunks")
    if chunks <= 0:
        raise RuntimeError(named(f"chunk expects `chunks` to be greater than 0, got: {chunks}"))
    axis = _normalize_dim(dim, input.ndim)
    length = input.shape[axis]
    if length == 0:
        return run("split", input, sizes=(0,) * chunks, axis=axis)
    return split(input, -(-length // chunks), axis)


def tensor_split(input, indices_or_sections, dim=0):
    if not isinstance(input, Tensor):
        raise not_tensors(input=input)
    axis = _normalize_dim(dim, input.ndim)
    length = input.shape[axis]
    if isinstance(indices_or_sections, numbers.Integral):
        n = int(indices_or_sections)
        if n <= 0:
            raise RuntimeError(named(f"number of sections must be larger than 0, got {n}"))
        base, extra = divmod(length, n)
        sizes = [base + 1] * extra + [base] * (n - extra)
    else:
        bounds = [0] + [builtins.min(i, length) for i in check_ints(indices_or_sections, "indices_or_sections")]
        bounds.append(length)
        sizes = [builtins.max(b - a, 0) for a, b in zip(bounds[:-1], bounds[1:])]
    return run("split", input, sizes=tuple(sizes), axis=axis)


@kernel("unbind", "UnbindBackward0")
class Unbind(Op):
    num_outputs = -1

    @staticmethod
    def forward(ctx, a, axis):
        xp = ctx.xp
        ctx.shape, ctx.axis = a.shape, axis
        ctx.num_outputs = a.shape[axis]
        moved = xp.moveaxis(a, axis, 0)
        return tuple(moved[i] for i in range(a.shape[axis]))

    @staticmethod
    def backward(ctx, grads):
        xp = ctx.xp
        if ctx.num_outputs == 1:  # one slice: the engine hands over its gradient alone, not in a tuple
            grads = (grads,)
        like = next(g for g in grads if g is not None)
        filled = [g if g is not None else xp.zeros_like(like) for g in grads]
        return xp.stack(filled, axis=ctx.axis)


def unbind(input, dim=0):
    """The slices along ``dim`` as a tuple of tensors (``torch.unbind``)."""
    if not isinstance(input, Tensor):
        raise not_tensors(input=input)
    if input.ndim == 0:
        raise IndexError(named("Dimension specified as 0 but tensor has no dimensions"))
    return run("unbind", input, axis=_normalize_dim(dim, input.ndim))


def narrow(input, dim, start, length):
    if not isinstance(input, Tensor):
        raise not_tensors(input=input)
    axis = _normalize_dim(dim, input.ndim)
    start, length = check_int(start, "start"), check_int(length, "length")
    size = input.shape[axis]
    if not -size <= start <= size:
        raise IndexError(named(f"start out of range (expected to be in range of [{-size}, {size}], but got {start})"))
    if start < 0:
        start += size
    if length < 0:
        raise RuntimeError(named(f"narrow(): length must be non-negative, got {length}"))
    if start + length > size:
        raise RuntimeError(named(f"start ({start}) + length ({length}) exceeds dimension size ({size})."))
    index = [slice(None)] * input.ndim
    index[axis] = slice(start, start + length)
    return getitem(input, tuple(index))


def select(input, dim, index):
    if not isinstance(input, Tensor):
        raise not_tensors(input=input)
    axis = _normalize_dim(dim, input.ndim)
    full = [slice(None)] * input.ndim
    full[axis] = check_int(index, "index")
    return getitem(input, tuple(full))


# ---------------------------------------------------------------------------------------------------------
# Indexing
# ---------------------------------------------------------------------------------------------------------

def _convert_index(index, device):
    """A Python index with tensors in it -> the same index over raw arrays.

    Boolean masks become their nonzero coordinates so that gradients can be
    scattered with ``add.at`` (repeated indices accumulate).
    """
    if not isinstance(index, tuple):
        index = (index,)
    converted = []
    advanced = False
    for item in index:
        if isinstance(item, Tensor):
            array = item._data
            if item._device is not device:
                if item._device.type != "cpu":
                    raise RuntimeError(named(f"indices should be either on cpu or on the same device as the indexed "
                                             f"tensor ({device}), got {item._device}"))
                array = _host_to(array, device)  # cpu indices serve any device, as in PyTorch
            if array.dtype.kind == "f":
                raise IndexError(named("tensors used as indices must be long, int, byte or bool tensors"))
            if array.dtype.kind == "b" or array.dtype == device._xp.uint8 and array.ndim > 0:
                converted.extend(device._xp.nonzero(array.astype(bool)))
                advanced = True
                continue
            converted.append(array)
            advanced = True
        elif isinstance(item, range):  # a sequence of integers, as PyTorch reads it: x[range(n), labels]
            converted.append(_host_to(np.arange(item.start, item.stop, item.step, dtype=np.int64), device))
            advanced = True
        elif isinstance(item, (list, tuple)) or (hasattr(item, "dtype") and hasattr(item, "shape")):
            array = device._xp.asarray(item) if isinstance(item, device._xp.ndarray) else _host_to(item, device)
            if array.dtype.kind == "b":
                converted.extend(device._xp.nonzero(array))
            else:
                if array.dtype.kind == "f":
                    raise IndexError(named("tensors used as indices must be long, int, byte or bool tensors"))
                converted.append(array)
            advanced = True
        elif isinstance(item, bool):
            converted.append(item)
            advanced = True
        elif isinstance(item, (numbers.Integral, slice)) or item is None or item is Ellipsis:
            converted.append(item)
        else:
            raise IndexError(named(f"only integers, slices (`:`), ellipsis (`...`), None, sequences of integers "
                                   f"(lists, ranges) and long or byte Variables are valid indices "
                                   f"(got {type(item).__name__})"))
    return tuple(converted), advanced


def _host_to(value, device):
    """Host data (a numpy array, a list) as an array on ``device``."""
    array = np.asarray(value)  # host data by definition: numpy is the host's array module
    if device.type == "cpu":
        return array
    return dispatch.get_backend(device.type).to_device(array, device.index)


def _check_bounds(shape, index):
    dim = 0
    for item in index:
        if item is None:
            continue
        if item is Ellipsis:
            dim = len(shape) - builtins.sum(1 for i in index if i is not None and i is not Ellipsis) + dim
            continue
        if isinstance(item, numbers.Integral) and not isinstance(item, bool):
            if dim >= len(shape):
                raise IndexError(named(f"too many indices for tensor of dimension {len(shape)}"))
            if not -shape[dim] <= item < shape[dim]:
                raise IndexError(named(f"index {item} is out of bounds for dimension {dim} with size {shape[dim]}"))
        dim += 1


@kernel("getitem", "SliceBackward0")
class GetItem(Op):
    @staticmethod
    def forward(ctx, a, index, advanced=False):
        ctx.shape, ctx.dtype, ctx.advanced = a.shape, a.dtype, advanced
        if advanced:
            ctx.save_for_backward(*index)  # the index tuple, arrays and all: backward frees it
        else:
            ctx.index = index  # ints and slices only: nothing to free, and a second backward may run
        return a[index]

    @staticmethod
    def backward(ctx, grad):
        xp = ctx.xp
        index = ctx.saved if ctx.advanced else ctx.index
        grad_input = xp.zeros(ctx.shape, dtype=grad.dtype)
        if ctx.advanced:
            xp.add.at(grad_input, index, grad)  # repeated indices accumulate
        else:
            grad_input[index] = grad
        return grad_input


def getitem(input, index):
    converted, advanced = _convert_index(index, input._device)
    if not advanced:
        _check_bounds(input._data.shape, converted)
    try:
        result = run("getitem", input, index=converted, advanced=advanced)
    except IndexError as error:
        raise IndexError(named(f"{error} (indexing a tensor of shape {list(input.shape)})")) from None
    fn = result._grad_fn
    if fn is not None:
        if advanced:
            fn.grad_fn_name = "IndexBackward0"
        elif len(converted) == 1 and isinstance(converted[0], numbers.Integral):
            fn.grad_fn_name = "SelectBackward0"
    return result


@kernel("index_put", "IndexPutBackward0")
class IndexPut(Op):
    @staticmethod
    def forward(ctx, a, value, index, accumulate=False):
        xp = ctx.xp
        out = a.copy()
        if accumulate:
            xp.add.at(out, index, value)
        else:
            out[index] = value
        ctx.save_for_backward(*index)  # the index tuple, arrays and all: backward frees it
        ctx.accumulate, ctx.value_shape = accumulate, getattr(value, "shape", None)
        return out

    @staticmethod
    def backward(ctx, grad):
        index = ctx.saved
        grad_input = grad
        if not ctx.accumulate:
            grad_input = grad.copy()
            grad_input[index] = 0
        grad_value = None
        if ctx.value_shape is not None:
            grad_value = sum_to_shape(grad[index], ctx.value_shape)
        return grad_input, grad_value


def setitem(input, index, value):
    """``input[index] = value``: in place when no graph is recorded, else recorded as ``index_put``."""
    converted, advanced = _convert_index(index, input._device)
    if not advanced:
        _check_bounds(input._data.shape, converted)
    records = _node.grad_mode.enabled and (input._requires_grad or getattr(value, "_requires_grad", False))
    if records:
        input._check_inplace()
        if isinstance(value, Tensor):
            value = value.to(input.dtype) if value.dtype is not input.dtype else value
        result = run("index_put", input, value, index=converted)
        input._inplace_from(result)
        return
    if isinstance(value, Tensor):
        if value._device is not input._device:
            raise RuntimeError(named(f"expected value on {input._device}, got {value._device}"))
        value = value._data
    try:
        input._data[converted] = value
    except ValueError as error:
        raise RuntimeError(named(f"shape mismatch: value cannot be broadcast to the indexing result of a tensor of "
                                 f"shape {list(input.shape)}: {error}")) from None


def index_put(input, indices, values, accumulate=False):
    if not isinstance(input, Tensor):
        raise not_tensors(input=input)
    if not isinstance(indices, (tuple, list)):
        raise TypeError(named(f"argument 'indices' must be tuple of Tensors, not {type_name(indices)}"))
    converted, _ = _convert_index(tuple(indices), input._device)
    return run("index_put", input, values, index=converted, accumulate=accumulate)


def nonzero(input, *, as_tuple=False):
    if not isinstance(input, Tensor):
        raise not_tensors(input=input)
    xp = input._device._xp
    if input._data.ndim == 0:  # numpy refuses a 0-d array; PyTorch treats it as one element
        hit = int(bool(input._data.item()))
        if as_tuple:
            return (Tensor._wrap(xp.zeros(hit, dtype=xp.int64), input._device),)
        return Tensor._wrap(xp.zeros((hit, 0), dtype=xp.int64), input._device)
    coords = xp.nonzero(input._data)
    if as_tuple:
        return tuple(Tensor._wrap(c.astype(xp.int64), input._device) for c in coords)
    return Tensor._wrap(xp.stack(coords, axis=1).astype(xp.int64) if coords else
                        xp.zeros((int(bool(input._data.item())), 0), dtype=xp.int64), input._device)


argwhere = nonzero


def masked_select(input, mask):
    if not (isinstance(input, Tensor) and isinstance(mask, Tensor)):
        raise not_tensors(input=input, mask=mask)
    input, mask = broadcast_tensors(input, mask)
    return getitem(input, mask)


@kernel("gather", "GatherBackward0")
class Gather(Op):
    @staticmethod
    def forward(ctx, a, index, axis):
        ctx.shape, ctx.axis = a.shape, axis
        ctx.save_for_backward(index)  # the coordinates are rebuilt from it: sparse grids cost nothing
        return a[full_index(ctx.xp, index, axis)]

    @staticmethod
    def backward(ctx, grad):
        xp = ctx.xp
        (index,) = ctx.saved
        grad_input = xp.zeros(ctx.shape, dtype=grad.dtype)
        xp.add.at(grad_input, full_index(xp, index, ctx.axis), grad)
        return grad_input, None


def _check_index(index, op):
    if not isinstance(index, Tensor):
        raise TypeError(named(f"argument 'index' must be Tensor, not {type_name(index)}", op))
    if index.dtype.is_floating_point or index.dtype is _dtype.bool_:
        raise RuntimeError(named(f"Expected dtype int64 for index, got {index.dtype}", op))


class IndexOutOfRangeError(IndexError, RuntimeError):
    """An index outside its dimension: both an IndexError and a RuntimeError.

    PyTorch raises either for the same mistake, depending on the op and even its arguments
    (``index_add`` raises RuntimeError, with ``alpha=2`` IndexError; ``embedding`` IndexError,
    ``gather`` RuntimeError); code written against PyTorch catches this one either way.
    """


def _check_in_range(index, size, axis, op, error=IndexOutOfRangeError):
    """PyTorch's error for an index outside ``[0, size)``: negative indices do not wrap here.

    One ``min`` and one ``max`` over the index, vectorised; what gather, scatter and
    index_add check before their kernels run (a kernel must never index out of bounds).
    """
    if not index.numel():
        return
    data = index._data
    low, high = data.min().item(), data.max().item()
    if low < 0 or high >= size:
        raise error(named(f"index {low if low < 0 else high} is out of bounds for dimension {axis} with size {size}",
                          op))


def _nonempty(t):
    """A 0-d tensor as shape (1,): PyTorch's gather/scatter/index_add treat a scalar as one element."""
    return reshape(t, 1) if isinstance(t, Tensor) and t.ndim == 0 else t


def gather(input, dim, index, *, sparse_grad=False):
    """``out[i][j] = input[index[i][j]][j]`` along ``dim`` (``torch.gather``).

    Every index must be in ``[0, input.shape[dim])``: negative indices raise, as in PyTorch.
    """
    if not (isinstance(input, Tensor) and isinstance(index, Tensor)):
        raise not_tensors(input=input, index=index)
    _check_index(index, "gather")
    axis = _normalize_dim(dim, input.ndim)
    if input.ndim == 0 or index.ndim == 0:
        if max(input.ndim, 1) == max(index.ndim, 1):
            return reshape(gather(_nonempty(input), axis, _nonempty(index)), index.shape)
    if index.ndim != input.ndim:
        raise RuntimeError(named("Index tensor must have the same number of dimensions as input tensor"))
    for d in range(input.ndim):
        if d != axis and index.shape[d] > input.shape[d]:
            raise RuntimeError(named(f"Size does not match at dimension {d} expected index {list(index.shape)} to be "
                                     f"no larger than self {list(input.shape)} apart from dimension {axis}"))
    _check_in_range(index, input.shape[axis], axis, "gather")
    return run("gather", input, index, axis=axis)


def take_along_dim(input, indices, dim=None):
    """Values of ``input`` at ``indices`` along ``dim`` (``torch.take_along_dim``); ``indices`` broadcast.

    As in PyTorch, with a ``dim`` a negative index counts from the end (``gather`` refuses one).
    An index outside ``[-size, size)`` raises (PyTorch wraps it around).
    """
    if not (isinstance(input, Tensor) and isinstance(indices, Tensor)):
        raise not_tensors(input=input, indices=indices)
    _check_index(indices, "take_along_dim")
    if dim is None:
        input, indices, axis = reshape(input, -1), reshape(indices, -1), 0
    else:
        axis = _normalize_dim(dim, input.ndim)
    if dim is None:  # PyTorch refuses a negative index here, as gather does
        return gather(input, 0, indices)
    size = input.shape[axis] if input.ndim else 1
    lowest = indices._data.min().item() if indices.numel() else 0
    if -size <= lowest < 0:  # below -size stays negative: gather names it (PyTorch wraps it around silently)
        indices = indices + (indices < 0).to(indices.dtype) * size
    shape = list(input.shape)
    index_shape = list(indices.shape)
    shape[axis] = index_shape[axis] = 1
    from corenn.ops._kernel import broadcast_shapes
    common = list(broadcast_shapes(tuple(shape), tuple(index_shape)))
    input_target, index_target = list(common), list(common)
    input_target[axis], index_target[axis] = input.shape[axis], indices.shape[axis]
    return gather(expand(input, input_target), axis, expand(indices, index_target))


@kernel("scatter", "ScatterBackward0")
class Scatter(Op):
    @staticmethod
    def forward(ctx, a, index, src, axis, reduce=None):
        xp = ctx.xp
        coords = full_index(xp, index, axis)
        # The front end checked that src is at least as large as index in every dimension.
        values = src[tuple(slice(0, s) for s in index.shape)] if hasattr(src, "shape") and src.ndim else src
        out = a.copy()
        if reduce == "add":
            xp.add.at(out, coords, values)
        elif reduce == "multiply":
            xp.multiply.at(out, coords, values)
        else:
            out[coords] = values
        ctx.save_for_backward(index)
        ctx.axis, ctx.reduce, ctx.src_shape = axis, reduce, getattr(src, "shape", None)
        return out

    @staticmethod
    def backward(ctx, grad):
        xp = ctx.xp
        (index,) = ctx.saved
        coords = full_index(xp, index, ctx.axis)
        grad_input = grad
        if ctx.reduce is None:
            grad_input = grad.copy()
            grad_input[coords] = 0
        grad_src = None
        if ctx.src_shape is not None:
            grad_src = xp.zeros(ctx.src_shape, dtype=grad.dtype)
            grad_src[tuple(slice(0, s) for s in index.shape)] = grad[coords]
        return grad_input, None, grad_src


def _check_scatter(op, input, axis, index, src):
    """PyTorch's shape rules for scatter: index no larger than self (apart from ``dim``) nor than src."""
    if not index.numel():
        return
    if max(index.ndim, 1) != max(input.ndim, 1):
        raise RuntimeError(f"{op}(): Index tensor must have the same number of dimensions as self tensor")
    has_src = isinstance(src, Tensor)
    if has_src and max(src.ndim, 1) != max(index.ndim, 1):
        error = IndexError if 0 < src.ndim < index.ndim else RuntimeError  # PyTorch's types, its messages unclear
        raise error(f"{op}(): Index tensor must have the same number of dimensions as src tensor")
    index_shape, self_shape = index.shape or (1,), input.shape or (1,)
    wrong = any(i > s for d, (i, s) in enumerate(zip(index_shape, self_shape)) if d != axis)
    if has_src:
        wrong = wrong or any(i > s for i, s in zip(index_shape, src.shape or (1,)))
    if wrong:
        raise RuntimeError(f"{op}(): Expected index {list(index.shape)} to be no larger than self "
                           f"{list(input.shape)} apart from dimension {axis}"
                           + (f" and to be no larger size than src {list(src.shape)}" if has_src else ""))
    _check_in_range(index, self_shape[axis], axis, op)


def scatter(input, dim, index, src=None, *, value=None, reduce=None):
    """Write ``src`` (or ``value``) into a copy of ``input`` at ``index`` along ``dim`` (``torch.scatter``).

    ``index`` must be no larger than ``input`` (apart from ``dim``) nor than ``src`` in any
    dimension, and its values in ``[0, input.shape[dim])``; anything else raises, as in PyTorch.
    """
    if not (isinstance(input, Tensor) and isinstance(index, Tensor)):
        raise not_tensors(input=input, index=index)
    _check_index(index, "scatter")
    axis = _normalize_dim(dim, input.ndim)
    if src is None:
        src = value
    if reduce not in (None, "add", "multiply"):
        raise RuntimeError(f"scatter(): reduce argument must be either add or multiply, got {reduce!r}")
    if isinstance(src, Tensor):
        src = src.to(input.dtype) if src.dtype is not input.dtype else src
    _check_scatter("scatter_add" if reduce == "add" else "scatter", input, axis, index, src)
    if not index.numel():
        return clone(input)
    if input.ndim == 0 or index.ndim == 0:
        return reshape(scatter(_nonempty(input), axis, _nonempty(index), _nonempty(src), reduce=reduce), input.shape)
    return run("scatter", input, index, src, axis=axis, reduce=reduce)


def scatter_add(input, dim, index, src):
    """Add ``src`` into a copy of ``input`` at ``index`` along ``dim``; repeated indices accumulate."""
    if not (isinstance(input, Tensor) and isinstance(index, Tensor) and isinstance(src, Tensor)):
        raise not_tensors(input=input, index=index, src=src)
    if not isinstance(src, Tensor):
        raise TypeError(f"scatter_add(): argument 'src' (position 3) must be Tensor, not {type(src).__name__}")
    return scatter(input, dim, index, src, reduce="add")


@kernel("index_select", "IndexSelectBackward0")
class IndexSelect(Op):
    @staticmethod
    def forward(ctx, a, index, axis):
        ctx.shape, ctx.axis = a.shape, axis
        ctx.save_for_backward(index)
        return ctx.xp.take(a, index, axis=axis)

    @staticmethod
    def backward(ctx, grad):
        (index,) = ctx.saved
        xp = ctx.xp
        grad_input = xp.zeros(ctx.shape, dtype=grad.dtype)
        xp.add.at(xp.moveaxis(grad_input, ctx.axis, 0), index, xp.moveaxis(grad, ctx.axis, 0))
        return grad_input, None


def index_select(input, dim, index):
    """The slices of ``input`` at ``index`` along ``dim`` (``torch.index_select``); indices in ``[0, size)``."""
    if not (isinstance(input, Tensor) and isinstance(index, Tensor)):
        raise not_tensors(input=input, index=index)
    axis = _normalize_dim(dim, input.ndim)
    _check_index(index, "index_select")
    if index.ndim > 1:
        raise IndexError("index_select(): Index is supposed to be a vector")
    if input.ndim == 0:
        if index.numel() != 1:
            raise RuntimeError(f"index_select(): Index to scalar can have only 1 value, got {index.numel()} "
                               f"value(s)")
        _check_in_range(index, 1, axis, "index_select")
        return clone(input)
    _check_in_range(index, input.shape[axis], axis, "index_select")
    return run("index_select", input, reshape(index, -1), axis=axis)


@kernel("index_add", "IndexAddBackward0")
class IndexAdd(Op):
    @staticmethod
    def forward(ctx, a, index, source, axis, alpha=1):
        xp = ctx.xp
        out = a.copy()
        xp.add.at(xp.moveaxis(out, axis, 0), index, xp.moveaxis(source * alpha if alpha != 1 else source, axis, 0))
        ctx.save_for_backward(index)
        ctx.axis, ctx.alpha = axis, alpha
        return out

    @staticmethod
    def backward(ctx, grad):
        (index,) = ctx.saved
        grad_source = ctx.xp.take(grad, index, axis=ctx.axis)
        return grad, None, grad_source * ctx.alpha if ctx.alpha != 1 else grad_source


def index_add(input, dim, index, source, *, alpha=1):
    """Add the slices of ``source`` into a copy of ``input`` at ``index`` along ``dim`` (``torch.index_add``).

    ``source`` has ``input``'s shape with ``len(index)`` at ``dim``; indices are in ``[0, size)``.
    """
    if not (isinstance(input, Tensor) and isinstance(index, Tensor) and isinstance(source, Tensor)):
        raise not_tensors(input=input, index=index, source=source)
    _check_index(index, "index_add")
    if not isinstance(source, Tensor):
        raise TypeError(f"index_add(): argument 'source' (position 3) must be Tensor, not {type(source).__name__}")
    axis = _normalize_dim(dim, input.ndim)
    if index.ndim > 1:
        raise IndexError(f"index_add(): Index is supposed to be a vector, but got dim: {index.ndim} with size: "
                         f"{list(index.shape)}")
    if not (axis == 0 or axis < source.ndim):
        raise RuntimeError(f"index_add(): Indexing dim {axis} is out of bounds of the source tensor with dim "
                           f"{source.ndim}")
    count = source.shape[axis] if source.ndim else 1
    if index.numel() != count:
        raise RuntimeError(f"index_add(): Number of indices ({index.numel()}) should be equal to source.size(dim): "
                           f"({count}), for dim: {axis}")
    self_rest, source_rest = list(input.shape), list(source.shape)
    if input.ndim and source.ndim:
        del self_rest[axis], source_rest[axis]
    if self_rest != source_rest:
        raise RuntimeError(f"index_add(): source tensor shape must match self tensor shape, excluding the specified "
                           f"dimension. Got self.shape = {list(input.shape)} source.shape = {list(source.shape)}")
    _check_in_range(index, input.shape[axis] if input.ndim else 1, axis, "index_add")
    if input.ndim == 0:
        return reshape(index_add(_nonempty(input), 0, index, _nonempty(source), alpha=alpha), ())
    return run("index_add", input, reshape(index, -1), source.to(input.dtype), axis=axis, alpha=alpha)


def index_fill(input, dim, index, value):
    if not (isinstance(input, Tensor) and isinstance(index, Tensor)):
        raise not_tensors(input=input, index=index)
    axis = _normalize_dim(dim, input.ndim)
    _check_index(index, "index_fill")
    if index.ndim > 1:
        raise RuntimeError(named(f"Index has to be a vector/scalar, got a {index.ndim}-D index"))
    size = input.shape[axis] if input.ndim else 1
    if index.numel() and not -size <= index._data.min().item() <= index._data.max().item() < size:
        bad = index._data.min().item() if index._data.min().item() < -size else index._data.max().item()
        raise IndexError(named(f"index {bad} is out of bounds for dimension {axis} with size {size}"))
    full = [slice(None)] * input.ndim
    full[axis] = index
    mask = Tensor._wrap(input._device._xp.zeros(input.shape, dtype=bool), input._device)
    mask._data[tuple(x._data if isinstance(x, Tensor) else x for x in full)] = True
    from corenn.ops.elementwise import masked_fill
    return masked_fill(input, mask, value)


@kernel("tril", "TrilBackward0")
class Tril(Op):
    @staticmethod
    def forward(ctx, a, diagonal=0, upper=False):
        ctx.diagonal, ctx.upper = diagonal, upper
        return ctx.xp.triu(a, diagonal) if upper else ctx.xp.tril(a, diagonal)

    @staticmethod
    def backward(ctx, grad):
        return ctx.xp.triu(grad, ctx.diagonal) if ctx.upper else ctx.xp.tril(grad, ctx.diagonal)


def tril(input, diagonal=0):
    if not isinstance(input, Tensor):
        raise not_tensors(input=input)
    if input.ndim < 2:
        raise RuntimeError("tril: input tensor must have at least 2 dimensions")
    return run("tril", input, diagonal=check_int(diagonal, "diagonal"))


def triu(input, diagonal=0):
    if not isinstance(input, Tensor):
        raise not_tensors(input=input)
    if input.ndim < 2:
        raise RuntimeError("triu: input tensor must have at least 2 dimensions")
    result = run("tril", input, diagonal=check_int(diagonal, "diagonal"), upper=True)
    if result._grad_fn is not None:
        result._grad_fn.grad_fn_name = "TriuBackward0"
    return result


@kernel("flip", "FlipBackward0")
class Flip(Op):
    @staticmethod
    def forward(ctx, a, axes):
        ctx.axes = axes
        return ctx.xp.flip(a, axes)

    @staticmethod
    def backward(ctx, grad):
        return ctx.xp.flip(grad, ctx.axes)


def flip(input, dims):
    if not isinstance(input, Tensor):
        raise not_tensors(input=input)
    dims = check_ints(dims, "dims")
    return run("flip", input, axes=tuple(_normalize_dim(d, input.ndim) for d in dims))


def fliplr(input):
    if not isinstance(input, Tensor):
        raise not_tensors(input=input)
    return flip(input, 1)


def flipud(input):
    if not isinstance(input, Tensor):
        raise not_tensors(input=input)
    return flip(input, 0)


@kernel("roll", "RollBackward0")
class Roll(Op):
    @staticmethod
    def forward(ctx, a, shifts, axes):
        ctx.shifts, ctx.axes = shifts, axes
        return ctx.xp.roll(a, shifts, axes)

    @staticmethod
    def backward(ctx, grad):
        shifts = tuple(-s for s in ctx.shifts) if isinstance(ctx.shifts, tuple) else -ctx.shifts
        return ctx.xp.roll(grad, shifts, ctx.axes)


def roll(input, shifts, dims=None):
    if not isinstance(input, Tensor):
        raise not_tensors(input=input)
    shifts = check_ints(shifts, "shifts")
    if dims is None:
        if len(shifts) != 1:
            raise RuntimeError(named(f"shifts and dimensions must align. shifts: {len(shifts)}, dims: 0"))
        return reshape(run("roll", reshape(input, -1), shifts=shifts[0], axes=0), input.shape)
    axes = tuple(_normalize_dim(d, input.ndim) for d in check_ints(dims, "dims"))
    if len(shifts) != len(axes):
        raise RuntimeError(named(f"shifts and dimensions must align. shifts: {len(shifts)}, dims: {len(axes)}"))
    return run("roll", input, shifts=shifts, axes=axes)


@kernel("pad_axis", "ConstantPadNdBackward0")
class PadAxis(Op):
    """Pad one axis; reflect/replicate/circular scatter their gradient back through an index map."""

    @staticmethod
    def forward(ctx, a, axis, before, after, mode="constant", value=0.0):
        xp = ctx.xp
        widths = [(0, 0)] * a.ndim
        widths[axis] = (before, after)
        ctx.axis, ctx.before, ctx.mode, ctx.size = axis, before, mode, a.shape[axis]
        if mode == "constant":
            return xp.pad(a, widths, mode="constant", constant_values=value)
        return xp.pad(a, widths, mode=PAD_MODES[mode])

    @staticmethod
    def backward(ctx, grad):
        xp = ctx.xp
        if ctx.mode == "constant":
            index = [slice(None)] * grad.ndim
            index[ctx.axis] = slice(ctx.before, ctx.before + ctx.size)
            return grad[tuple(index)]
        after = grad.shape[ctx.axis] - ctx.size - ctx.before
        source = xp.pad(xp.arange(ctx.size), (ctx.before, after), mode=PAD_MODES[ctx.mode])
        shape = list(grad.shape)
        shape[ctx.axis] = ctx.size
        grad_input = xp.zeros(shape, dtype=grad.dtype)
        xp.add.at(xp.moveaxis(grad_input, ctx.axis, 0), source, xp.moveaxis(grad, ctx.axis, 0))
        return grad_input


def pad(input, pad, mode="constant", value=None):
    """Pad the last dimensions: ``pad = (left, right, top, bottom, ...)`` from the last dim backwards.

    Negative padding crops. Modes: constant, reflect, replicate, circular (``torch.nn.functional.pad``).
    """
    if not isinstance(input, Tensor):
        raise not_tensors(input=input)
    pad = check_ints(pad, "pad") if isinstance(pad, (tuple, list)) else check_ints([pad], "pad")
    if len(pad) % 2:
        raise RuntimeError(named("Padding length must be divisible by 2"))
    if len(pad) // 2 > input.ndim:
        raise RuntimeError(named(f"Padding length should be less than or equal to two times the input dimension but "
                                 f"got padding length {len(pad)} and input of dimension {input.ndim}"))
    if not isinstance(mode, str):
        raise TypeError(named(f"argument 'mode' must be str, not {type_name(mode)}"))
    if mode not in PAD_MODES:
        raise NotImplementedError(f"Unsupported padding mode: {mode!r}; expected one of {sorted(PAD_MODES)}")
    result = input
    for i in range(len(pad) // 2):
        axis = input.ndim - 1 - i
        before, after = int(pad[2 * i]), int(pad[2 * i + 1])
        if before < 0 or after < 0:
            size = result.shape[axis]
            result = narrow(result, axis, builtins.max(-before, 0), size - builtins.max(-before, 0) - builtins.max(-after, 0))
            before, after = builtins.max(before, 0), builtins.max(after, 0)
        if before or after:
            if mode == "reflect" and (before >= result.shape[axis] or after >= result.shape[axis]):
                raise RuntimeError(named(f"Argument #4: Padding size should be less than the corresponding input "
                                         f"dimension, but got: padding ({before}, {after}) at dimension {axis} of "
                                         f"input {list(input.shape)}"))
            result = run("pad_axis", result, axis=axis, before=before, after=after, mode=mode,
                         value=0.0 if value is None else value)
    return result if result is not input else clone(input)


# ---------------------------------------------------------------------------------------------------------
# Sorting and selection
# ---------------------------------------------------------------------------------------------------------

def argsort(input, dim=-1, descending=False, stable=False):
    if not isinstance(input, Tensor):
        raise not_tensors(input=input)
    xp = input._device._xp
    axis = _normalize_dim(dim, input.ndim)
    data = input._data
    if input.ndim == 0:
        return Tensor._wrap(xp.zeros((), dtype=xp.int64), input._device)
    if descending:
        # Stable descending order: sort the reversed array ascending on negated keys' ranks.
        order = xp.flip(xp.argsort(xp.flip(data, axis), axis=axis, kind="stable"), axis)
        order = data.shape[axis] - 1 - order
    else:
        order = xp.argsort(data, axis=axis, kind="stable")
    return Tensor._wrap(order.astype(xp.int64), input._device)


def sort(input, dim=-1, descending=False, stable=False):
    if not isinstance(input, Tensor):
        raise not_tensors(input=input)
    from corenn.ops.reduce import return_types
    indices = argsort(input, dim, descending, stable)
    if input.ndim == 0:
        return return_types.sort(input.clone(), indices)
    return return_types.sort(gather(input, dim, indices), indices)


def topk(input, k, dim=-1, largest=True, sorted=True):  # noqa: A002
    """The ``k`` largest (or smallest) elements along ``dim`` with their indices (``torch.topk``)."""
    if not isinstance(input, Tensor):
        raise not_tensors(input=input)
    from corenn.ops.reduce import return_types
    axis = _normalize_dim(dim, input.ndim)
    size = input.shape[axis] if input.ndim else 1
    k = check_int(k, "k")
    if not 0 <= k <= size:
        raise RuntimeError(named(f"selected index k out of range (k={k} for dimension {axis} of size {size})"))
    indices = argsort(input, axis, descending=largest)
    indices = narrow(indices, axis, 0, k) if input.ndim else indices
    return return_types.topk(gather(input, axis, indices) if input.ndim else input.clone(), indices.contiguous())


def unique(input, sorted=True, return_inverse=False, return_counts=False, dim=None):  # noqa: A002
    if not isinstance(input, Tensor):
        raise not_tensors(input=input)
    xp = input._device._xp
    if dim is not None:
        dim = _normalize_dim(dim, input.ndim)
    values, inverse, counts = xp.unique(input._data, return_inverse=True, return_counts=True, axis=dim)
    result = [Tensor._wrap(values, input._device)]
    if return_inverse:
        result.append(Tensor._wrap(inverse.reshape(input.shape if dim is None else -1).astype(xp.int64), input._device))
    if return_counts:
        result.append(Tensor._wrap(counts.astype(xp.int64), input._device))
    return result[0] if len(result) == 1 else tuple(result)


def diagonal(input, offset=0, dim1=0, dim2=1):
    if not isinstance(input, Tensor):
        raise not_tensors(input=input)
    xp = input._device._xp
    offset = check_int(offset, "offset")
    d1, d2 = _normalize_dim(dim1, input.ndim, "dim1"), _normalize_dim(dim2, input.ndim, "dim2")
    if d1 == d2:
        raise RuntimeError(named(f"diagonal dimensions cannot be identical {dim1}, {dim2}"))
    n1, n2 = input.shape[d1], input.shape[d2]
    rows = xp.arange(builtins.max(0, -offset), builtins.min(n1, n2 - offset))
    moved = movedim(input, (d1, d2), (-2, -1))
    # rows is an array of input's device: wrapped as it is (tensor() would read it on the host)
    return getitem(moved, (Ellipsis, Tensor._wrap(rows.astype("int64"), input._device),
                           Tensor._wrap((rows + offset).astype("int64"), input._device)))


def diag(input, diagonal_=0):
    if not isinstance(input, Tensor):
        raise not_tensors(input=input)
    diagonal_ = check_int(diagonal_, "diagonal")
    if input.ndim not in (1, 2):
        raise RuntimeError(named(f"expected a 1D or 2D tensor, got {input.ndim}D"))
    if input.ndim == 1:
        n = input.shape[0] + builtins.abs(diagonal_)
        out = input.new_zeros(n, n)
        rows = list(range(builtins.max(0, -diagonal_), builtins.max(0, -diagonal_) + input.shape[0]))
        cols = [r + diagonal_ for r in rows]
        return index_put(out, (_tensor(rows, device=input._device), _tensor(cols, device=input._device)), input)
    return diagonal(input, diagonal_)


def trace(input):
    if not isinstance(input, Tensor):
        raise not_tensors(input=input)
    from corenn.ops.reduce import sum as sum_
    return sum_(diagonal(input))


def _promote_for(input, other):
    return promote_pair(input, other)


# The public op functions of this file (what ``from corenn.ops import *`` re-exports as ``corenn.X``).
__all__ = [name for name, value in list(globals().items())
           if not name.startswith("_") and callable(value) and not isinstance(value, type)
           and getattr(value, "__module__", None) == __name__]
