"""The FX view of a captured program (``compiled.graph``): one node per step, for reading, not running."""
from __future__ import annotations

from corenn.compiler import _capture


class CapturedOp:
    """The ``target`` of a kernel step's node: prints as the op's name (``add``, ``getitem``, ...)."""

    def __init__(self, name: str):
        self.__name__ = self.__qualname__ = name

    def __call__(self, *args, **kwargs):
        raise RuntimeError(f"{self.__name__}: a captured program's graph is for inspection; run the compiled "
                           f"callable instead")

    def __repr__(self):
        return self.__name__


def program_graph(program):
    from corenn.fx import Graph
    graph = Graph()
    values = {i: graph.placeholder(f"input_{i}") for i in range(program.num_inputs)}
    for slot, constant in enumerate(program.env_template):
        if constant is not None:
            values[slot] = constant
    names = {_capture.LOAD: "load", _capture.LOAD_GRAD: "load_grad", _capture.BACKWARD: "backward",
             _capture.EAGER: "eager_call", _capture.WRITE: "write_", _capture.KEEP_MASK: "dropout_mask"}
    last = None
    for step in program.steps:
        kind = step[0]
        if kind == _capture.KERNEL:
            args = tuple(values.get(i) for i in step[3])
            last = graph.call_function(CapturedOp(step[7]), args)
            if len(step[5]) == 1:
                values[step[5][0]] = last
            else:
                for nr, slot in enumerate(step[5]):
                    values[slot] = graph.call_function(CapturedOp("getitem"), (last, nr))
        elif kind in (_capture.LOAD, _capture.LOAD_GRAD):
            last = values[step[2]] = graph.call_function(CapturedOp(names[kind]), ())
        elif kind == _capture.KEEP_MASK:
            last = values[step[6]] = graph.call_function(CapturedOp(names[kind]), (values.get(step[2]),))
        elif kind == _capture.WRITE:
            last = graph.call_function(CapturedOp(names[kind]), (values.get(step[1]), values.get(step[2])))
        elif kind == _capture.EAGER:
            last = graph.call_function(CapturedOp(f"{type(step[2]).__name__}.{step[1].__name__}"), ())
        else:
            last = graph.call_function(CapturedOp(names[kind]), tuple(values.get(s[0]) for s in step[2]))
    graph.output(last)
    return graph
