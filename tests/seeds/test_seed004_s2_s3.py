"""Seed 004 (EffectivePyTorch) sections 2 and 3, ported by renaming torch to corenn.

§2 encapsulates models as modules (``Net`` with Parameters, then with ``nn.Linear``,
``nn.Sequential``); §3 shows broadcasting with linear layers (``Merge``).
"""
from __future__ import annotations

import numpy as np
import pytest

import corenn
from corenn import optim

# ---------------------------------------------------------------------------------------------------------
# §2 Encapsulate your model with Modules
# ---------------------------------------------------------------------------------------------------------

class Net(corenn.nn.Module):
    def __init__(self):
        super().__init__()
        self.a = corenn.nn.Parameter(corenn.rand(1))
        self.b = corenn.nn.Parameter(corenn.rand(1))

    def forward(self, x):
        yhat = self.a * x + self.b
        return yhat


def test_net_is_called_like_a_function_and_lists_its_parameters():
    x = corenn.arange(100, dtype=corenn.float32)
    net = Net()
    y = net(x)
    assert y.shape == (100,)
    np.testing.assert_allclose(y.detach().numpy(), net.a.item() * np.arange(100) + net.b.item(), rtol=1e-6)
    params = list(net.parameters())
    assert [p.shape for p in params] == [(1,), (1,)]
    assert all(p.requires_grad for p in params)
    assert params[0] is net.a and params[1] is net.b


def test_net_fits_y_equals_5x_plus_3_with_mse_and_sgd():
    corenn.manual_seed(0)
    x = corenn.arange(100, dtype=corenn.float32) / 100
    y = 5 * x + 3 + corenn.rand(100) * 0.3
    net = Net()
    criterion = corenn.nn.MSELoss()
    optimizer = optim.SGD(net.parameters(), lr=0.01)
    for i in range(10000):
        net.zero_grad()
        yhat = net(x)
        loss = criterion(yhat, y)
        loss.backward()
        optimizer.step()
    # "Should be close to 5 and 3" (the noise adds 0.15 on average to the intercept)
    assert net.a.item() == pytest.approx(5, abs=0.2)
    assert net.b.item() == pytest.approx(3.15, abs=0.15)


