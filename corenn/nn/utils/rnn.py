"""Variable-length sequences for the recurrent layers (mirrors ``torch.nn.utils.rnn``).

A :class:`PackedSequence` stores a batch of sequences time step by time step,
dropping the padding: ``data`` holds the rows of step 0 for every sequence, then the
rows of step 1 for the sequences still running, and so on; ``batch_sizes[t]`` is how
many sequences step ``t`` has. Sequences are sorted longest first inside, and
``sorted_indices``/``unsorted_indices`` map between that order and the caller's.

    >>> from corenn.nn.utils.rnn import pad_sequence, pack_padded_sequence, pad_packed_sequence
    >>> seqs = [corenn.ones(3, 2), corenn.ones(1, 2)]
    >>> padded = pad_sequence(seqs, batch_first=True)          # (2, 3, 2)
    >>> packed = pack_padded_sequence(padded, [3, 1], batch_first=True)
    >>> packed.batch_sizes.tolist()
    [2, 1, 1]
    >>> out, lengths = pad_packed_sequence(packed, batch_first=True)
"""
from __future__ import annotations

from typing import NamedTuple

import corenn
from corenn.tensor.tensor import Tensor

__all__ = ["PackedSequence", "invert_permutation", "pack_padded_sequence", "pad_packed_sequence", "pad_sequence",
           "unpad_sequence", "pack_sequence", "unpack_sequence"]


class _PackedSequenceBase(NamedTuple):
    data: Tensor
    batch_sizes: Tensor
    sorted_indices: Tensor | None
    unsorted_indices: Tensor | None


class PackedSequence(_PackedSequenceBase):
    """A batch of variable-length sequences packed time-major without padding (a named tuple, as PyTorch's).

    Build one with :func:`pack_padded_sequence` or :func:`pack_sequence`, never by hand;
    ``nn.RNN``/``nn.LSTM``/``nn.GRU`` accept it and return one.
    """

    def __new__(cls, data, batch_sizes=None, sorted_indices=None, unsorted_indices=None):
        if unsorted_indices is None and sorted_indices is not None:
            unsorted_indices = invert_permutation(sorted_indices)
        if batch_sizes is None:  # PackedSequence(data, batch_sizes) given as one tuple
            data, batch_sizes = data
        return super().__new__(cls, data, batch_sizes, sorted_indices, unsorted_indices)

    def to(self, *args, **kwargs) -> "PackedSequence":
        """``data`` moved/cast like ``Tensor.to``; the index tensors follow ``data``'s device (batch_sizes stays)."""
        data = self.data.to(*args, **kwargs)
        if data is self.data:
            return self
        def move(index):
            return None if index is None else index.to(data.device)
        return type(self)(data, self.batch_sizes, move(self.sorted_indices), move(self.unsorted_indices))

    def cpu(self) -> "PackedSequence":
        return self.to("cpu")

    def double(self) -> "PackedSequence":
        return self.to(dtype=corenn.float64)

    def float(self) -> "PackedSequence":
        return self.to(dtype=corenn.float32)

    @property
    def is_cuda(self) -> bool:
        return self.data.device.type == "cuda"

    def is_pinned(self) -> bool:
        return False


def invert_permutation(permutation: Tensor | None) -> Tensor | None:
    """The permutation that undoes ``permutation`` (``output[permutation[i]] = i``)."""
    if permutation is None:
        return None
    order = permutation.tolist()
    inverse = [0] * len(order)
    for position, index in enumerate(order):
        inverse[index] = position
    return corenn.tensor(inverse, dtype=corenn.int64, device=permutation.device)


def _lengths_list(lengths, function: str) -> list[int]:
    if isinstance(lengths, Tensor):
        if lengths.ndim != 1:
            raise RuntimeError(f"{function}: 'lengths' argument should be a 1D tensor or list, got "
                               f"{lengths.ndim}-D tensor")
        return [int(n) for n in lengths.tolist()]
    return [int(n) for n in lengths]


def pack_padded_sequence(input: Tensor, lengths, batch_first: bool = False,
                         enforce_sorted: bool = True) -> PackedSequence:
    """Pack a padded batch (T, B, *) (or (B, T, *) with ``batch_first``) of sequences of the given ``lengths``.

    With ``enforce_sorted=True`` the lengths must be non-increasing; otherwise the batch is
    sorted here and the order is remembered in the result.

        >>> packed = pack_padded_sequence(corenn.randn(4, 2, 3), [4, 2])
        >>> packed.data.shape, packed.batch_sizes.tolist()
        (corenn.Size([6, 3]), [2, 2, 1, 1])
    """
    lengths = _lengths_list(lengths, "pack_padded_sequence")
    batch_dim = 0 if batch_first else 1
    if len(lengths) != input.shape[batch_dim]:
        raise RuntimeError(f"pack_padded_sequence: expected {input.shape[batch_dim]} lengths (the batch size), "
                           f"got {len(lengths)}")
    if any(n <= 0 for n in lengths):
        raise RuntimeError("Length of all samples has to be greater than 0, but found an element in 'lengths' "
                           "that is <= 0")
    if enforce_sorted:
        if any(a < b for a, b in zip(lengths, lengths[1:])):
            raise RuntimeError("`lengths` array must be sorted in decreasing order when `enforce_sorted` is True. "
                               "You can pass `enforce_sorted=False` to pack_padded_sequence and/or pack_sequence "
                               "to sidestep this requirement if you do not need ONNX exportability.")
        sorted_indices = None
    else:
        # stable sort, longest first (PyTorch sorts with torch.sort(descending=True))
        order = sorted(range(len(lengths)), key=lambda i: -lengths[i])
        lengths = [lengths[i] for i in order]
        sorted_indices = corenn.tensor(order, dtype=corenn.int64, device=input.device)
        input = input.index_select(batch_dim, sorted_indices)
    if lengths[0] > input.shape[0 if not batch_first else 1]:
        raise RuntimeError(f"pack_padded_sequence: a length of {lengths[0]} exceeds the padded sequence length "
                           f"{input.shape[0 if not batch_first else 1]}")
    if batch_first:
        input = input.transpose(0, 1)
    batch_sizes = [sum(1 for n in lengths if n > t) for t in range(lengths[0])]
    data = corenn.cat([input[t, :size] for t, size in enumerate(batch_sizes)])
    return PackedSequence(data, corenn.tensor(batch_sizes, dtype=corenn.int64), sorted_indices, None)


