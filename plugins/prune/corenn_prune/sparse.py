"""Sparse storage and kernels for unstructured pruning: ``compact(model)``.

``compact`` replaces every ``Linear`` and ``Conv2d`` whose weight is mostly zeros (a
pruned weight counts with its mask applied) by a :class:`SparseLinear` /
:class:`SparseConv2d` that stores only the nonzero weights -- CSR (values, column
indices, row offsets) or block-sparse (BSR: dense ``r x c`` blocks, kept where any entry
is nonzero) -- and multiplies with a sparse kernel. Column indices are 16-bit where the
width allows, so CSR costs 6 bytes per kept weight instead of 4 per weight: less memory
from about one third sparsity, 6.7x less at 90%. State dicts (and checkpoints) hold the
sparse arrays only.

Kernels, chosen once per process (:func:`sparse_backend`): numba (parallel, compiled on
first use) when corenn-numba is installed, else scipy.sparse, else numpy. Compacted
layers are for inference: their weights are buffers, not parameters, and a forward that
would need a gradient raises.

Example::

    >>> import corenn_prune
    >>> net = nn.Sequential(nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 10))
    >>> corenn_prune.global_unstructured([(net[0], "weight"), (net[2], "weight")],
    ...                                  pruning_method=corenn_prune.L1Unstructured, amount=0.9)
    >>> small = corenn_prune.compact(net)
    >>> type(small[0]).__name__
    'SparseLinear'
"""
from __future__ import annotations

import copy
import importlib.metadata
import math

import numpy as np

import corenn
from corenn import nn

__all__ = ["compact", "SparseLinear", "SparseConv2d", "sparse_backend"]

_BACKENDS = ("numba", "scipy", "numpy")
_backend: str | None = None


def _available(backend: str) -> bool:
    if backend == "numba":
        try:
            importlib.metadata.distribution("corenn-numba")
            import numba  # noqa: F401
        except Exception:
            return False
        return True
    if backend == "scipy":
        try:
            import scipy.sparse  # noqa: F401
        except ImportError:
            return False
        return True
    return backend == "numpy"


def sparse_backend(name: str | None = None) -> str:
    """The kernels compacted layers use: ``"numba"``, ``"scipy"`` or ``"numpy"``; ``name`` picks one (tests, benchmarks).

    The default is the first available of numba (when corenn-numba is installed), scipy, numpy.

    Example::

        >>> sparse_backend() in ("numba", "scipy", "numpy")
        True
    """
    global _backend
    if name is not None:
        if name not in _BACKENDS:
            raise ValueError(f"sparse_backend(): argument 'name' must be one of {_BACKENDS}, got {name!r}")
        if not _available(name):
            raise RuntimeError(f"sparse_backend(): {name!r} is not installed here "
                               f"({'pip install -e plugins/numba_backend' if name == 'numba' else 'pip install scipy'})")
        _backend = name
    elif _backend is None:
        _backend = next(b for b in _BACKENDS if _available(b))
    return _backend


# -- storage ---------------------------------------------------------------------------------------------

def _index_dtype(limit: int):
    return np.uint16 if limit <= np.iinfo(np.uint16).max + 1 else np.int32


def to_csr(dense: np.ndarray):
    """(values, column indices, row offsets) of a 2-D array's nonzeros, rows in order."""
    rows, cols = np.nonzero(dense)
    values = dense[rows, cols].astype(dense.dtype)
    offsets = np.zeros(dense.shape[0] + 1, dtype=np.int64)
    np.cumsum(np.bincount(rows, minlength=dense.shape[0]), out=offsets[1:])
    return values, cols.astype(_index_dtype(dense.shape[1])), offsets


