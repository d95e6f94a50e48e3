"""``ShapeProp``: run a GraphModule on example inputs and record each value's shape and dtype in ``node.meta``.

Example::

    >>> import corenn
    >>> from corenn.fx.passes.shape_prop import ShapeProp
    >>> gm = corenn.fx.symbolic_trace(lambda x: x.sum(dim=1))
    >>> _ = ShapeProp(gm).propagate(corenn.ones(2, 3))
    >>> [tuple(n.meta["tensor_meta"].shape) for n in gm.graph.nodes if n.op != "output"]
    [(2, 3), (2,)]
"""
from __future__ import annotations

from typing import Any, NamedTuple

from corenn.fx.interpreter import Interpreter
from corenn.fx.node import map_aggregate

__all__ = ["ShapeProp", "TensorMetadata", "extract_tensor_metadata"]


class TensorMetadata(NamedTuple):
    """What ShapeProp records for a tensor value: shape, dtype, requires_grad, stride, device, contiguity."""

    shape: Any
    dtype: Any
    requires_grad: bool
    stride: tuple
    device: Any
    is_contiguous: bool


def extract_tensor_metadata(t) -> TensorMetadata:
    """The :class:`TensorMetadata` of tensor ``t``.

    Example::

        >>> extract_tensor_metadata(corenn.zeros(2, 3)).shape
        corenn.Size([2, 3])
    """
    return TensorMetadata(t.shape, t.dtype, t.requires_grad, t.stride(), t.device, t.is_contiguous())


class ShapeProp(Interpreter):
    """Runs the graph and stores ``node.meta["tensor_meta"]`` (a TensorMetadata, or a structure of them
    for tuple results such as ``topk``) and ``node.meta["type"]`` for every node.

    Example::

        >>> ShapeProp(gm).propagate(corenn.randn(5, 4))   # doctest: +SKIP
        >>> gm.graph.find_nodes(op="call_module")[0].meta["tensor_meta"].shape   # doctest: +SKIP
        corenn.Size([5, 5])
    """

    def run_node(self, n):
        from corenn.tensor.tensor import Tensor
        result = super().run_node(n)
        found = []

        def extract(value):
            if isinstance(value, Tensor):
                found.append(True)
                return extract_tensor_metadata(value)
            return value
        meta = map_aggregate(result, extract)
        if found:
            n.meta["tensor_meta"] = meta
        n.meta["type"] = type(result)
        return result

    def propagate(self, *args):
        """Run on ``args`` (example inputs) and return the graph's output."""
        return super().run(*args)
