"""Port of the PyTorch "Quickstart" tutorial (``beginner/basics/quickstart_tutorial``): a
``Flatten`` + ``Sequential`` MLP classifier with ``train``/``test`` loops over ``DataLoader``s, saved
with ``torch.save(model.state_dict(), ...)`` and loaded back into a fresh model.

Written once against ``lib`` and run under PyTorch and corenn from the same weights. FashionMNIST is
not downloadable here, so the images are scikit-learn's bundled 8x8 digits (the repository's examples
use them too). It keeps the tutorial's ``NeuralNetwork`` (``nn.Flatten()``, ``nn.Sequential`` of
``Linear``/``ReLU``), ``nn.CrossEntropyLoss``, ``optim.SGD`` (lr 0.1, not 1e-3, so that six steps move the
weights visibly), the train loop's
``loss.item()``/``(batch + 1) * len(X)`` bookkeeping, the test loop's
``(pred.argmax(1) == y).type(torch.float).sum().item()`` under ``torch.no_grad()``,
``len(dataloader.dataset)``/``len(dataloader)``, ``model.eval()`` and the state-dict round trip
(``torch.load(..., weights_only=True)`` in PyTorch; corenn saves safetensors).
"""
from __future__ import annotations

import numpy as np
import pytest

import corenn
from _port import assert_same_run, assert_same_state, numpy_state, same_weights

pytestmark = pytest.mark.torch


def build(lib):
    nn = lib.nn

    class NeuralNetwork(nn.Module):
        def __init__(self):
            super().__init__()
            self.flatten = nn.Flatten()
            self.linear_relu_stack = nn.Sequential(
                nn.Linear(8 * 8, 64),
                nn.ReLU(),
                nn.Linear(64, 64),
                nn.ReLU(),
                nn.Linear(64, 10),
            )

        def forward(self, x):
            x = self.flatten(x)
            logits = self.linear_relu_stack(x)
            return logits

    return NeuralNetwork()


def train(dataloader, model, loss_fn, optimizer, losses):
    size = len(dataloader.dataset)
    model.train()
    for batch, (X, y) in enumerate(dataloader):
        pred = model(X)
        loss = loss_fn(pred, y)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        loss, current = loss.item(), (batch + 1) * len(X)
        assert current <= size
        losses.append(loss)


def evaluate(lib, dataloader, model, loss_fn):
    size = len(dataloader.dataset)
    num_batches = len(dataloader)
    model.eval()
    test_loss, correct = 0, 0
    with lib.no_grad():
        for X, y in dataloader:
            pred = model(X)
            test_loss += loss_fn(pred, y).item()
            correct += (pred.argmax(1) == y).type(lib.float).sum().item()
    test_loss /= num_batches
    correct /= size
    return test_loss, correct


def main(lib, model, images, labels, epochs=2):
    data = lib.utils.data
    training_data = data.TensorDataset(lib.from_numpy(images[:96]), lib.from_numpy(labels[:96]))
    test_data = data.TensorDataset(lib.from_numpy(images[96:]), lib.from_numpy(labels[96:]))
    train_dataloader = data.DataLoader(training_data, batch_size=32)
    test_dataloader = data.DataLoader(test_data, batch_size=32)
    loss_fn = lib.nn.CrossEntropyLoss()
    optimizer = lib.optim.SGD(model.parameters(), lr=1e-1)
    losses, results = [], []
    for t in range(epochs):
        train(train_dataloader, model, loss_fn, optimizer, losses)
        results.append(evaluate(lib, test_dataloader, model, loss_fn))
    return losses, results


def test_quickstart_trains_the_same_in_both_frameworks(torch, tmp_path):
    datasets = pytest.importorskip("sklearn.datasets")
    digits = datasets.load_digits()
    images = (digits.images[:160] / 16.0).astype(np.float32)
    labels = digits.target[:160].astype(np.int64)
    theirs, ours = same_weights(torch, build)
    start = numpy_state(theirs)
    their_losses, their_results = main(torch, theirs, images, labels)
    our_losses, our_results = main(corenn, ours, images, labels)
    assert len(our_losses) == 6
    assert_same_run(our_losses, their_losses)
    assert_same_run(our_results, their_results)
    assert_same_state(ours, theirs, moved_from=start)

    torch.save(theirs.state_dict(), tmp_path / "model.pth")
    corenn.save(ours.state_dict(), tmp_path / "model.safetensors")
    their_model = build(torch)
    their_model.load_state_dict(torch.load(tmp_path / "model.pth", weights_only=True))
    our_model = build(corenn)
    our_model.load_state_dict(corenn.load(tmp_path / "model.safetensors"))
    our_model.eval(), their_model.eval()
    x = images[:5]
    with corenn.no_grad(), torch.no_grad():
        their_pred = their_model(torch.from_numpy(x))
        our_pred = our_model(corenn.from_numpy(x))
    assert_same_run([our_pred], [their_pred])
    assert our_pred[0].argmax(0).item() == their_pred[0].argmax(0).item()
