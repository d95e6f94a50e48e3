"""Seed 004, section 2 ("Encapsulate your model with Modules"): a linear model as a Module, fitted with SGD.

The programs of the seed document, ported by renaming ``torch`` to ``corenn``:

1. ``Net`` with two scalar parameters ``a`` and ``b``, fitted to y = 5 x + 3 + noise
   (noise uniform in [0, 0.3)) with ``SGD(net.parameters(), lr=0.01)`` for 10000 steps:
   the document says ``net.a, net.b`` "should be close to 5 and 3" (b absorbs the
   noise's mean 0.15, so about 3.15);
2. the same model written with ``nn.Linear(1, 1)`` (``unsqueeze``/``squeeze`` around it),
   trained the same way;
3. ``nn.Sequential(Linear(64, 32), ReLU(), Linear(32, 10))`` and its parameters.

Run: ``python examples/seed004_modules.py [--seed N] [--steps N]``
"""
from __future__ import annotations

import argparse

import corenn


class Net(corenn.nn.Module):
    def __init__(self):
        super().__init__()
        self.a = corenn.nn.Parameter(corenn.rand(1))
        self.b = corenn.nn.Parameter(corenn.rand(1))

    def forward(self, x):
        yhat = self.a * x + self.b
        return yhat


class LinearNet(corenn.nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = corenn.nn.Linear(1, 1)

    def forward(self, x):
        yhat = self.linear(x.unsqueeze(1)).squeeze(1)
        return yhat


def train(net, steps: int):
    x = corenn.arange(100, dtype=corenn.float32) / 100
    y = 5 * x + 3 + corenn.rand(100) * 0.3
    criterion = corenn.nn.MSELoss()
    optimizer = corenn.optim.SGD(net.parameters(), lr=0.01)
    for i in range(steps):
        net.zero_grad()
        yhat = net(x)
        loss = criterion(yhat, y)
        loss.backward()
        optimizer.step()
    return loss.item()


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    parser.add_argument("--steps", type=int, default=10000, help="SGD steps (default 10000, as in the document)")
    args = parser.parse_args(argv)
    corenn.manual_seed(args.seed)

    net = Net()
    x = corenn.arange(100, dtype=corenn.float32)
    y = net(x)
    for p in net.parameters():
        print(p)
    train(net, args.steps)
    print(net.a, net.b)  # Should be close to 5 and 3

    linear_net = LinearNet()
    for p in linear_net.parameters():
        print(p)
    train(linear_net, args.steps)
    weight, bias = linear_net.linear.weight.item(), linear_net.linear.bias.item()
    print(f"Linear: weight {weight:.4f}, bias {bias:.4f}")  # also close to 5 and 3

    model = corenn.nn.Sequential(
        corenn.nn.Linear(64, 32),
        corenn.nn.ReLU(),
        corenn.nn.Linear(32, 10),
    )
    print(model)
    print(model(corenn.randn(2, 64)).shape)  # corenn.Size([2, 10])
    return (net.a.item(), net.b.item()), (weight, bias)


if __name__ == "__main__":
    main()