class LinearNet(corenn.nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = corenn.nn.Linear(1, 1)

    def forward(self, x):
        yhat = self.linear(x.unsqueeze(1)).squeeze(1)
        return yhat


def test_linear_net_collects_submodule_parameters_and_fits():
    corenn.manual_seed(1)
    net = LinearNet()
    names = [name for name, _ in net.named_parameters()]
    assert names == ["linear.weight", "linear.bias"]
    assert [p.shape for p in net.parameters()] == [(1, 1), (1,)]
    x = corenn.arange(100, dtype=corenn.float32) / 100
    y = 5 * x + 3
    optimizer = optim.SGD(net.parameters(), lr=0.1)
    for _ in range(2000):
        net.zero_grad()
        loss = corenn.nn.MSELoss()(net(x), y)
        loss.backward()
        optimizer.step()
    assert net.linear.weight.item() == pytest.approx(5, abs=0.05)
    assert net.linear.bias.item() == pytest.approx(3, abs=0.05)


def test_sequential_stack_of_linear_relu_linear():
    model = corenn.nn.Sequential(
        corenn.nn.Linear(64, 32),
        corenn.nn.ReLU(),
        corenn.nn.Linear(32, 10),
    )
    out = model(corenn.randn(8, 64))
    assert out.shape == (8, 10)
    assert [p.shape for p in model.parameters()] == [(32, 64), (32,), (10, 32), (10,)]
    assert repr(model) == ("Sequential(\n"
                           "  (0): Linear(in_features=64, out_features=32, bias=True)\n"
                           "  (1): ReLU()\n"
                           "  (2): Linear(in_features=32, out_features=10, bias=True)\n"
                           ")")
    hidden = corenn.nn.functional.relu(model[0](corenn.ones(1, 64)))
    np.testing.assert_allclose(model(corenn.ones(1, 64)).detach().numpy(), model[2](hidden).detach().numpy(),
                               rtol=1e-6)


# ---------------------------------------------------------------------------------------------------------
# §3 Broadcasting: the good and the ugly
# ---------------------------------------------------------------------------------------------------------

def test_broadcast_add_of_column():
    a = corenn.tensor([[1., 2.], [3., 4.]])
    b = corenn.tensor([[1.], [2.]])
    c = a + b
    assert c.tolist() == [[2., 3.], [5., 6.]]
    assert c.tolist() == (a + b.repeat([1, 2])).tolist()


def test_concat_then_linear_equals_two_linears_broadcast():
    a = corenn.rand([5, 3, 5])
    b = corenn.rand([5, 1, 6])
    linear = corenn.nn.Linear(11, 10)
    # concat a and b and apply nonlinearity
    tiled_b = b.repeat([1, 3, 1])  # b shape: [5, 3, 6]
    c = corenn.cat([a, tiled_b], 2)  # c shape: [5, 3, 11]
    d = corenn.nn.functional.relu(linear(c))
    assert d.shape == (5, 3, 10)

    linear1 = corenn.nn.Linear(5, 10)
    linear2 = corenn.nn.Linear(6, 10)
    # f(m(x + y)) == f(mx + my): split linear's weight between the two
    with corenn.no_grad():
        linear1.weight.copy_(linear.weight[:, :5])
        linear1.bias.copy_(linear.bias)
        linear2.weight.copy_(linear.weight[:, 5:])
        linear2.bias.zero_()
    pa = linear1(a)  # pa shape: [5, 3, 10]
    pb = linear2(b)  # pb shape: [5, 1, 10]
    d2 = corenn.nn.functional.relu(pa + pb)
    assert pa.shape == (5, 3, 10) and pb.shape == (5, 1, 10) and d2.shape == (5, 3, 10)
    np.testing.assert_allclose(d2.detach().numpy(), d.detach().numpy(), rtol=1e-5, atol=1e-6)


class Merge(corenn.nn.Module):
    def __init__(self, in_features1, in_features2, out_features, activation=None):
        super().__init__()
        self.linear1 = corenn.nn.Linear(in_features1, out_features)
        self.linear2 = corenn.nn.Linear(in_features2, out_features)
        self.activation = activation

    def forward(self, a, b):
        pa = self.linear1(a)
        pb = self.linear2(b)
        c = pa + pb
        if self.activation is not None:
            c = self.activation(c)
        return c


def test_merge_works_for_any_broadcastable_ranks_and_backpropagates():
    merge = Merge(5, 6, 10, activation=corenn.nn.functional.relu)
    for shape_a, shape_b, expected in [([5, 3, 5], [5, 1, 6], (5, 3, 10)), ([2, 4, 3, 5], [4, 1, 6], (2, 4, 3, 10)),
                                       ([7, 5], [1, 6], (7, 10))]:
        out = merge(corenn.rand(shape_a), corenn.rand(shape_b))
        assert out.shape == expected
        assert (out.detach().numpy() >= 0).all()
    out.sum().backward()
    assert merge.linear1.weight.grad.shape == (10, 5) and merge.linear2.bias.grad.shape == (10,)
    # pb broadcasts over the 7 rows: its bias gradient sums the 7 rows where relu is active
    active = (out.detach().numpy() > 0).sum(axis=0)
    np.testing.assert_allclose(merge.linear2.bias.grad.numpy(), active, rtol=1e-6)


def test_the_ugly_implicit_broadcast_in_a_sum():
    a = corenn.tensor([[1.], [2.]])
    b = corenn.tensor([1., 2.])
    c = corenn.sum(a + b)
    assert c.item() == 12  # not 6: a + b broadcasts to [[2, 3], [3, 4]]
    c = corenn.sum(a + b, 0)
    assert c.tolist() == [5., 7.]
