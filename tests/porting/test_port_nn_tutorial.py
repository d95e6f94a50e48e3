"""Port of the PyTorch tutorial "What is torch.nn really?" (``beginner/nn_tutorial``): the same MNIST
classifier written first from raw tensors, then refactored step by step onto ``nn.functional``,
``nn.Module``, ``nn.Linear``, ``optim``, ``TensorDataset``/``DataLoader`` and finally a CNN in
``nn.Sequential`` with a ``Lambda`` layer.

Each stage is written once against ``lib`` and run under PyTorch and corenn from the same start on
scikit-learn's bundled 8x8 digits (MNIST is a download; the repository's examples use the digits).
It keeps the tutorial's raw-tensor stage (``torch.randn(784, 10) / math.sqrt(784)``,
``weights.requires_grad_()``, ``torch.zeros(10, requires_grad=True)``, ``log_softmax`` as
``x - x.exp().sum(-1).log().unsqueeze(-1)``, ``model(xb)`` as ``log_softmax(xb @ weights + bias)``,
``nll`` as ``-input[range(target.shape[0]), target].mean()``, ``accuracy`` with ``torch.argmax(out, dim=1)``,
manual updates under ``torch.no_grad()`` with ``weights.grad.zero_()``), ``Mnist_Logistic`` with
``nn.Parameter``, ``get_model``, ``loss_batch``, ``fit`` with ``model.train()``/``model.eval()`` and the
weighted validation loss ``np.sum(np.multiply(losses, nums)) / np.sum(nums)``, ``get_data`` returning
training and validation ``DataLoader``s, and the CNN stage (``Lambda(preprocess)``,
``xb.view(-1, 1, 8, 8)``, three ``Conv2d``+``ReLU``, ``nn.AdaptiveAvgPool2d(1)``, ``Lambda(lambda x:
x.view(x.size(0), -1))``) trained with ``optim.SGD(lr, momentum=0.9)``.
"""
from __future__ import annotations

import math

import numpy as np
import pytest

import corenn
from _port import assert_same_run, assert_same_state, numpy_state, same_weights

pytestmark = pytest.mark.torch

PIXELS = 64
bs = 16


@pytest.fixture(scope="module")
def digits():
    datasets = pytest.importorskip("sklearn.datasets")
    data = datasets.load_digits()
    x = (data.data / 16.0).astype(np.float32)
    y = data.target.astype(np.int64)
    return x[:96], y[:96], x[96:160], y[96:160]


