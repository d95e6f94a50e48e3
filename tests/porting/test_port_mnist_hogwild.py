"""Port of pytorch/examples ``mnist_hogwild/main.py`` (with its ``train.py``): Hogwild training, worker
processes updating one model whose parameters live in shared memory.

Written once against ``lib`` and run under PyTorch (``torch.multiprocessing``) and corenn
(``corenn.multiprocessing``) from the same weights on generated images. It keeps the example's
``mp.set_start_method('spawn')`` (here a ``get_context('spawn')``), ``model.share_memory()``,
``mp.Process(target=train, args=(rank, args, model, ...))`` started and joined per rank,
``torch.manual_seed(args.seed + rank)`` in each worker, ``train_epoch`` with ``optim.SGD(lr,
momentum)``, ``F.nll_loss`` and ``model.train()``, and the final ``test_epoch`` in the parent on the
weights the workers wrote. One worker, so that the run is deterministic and comparable (with several,
the interleaving of updates is the point of Hogwild, and differs run to run); the worker sends its
losses back through a ``Queue``. Dropout is 0 (different masks per framework).
"""
from __future__ import annotations

import functools
import importlib
import queue

import numpy as np
import pytest

import corenn
from _port import assert_same_run, assert_same_state, numpy_state, same_weights

# slow: each framework starts a spawned worker, which imports the framework afresh
pytestmark = [pytest.mark.torch, pytest.mark.slow]


@functools.cache
def net_class(lib_name):
    """The program's ``Net`` for one framework, reachable as a module attribute so that spawn can pickle it."""
    lib = importlib.import_module(lib_name)
    nn, F = lib.nn, lib.nn.functional

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv1 = nn.Conv2d(1, 4, kernel_size=5)
            self.conv2 = nn.Conv2d(4, 8, kernel_size=3)
            self.conv2_drop = nn.Dropout2d(0.0)
            self.fc1 = nn.Linear(8, 16)
            self.fc2 = nn.Linear(16, 10)

        def forward(self, x):
            x = F.relu(F.max_pool2d(self.conv1(x), 2))
            x = F.relu(F.max_pool2d(self.conv2_drop(self.conv2(x)), 2))
            x = x.view(-1, 8)
            x = F.relu(self.fc1(x))
            x = F.dropout(x, p=0.0, training=self.training)
            x = self.fc2(x)
            return F.log_softmax(x, dim=1)

    Net.__name__ = Net.__qualname__ = f"Net_{lib_name}"
    return Net


def __getattr__(name):
    if name.startswith("Net_"):
        return net_class(name[len("Net_"):])
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def build(lib):
    return net_class(lib.__name__)()


def train(rank, lib_name, seed, model, images, labels, losses):
    lib = importlib.import_module(lib_name)
    lib.manual_seed(seed + rank)
    data = lib.utils.data
    train_loader = data.DataLoader(data.TensorDataset(lib.from_numpy(images), lib.from_numpy(labels)),
                                   batch_size=4)
    optimizer = lib.optim.SGD(model.parameters(), lr=0.05, momentum=0.5)
    for epoch in range(1, 3):
        train_epoch(lib, epoch, model, train_loader, optimizer, losses)


def train_epoch(lib, epoch, model, data_loader, optimizer, losses):
    model.train()
    for batch_idx, (data, target) in enumerate(data_loader):
        optimizer.zero_grad()
        output = model(data)
        loss = lib.nn.functional.nll_loss(output, target)
        loss.backward()
        optimizer.step()
        losses.put(loss.item())


def test_epoch(lib, model, images, labels):
    model.eval()
    with lib.no_grad():
        output = model(lib.from_numpy(images))
        test_loss = lib.nn.functional.nll_loss(output, lib.from_numpy(labels), reduction="sum").item()
        pred = output.max(1)[1]
        correct = pred.eq(lib.from_numpy(labels)).sum().item()
    return test_loss / len(images), correct


test_epoch.__test__ = False  # the example's name, not a pytest test


def main(lib, model, images, labels, num_processes=1, seed=1):
    mp = importlib.import_module(f"{lib.__name__}.multiprocessing").get_context("spawn")
    model.share_memory()  # gradients are allocated lazily, so they are not shared here
    losses = mp.Queue()
    processes = []
    for rank in range(num_processes):
        p = mp.Process(target=train, args=(rank, lib.__name__, seed, model, images, labels, losses))
        p.start()
        processes.append(p)
    received = []
    while len(received) < num_processes * 2 * len(images) // 4:
        try:
            received.append(losses.get(timeout=1))
        except queue.Empty:
            if not any(p.is_alive() for p in processes):  # a worker failed: its traceback is on stderr
                break
    for p in processes:
        p.join(120)
        assert p.exitcode == 0
    return received, test_epoch(lib, model, images, labels)


def test_mnist_hogwild_trains_the_same_in_both_frameworks(torch):
    rng = np.random.default_rng(0)
    images = rng.standard_normal((12, 1, 12, 12)).astype(np.float32)
    labels = rng.integers(0, 10, 12).astype(np.int64)
    theirs, ours = same_weights(torch, build)
    start = numpy_state(theirs)
    their_losses, their_test = main(torch, theirs, images, labels)
    our_losses, our_test = main(corenn, ours, images, labels)
    assert len(our_losses) == 6
    assert_same_run(our_losses, their_losses)
    assert_same_run([our_test], [their_test])
    assert_same_state(ours, theirs, moved_from=start)  # the parent sees what the worker wrote