def pad_packed_sequence(sequence: PackedSequence, batch_first: bool = False, padding_value: float = 0.0,
                        total_length: int | None = None) -> tuple[Tensor, Tensor]:
    """Undo :func:`pack_padded_sequence`: the padded batch and each sequence's length (in the caller's order).

        >>> padded, lengths = pad_packed_sequence(packed, batch_first=True, total_length=5)
    """
    batch_sizes = [int(n) for n in sequence.batch_sizes.tolist()]
    max_length, batch = len(batch_sizes), batch_sizes[0]
    if total_length is not None:
        if total_length < max_length:
            raise ValueError("Expected total_length to be at least the length of the longest sequence in input, but "
                             f"got total_length={total_length} and max sequence length being {max_length}")
    else:
        total_length = max_length
    data = sequence.data
    feature_shape = tuple(data.shape[1:])
    steps = []
    for piece, size in zip(data.split(batch_sizes), batch_sizes):
        if size < batch:
            fill = corenn.full((batch - size,) + feature_shape, padding_value, dtype=data.dtype, device=data.device)
            piece = corenn.cat([piece, fill])
        steps.append(piece)
    if total_length > max_length:
        steps.append(corenn.full((total_length - max_length, batch) + feature_shape, padding_value, dtype=data.dtype,
                                 device=data.device))
        padded = corenn.cat([corenn.stack(steps[:-1]), steps[-1]])
    else:
        padded = corenn.stack(steps)
    lengths = [sum(1 for size in batch_sizes if size > b) for b in range(batch)]
    lengths = corenn.tensor(lengths, dtype=corenn.int64)
    if sequence.unsorted_indices is not None:
        padded = padded.index_select(1, sequence.unsorted_indices)
        lengths = lengths[sequence.unsorted_indices.cpu()]
    if batch_first:
        padded = padded.transpose(0, 1)
    return padded, lengths


def pad_sequence(sequences, batch_first: bool = False, padding_value: float = 0.0,
                 padding_side: str = "right") -> Tensor:
    """Stack tensors of shape (L_i, *) into (T, B, *) (or (B, T, *)), padding with ``padding_value``.

        >>> pad_sequence([corenn.ones(3), corenn.ones(1)], batch_first=True).tolist()
        [[1.0, 1.0, 1.0], [1.0, 0.0, 0.0]]
    """
    if padding_side not in ("left", "right"):
        raise ValueError(f"pad_sequence: padding_side must be 'left' or 'right', got {padding_side!r}")
    if isinstance(sequences, Tensor):
        sequences = sequences.unbind(0)
    sequences = list(sequences)
    if not sequences:
        raise RuntimeError("pad_sequence: received an empty list of sequences")
    trailing = tuple(sequences[0].shape[1:])
    max_length = max(s.shape[0] for s in sequences)
    padded = []
    for s in sequences:
        if tuple(s.shape[1:]) != trailing:
            raise RuntimeError(f"pad_sequence: every sequence must have the trailing shape {list(trailing)}, got "
                               f"{list(s.shape[1:])}")
        missing = max_length - s.shape[0]
        if missing:
            fill = corenn.full((missing,) + trailing, padding_value, dtype=s.dtype, device=s.device)
            s = corenn.cat([s, fill] if padding_side == "right" else [fill, s])
        padded.append(s)
    return corenn.stack(padded, dim=0 if batch_first else 1)


def unpad_sequence(padded_sequences: Tensor, lengths, batch_first: bool = False) -> list[Tensor]:
    """Split a padded batch back into a list of sequences of the given ``lengths``."""
    if not batch_first:
        padded_sequences = padded_sequences.transpose(0, 1)
    return [padded_sequences[i, :n] for i, n in enumerate(_lengths_list(lengths, "unpad_sequence"))]


def pack_sequence(sequences, enforce_sorted: bool = True) -> PackedSequence:
    """Pack a list of tensors (L_i, *) directly (``pad_sequence`` then ``pack_padded_sequence``).

        >>> pack_sequence([corenn.ones(2, 3), corenn.ones(1, 3)]).batch_sizes.tolist()
        [2, 1]
    """
    lengths = [s.shape[0] for s in sequences]
    return pack_padded_sequence(pad_sequence(sequences), lengths, enforce_sorted=enforce_sorted)


def unpack_sequence(packed_sequences: PackedSequence) -> list[Tensor]:
    """The list of sequences a :class:`PackedSequence` holds, in the caller's order."""
    padded, lengths = pad_packed_sequence(packed_sequences, batch_first=True)
    return unpad_sequence(padded, lengths, batch_first=True)