def from_scratch(lib, x_train, y_train, start, epochs=2, lr=0.5):
    weights = lib.from_numpy(start.copy())  # torch.randn(784, 10) / math.sqrt(784), drawn by numpy
    weights.requires_grad_()
    bias = lib.zeros(10, requires_grad=True)

    def log_softmax(x):
        return x - x.exp().sum(-1).log().unsqueeze(-1)

    def model(xb):
        return log_softmax(xb @ weights + bias)

    def nll(input, target):
        return -input[range(target.shape[0]), target].mean()

    def accuracy(out, yb):
        preds = lib.argmax(out, dim=1)
        return (preds == yb).float().mean()

    x_train, y_train = lib.from_numpy(x_train), lib.from_numpy(y_train)
    n = x_train.shape[0]
    loss_func = nll
    losses = []
    for epoch in range(epochs):
        for i in range((n - 1) // bs + 1):
            start_i = i * bs
            end_i = start_i + bs
            xb = x_train[start_i:end_i]
            yb = y_train[start_i:end_i]
            pred = model(xb)
            loss = loss_func(pred, yb)
            loss.backward()
            with lib.no_grad():
                weights -= weights.grad * lr
                bias -= bias.grad * lr
                weights.grad.zero_()
                bias.grad.zero_()
            losses.append(loss.item())
    return losses, loss_func(model(x_train), y_train).item(), accuracy(model(x_train), y_train).item(), weights


def test_from_scratch_stage(torch, digits):
    x_train, y_train, _, _ = digits
    start = (np.random.default_rng(0).standard_normal((PIXELS, 10)) / math.sqrt(PIXELS)).astype(np.float32)
    ours = from_scratch(corenn, x_train, y_train, start)
    theirs = from_scratch(torch, x_train, y_train, start)
    assert_same_run(ours[0], theirs[0])
    assert_same_run(ours[1:], theirs[1:])


def build_logistic(lib):
    nn = lib.nn

    class Mnist_Logistic(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(PIXELS, 10)

        def forward(self, xb):
            return self.lin(xb)

    return Mnist_Logistic()


def lambda_layer(lib):
    """The tutorial's ``Lambda(nn.Module)`` for one framework."""
    class Lambda(lib.nn.Module):
        def __init__(self, func):
            super().__init__()
            self.func = func

        def forward(self, x):
            return self.func(x)

    return Lambda


def build_cnn(lib):
    nn = lib.nn
    Lambda = lambda_layer(lib)

    def preprocess(x):
        return x.view(-1, 1, 8, 8)

    return nn.Sequential(
        Lambda(preprocess),
        nn.Conv2d(1, 8, kernel_size=3, stride=2, padding=1),
        nn.ReLU(),
        nn.Conv2d(8, 8, kernel_size=3, stride=2, padding=1),
        nn.ReLU(),
        nn.Conv2d(8, 10, kernel_size=3, stride=2, padding=1),
        nn.ReLU(),
        nn.AdaptiveAvgPool2d(1),
        Lambda(lambda x: x.view(x.size(0), -1)),
    )


def get_data(lib, train_ds, valid_ds, bs):
    return (
        lib.utils.data.DataLoader(train_ds, batch_size=bs, shuffle=False),
        lib.utils.data.DataLoader(valid_ds, batch_size=bs * 2),
    )


def loss_batch(model, loss_func, xb, yb, opt=None):
    loss = loss_func(model(xb), yb)
    if opt is not None:
        loss.backward()
        opt.step()
        opt.zero_grad()
    return loss.item(), len(xb)


def fit(lib, epochs, model, loss_func, opt, train_dl, valid_dl):
    history = []
    for epoch in range(epochs):
        model.train()
        for xb, yb in train_dl:
            history.append(loss_batch(model, loss_func, xb, yb, opt)[0])
        model.eval()
        with lib.no_grad():
            losses, nums = zip(*[loss_batch(model, loss_func, xb, yb) for xb, yb in valid_dl])
        val_loss = np.sum(np.multiply(losses, nums)) / np.sum(nums)
        history.append(val_loss)
    return history


def train_stage(lib, model, digits, momentum):
    x_train, y_train, x_valid, y_valid = (lib.from_numpy(a) for a in digits)
    train_ds = lib.utils.data.TensorDataset(x_train, y_train)
    valid_ds = lib.utils.data.TensorDataset(x_valid, y_valid)
    train_dl, valid_dl = get_data(lib, train_ds, valid_ds, bs)
    opt = lib.optim.SGD(model.parameters(), lr=0.1, momentum=momentum)
    return fit(lib, 2, model, lib.nn.functional.cross_entropy, opt, train_dl, valid_dl)


@pytest.mark.parametrize("stage", ["logistic", "cnn"])
def test_refactored_stages(torch, digits, stage):
    build, momentum = {"logistic": (build_logistic, 0.0), "cnn": (build_cnn, 0.9)}[stage]
    theirs, ours = same_weights(torch, build)
    start = numpy_state(theirs)
    their_history = train_stage(torch, theirs, digits, momentum)
    our_history = train_stage(corenn, ours, digits, momentum)
    assert len(our_history) == 2 * (96 // bs + 1)
    assert_same_run(our_history, their_history)
    assert_same_state(ours, theirs, moved_from=start)
