"""Seed note "Modules", section "Modules as Building Blocks", run with corenn for torch."""
import re

import numpy as np
import pytest

import corenn as torch
import corenn.nn.functional as F
from corenn import nn


class MyLinear(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(in_features, out_features))
        self.bias = nn.Parameter(torch.randn(out_features))

    def forward(self, input):
        return (input @ self.weight) + self.bias


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.l0 = MyLinear(4, 3)
        self.l1 = MyLinear(3, 1)

    def forward(self, x):
        x = self.l0(x)
        x = F.relu(x)
        x = self.l1(x)
        return x


class BigNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.l1 = MyLinear(5, 4)
        self.net = Net()

    def forward(self, x):
        return self.net(self.l1(x))


class DynamicNet(nn.Module):
    def __init__(self, num_layers):
        super().__init__()
        self.linears = nn.ModuleList(
            [MyLinear(4, 4) for _ in range(num_layers)])
        self.activations = nn.ModuleDict({
            'relu': nn.ReLU(),
            'lrelu': nn.LeakyReLU()
        })
        self.final = MyLinear(4, 1)

    def forward(self, x, act):
        for linear in self.linears:
            x = linear(x)
        x = self.activations[act](x)
        x = self.final(x)
        return x


def test_sequential_chains_modules():
    net = nn.Sequential(
        MyLinear(4, 3),
        nn.ReLU(),
        MyLinear(3, 1)
    )
    sample_input = torch.randn(4)
    out = net(sample_input)
    assert re.fullmatch(r"tensor\(\[-?\d+\.\d{4}\], grad_fn=<AddBackward0>\)", repr(out))
    hidden = np.maximum(sample_input.numpy() @ net[0].weight.detach().numpy() + net[0].bias.detach().numpy(), 0)
    expected = hidden @ net[2].weight.detach().numpy() + net[2].bias.detach().numpy()
    np.testing.assert_allclose(out.detach().numpy(), expected, rtol=1e-5, atol=1e-6)


def test_named_children_prints_as_in_the_note(capsys):
    net = Net()
    for child in net.named_children():
        print(child)
    assert capsys.readouterr().out == "('l0', MyLinear())\n('l1', MyLinear())\n"


def test_named_modules_prints_as_in_the_note(capsys):
    big_net = BigNet()
    for module in big_net.named_modules():
        print(module)
    assert capsys.readouterr().out == """\
('', BigNet(
  (l1): MyLinear()
  (net): Net(
    (l0): MyLinear()
    (l1): MyLinear()
  )
))
('l1', MyLinear())
('net', Net(
  (l0): MyLinear()
  (l1): MyLinear()
))
('net.l0', MyLinear())
('net.l1', MyLinear())
"""


def test_dynamic_net_runs_and_lists_parameters(capsys):
    dynamic_net = DynamicNet(3)
    sample_input = torch.randn(4)
    output = dynamic_net(sample_input, 'relu')
    assert output.shape == (1,)
    assert dynamic_net(sample_input, 'lrelu').shape == (1,)
    for parameter in dynamic_net.named_parameters():
        print(parameter)
    printed = capsys.readouterr().out
    names = re.findall(r"^\('([\w.]+)', Parameter containing:$", printed, flags=re.M)
    assert names == ['linears.0.weight', 'linears.0.bias', 'linears.1.weight', 'linears.1.bias',
                     'linears.2.weight', 'linears.2.bias', 'final.weight', 'final.bias']
    assert printed.count("requires_grad=True))") == 8


def test_to_changes_precision_of_all_parameters():
    dynamic_net = DynamicNet(3)
    weight = dynamic_net.final.weight
    dynamic_net.to(dtype=torch.float64)
    assert all(p.dtype is torch.float64 for p in dynamic_net.parameters())
    assert dynamic_net.final.weight is weight
    out = dynamic_net(torch.randn(4, dtype=torch.float64), 'relu')
    assert re.fullmatch(r"tensor\(\[-?\d+\.\d{4}\], dtype=corenn.float64, grad_fn=<AddBackward0>\)", repr(out))


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs the corenn-cuda plugin and a GPU")
def test_to_cuda_as_in_the_note():
    dynamic_net = DynamicNet(3)
    dynamic_net.to(device='cuda')
    dynamic_net.to(dtype=torch.float64)
    out = dynamic_net(torch.randn(4, device='cuda', dtype=torch.float64), 'relu')
    assert repr(out).endswith("device='cuda:0', dtype=corenn.float64, grad_fn=<AddBackward0>)")


def test_apply_initialises_linear_submodules():
    @torch.no_grad()
    def init_weights(m):
        if isinstance(m, nn.Linear):
            nn.init.xavier_normal_(m.weight)
            m.bias.fill_(0.0)

    holder = DynamicNet(3)
    holder.extra = nn.Linear(4, 4)  # the note's init_weights targets nn.Linear modules
    assert holder.apply(init_weights) is holder
    assert holder.extra.bias.tolist() == [0.0] * 4
    assert holder.extra.bias.requires_grad and holder.extra.bias.grad_fn is None
