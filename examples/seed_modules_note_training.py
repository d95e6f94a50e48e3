"""The Modules note's "Neural Network Training with Modules": SGD teaches a network to output zero.

The program of the seed note (PyTorch's "Modules" note), ported by renaming ``torch``
to ``corenn``: ``Net`` = MyLinear(4, 3) -> ReLU -> MyLinear(3, 1), optimized with
``SGD(net.parameters(), lr=1e-4, weight_decay=1e-2, momentum=0.9)`` on the loss
``abs(net(randn(4)))`` for 10000 steps. The note's result: "the network learns to simply
output zero", because any non-zero output is penalized. The script prints the mean
|output| on 1000 fresh inputs before and after training.

Run: ``python examples/seed_modules_note_training.py [--seed N] [--steps N]``
"""
from __future__ import annotations

import argparse

import corenn
from corenn import nn
import corenn.nn.functional as F


class MyLinear(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.weight = nn.Parameter(corenn.randn(in_features, out_features))
        self.bias = nn.Parameter(corenn.randn(out_features))

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


@corenn.no_grad()
def mean_abs_output(net, inputs) -> float:
    return net(inputs).abs().mean().item()


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    parser.add_argument("--steps", type=int, default=10000, help="SGD steps (default 10000, as in the note)")
    args = parser.parse_args(argv)
    corenn.manual_seed(args.seed)

    # Create the network (from previous section) and optimizer
    net = Net()
    optimizer = corenn.optim.SGD(net.parameters(), lr=1e-4, weight_decay=1e-2, momentum=0.9)
    probe = corenn.randn(1000, 4)
    before = mean_abs_output(net, probe)

    # Run a sample training loop that "teaches" the network
    # to output the constant zero function
    for _ in range(args.steps):
        input = corenn.randn(4)
        output = net(input)
        loss = corenn.abs(output)
        net.zero_grad()
        loss.backward()
        optimizer.step()

    # After training, switch the module to eval mode to do inference, compute performance metrics, etc.
    net.eval()
    after = mean_abs_output(net, probe)
    print(f"mean |output| on 1000 random inputs: {before:.4f} before training, {after:.4f} after")
    return before, after


if __name__ == "__main__":
    main()
