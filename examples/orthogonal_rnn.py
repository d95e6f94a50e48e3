"""A recurrent network whose hidden-to-hidden weight is kept orthogonal (needs corenn-parametrize).

An orthogonal recurrent weight neither shrinks nor blows up the hidden state from step
to step, which helps a recurrence remember over many steps. The task: after 20 steps,
output the sum of the first input channel. The weight is parametrized with
``orthogonal`` (the matrix exponential of a skew-symmetric matrix, from a base the
dynamic trivialization keeps), and ``parametrize.cached()`` computes it once per
forward instead of once per time step.

    python examples/orthogonal_rnn.py --steps 200
"""
from __future__ import annotations

import argparse

import corenn
import corenn.nn.utils.parametrize as parametrize
from corenn import nn
from corenn.nn.utils.parametrizations import orthogonal


class OrthogonalRNN(nn.Module):
    def __init__(self, input_size: int, hidden_size: int, output_size: int):
        super().__init__()
        self.input_to_hidden = nn.Linear(input_size, hidden_size)
        self.hidden_to_hidden = orthogonal(nn.Linear(hidden_size, hidden_size, bias=False))
        self.readout = nn.Linear(hidden_size, output_size)

    def forward(self, sequence):                      # (time, batch, input_size)
        hidden = corenn.zeros(sequence.shape[1], self.hidden_to_hidden.in_features)
        for x in sequence:
            hidden = corenn.tanh(self.input_to_hidden(x) + self.hidden_to_hidden(hidden))
        return self.readout(hidden)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--hidden", type=int, default=32)
    args = parser.parse_args()
    if args.steps < 1:
        parser.error(f"--steps must be at least 1, got {args.steps}")

    corenn.manual_seed(0)
    model = OrthogonalRNN(input_size=3, hidden_size=args.hidden, output_size=1)
    optimizer = corenn.optim.Adam(model.parameters(), lr=0.005)
    inputs = corenn.randn(20, 64, 3)
    targets = inputs[:, :, :1].sum(0) / 4
    for step in range(1, args.steps + 1):
        with parametrize.cached():
            loss = ((model(inputs) - targets) ** 2).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if step % 20 == 0 or step == args.steps:
            W = model.hidden_to_hidden.weight.detach()
            error = float(corenn.norm(W.mT @ W - corenn.eye(args.hidden)))
            print(f"step {step:4d}  loss {float(loss):.4f}  ||W^T W - I|| = {error:.2e}")


if __name__ == "__main__":
    main()
