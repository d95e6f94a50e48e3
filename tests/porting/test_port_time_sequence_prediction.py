"""Port of pytorch/examples ``time_sequence_prediction`` (``generate_sine_wave.py`` and ``train.py``):
two stacked ``LSTMCell``s learn sine waves in float64 with L-BFGS, then predict the future.

Written once against ``lib`` and run under PyTorch and corenn from the same weights. It keeps the
example's data (shifted sine waves made with numpy, ``torch.from_numpy(data[3:, :-1])``), the
``Sequence`` module stepping ``input.split(1, dim=1)`` with ``torch.zeros(..., dtype=torch.double)``
states and ``torch.cat(outputs, dim=1)``, the ``future`` loop feeding predictions back,
``seq.double()``, ``nn.MSELoss``, ``optim.LBFGS(seq.parameters(), lr=0.8)`` stepped with a closure,
and the prediction under ``torch.no_grad()`` with ``pred.detach().numpy()``. The waves are shorter,
the hidden size 12 instead of 51 and L-BFGS runs 2 steps of 5 iterations, to stay small.
"""
from __future__ import annotations

import numpy as np
import pytest

import corenn
from _port import assert_same_run, assert_same_state, numpy_state, same_weights

pytestmark = pytest.mark.torch

HIDDEN = 12


def generate_sine_wave(T=20, L=30, N=8, seed=2):
    np.random.seed(seed)
    x = np.empty((N, L), "int64")
    x[:] = np.array(range(L)) + np.random.randint(-4 * T, 4 * T, N).reshape(N, 1)
    return np.sin(x / 1.0 / T).astype("float64")


def build(lib):
    nn = lib.nn

    class Sequence(nn.Module):
        def __init__(self):
            super().__init__()
            self.lstm1 = nn.LSTMCell(1, HIDDEN)
            self.lstm2 = nn.LSTMCell(HIDDEN, HIDDEN)
            self.linear = nn.Linear(HIDDEN, 1)

        def forward(self, input, future=0):
            outputs = []
            h_t = lib.zeros(input.size(0), HIDDEN, dtype=lib.double)
            c_t = lib.zeros(input.size(0), HIDDEN, dtype=lib.double)
            h_t2 = lib.zeros(input.size(0), HIDDEN, dtype=lib.double)
            c_t2 = lib.zeros(input.size(0), HIDDEN, dtype=lib.double)

            for input_t in input.split(1, dim=1):
                h_t, c_t = self.lstm1(input_t, (h_t, c_t))
                h_t2, c_t2 = self.lstm2(h_t, (h_t2, c_t2))
                output = self.linear(h_t2)
                outputs += [output]
            for i in range(future):  # if we should predict the future
                h_t, c_t = self.lstm1(output, (h_t, c_t))
                h_t2, c_t2 = self.lstm2(h_t, (h_t2, c_t2))
                output = self.linear(h_t2)
                outputs += [output]
            outputs = lib.cat(outputs, dim=1)
            return outputs

    seq = Sequence()
    seq.double()
    return seq


def train(lib, seq, data, steps=2, future=6):
    input = lib.from_numpy(data[3:, :-1])
    target = lib.from_numpy(data[3:, 1:])
    test_input = lib.from_numpy(data[:3, :-1])
    test_target = lib.from_numpy(data[:3, 1:])
    criterion = lib.nn.MSELoss()
    optimizer = lib.optim.LBFGS(seq.parameters(), lr=0.8, max_iter=5)
    losses, closure_losses = [], []
    for i in range(steps):
        def closure():
            optimizer.zero_grad()
            out = seq(input)
            loss = criterion(out, target)
            closure_losses.append(loss.item())
            loss.backward()
            return loss
        optimizer.step(closure)
        with lib.no_grad():
            pred = seq(test_input, future=future)
            loss = criterion(pred[:, :-future], test_target)
            losses.append(loss.item())
            y = pred.detach().numpy()
    return losses, closure_losses, y


def test_time_sequence_prediction_trains_the_same_in_both_frameworks(torch):
    data = generate_sine_wave()
    theirs, ours = same_weights(torch, build)
    start = numpy_state(theirs)
    assert start["linear.weight"].dtype == np.float64
    their_losses, their_closure_losses, their_y = train(torch, theirs, data)
    our_losses, our_closure_losses, our_y = train(corenn, ours, data)
    # float64 throughout: the tolerances can be tighter than float32's
    assert_same_run(our_closure_losses, their_closure_losses, rtol=1e-9, atol=1e-12)
    assert_same_run(our_losses, their_losses, rtol=1e-9, atol=1e-12)
    assert our_y.shape == their_y.shape == (3, 29 + 6)
    np.testing.assert_allclose(our_y, their_y, rtol=1e-9, atol=1e-12)
    assert_same_state(ours, theirs, rtol=1e-9, atol=1e-12, moved_from=start)
    assert their_closure_losses[-1] < their_closure_losses[0]
