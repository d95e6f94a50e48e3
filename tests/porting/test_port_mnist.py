"""Port of pytorch/examples ``mnist/main.py``: a two-convolution CNN trained with Adadelta and StepLR.

The program below is written once against ``lib`` and run with ``lib = torch`` and ``lib = corenn``
from the same initial weights, on the same generated 12x12 "digits" (MNIST is not downloadable here,
and 28x28 images with 32/64 channels would be slow on two cores: the widths are parameters).
It keeps the example's structure: ``nn.Module`` with ``F.relu``/``F.max_pool2d``/``torch.flatten``/
``F.log_softmax``, a ``DataLoader`` over a ``TensorDataset``, ``F.nll_loss``, ``optim.Adadelta(lr=1.0)``,
``StepLR(step_size=1, gamma=0.7)`` stepped once per epoch, and the test loop (here `evaluate`) under ``torch.no_grad()``
with ``reduction='sum'``, ``argmax(dim=1, keepdim=True)`` and ``pred.eq(target.view_as(pred))``.
Training runs with the dropout probabilities at 0 because the two frameworks draw different dropout
masks; the test loop (``model.eval()``) runs the example's 0.25 and 0.5.
"""
from __future__ import annotations

import numpy as np
import pytest

import corenn
from _port import assert_same_run, assert_same_state, numpy_state, same_weights

pytestmark = pytest.mark.torch


def build(lib, width=8, dropout=(0.25, 0.5)):
    nn, F = lib.nn, lib.nn.functional

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv1 = nn.Conv2d(1, width, 3, 1)
            self.conv2 = nn.Conv2d(width, 2 * width, 3, 1)
            self.dropout1 = nn.Dropout(dropout[0])
            self.dropout2 = nn.Dropout(dropout[1])
            self.fc1 = nn.Linear(2 * width * 4 * 4, 32)
            self.fc2 = nn.Linear(32, 10)

        def forward(self, x):
            x = self.conv1(x)
            x = F.relu(x)
            x = self.conv2(x)
            x = F.relu(x)
            x = F.max_pool2d(x, 2)
            x = self.dropout1(x)
            x = lib.flatten(x, 1)
            x = self.fc1(x)
            x = F.relu(x)
            x = self.dropout2(x)
            x = self.fc2(x)
            output = F.log_softmax(x, dim=1)
            return output

    return Net()


def train(lib, model, train_loader, optimizer, epoch, losses):
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
    test_loss /= len(test_loader.dataset)
    return test_loss, correct


def main(lib, model, images, labels, epochs=3):
    from_numpy = lib.from_numpy
    dataset = lib.utils.data.TensorDataset(from_numpy(images), from_numpy(labels))
    train_loader = lib.utils.data.DataLoader(dataset, batch_size=8)
    test_loader = lib.utils.data.DataLoader(dataset, batch_size=16)
    optimizer = lib.optim.Adadelta(model.parameters(), lr=1.0)
    scheduler = lib.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.7)
    losses, lrs = [], []
    for epoch in range(1, epochs + 1):
        train(lib, model, train_loader, optimizer, epoch, losses)
        scheduler.step()
        lrs.append(scheduler.get_last_lr()[0])
    return losses, lrs, evaluate(lib, model, test_loader)


def _digits(n=16, seed=0):
    rng = np.random.default_rng(seed)
    images = rng.standard_normal((n, 1, 12, 12)).astype(np.float32)
    labels = rng.integers(0, 10, n).astype(np.int64)
    return images, labels


def test_mnist_trains_the_same_in_both_frameworks(torch):
    images, labels = _digits()
    theirs, ours = same_weights(torch, build, dropout=(0.0, 0.0))
    start = numpy_state(theirs)
    their_losses, their_lrs, their_test = main(torch, theirs, images, labels)
    our_losses, our_lrs, our_test = main(corenn, ours, images, labels)
    assert len(our_losses) == 6
    assert_same_run(our_losses, their_losses)
    assert our_lrs == pytest.approx(their_lrs) and their_lrs == pytest.approx([0.7, 0.49, 0.343])
    assert_same_state(ours, theirs, moved_from=start)
    assert our_test[0] == pytest.approx(their_test[0], rel=1e-4)
    assert our_test[1] == their_test[1]


def test_mnist_evaluates_with_the_examples_dropout_the_same(torch):
    images, labels = _digits(seed=1)
    theirs, ours = same_weights(torch, build)
    their_test = evaluate(torch, theirs, torch.utils.data.DataLoader(
        torch.utils.data.TensorDataset(torch.from_numpy(images), torch.from_numpy(labels)), batch_size=16))
    our_test = evaluate(corenn, ours, corenn.utils.data.DataLoader(
        corenn.utils.data.TensorDataset(corenn.from_numpy(images), corenn.from_numpy(labels)), batch_size=16))
    assert our_test[0] == pytest.approx(their_test[0], rel=1e-5)
    assert our_test[1] == their_test[1]
