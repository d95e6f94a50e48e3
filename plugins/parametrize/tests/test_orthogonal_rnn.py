"""A recurrence with an orthogonal hidden-to-hidden weight: training keeps it orthogonal while the loss falls."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import corenn
import corenn.nn.utils.parametrize as P
from corenn import nn
from corenn.nn.utils import parametrizations

EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "orthogonal_rnn.py"


class OrthogonalRNN(nn.Module):
    """h_t = tanh(W_ih x_t + W_hh h_{t-1}), W_hh orthogonal; the readout sees the last hidden state."""

    def __init__(self, input_size, hidden_size, output_size):
        super().__init__()
        self.input_to_hidden = nn.Linear(input_size, hidden_size)
        self.hidden_to_hidden = parametrizations.orthogonal(nn.Linear(hidden_size, hidden_size, bias=False))
        self.readout = nn.Linear(hidden_size, output_size)

    def forward(self, sequence):                      # sequence: (time, batch, input_size)
        hidden = corenn.zeros(sequence.shape[1], self.hidden_to_hidden.in_features)
        for x in sequence:
            hidden = corenn.tanh(self.input_to_hidden(x) + self.hidden_to_hidden(hidden))
        return self.readout(hidden)


def orthogonality_error(W) -> float:
    """||W^T W - I||, Frobenius norm."""
    return float(corenn.norm(W.mT @ W - corenn.eye(W.shape[1])))


def test_orthogonal_hidden_weight_stays_orthogonal_for_200_steps_while_the_loss_falls():
    corenn.manual_seed(0)
    model = OrthogonalRNN(input_size=3, hidden_size=16, output_size=1)
    optimizer = corenn.optim.Adam(model.parameters(), lr=0.01)
    # The task: the sum of the first input channel over 12 steps (a memory task for the recurrence).
    inputs = corenn.randn(12, 32, 3)
    targets = inputs[:, :, :1].sum(0) / 3
    losses = []
    for step in range(200):
        with P.cached():                             # the orthogonal weight: computed once per forward
            loss = ((model(inputs) - targets) ** 2).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(float(loss))
        if step % 50 == 49:
            assert orthogonality_error(model.hidden_to_hidden.weight.detach()) < 1e-5, step
    assert orthogonality_error(model.hidden_to_hidden.weight.detach()) < 1e-5
    assert losses[-1] < 0.2 * losses[0], (losses[0], losses[-1])
    # The parameter the optimizer trained is the original, not the weight.
    trained = dict(model.named_parameters())
    assert "hidden_to_hidden.parametrizations.weight.original" in trained and "hidden_to_hidden.weight" not in trained


def test_the_example_runs_and_reports_orthogonality():
    result = subprocess.run([sys.executable, str(EXAMPLE), "--steps", "40"], capture_output=True, text=True,
                            timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    last = result.stdout.strip().splitlines()[-1]
    assert last.split()[:2] == ["step", "40"] and "||W^T W - I||" in last, result.stdout
    error = float(last.rsplit("=", 1)[1])
    assert error < 1e-5
