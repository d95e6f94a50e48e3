"""Port of the PyTorch "Transfer Learning for Computer Vision" tutorial
(``beginner/transfer_learning_tutorial``), on a ResNet written the way torchvision's ``resnet.py`` is.

Written once against ``lib`` and run under PyTorch and corenn from the same weights (torchvision's
pretrained ResNet-18 and the ants/bees images are not available here: the network is a two-stage
ResNet of ``BasicBlock``s with torchvision's initialization, the images are generated). It keeps the
tutorial's two scenarios, fine-tuning everything (``optim.SGD(model_ft.parameters(), lr=0.001,
momentum=0.9)``) and the frozen feature extractor (``param.requires_grad = False`` for every parameter,
then a new ``model_conv.fc = nn.Linear(num_ftrs, 2)`` trained alone), ``lr_scheduler.StepLR(step_size=7,
gamma=0.1)``, and ``train_model``'s phases: ``model.train()``/``model.eval()``,
``torch.set_grad_enabled(phase == 'train')``, ``_, preds = torch.max(outputs, 1)``,
``running_loss += loss.item() * inputs.size(0)``, ``running_corrects += torch.sum(preds == labels.data)``,
``running_corrects.double() / dataset_sizes[phase]`` and the best weights kept with
``copy.deepcopy(model.state_dict())`` and restored with ``load_state_dict``.
"""
from __future__ import annotations

import copy

import numpy as np
import pytest

import corenn
from _port import assert_same_run, assert_same_state, numpy_state, same_weights

pytestmark = pytest.mark.torch


def build(lib, num_classes=10):
    nn = lib.nn

    def conv3x3(in_planes, out_planes, stride=1):
        return nn.Conv2d(in_planes, out_planes, kernel_size=3, stride=stride, padding=1, bias=False)

    def conv1x1(in_planes, out_planes, stride=1):
        return nn.Conv2d(in_planes, out_planes, kernel_size=1, stride=stride, bias=False)

    class BasicBlock(nn.Module):
        expansion = 1

        def __init__(self, inplanes, planes, stride=1, downsample=None):
            super().__init__()
            self.conv1 = conv3x3(inplanes, planes, stride)
            self.bn1 = nn.BatchNorm2d(planes)
            self.relu = nn.ReLU(inplace=True)
            self.conv2 = conv3x3(planes, planes)
            self.bn2 = nn.BatchNorm2d(planes)
            self.downsample = downsample
            self.stride = stride

        def forward(self, x):
            identity = x
            out = self.conv1(x)
            out = self.bn1(out)
            out = self.relu(out)
            out = self.conv2(out)
            out = self.bn2(out)
            if self.downsample is not None:
                identity = self.downsample(x)
            out += identity
            out = self.relu(out)
            return out

    class ResNet(nn.Module):
        def __init__(self, layers=(1, 1)):
            super().__init__()
            self.inplanes = 8
            self.conv1 = nn.Conv2d(3, self.inplanes, kernel_size=3, stride=1, padding=1, bias=False)
            self.bn1 = nn.BatchNorm2d(self.inplanes)
            self.relu = nn.ReLU(inplace=True)
            self.maxpool = nn.MaxPool2d(kernel_size=3, stride=2, padding=1)
            self.layer1 = self._make_layer(8, layers[0])
            self.layer2 = self._make_layer(16, layers[1], stride=2)
            self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
            self.fc = nn.Linear(16 * BasicBlock.expansion, num_classes)
            for m in self.modules():
                if isinstance(m, nn.Conv2d):
                    nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")
                elif isinstance(m, (nn.BatchNorm2d, nn.GroupNorm)):
                    nn.init.constant_(m.weight, 1)
                    nn.init.constant_(m.bias, 0)

        def _make_layer(self, planes, blocks, stride=1):
            downsample = None
            if stride != 1 or self.inplanes != planes * BasicBlock.expansion:
                downsample = nn.Sequential(
                    conv1x1(self.inplanes, planes * BasicBlock.expansion, stride),
                    nn.BatchNorm2d(planes * BasicBlock.expansion),
                )
            layers = [BasicBlock(self.inplanes, planes, stride, downsample)]
            self.inplanes = planes * BasicBlock.expansion
            for _ in range(1, blocks):
                layers.append(BasicBlock(self.inplanes, planes))
            return nn.Sequential(*layers)

        def forward(self, x):
            x = self.conv1(x)
            x = self.bn1(x)
            x = self.relu(x)
            x = self.maxpool(x)
            x = self.layer1(x)
            x = self.layer2(x)
            x = self.avgpool(x)
            x = lib.flatten(x, 1)
            x = self.fc(x)
            return x

    return ResNet()


