"""Port of pytorch/examples ``mnist_rnn/main.py``: an LSTM reads an image row by row and classifies it
from its last output.

Written once against ``lib`` and run under PyTorch and corenn from the same weights on generated
images (MNIST is a download; 14x14 instead of 28x28). It keeps the example's ``Net`` with
``nn.LSTM(input_size=28, hidden_size=64, batch_first=True)``-shaped recurrence, ``nn.BatchNorm1d``
on the last output, ``nn.Dropout2d`` on those (N, C) features and ``nn.Dropout``, two ``nn.Linear`` layers and ``F.log_softmax``, the input
``input.reshape(-1, 28, 28)``, ``output[:, -1, :]``, ``F.nll_loss``, ``optim.Adadelta(lr=0.1)``,
``StepLR(step_size=1, gamma=0.7)`` per epoch, and the test loop's ``reduction='sum'`` and
``pred.eq(target.view_as(pred)).sum().item()``. Dropout is 0 in training (different masks per framework).
"""
from __future__ import annotations

import numpy as np
import pytest

import corenn
from _port import assert_same_run, assert_same_state, numpy_state, same_weights

pytestmark = [
    pytest.mark.torch,
    # the example applies Dropout2d to (N, C) features, which PyTorch (and corenn after it) warns about
    pytest.mark.filterwarnings("ignore:dropout2d. Received a 2-D input"),
]

SIDE = 14


def build(lib, dropout=0.0):
    nn, F = lib.nn, lib.nn.functional

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.rnn = nn.LSTM(input_size=SIDE, hidden_size=16, batch_first=True)
            self.batchnorm = nn.BatchNorm1d(16)
            self.dropout1 = nn.Dropout2d(dropout)
            self.dropout2 = nn.Dropout(dropout)
            self.fc1 = nn.Linear(16, 32)
            self.fc2 = nn.Linear(32, 10)

        def forward(self, input):
            input = input.reshape(-1, SIDE, SIDE)  # shape of input is (batch_size, 1, 28, 28): drop the channel
            output, hidden = self.rnn(input)
            output = output[:, -1, :]  # the last output of each sequence
            output = self.batchnorm(output)
            output = self.dropout1(output)
            output = self.fc1(output)
            output = F.relu(output)
            output = self.dropout2(output)
            output = self.fc2(output)
            output = F.log_softmax(output, dim=1)
            return output

    return Net()


def train(lib, model, train_loader, optimizer, losses):
    F = lib.nn.functional
    model.train()
    for batch_idx, (data, target) in enumerate(train_loader):
        optimizer.zero_grad()
        output = model(data)
        loss = F.nll_loss(output, target)
        loss.backward()
        optimizer.step()
        losses.append(loss.item())


def evaluate(lib, model, test_loader):
    F = lib.nn.functional
    model.eval()
    test_loss = 0
    correct = 0
    with lib.no_grad():
        for data, target in test_loader:
            output = model(data)
            test_loss += F.nll_loss(output, target, reduction="sum").item()
            pred = output.argmax(dim=1, keepdim=True)
            correct += pred.eq(target.view_as(pred)).sum().item()
    return test_loss / len(test_loader.dataset), correct


def main(lib, model, images, labels, epochs=2):
    dataset = lib.utils.data.TensorDataset(lib.from_numpy(images), lib.from_numpy(labels))
    train_loader = lib.utils.data.DataLoader(dataset, batch_size=8)
    test_loader = lib.utils.data.DataLoader(dataset, batch_size=16)
    optimizer = lib.optim.Adadelta(model.parameters(), lr=0.1)
    scheduler = lib.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.7)
    losses, results = [], []
    for epoch in range(1, epochs + 1):
        train(lib, model, train_loader, optimizer, losses)
        results.append(evaluate(lib, model, test_loader))
        scheduler.step()
    return losses, results


def test_mnist_rnn_trains_the_same_in_both_frameworks(torch):
    rng = np.random.default_rng(0)
    images = rng.standard_normal((16, 1, SIDE, SIDE)).astype(np.float32)
    labels = rng.integers(0, 10, 16).astype(np.int64)
    theirs, ours = same_weights(torch, build)
    start = numpy_state(theirs)
    their_losses, their_results = main(torch, theirs, images, labels)
    our_losses, our_results = main(corenn, ours, images, labels)
    assert len(our_losses) == 4
    assert_same_run(our_losses, their_losses)
    assert [c for _, c in our_results] == [c for _, c in their_results]
    assert_same_run([l for l, _ in our_results], [l for l, _ in their_results])
    assert_same_state(ours, theirs, moved_from=start)
