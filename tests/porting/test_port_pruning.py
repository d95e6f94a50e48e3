"""Port of the PyTorch "Pruning Tutorial" (``intermediate/pruning_tutorial``) on its LeNet, then a few
training steps of the pruned network (the usual prune-then-fine-tune loop).

Written once against ``lib`` and run under PyTorch and corenn (``corenn.nn.utils.prune``, from the
corenn-prune plugin) from the same weights. It keeps the tutorial's ``LeNet`` (``conv1``, ``conv2``,
``fc1``..``fc3``, ``F.max_pool2d``, ``x.view(-1, int(x.nelement() / x.shape[0]))``), the deterministic
pruning calls (``prune.l1_unstructured(module, name="bias", amount=3)``, ``prune.ln_structured(module,
name="weight", amount=0.5, n=2, dim=0)`` on top of an earlier pruning, which builds a
``PruningContainer``, ``prune.global_unstructured(parameters_to_prune, pruning_method=prune.L1Unstructured,
amount=0.2)``, ``prune.custom_from_mask``), what it inspects (``named_parameters`` with ``weight_orig``,
``named_buffers`` with ``weight_mask``, ``module._forward_pre_hooks``, the global sparsity
``100. * float(torch.sum(model.fc1.weight == 0)) / float(model.fc1.weight.nelement())``),
``prune.remove`` making the pruning permanent, and ``state_dict()`` keys. The tutorial's random pruning
is left out: the two frameworks draw different numbers.
"""
from __future__ import annotations

import importlib

import numpy as np
import pytest

import corenn
from _port import assert_same_run, assert_same_state, numpy_state, same_weights

pytestmark = pytest.mark.torch


def build(lib):
    nn, F = lib.nn, lib.nn.functional

    class LeNet(nn.Module):
        def __init__(self):
            super().__init__()
            # 1 input image channel, 6 output channels, 5x5 square conv kernel
            self.conv1 = nn.Conv2d(1, 6, 5)
            self.conv2 = nn.Conv2d(6, 16, 5)
            self.fc1 = nn.Linear(16 * 5 * 5, 120)  # 5x5 image dimension
            self.fc2 = nn.Linear(120, 84)
            self.fc3 = nn.Linear(84, 10)

        def forward(self, x):
            x = F.max_pool2d(F.relu(self.conv1(x)), (2, 2))
            x = F.max_pool2d(F.relu(self.conv2(x)), 2)
            x = x.view(-1, int(x.nelement() / x.shape[0]))
            x = F.relu(self.fc1(x))
            x = F.relu(self.fc2(x))
            x = self.fc3(x)
            return x

    return LeNet()


def prune_like_the_tutorial(lib, model):
    prune = importlib.import_module(f"{lib.__name__}.nn.utils.prune")  # import torch.nn.utils.prune as prune
    module = model.conv1
    prune.l1_unstructured(module, name="bias", amount=3)
    prune.l1_unstructured(module, name="weight", amount=0.3)
    prune.ln_structured(module, name="weight", amount=0.5, n=2, dim=0)
    container = [hook for hook in module._forward_pre_hooks.values() if hook._tensor_name == "weight"][0]
    history = [type(method).__name__ for method in container]
    report = {
        "parameters": [name for name, _ in module.named_parameters()],
        "buffers": [name for name, _ in module.named_buffers()],
        "hooks": len(module._forward_pre_hooks),
        "history": history,
    }
    prune.remove(module, "weight")
    report["after_remove"] = [name for name, _ in module.named_parameters()]
    parameters_to_prune = (
        (model.conv2, "weight"),
        (model.fc1, "weight"),
        (model.fc2, "weight"),
        (model.fc3, "weight"),
    )
    prune.global_unstructured(parameters_to_prune, pruning_method=prune.L1Unstructured, amount=0.2)
    report["sparsity"] = [
        100. * float(lib.sum(layer.weight == 0)) / float(layer.weight.nelement())
        for layer in (model.conv1, model.conv2, model.fc1, model.fc2, model.fc3)
    ]
    mask = lib.ones(10)
    mask[::3] = 0
    prune.custom_from_mask(model.fc3, name="bias", mask=mask)
    report["keys"] = sorted(model.state_dict())
    return report


def fine_tune(lib, model, batches):
    optimizer = lib.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    losses = []
    for images, labels in batches:
        optimizer.zero_grad()
        loss = lib.nn.functional.cross_entropy(model(lib.from_numpy(images)), lib.from_numpy(labels))
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    # the masks hold: pruned weights stay zero however the originals move
    return losses, float(lib.sum(model.fc1.weight == 0))


def test_pruning_tutorial_prunes_and_fine_tunes_the_same(torch):
    rng = np.random.default_rng(0)
    batches = [(rng.standard_normal((4, 1, 32, 32)).astype(np.float32), rng.integers(0, 10, 4)) for _ in range(4)]
    theirs, ours = same_weights(torch, build)
    their_report = prune_like_the_tutorial(torch, theirs)
    our_report = prune_like_the_tutorial(corenn, ours)
    assert our_report["parameters"] == their_report["parameters"] == ["bias_orig", "weight_orig"]
    assert our_report["buffers"] == their_report["buffers"] == ["bias_mask", "weight_mask"]
    assert our_report["hooks"] == their_report["hooks"] == 2
    assert our_report["history"] == their_report["history"] == ["L1Unstructured", "LnStructured"]
    assert our_report["after_remove"] == their_report["after_remove"] == ["bias_orig", "weight"]
    assert our_report["sparsity"] == pytest.approx(their_report["sparsity"])
    assert our_report["keys"] == their_report["keys"]
    assert_same_state(ours, theirs)
    start = numpy_state(theirs)
    their_losses, their_zeros = fine_tune(torch, theirs, batches)
    our_losses, our_zeros = fine_tune(corenn, ours, batches)
    assert_same_run(our_losses, their_losses)
    assert our_zeros == their_zeros == pytest.approx(0.2 * 48000, abs=0.05 * 48000)
    assert_same_state(ours, theirs, moved_from=start)
