"""Port of kuangliu/pytorch-cifar (``main.py`` with ``models/mobilenetv2.py``): MobileNetV2 inverted
residual blocks with depthwise convolutions, trained with SGD, weight decay and ``CosineAnnealingLR``.

Written once against ``lib`` and run under PyTorch and corenn from the same weights on generated
8x8 images (CIFAR-10 is a download; the block table is cut to three stages). It keeps the
program's ``Block`` (expand 1x1 ``Conv2d``, depthwise 3x3 ``Conv2d(groups=planes)``, project 1x1, each
with ``BatchNorm2d``; an ``nn.Sequential()`` shortcut, a conv shortcut when shapes change, added only
at stride 1), ``_make_layers`` over a ``cfg`` table, ``F.avg_pool2d(out, 4)``, ``out.view(out.size(0), -1)``,
``optim.SGD(lr=0.1, momentum=0.9, weight_decay=5e-4)``, ``lr_scheduler.CosineAnnealingLR(T_max=200)``
stepped per epoch, and the loops' ``outputs.max(1)``, ``predicted.eq(targets).sum().item()`` and
``train_loss/(batch_idx+1)``; then ``net.eval()`` with ``torch.no_grad()``, and the best-accuracy
``state`` dict.
"""
from __future__ import annotations

import numpy as np
import pytest

import corenn
from _port import assert_same_run, assert_same_state, numpy_state, same_weights

pytestmark = pytest.mark.torch


def build(lib, num_classes=10):
    nn, F = lib.nn, lib.nn.functional

    class Block(nn.Module):
        """expand + depthwise + pointwise"""

        def __init__(self, in_planes, out_planes, expansion, stride):
            super().__init__()
            self.stride = stride
            planes = expansion * in_planes
            self.conv1 = nn.Conv2d(in_planes, planes, kernel_size=1, stride=1, padding=0, bias=False)
            self.bn1 = nn.BatchNorm2d(planes)
            self.conv2 = nn.Conv2d(planes, planes, kernel_size=3, stride=stride, padding=1, groups=planes, bias=False)
            self.bn2 = nn.BatchNorm2d(planes)
            self.conv3 = nn.Conv2d(planes, out_planes, kernel_size=1, stride=1, padding=0, bias=False)
            self.bn3 = nn.BatchNorm2d(out_planes)
            self.shortcut = nn.Sequential()
            if stride == 1 and in_planes != out_planes:
                self.shortcut = nn.Sequential(
                    nn.Conv2d(in_planes, out_planes, kernel_size=1, stride=1, padding=0, bias=False),
                    nn.BatchNorm2d(out_planes),
                )

        def forward(self, x):
            out = F.relu(self.bn1(self.conv1(x)))
            out = F.relu(self.bn2(self.conv2(out)))
            out = self.bn3(self.conv3(out))
            out = out + self.shortcut(x) if self.stride == 1 else out
            return out

    class MobileNetV2(nn.Module):
        # (expansion, out_planes, num_blocks, stride)
        cfg = [(1, 8, 1, 1),
               (2, 12, 2, 2),
               (2, 16, 1, 1)]

        def __init__(self):
            super().__init__()
            self.conv1 = nn.Conv2d(3, 8, kernel_size=3, stride=1, padding=1, bias=False)
            self.bn1 = nn.BatchNorm2d(8)
            self.layers = self._make_layers(in_planes=8)
            self.conv2 = nn.Conv2d(16, 32, kernel_size=1, stride=1, padding=0, bias=False)
            self.bn2 = nn.BatchNorm2d(32)
            self.linear = nn.Linear(32, num_classes)

        def _make_layers(self, in_planes):
            layers = []
            for expansion, out_planes, num_blocks, stride in self.cfg:
                strides = [stride] + [1] * (num_blocks - 1)
                for stride in strides:
                    layers.append(Block(in_planes, out_planes, expansion, stride))
                    in_planes = out_planes
            return nn.Sequential(*layers)

        def forward(self, x):
            out = F.relu(self.bn1(self.conv1(x)))
            out = self.layers(out)
            out = F.relu(self.bn2(self.conv2(out)))
            out = F.avg_pool2d(out, 4)
            out = out.view(out.size(0), -1)
            out = self.linear(out)
            return out

    return MobileNetV2()


def main(lib, net, images, labels, epochs=2):
    data = lib.utils.data
    trainloader = data.DataLoader(data.TensorDataset(lib.from_numpy(images[:12]), lib.from_numpy(labels[:12])),
                                  batch_size=4)
    testloader = data.DataLoader(data.TensorDataset(lib.from_numpy(images[12:]), lib.from_numpy(labels[12:])),
                                 batch_size=4)
    criterion = lib.nn.CrossEntropyLoss()
    optimizer = lib.optim.SGD(net.parameters(), lr=0.1, momentum=0.9, weight_decay=5e-4)
    scheduler = lib.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=200)
    best_acc = 0
    history = []
    for epoch in range(epochs):
        net.train()
        train_loss = 0
        correct = 0
        total = 0
        for batch_idx, (inputs, targets) in enumerate(trainloader):
            optimizer.zero_grad()
            outputs = net(inputs)
            loss = criterion(outputs, targets)
            loss.backward()
            optimizer.step()
            train_loss += loss.item()
            _, predicted = outputs.max(1)
            total += targets.size(0)
            correct += predicted.eq(targets).sum().item()
            history.append([loss.item(), train_loss / (batch_idx + 1)])
        net.eval()
        test_loss = 0
        correct = 0
        total = 0
        with lib.no_grad():
            for batch_idx, (inputs, targets) in enumerate(testloader):
                outputs = net(inputs)
                loss = criterion(outputs, targets)
                test_loss += loss.item()
                _, predicted = outputs.max(1)
                total += targets.size(0)
                correct += predicted.eq(targets).sum().item()
        acc = 100. * correct / total
        if acc > best_acc:
            state = {"net": net.state_dict(), "acc": acc, "epoch": epoch}
            best_acc = state["acc"]
        history.append([test_loss / len(testloader), acc])
        scheduler.step()
    return history, scheduler.get_last_lr()


def test_pytorch_cifar_mobilenetv2_trains_the_same_in_both_frameworks(torch):
    rng = np.random.default_rng(0)
    images = rng.standard_normal((16, 3, 8, 8)).astype(np.float32)
    labels = rng.integers(0, 10, 16).astype(np.int64)
    theirs, ours = same_weights(torch, build)
    start = numpy_state(theirs)
    assert ours.layers[1].conv2.groups == 16
    their_history, their_lr = main(torch, theirs, images, labels)
    our_history, our_lr = main(corenn, ours, images, labels)
    assert_same_run(our_history, their_history)
    assert our_lr == pytest.approx(their_lr)
    assert_same_state(ours, theirs, moved_from=start)
