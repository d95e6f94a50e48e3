"""Port of the PyTorch tutorial "Adversarial Example Generation" (``beginner/fgsm_tutorial``): the fast
gradient sign method against a small MNIST-style CNN, at several epsilons.

Written once against ``lib`` and run under PyTorch and corenn from the same weights (the tutorial
loads a pretrained LeNet; here the network has PyTorch's initial weights, and the images are
generated). It keeps the tutorial's ``fgsm_attack`` (``data_grad.sign()``, ``image + epsilon*sign_data_grad``,
``torch.clamp(perturbed_image, 0, 1)``), ``denorm`` with ``torch.tensor(mean).view(1, -1, 1, 1)``,
``transforms.Normalize``'s arithmetic by hand, and ``test``'s loop: ``data.requires_grad = True``,
``output.max(1, keepdim=True)[1]``, ``F.nll_loss``, ``model.zero_grad()``, ``loss.backward()``,
``data.grad.data``, re-classifying the perturbed image, and ``adv_ex = perturbed_data.squeeze().detach().cpu().numpy()``.
The network has no dropout: the tutorial runs it in ``model.eval()`` mode anyway.
"""
from __future__ import annotations

import numpy as np
import pytest

import corenn
from _port import assert_same_run, same_weights

pytestmark = pytest.mark.torch

MEAN, STD = (0.1307,), (0.3081,)


def build(lib):
    nn, F = lib.nn, lib.nn.functional

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv1 = nn.Conv2d(1, 8, 3, 1)
            self.conv2 = nn.Conv2d(8, 8, 3, 1)
            self.fc1 = nn.Linear(8 * 4 * 4, 32)
            self.fc2 = nn.Linear(32, 10)

        def forward(self, x):
            x = F.relu(self.conv1(x))
            x = F.max_pool2d(F.relu(self.conv2(x)), 2)
            x = lib.flatten(x, 1)
            x = F.relu(self.fc1(x))
            x = self.fc2(x)
            return F.log_softmax(x, dim=1)

    return Net()


def fgsm_attack(lib, image, epsilon, data_grad):
    sign_data_grad = data_grad.sign()
    perturbed_image = image + epsilon * sign_data_grad
    perturbed_image = lib.clamp(perturbed_image, 0, 1)
    return perturbed_image


def denorm(lib, batch, mean=MEAN, std=STD):
    if isinstance(mean, list) or isinstance(mean, tuple):
        mean = lib.tensor(mean)
    if isinstance(std, list) or isinstance(std, tuple):
        std = lib.tensor(std)
    return batch * std.view(1, -1, 1, 1) + mean.view(1, -1, 1, 1)


def attack(lib, model, images, targets, epsilon):
    F = lib.nn.functional
    correct = 0
    adv_examples, losses = [], []
    for image, label in zip(images, targets):
        data = (lib.from_numpy(image[None]) - MEAN[0]) / STD[0]  # transforms.Normalize by hand
        target = lib.tensor([int(label)])
        data.requires_grad = True
        output = model(data)
        init_pred = output.max(1, keepdim=True)[1]
        if init_pred.item() != target.item():
            continue
        loss = F.nll_loss(output, target)
        model.zero_grad()
        loss.backward()
        data_grad = data.grad.data
        data_denorm = denorm(lib, data)
        perturbed_data = fgsm_attack(lib, data_denorm, epsilon, data_grad)
        perturbed_data_normalized = (perturbed_data - MEAN[0]) / STD[0]
        output = model(perturbed_data_normalized)
        final_pred = output.max(1, keepdim=True)[1]
        losses.append(F.nll_loss(output, target).item())
        if final_pred.item() == target.item():
            correct += 1
        adv_ex = perturbed_data.squeeze().detach().cpu().numpy()
        adv_examples.append((init_pred.item(), final_pred.item(), adv_ex))
    final_acc = correct / float(len(images))
    return final_acc, adv_examples, losses


def test_fgsm_attack_is_the_same_in_both_frameworks(torch):
    rng = np.random.default_rng(0)
    images = rng.uniform(0, 1, (12, 1, 12, 12)).astype(np.float32)
    theirs, ours = same_weights(torch, build)
    theirs.eval(), ours.eval()
    with torch.no_grad():  # label each image with the network's own guess, so that every image gets attacked
        targets = theirs((torch.from_numpy(images) - MEAN[0]) / STD[0]).argmax(1).numpy()
    attacked = 0
    for epsilon in (0.0, 0.05, 0.3):
        their_acc, their_examples, their_losses = attack(torch, theirs, images, targets, epsilon)
        our_acc, our_examples, our_losses = attack(corenn, ours, images, targets, epsilon)
        assert our_acc == their_acc
        assert_same_run(our_losses, their_losses)
        assert [e[:2] for e in our_examples] == [e[:2] for e in their_examples]
        for (_, _, ours_ex), (_, _, theirs_ex) in zip(our_examples, their_examples):
            # pixel by pixel: a gradient sign that differed would move a pixel by 2 * epsilon
            np.testing.assert_allclose(ours_ex, theirs_ex, rtol=1e-5, atol=1e-5)
        attacked += len(our_examples)
        if epsilon == 0.0:
            assert our_acc == 1.0
    assert attacked == 3 * len(images)
