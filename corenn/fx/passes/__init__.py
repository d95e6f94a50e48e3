"""Graph passes: shape propagation, conv + batch-norm fusion, drawing the graph.

Example::

    >>> from corenn.fx.passes import ShapeProp, fuse_conv_bn, FxGraphDrawer
"""
from corenn.fx.passes import fuse, graph_drawer, shape_prop  # noqa: F401
from corenn.fx.passes.fuse import fuse_conv_bn
from corenn.fx.passes.graph_drawer import FxGraphDrawer
from corenn.fx.passes.shape_prop import ShapeProp, TensorMetadata

__all__ = ["FxGraphDrawer", "ShapeProp", "TensorMetadata", "fuse_conv_bn"]
