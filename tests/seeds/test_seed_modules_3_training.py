"""Seed note "Modules", section "Neural Network Training with Modules", run with corenn for torch.

The note's training loop runs 10,000 steps; the oracle test runs the same loop in
PyTorch from the same weights and inputs and compares the trained weights.
"""
import numpy as np
import pytest

import corenn
import corenn.nn.functional as F
from corenn import nn


def build(lib):
    class MyLinear(lib.nn.Module):
        def __init__(self, in_features, out_features):
            super().__init__()
            self.weight = lib.nn.Parameter(lib.randn(in_features, out_features))
            self.bias = lib.nn.Parameter(lib.randn(out_features))

        def forward(self, input):
            return (input @ self.weight) + self.bias

    class Net(lib.nn.Module):
        def __init__(self):
            super().__init__()
            self.l0 = MyLinear(4, 3)
            self.l1 = MyLinear(3, 1)

        def forward(self, x):
            x = self.l0(x)
            x = lib.nn.functional.relu(x)
            x = self.l1(x)
            return x

    class ModalModule(lib.nn.Module):
        def __init__(self):
            super().__init__()

        def forward(self, x):
            if self.training:
                # Add a constant only in training mode.
                return x + 1.
            else:
                return x

    return Net, ModalModule


def train(lib, net, inputs):
    optimizer = lib.optim.SGD(net.parameters(), lr=1e-4, weight_decay=1e-2, momentum=0.9)
    for row in inputs:
        input = lib.tensor(row)
        output = net(input)
        loss = lib.abs(output)
        net.zero_grad()
        loss.backward()
        optimizer.step()
    net.eval()
    return net


def test_training_loop_drives_output_towards_zero():
    corenn.manual_seed(0)
    Net, _ = build(corenn)
    net = Net()
    inputs = np.random.default_rng(0).standard_normal((10000, 4)).astype(np.float32)
    held_out = corenn.tensor(np.random.default_rng(1).standard_normal((500, 4)).astype(np.float32))
    with corenn.no_grad():
        loss_before = float(net(held_out).abs().mean())
    weight_before = float(net.l1.weight.abs().sum())
    train(corenn, net, inputs)
    assert not net.training and not net.l0.training
    with corenn.no_grad():
        loss_after = float(net(held_out).abs().mean())
    # the network learns to output (nearly) zero, and l1's weights shrink towards 0 (weight decay)
    assert loss_after < 0.05 < loss_before
    assert float(net.l1.weight.abs().sum()) < weight_before
    printed = str(net.l1.weight)
    assert printed.startswith("Parameter containing:\ntensor([[") and printed.endswith("]], requires_grad=True)")


@pytest.mark.torch
def test_training_loop_matches_torch(torch):
    torch.manual_seed(0)
    t_net = build(torch)[0]()
    c_net = build(corenn)[0]()
    for (_, tp), (_, cp) in zip(t_net.named_parameters(), c_net.named_parameters()):
        cp.data = corenn.tensor(tp.detach().numpy())
    inputs = np.random.default_rng(1).standard_normal((2000, 4)).astype(np.float32)
    train(torch, t_net, inputs)
    train(corenn, c_net, inputs)
    for (name, tp), (_, cp) in zip(t_net.named_parameters(), c_net.named_parameters()):
        np.testing.assert_allclose(cp.detach().numpy(), tp.detach().numpy(), rtol=1e-3, atol=1e-4, err_msg=name)


def test_modal_module_differs_between_train_and_eval(capsys):
    _, ModalModule = build(corenn)
    m = ModalModule()
    x = corenn.randn(4)
    print('training mode output: {}'.format(m(x)))
    m.eval()
    print('evaluation mode output: {}'.format(m(x)))
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == f"training mode output: {x + 1.0}"
    assert lines[1] == f"evaluation mode output: {x}"
    assert F.relu is not None  # the note imports torch.nn.functional as F in this section