def to_bsr(dense: np.ndarray, block: tuple[int, int]):
    """(blocks (n, r, c), block column indices, block-row offsets) of the r x c blocks holding a nonzero."""
    r, c = block
    rows, cols = dense.shape
    padded = np.zeros((-(-rows // r) * r, -(-cols // c) * c), dtype=dense.dtype)
    padded[:rows, :cols] = dense
    tiles = padded.reshape(padded.shape[0] // r, r, padded.shape[1] // c, c).swapaxes(1, 2)
    keep = np.any(tiles != 0, axis=(2, 3))
    block_rows, block_cols = np.nonzero(keep)
    offsets = np.zeros(keep.shape[0] + 1, dtype=np.int64)
    np.cumsum(np.bincount(block_rows, minlength=keep.shape[0]), out=offsets[1:])
    return np.ascontiguousarray(tiles[block_rows, block_cols]), block_cols.astype(_index_dtype(keep.shape[1])), offsets


# -- kernels: y (batch, out) = x (batch, in) @ W.T ---------------------------------------------------------

_numba_kernels = None


def _numba():
    global _numba_kernels
    if _numba_kernels is None:
        import numba

        @numba.njit(parallel=True, fastmath=True, cache=True)
        def csr_matmul(values, columns, offsets, x_t, out_t):
            batch = x_t.shape[1]
            for row in numba.prange(offsets.shape[0] - 1):
                acc = np.zeros(batch, dtype=out_t.dtype)
                for j in range(offsets[row], offsets[row + 1]):
                    v = values[j]
                    source = x_t[columns[j]]
                    for b in range(batch):
                        acc[b] += v * source[b]
                out_t[row] = acc

        @numba.njit(parallel=True, fastmath=True, cache=True)
        def bsr_matmul(blocks, columns, offsets, x_t, out_t):
            r, c = blocks.shape[1], blocks.shape[2]
            batch = x_t.shape[1]
            for block_row in numba.prange(offsets.shape[0] - 1):
                acc = np.zeros((r, batch), dtype=out_t.dtype)
                for j in range(offsets[block_row], offsets[block_row + 1]):
                    start = columns[j] * c
                    for i in range(r):
                        for k in range(c):
                            v = blocks[j, i, k]
                            if v != 0:
                                source = x_t[start + k]
                                for b in range(batch):
                                    acc[i, b] += v * source[b]
                out_t[block_row * r:(block_row + 1) * r] = acc

        _numba_kernels = (csr_matmul, bsr_matmul)
    return _numba_kernels


def sparse_matmul(layout: str, arrays, shape: tuple[int, int], x: np.ndarray, backend: str) -> np.ndarray:
    """``x @ W.T`` for ``W`` (``shape`` = (out, in)) stored as ``arrays`` in ``layout``; ``x`` is (batch, in)."""
    rows, cols = shape
    batch = x.shape[0]
    if backend == "numba":
        csr_kernel, bsr_kernel = _numba()
        x_t = np.ascontiguousarray(x.T)
        if layout == "csr":
            out_t = np.empty((rows, batch), dtype=x.dtype)
            csr_kernel(*arrays, x_t, out_t)
        else:
            r, c = arrays[0].shape[1:]
            padded_in = (arrays[2].shape[0] - 1) * 0 + -(-cols // c) * c
            if padded_in != cols:
                x_t = np.concatenate([x_t, np.zeros((padded_in - cols, batch), dtype=x.dtype)])
            out_t = np.empty(((arrays[2].shape[0] - 1) * r, batch), dtype=x.dtype)
            bsr_kernel(*arrays, x_t, out_t)
            out_t = out_t[:rows]
        return out_t.T
    if backend == "scipy":
        import scipy.sparse
        if layout == "csr":
            matrix = scipy.sparse.csr_matrix(arrays, shape=shape)
        else:
            r, c = arrays[0].shape[1:]
            padded = (-(-rows // r) * r, -(-cols // c) * c)
            matrix = scipy.sparse.bsr_matrix(arrays, shape=padded)
            if padded[1] != cols:
                x = np.concatenate([x, np.zeros((batch, padded[1] - cols), dtype=x.dtype)], axis=1)
        return np.asarray(matrix @ x.T)[:rows].T.astype(x.dtype, copy=False)
    # numpy: gather every kept weight's input column, then sum per row
    if layout == "csr":
        values, columns, offsets = arrays
        out = np.zeros((batch, rows), dtype=x.dtype)
        if values.size:
            products = x[:, columns] * values
            nonempty = offsets[:-1] < offsets[1:]
            sums = np.add.reduceat(products, offsets[:-1][nonempty], axis=1)
            out[:, nonempty] = sums
        return out
    blocks, columns, offsets = arrays
    r, c = blocks.shape[1:]
    padded_in = -(-cols // c) * c
    x_t = np.zeros((padded_in, batch), dtype=x.dtype)
    x_t[:cols] = x.T
    gathered = x_t.reshape(-1, c, batch)[columns]                    # (n, c, batch)
    products = np.einsum("nik,nkb->nib", blocks, gathered)
    out = np.zeros((offsets.shape[0] - 1, r, batch), dtype=x.dtype)
    np.add.at(out, np.repeat(np.arange(offsets.shape[0] - 1), np.diff(offsets)), products)
    return out.reshape(-1, batch)[:rows].T


# -- the layers ------------------------------------------------------------------------------------------

def take_checkpoint_sizes(module, state_dict, prefix, *args):
    """Load-state-dict pre-hook: a checkpoint of another compaction keeps another number of weights; take its sizes."""
    for name in module._array_names():
        saved = state_dict.get(prefix + name)
        if saved is not None and tuple(saved.shape) != tuple(getattr(module, name).shape):
            setattr(module, name, corenn.zeros(tuple(saved.shape), dtype=saved.dtype))


class _SparseWeight(nn.Module):
    """Shared part: the weight's sparse arrays as buffers, ``weight`` computed dense on read."""

    def _init_sparse(self, dense: np.ndarray, layout: str, block_size) -> None:
        if layout not in ("csr", "block"):
            raise ValueError(f"compact(): argument 'layout' must be 'csr' or 'block', got {layout!r}")
        self.layout = layout
        self.weight_shape = tuple(dense.shape)
        matrix = dense.reshape(dense.shape[0], -1)
        if layout == "csr":
            arrays = to_csr(matrix)
        else:
            arrays = to_bsr(matrix, block_size)
        for name, array in zip(self._array_names(), arrays):
            if array.dtype == np.uint16:   # corenn has no uint16: the same bits as int16, read back as uint16
                array = array.view(np.int16)
            self.register_buffer(name, corenn.from_numpy(np.ascontiguousarray(array)))
        self.register_computed_attribute("weight", _SparseWeight.dense_weight)
        self.register_load_state_dict_pre_hook(take_checkpoint_sizes)

    def _array_names(self):
        return (("weight_values", "weight_columns", "weight_row_offsets") if self.layout == "csr"
                else ("weight_blocks", "weight_block_columns", "weight_block_row_offsets"))

    def sparse_arrays(self):
        """The stored arrays of the weight (numpy, shared with the buffers); column indices of 16 bits are unsigned."""
        values, columns, offsets = (getattr(self, name).numpy() for name in self._array_names())
        return values, (columns.view(np.uint16) if columns.dtype == np.int16 else columns), offsets

    def dense_weight(self):
        """The weight as a dense tensor (what ``module.weight`` reads): zeros where nothing is stored."""
        rows = self.weight_shape[0]
        cols = int(np.prod(self.weight_shape[1:]))
        arrays = self.sparse_arrays()
        if self.layout == "csr":
            values, columns, offsets = arrays
            dense = np.zeros((rows, cols), dtype=values.dtype)
            dense[np.repeat(np.arange(rows), np.diff(offsets)), columns.astype(np.int64)] = values
        else:
            blocks, columns, offsets = arrays
            r, c = blocks.shape[1:]
            padded = np.zeros(((offsets.shape[0] - 1) * r, -(-cols // c) * c), dtype=blocks.dtype)
            tiles = padded.reshape(offsets.shape[0] - 1, r, -1, c).swapaxes(1, 2)
            tiles[np.repeat(np.arange(offsets.shape[0] - 1), np.diff(offsets)), columns.astype(np.int64)] = blocks
            dense = tiles.swapaxes(1, 2).reshape(padded.shape)[:rows, :cols]
        return corenn.from_numpy(np.ascontiguousarray(dense).reshape(self.weight_shape))

    def stored_nbytes(self) -> int:
        """Bytes the weight's sparse arrays take."""
        return sum(array.nbytes for array in self.sparse_arrays())

    def _matmul(self, x2d: np.ndarray) -> np.ndarray:
        shape = (self.weight_shape[0], int(np.prod(self.weight_shape[1:])))
        return sparse_matmul(self.layout, self.sparse_arrays(), shape, x2d, sparse_backend())

    def _check_inference(self, input) -> None:
        if corenn.is_grad_enabled() and input.requires_grad:
            raise RuntimeError(f"{type(self).__name__} is for inference (compacted weights are not trained): call it "
                               "under corenn.no_grad() or with an input that does not require grad; fine-tune the "
                               "pruned dense model before compact()")


class SparseLinear(_SparseWeight):
    """``nn.Linear`` with a sparse weight (from :func:`compact`); ``weight`` reads back dense.

    Example::

        >>> layer = SparseLinear.from_dense(nn.Linear(8, 4))
        >>> layer(corenn.randn(2, 8)).shape
        corenn.Size([2, 4])
    """

    def __init__(self, in_features: int, out_features: int, weight: np.ndarray, bias=None, layout: str = "csr",
                 block_size=(1, 8)) -> None:
        super().__init__()
        self.in_features = in_features
        self.out_features = out_features
        self._init_sparse(weight, layout, block_size)
        self.register_buffer("bias", bias)

    @classmethod
    def from_dense(cls, linear, layout: str = "csr", block_size=(1, 8)) -> "SparseLinear":
        """The sparse twin of ``linear`` (its current weight, pruned or not; zeros are dropped)."""
        weight = linear.weight.detach().numpy()
        bias = linear.bias.detach().clone() if linear.bias is not None else None
        return cls(linear.in_features, linear.out_features, weight, bias, layout, block_size)

    def forward(self, input):
        self._check_inference(input)
        x = input.detach().numpy()
        out = self._matmul(x.reshape(-1, self.in_features)).reshape(*x.shape[:-1], self.out_features)
        if self.bias is not None:
            out = out + self.bias.numpy()
        return corenn.from_numpy(np.ascontiguousarray(out, dtype=x.dtype))

    def extra_repr(self) -> str:
        return (f"in_features={self.in_features}, out_features={self.out_features}, bias={self.bias is not None}, "
                f"layout={self.layout!r}, nnz={self.nnz()}")

    def nnz(self) -> int:
        """Weights stored (blocks count whole)."""
        return int(self.sparse_arrays()[0].size)


class SparseConv2d(_SparseWeight):
    """``nn.Conv2d`` with a sparse weight (from :func:`compact`): im2col, then the sparse matmul.

    Example::

        >>> conv = SparseConv2d.from_dense(nn.Conv2d(3, 4, 3, padding=1))
        >>> conv(corenn.randn(1, 3, 5, 5)).shape
        corenn.Size([1, 4, 5, 5])
    """

    def __init__(self, conv_args: dict, weight: np.ndarray, bias=None, layout: str = "csr", block_size=(1, 8)) -> None:
        super().__init__()
        for key, value in conv_args.items():
            setattr(self, key, value)
        self._init_sparse(weight, layout, block_size)
        self.register_buffer("bias", bias)

    @classmethod
    def from_dense(cls, conv, layout: str = "csr", block_size=(1, 8)) -> "SparseConv2d":
        """The sparse twin of ``conv`` (groups=1, zero padding given as numbers)."""
        if conv.groups != 1:
            raise NotImplementedError(f"compact(): Conv2d with groups={conv.groups} is not supported (groups=1 only)")
        if conv.padding_mode != "zeros" or isinstance(conv.padding, str):
            raise NotImplementedError(f"compact(): Conv2d with padding={conv.padding!r}, padding_mode="
                                      f"{conv.padding_mode!r} is not supported (numeric zero padding only)")
        args = dict(in_channels=conv.in_channels, out_channels=conv.out_channels, kernel_size=tuple(conv.kernel_size),
                    stride=tuple(conv.stride), padding=tuple(conv.padding), dilation=tuple(conv.dilation))
        bias = conv.bias.detach().clone() if conv.bias is not None else None
        return cls(args, conv.weight.detach().numpy(), bias, layout, block_size)

    def forward(self, input):
        self._check_inference(input)
        x = input.detach().numpy()
        n, channels, height, width = x.shape
        (kh, kw), (sh, sw), (ph, pw), (dh, dw) = self.kernel_size, self.stride, self.padding, self.dilation
        if ph or pw:
            x = np.pad(x, ((0, 0), (0, 0), (ph, ph), (pw, pw)))
        out_h = (x.shape[2] - dh * (kh - 1) - 1) // sh + 1
        out_w = (x.shape[3] - dw * (kw - 1) - 1) // sw + 1
        s = x.strides
        windows = np.lib.stride_tricks.as_strided(
            x, (n, out_h, out_w, channels, kh, kw), (s[0], s[2] * sh, s[3] * sw, s[1], s[2] * dh, s[3] * dw))
        columns = windows.reshape(n * out_h * out_w, channels * kh * kw)
        out = self._matmul(columns).reshape(n, out_h, out_w, self.out_channels).transpose(0, 3, 1, 2)
        if self.bias is not None:
            out = out + self.bias.numpy()[:, None, None]
        return corenn.from_numpy(np.ascontiguousarray(out, dtype=input.numpy().dtype))

    def extra_repr(self) -> str:
        return (f"{self.in_channels}, {self.out_channels}, kernel_size={self.kernel_size}, stride={self.stride}, "
                f"padding={self.padding}, layout={self.layout!r}, nnz={int(self.sparse_arrays()[0].size)}")


def _weight_sparsity(module) -> float:
    weight = module.weight.detach().numpy()
    return float((weight == 0).mean()) if weight.size else 0.0


def compact(model, *, layout: str = "csr", block_size=(1, 8), min_sparsity: float = 0.3, inplace: bool = False):
    """Replace mostly-zero ``Linear``/``Conv2d`` layers of ``model`` by sparse ones; returns the model (a copy unless ``inplace``).

    A layer is compacted when at least ``min_sparsity`` of its weight is zero (pruned
    weights count with their mask applied; the pruning is made permanent in the copy).
    ``layout`` is ``"csr"`` or ``"block"`` (block-sparse with ``block_size = (rows, cols)``
    blocks: for weights pruned in blocks). ``model`` may itself be one layer.

    Example::

        >>> layer = corenn_prune.l1_unstructured(nn.Linear(32, 32), "weight", amount=0.9)
        >>> corenn_prune.compact(layer).nnz()
        102
    """
    from corenn_prune.prune import _pruned_tensor, remove
    if layout not in ("csr", "block"):
        raise ValueError(f"compact(): argument 'layout' must be 'csr' or 'block', got {layout!r}")
    if (not isinstance(block_size, (tuple, list)) or len(block_size) != 2
            or not all(isinstance(b, int) and b >= 1 for b in block_size)):
        raise ValueError(f"compact(): argument 'block_size' must be two positive ints (rows, cols), got {block_size!r}")
    if not 0.0 <= min_sparsity <= 1.0:
        raise ValueError(f"compact(): argument 'min_sparsity' must be in [0, 1], got {min_sparsity}")
    if not inplace:
        model = copy.deepcopy(model)
    block_size = tuple(block_size)

    def convert(module):
        if type(module) not in (nn.Linear, nn.Conv2d) or _weight_sparsity(module) < min_sparsity:
            return None
        for name in ("weight", "bias"):
            if _pruned_tensor(module, name) is not None:
                remove(module, name)
        if isinstance(module, nn.Linear):
            return SparseLinear.from_dense(module, layout, block_size)
        return SparseConv2d.from_dense(module, layout, block_size)

    replaced = convert(model)
    if replaced is not None:
        return replaced
    for name, module in list(model.named_modules()):
        if not name:
            continue
        new = convert(module)
        if new is not None:
            parent_name, _, child = name.rpartition(".")
            setattr(model.get_submodule(parent_name), child, new)
    return model
