"""``summary(model)``: per-layer sparsity, parameters and bytes, dense against stored, as a table.

"Dense" is what the layer would take as plain dense tensors (its weight and bias,
whatever their storage); "stored" is what its parameters and buffers really take:
a pruned layer stores the original and the mask (twice the dense bytes, as in
PyTorch), a compacted one only the sparse arrays, a shrunk one fewer channels.

Example::

    >>> import corenn_prune
    >>> net = nn.Sequential(nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 2))
    >>> print(corenn_prune.summary(net))                       # doctest: +SKIP
    layer  type    shape   sparsity  params  dense bytes  stored bytes
    0      Linear  (8, 8)     0.0%       72          288           288
    ...
"""
from __future__ import annotations

from typing import NamedTuple

import numpy as np

__all__ = ["summary", "LayerSummary", "Summary"]


class LayerSummary(NamedTuple):
    """One row of :func:`summary`."""

    name: str
    type: str
    shape: tuple
    sparsity: float       # zeros in the effective weight (and bias), as a fraction
    params: int           # entries of the effective weight and bias
    nonzero: int
    dense_bytes: int
    stored_bytes: int


class Summary(list):
    """The rows of :func:`summary` (a list of :class:`LayerSummary`), printed as a table with totals."""

    def total(self) -> LayerSummary:
        """The totals row."""
        params = sum(r.params for r in self)
        nonzero = sum(r.nonzero for r in self)
        return LayerSummary("total", "", (), 1 - nonzero / params if params else 0.0, params, nonzero,
                            sum(r.dense_bytes for r in self), sum(r.stored_bytes for r in self))

    def __str__(self) -> str:
        header = ("layer", "type", "shape", "sparsity", "params", "nonzero", "dense bytes", "stored bytes")
        rows = [(r.name, r.type, str(r.shape), f"{100 * r.sparsity:.1f}%", f"{r.params:,}", f"{r.nonzero:,}",
                 f"{r.dense_bytes:,}", f"{r.stored_bytes:,}") for r in [*self, self.total()]]
        widths = [max(len(str(x)) for x in column) for column in zip(header, *rows)]
        left = {0, 1, 2}

        def line(cells):
            return "  ".join(str(c).ljust(w) if i in left else str(c).rjust(w)
                             for i, (c, w) in enumerate(zip(cells, widths))).rstrip()
        return "\n".join([line(header), *(line(r) for r in rows)])

    __repr__ = __str__


def summary(model) -> Summary:
    """A :class:`Summary` row for every module of ``model`` holding a ``weight`` (pruned, compacted, shrunk or plain).

    Example::

        >>> rows = corenn_prune.summary(corenn_prune.l1_unstructured(nn.Linear(10, 10), "weight", amount=0.5))
        >>> rows[0].sparsity, rows[0].stored_bytes > rows[0].dense_bytes
        (0.4545454545454546, True)
    """
    rows = Summary()
    for name, module in model.named_modules():
        try:
            weight = getattr(module, "weight")
        except AttributeError:
            continue
        if weight is None or not hasattr(weight, "numel"):
            continue
        tensors = [weight.detach().numpy()]
        bias = getattr(module, "bias", None)
        if bias is not None and hasattr(bias, "numel"):
            tensors.append(bias.detach().numpy())
        params = sum(t.size for t in tensors)
        nonzero = sum(int(np.count_nonzero(t)) for t in tensors)
        stored = sum(t.numel() * t.element_size() for t in module.parameters(recurse=False))
        stored += sum(t.numel() * t.element_size() for t in module.buffers(recurse=False) if t is not None)
        rows.append(LayerSummary(name or "(model)", type(module).__name__, tuple(weight.shape),
                                 1 - nonzero / params if params else 0.0, params, nonzero,
                                 sum(t.nbytes for t in tensors), stored))
    return rows