def train_model(lib, model, criterion, optimizer, scheduler, dataloaders, dataset_sizes, num_epochs=2):
    best_model_wts = copy.deepcopy(model.state_dict())
    best_acc = 0.0
    history = []
    for epoch in range(num_epochs):
        for phase in ["train", "val"]:
            if phase == "train":
                model.train()
            else:
                model.eval()
            running_loss = 0.0
            running_corrects = 0
            for inputs, labels in dataloaders[phase]:
                optimizer.zero_grad()
                with lib.set_grad_enabled(phase == "train"):
                    outputs = model(inputs)
                    _, preds = lib.max(outputs, 1)
                    loss = criterion(outputs, labels)
                    if phase == "train":
                        loss.backward()
                        optimizer.step()
                running_loss += loss.item() * inputs.size(0)
                running_corrects += lib.sum(preds == labels.data)
            if phase == "train":
                scheduler.step()
            epoch_loss = running_loss / dataset_sizes[phase]
            epoch_acc = running_corrects.double() / dataset_sizes[phase]
            history.append((epoch_loss, epoch_acc.item()))
            if phase == "val" and epoch_acc > best_acc:
                best_acc = epoch_acc
                best_model_wts = copy.deepcopy(model.state_dict())
    model.load_state_dict(best_model_wts)
    return model, history


def _loaders(lib, seed=0):
    rng = np.random.default_rng(seed)
    sets = {phase: lib.utils.data.TensorDataset(
        lib.from_numpy(rng.standard_normal((n, 3, 12, 12)).astype(np.float32)),
        lib.from_numpy(rng.integers(0, 2, n).astype(np.int64))) for phase, n in (("train", 12), ("val", 8))}
    loaders = {phase: lib.utils.data.DataLoader(sets[phase], batch_size=4) for phase in sets}
    return loaders, {phase: len(sets[phase]) for phase in sets}


def finetune(lib, model_ft):
    num_ftrs = model_ft.fc.in_features
    model_ft.fc = lib.nn.Linear(num_ftrs, 2)
    return model_ft


def run_finetuning(lib, model_ft):
    criterion = lib.nn.CrossEntropyLoss()
    optimizer_ft = lib.optim.SGD(model_ft.parameters(), lr=0.001, momentum=0.9)
    exp_lr_scheduler = lib.optim.lr_scheduler.StepLR(optimizer_ft, step_size=7, gamma=0.1)
    loaders, sizes = _loaders(lib)
    return train_model(lib, model_ft, criterion, optimizer_ft, exp_lr_scheduler, loaders, sizes)


def feature_extractor(lib, model_conv):
    for param in model_conv.parameters():
        param.requires_grad = False
    num_ftrs = model_conv.fc.in_features
    model_conv.fc = lib.nn.Linear(num_ftrs, 2)  # parameters of newly constructed modules require grad
    return model_conv


def run_feature_extractor(lib, model_conv):
    criterion = lib.nn.CrossEntropyLoss()
    optimizer_conv = lib.optim.SGD(model_conv.fc.parameters(), lr=0.01, momentum=0.9)
    exp_lr_scheduler = lib.optim.lr_scheduler.StepLR(optimizer_conv, step_size=7, gamma=0.1)
    loaders, sizes = _loaders(lib, seed=1)
    return train_model(lib, model_conv, criterion, optimizer_conv, exp_lr_scheduler, loaders, sizes)


def test_transfer_learning_finetunes_the_same_in_both_frameworks(torch):
    theirs, ours = same_weights(torch, lambda lib: finetune(lib, build(lib)))
    start = numpy_state(theirs)
    theirs, their_history = run_finetuning(torch, theirs)
    ours, our_history = run_finetuning(corenn, ours)
    assert_same_run(our_history, their_history)
    assert_same_state(ours, theirs)
    assert set(numpy_state(theirs)) == set(start)


def test_transfer_learning_trains_only_the_new_head_of_a_frozen_network(torch):
    theirs, ours = same_weights(torch, lambda lib: feature_extractor(lib, build(lib)))
    start = numpy_state(theirs)
    assert [name for name, p in ours.named_parameters() if p.requires_grad] == ["fc.weight", "fc.bias"]
    ours_after, our_history = run_feature_extractor(corenn, ours)
    theirs_after, their_history = run_feature_extractor(torch, theirs)
    assert_same_run(our_history, their_history)
    assert_same_state(ours_after, theirs_after)
    after = numpy_state(ours_after)
    np.testing.assert_array_equal(after["layer1.0.conv1.weight"], start["layer1.0.conv1.weight"])
    # frozen weights stay, but batch norm still tracks statistics in training mode
    assert not np.array_equal(after["bn1.running_mean"], start["bn1.running_mean"])
