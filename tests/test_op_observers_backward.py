"""Op observers' optional methods: ``op_node`` (the forward op's node) and ``backward_start`` / ``backward_end``.

The profiler attributes each backward call to the forward op that recorded its node, as
PyTorch's ``sequence_nr`` does; these tests hold the core to what that needs.
"""
from __future__ import annotations

import warnings

import pytest

import corenn
from corenn import dispatch, plugins
from corenn.testing import register_plugin


class NodeRecorder:
    """Logs forward ops with their nodes, and backward calls, in the order they happen."""

    def __init__(self):
        self.log = []
        self.forward_nodes = []
        self.gradients = []

    def op_start(self, op_name, device, arrays):
        self.log.append(("start", op_name))

    def op_node(self, op_name, node):
        self.forward_nodes.append((op_name, node))

    def op_end(self, op_name, device, out):
        self.log.append(("end", op_name))

    def backward_start(self, node, grad_outputs):
        self.log.append(("backward_start", node.grad_fn_name, node.sequence_nr))
        self.gradients.append(("received", node.grad_fn_name, grad_outputs))

    def backward_end(self, node, grad_inputs):
        self.log.append(("backward_end", node.grad_fn_name, node.sequence_nr))
        self.gradients.append(("returned", node.grad_fn_name, grad_inputs))


class Plugin:
    def __init__(self, observer):
        self.observer = observer

    @corenn.hookimpl
    def corenn_op_observers(self):
        return [self.observer]


def test_corenn_op_observers_see_the_node_and_its_backward():
    recorder = NodeRecorder()
    x = corenn.ones(3, requires_grad=True)
    with register_plugin(Plugin(recorder)):  # corenn_op_observers: the optional methods are asked too
        y = (x * 2).exp().sum()
        y.backward()
    names = [name for name, _ in recorder.forward_nodes]
    assert names == ["mul", "exp", "sum"]
    # Each forward op's node is the output's grad_fn, with its sequence number set after the op returned.
    forward = {node.sequence_nr: (name, node) for name, node in recorder.forward_nodes}
    assert y.grad_fn is recorder.forward_nodes[-1][1]
    assert all(number > 0 for number in forward)
    backward = [entry for entry in recorder.log if entry[0].startswith("backward")]
    assert [entry[1] for entry in backward if entry[0] == "backward_start"] == ["SumBackward0", "ExpBackward0",
                                                                               "MulBackward0"]
    for kind, grad_fn_name, number in backward:
        assert grad_fn_name.lower().startswith(forward[number][0])  # the backward call names its forward op
    # Backward calls are paired and do not nest (a node's backward is one call).
    assert [entry[0] for entry in backward] == ["backward_start", "backward_end"] * 3
    assert x.grad.tolist() == pytest.approx([2 * 7.38905609893065] * 3)
    # backward_start sees the gradient the node receives, backward_end what it returns.
    kind, name, received = recorder.gradients[0]
    assert (kind, name) == ("received", "SumBackward0") and float(received) == 1.0
    kind, name, returned = recorder.gradients[-1]
    assert (kind, name) == ("returned", "MulBackward0")
    returned = returned[0] if isinstance(returned, tuple) else returned
    assert returned.tolist() == x.grad.tolist()


def test_an_observer_without_the_optional_methods_is_not_asked_and_ops_record_no_node_without_grad():
    class Plain:
        def __init__(self):
            self.ops = []

        def op_start(self, op_name, device, arrays):
            self.ops.append(op_name)

        def op_end(self, op_name, device, out):
            pass

    plain, recorder = Plain(), NodeRecorder()
    x = corenn.ones(2, requires_grad=True)
    with plugins.observe_ops(plain), plugins.observe_ops(recorder):
        (x + 1).sum().backward()
        z = corenn.ones(2) * 3  # nothing records: the node keeps sequence number 0
    assert plain.ops == ["add", "sum", "mul"]
    assert recorder.forward_nodes[-1][0] == "mul" and recorder.forward_nodes[-1][1].sequence_nr == 0
    assert z.grad_fn is None
    assert [e[1] for e in recorder.log if e[0] == "backward_start"] == ["SumBackward0", "AddBackward0"]


def test_with_no_observer_the_walk_calls_nobody_and_a_removed_observer_is_not_called():
    recorder = NodeRecorder()
    x = corenn.ones(2, requires_grad=True)
    handle = plugins.observe_ops(recorder)
    y = (x * 2).sum()
    handle.remove()
    assert not dispatch.observers
    y.backward()
    assert not [e for e in recorder.log if e[0].startswith("backward")]


def test_an_autograd_function_node_is_observed_in_backward():
    class Double(corenn.autograd.Function):
        @staticmethod
        def forward(ctx, a):
            return a * 2

        @staticmethod
        def backward(ctx, grad):
            return grad * 2

    recorder = NodeRecorder()
    x = corenn.ones(2, requires_grad=True)
    with plugins.observe_ops(recorder):
        Double.apply(x).sum().backward()
    starts = [e[1] for e in recorder.log if e[0] == "backward_start"]
    assert starts[0] == "SumBackward0" and len(starts) == 2
    assert x.grad.tolist() == [2.0, 2.0]


def test_a_plugin_observer_raising_in_backward_start_is_detached_and_backward_goes_on():
    class Bad(NodeRecorder):
        def backward_start(self, node, grad_outputs):
            raise ValueError("profiler buffer full")

    bad = Bad()
    x = corenn.ones(2, requires_grad=True)
    with register_plugin(Plugin(bad), name="fake-profiler") as record:
        y = (x * 3).sum()
        with pytest.warns(plugins.PluginWarning, match="raised in backward_start"):
            y.backward()
        assert x.grad.tolist() == [3.0, 3.0]
        assert record.op_observers == [] and all(o is not bad for o in dispatch.observers)
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            (x * 3).sum().backward()  # detached: no second warning


def test_an_observe_ops_observer_raising_in_backward_end_propagates():
    class Bad(NodeRecorder):
        def backward_end(self, node, grad_inputs):
            raise ValueError("caller's own bug")

    x = corenn.ones(2, requires_grad=True)
    with plugins.observe_ops(Bad()):
        y = (x * 3).sum()
        with pytest.raises(ValueError, match="caller's own bug"):
            y.backward()
