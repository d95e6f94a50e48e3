"""A module's corenn.fx graph as a TensorFlow ``GraphDef``, the form TensorBoard's graph plugin draws.

PyTorch builds its graph from a TorchScript trace; corenn has no JIT, and its FX tracer records the
same thing at the level a reader wants: leaf layers (``call_module``), functions, tensor methods,
parameter reads (``get_attr``), inputs and the output. Names are grouped by ``/`` the way TensorBoard
folds them: ``input/<name>``, ``output/output``, and ``<ModelClass>/<submodule path>/<node name>``
for everything else, so a submodule's layers and parameters fold into one box.
"""
from __future__ import annotations

from tensorboard.compat.proto.attr_value_pb2 import AttrValue
from tensorboard.compat.proto.graph_pb2 import GraphDef
from tensorboard.compat.proto.node_def_pb2 import NodeDef
from tensorboard.compat.proto.tensor_shape_pb2 import TensorShapeProto
from tensorboard.compat.proto.versions_pb2 import VersionDef

__all__ = ["graph_def"]

# The GraphDef producer version PyTorch writes; TensorBoard only uses it to pick how to read the graph.
_PRODUCER_VERSION = 22


def _operation(node, root) -> str:
    """The op type shown for ``node``: the layer class, the function's qualified name, ``Tensor.<method>``..."""
    from corenn.fx.graph import _qualified_name
    if node.op in ("placeholder", "output"):
        return "IO Node"  # what PyTorch calls its inputs and outputs
    if node.op == "call_module":
        return type(root.get_submodule(node.target)).__name__
    if node.op == "call_function":
        return _qualified_name(node.target)
    if node.op == "call_method":
        return f"Tensor.{node.target}"
    # get_attr: what kind of state the graph reads
    owner_path, _, attribute = node.target.rpartition(".")
    owner = root.get_submodule(owner_path) if owner_path else root
    if attribute in owner._parameters:
        return "Parameter"
    if attribute in owner._buffers:
        return "Buffer"
    return "Constant"


def _scope(node) -> str:
    """The submodule path (``/``-separated) a node belongs to: its module for layers, the owner for attributes."""
    if node.op == "call_module":
        return node.target.replace(".", "/")
    if node.op == "get_attr":
        return node.target.rpartition(".")[0].replace(".", "/")
    return ""


def _shapes(node) -> list:
    """The output shapes ShapeProp recorded for ``node`` (none if the graph was not run on example inputs)."""
    from corenn.fx.passes.shape_prop import TensorMetadata
    found = []

    def collect(value):
        if isinstance(value, TensorMetadata):
            found.append(value)
        elif isinstance(value, (tuple, list)):
            for item in value:
                collect(item)
        elif isinstance(value, dict):
            for item in value.values():
                collect(item)

    collect(node.meta.get("tensor_meta"))
    return found


def graph_def(graph_module, root_name: str) -> GraphDef:
    """The GraphDef of ``graph_module`` (a traced GraphModule; ShapeProp'd if shapes are wanted)."""
    names: dict = {}
    for node in graph_module.graph.nodes:
        if node.op == "placeholder":
            names[node] = f"input/{node.name}"
        elif node.op == "output":
            names[node] = "output/output"
        else:
            scope = _scope(node)
            names[node] = "/".join(part for part in (root_name, scope, node.name) if part)
    # TensorBoard cannot draw a name that is both an op and a folder (``M/relu`` for F.relu while a submodule
    # ``relu`` folds ``M/relu/...``): such an op gets a trailing underscore until it is unique.
    folders = {name.rsplit("/", depth)[0] for name in names.values() for depth in range(1, name.count("/") + 1)}
    taken = set(names.values())
    for node, name in list(names.items()):
        if name in folders:
            renamed = name
            while renamed in folders or renamed in taken:
                renamed += "_"
            taken.add(renamed)
            names[node] = renamed

    nodes = []
    for node in graph_module.graph.nodes:
        attributes = {"attr": AttrValue(s=node.format_node().encode("utf-8"))}
        shapes = _shapes(node)
        if shapes:
            attributes["_output_shapes"] = AttrValue(list=AttrValue.ListValue(shape=[
                TensorShapeProto(dim=[TensorShapeProto.Dim(size=int(size)) for size in meta.shape])
                for meta in shapes]))
        device = ""
        if shapes:
            meta_device = shapes[0].device
            device = f"/device:{meta_device.type.upper()}:{meta_device.index or 0}"
        nodes.append(NodeDef(name=names[node], op=_operation(node, graph_module),
                             input=[names[source] for source in node.all_input_nodes],
                             device=device, attr=attributes))
    return GraphDef(node=nodes, versions=VersionDef(producer=_PRODUCER_VERSION))
