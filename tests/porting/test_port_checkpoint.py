"""Port of the PyTorch recipe "Saving and Loading a General Checkpoint" (``recipes/saving_and_loading_a_general_checkpoint``):
a checkpoint dict of epoch, model, optimizer (and scheduler) state dicts and loss, saved mid-training
and loaded to resume.

Written once against ``lib``. The recipe's CIFAR ``Net`` (two ``Conv2d`` + ``MaxPool2d`` stages and
three ``Linear`` layers, sized here for 14x14 inputs) trains for a few steps under one framework,
its checkpoint crosses to the other framework (every tensor converted through numpy: the
optimizer's ``state``/``param_groups`` layout and the scheduler's fields must mean the same thing in
both), and training resumes there with ``model.load_state_dict``, ``optimizer.load_state_dict``,
``scheduler.load_state_dict`` and ``model.train()``. The resumed run must match the run that never
stopped, step for step: SGD with momentum (``momentum_buffer``) and Adam (``step``, ``exp_avg``,
``exp_avg_sq``), each with a ``StepLR``.
"""
from __future__ import annotations

import numpy as np
import pytest

import corenn
from _port import assert_same_run, assert_same_state, same_weights, to_numpy

pytestmark = pytest.mark.torch


def build(lib):
    nn, F = lib.nn, lib.nn.functional

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv1 = nn.Conv2d(3, 6, 3)
            self.pool = nn.MaxPool2d(2, 2)
            self.conv2 = nn.Conv2d(6, 8, 3)
            self.fc1 = nn.Linear(8 * 2 * 2, 24)
            self.fc2 = nn.Linear(24, 16)
            self.fc3 = nn.Linear(16, 10)

        def forward(self, x):
            x = self.pool(F.relu(self.conv1(x)))
            x = self.pool(F.relu(self.conv2(x)))
            x = x.view(-1, 8 * 2 * 2)
            x = F.relu(self.fc1(x))
            x = F.relu(self.fc2(x))
            x = self.fc3(x)
            return x

    return Net()


def make_optimizer(lib, net, kind):
    if kind == "sgd":
        optimizer = lib.optim.SGD(net.parameters(), lr=0.01, momentum=0.9)
    else:
        optimizer = lib.optim.Adam(net.parameters(), lr=0.003)
    return optimizer, lib.optim.lr_scheduler.StepLR(optimizer, step_size=2, gamma=0.5)


def train(lib, net, optimizer, scheduler, batches):
    criterion = lib.nn.CrossEntropyLoss()
    losses = []
    for inputs, labels in batches:
        optimizer.zero_grad()
        loss = criterion(net(lib.from_numpy(inputs)), lib.from_numpy(labels))
        loss.backward()
        optimizer.step()
        scheduler.step()
        losses.append(loss.item())
    return losses


def convert(lib, value):
    """A checkpoint of one framework, as the other framework's objects (tensors through numpy)."""
    if isinstance(value, dict):
        return {key: convert(lib, item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(convert(lib, item) for item in value)
    if hasattr(value, "detach"):
        return lib.from_numpy(to_numpy(value))
    return value


def save_checkpoint(lib, path, epoch, model, optimizer, scheduler, loss):
    lib.save({"epoch": epoch, "model_state_dict": model.state_dict(),
              "optimizer_state_dict": optimizer.state_dict(), "scheduler_state_dict": scheduler.state_dict(),
              "loss": loss}, path)


def resume(lib, checkpoint, kind):
    model = build(lib)
    optimizer, scheduler = make_optimizer(lib, model, kind)
    model.load_state_dict(checkpoint["model_state_dict"])
    optimizer.load_state_dict(checkpoint["optimizer_state_dict"])
    scheduler.load_state_dict(checkpoint["scheduler_state_dict"])
    epoch = checkpoint["epoch"]
    loss = checkpoint["loss"]
    model.train()
    return model, optimizer, scheduler, epoch, loss


@pytest.mark.parametrize("kind", ["sgd", "adam"])
@pytest.mark.parametrize("direction", ["torch_to_corenn", "corenn_to_torch"])
def test_a_checkpoint_resumes_in_the_other_framework(torch, tmp_path, kind, direction):
    rng = np.random.default_rng(0)
    batches = [(rng.standard_normal((4, 3, 14, 14)).astype(np.float32), rng.integers(0, 10, 4).astype(np.int64))
               for _ in range(6)]
    first, second = (torch, corenn) if direction == "torch_to_corenn" else (corenn, torch)
    theirs, ours = same_weights(torch, build)
    models = {torch: theirs, corenn: ours}
    # the same start, trained without a stop in the framework that resumes below
    reference = build(second)
    reference.load_state_dict(models[second].state_dict())
    optimizer, scheduler = make_optimizer(second, reference, kind)
    uninterrupted = train(second, reference, optimizer, scheduler, batches)

    # three steps in the first framework, saved and loaded there as the recipe does
    model = models[first]
    optimizer, scheduler = make_optimizer(first, model, kind)
    before = train(first, model, optimizer, scheduler, batches[:3])
    path = tmp_path / "checkpoint"
    save_checkpoint(first, path, 3, model, optimizer, scheduler, before[-1])
    checkpoint = first.load(path, weights_only=True) if first is torch else first.load(path)

    # ... and resumed in the second
    model, optimizer, scheduler, epoch, loss = resume(second, convert(second, checkpoint), kind)
    assert epoch == 3 and loss == before[-1]
    after = train(second, model, optimizer, scheduler, batches[3:])

    assert_same_run(before + after, uninterrupted)
    assert_same_state(model, reference)
    assert optimizer.param_groups[0]["lr"] == pytest.approx(scheduler.get_last_lr()[0]) == pytest.approx(
        (0.01 if kind == "sgd" else 0.003) * 0.125)
