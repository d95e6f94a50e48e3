"""Graph passes: shape propagation, conv + batch-norm fusion, drawing the graph.

Example::

    >>> from corenn.fx.passes import ShapeProp, fuse_conv_bn, FxGraphDrawer
"""
from corenn.fx.passes.shape_prop import ShapeProp, TensorMetadata

__all__ = ["ShapeProp", "TensorMetadata"]
