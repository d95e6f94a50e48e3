"""Port of pytorch/examples ``siamese_network/main.py`` (a shared backbone scores whether two images
show the same digit, ``BCELoss`` on a sigmoid), and of the contrastive-loss siamese network of
harveyslash/Facial-Similarity-with-Siamese-Networks-in-Pytorch (``F.pairwise_distance``, margin loss).

Written once against ``lib`` and run under PyTorch and corenn from the same weights on generated
image pairs. The example's backbone is torchvision's ResNet-18; here it is a small network built the
same way: a model whose last child is ``fc``, ``fc_in_features = backbone.fc.in_features``,
``nn.Sequential(*(list(backbone.children())[:-1]))``, ``forward_once`` flattening with
``output.view(output.size()[0], -1)``, ``torch.cat((output1, output2), 1)``, the head
``nn.Sequential(nn.Linear(2 * n, 16), nn.ReLU(inplace=True), nn.Linear(16, 1))``, ``init_weights``
applied with ``self.fc.apply`` (``xavier_uniform_``, ``bias.data.fill_(0.01)``), ``optim.Adadelta(lr=1)``,
``StepLR(step_size=1, gamma=0.7)``, and the test's ``torch.where(outputs > 0.5, 1, 0)`` with
``pred.eq(targets.view_as(pred)).sum().item()``.
"""
from __future__ import annotations

import numpy as np
import pytest

import corenn
from _port import assert_same_run, assert_same_state, numpy_state, same_weights

pytestmark = pytest.mark.torch


def build_backbone(lib):
    nn = lib.nn

    class Backbone(nn.Module):
        """A ResNet-like stem: conv, batch norm, relu, global average pooling, then ``fc``."""

        def __init__(self):
            super().__init__()
            self.conv1 = nn.Conv2d(1, 8, kernel_size=3, stride=1, padding=1, bias=False)
            self.bn1 = nn.BatchNorm2d(8)
            self.relu = nn.ReLU(inplace=True)
            self.conv2 = nn.Conv2d(8, 8, kernel_size=3, stride=2, padding=1, bias=False)
            self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
            self.fc = nn.Linear(8, 10)

    return Backbone()


def build(lib):
    nn = lib.nn

    class SiameseNetwork(nn.Module):
        def __init__(self):
            super().__init__()
            self.resnet = build_backbone(lib)
            self.fc_in_features = self.resnet.fc.in_features
            # remove the last layer of the backbone (the linear layer before the average pool layer)
            self.resnet = nn.Sequential(*(list(self.resnet.children())[:-1]))
            self.fc = nn.Sequential(
                nn.Linear(self.fc_in_features * 2, 16),
                nn.ReLU(inplace=True),
                nn.Linear(16, 1),
            )
            self.sigmoid = nn.Sigmoid()
            self.resnet.apply(self.init_weights)
            self.fc.apply(self.init_weights)

        def init_weights(self, m):
            if isinstance(m, nn.Linear):
                lib.nn.init.xavier_uniform_(m.weight)
                m.bias.data.fill_(0.01)

        def forward_once(self, x):
            output = self.resnet(x)
            output = output.view(output.size()[0], -1)
            return output

        def forward(self, input1, input2):
            output1 = self.forward_once(input1)
            output2 = self.forward_once(input2)
            output = lib.cat((output1, output2), 1)
            output = self.fc(output)
            output = self.sigmoid(output)
            return output

    return SiameseNetwork()


def train_and_test(lib, model, pairs, epochs=2):
    optimizer = lib.optim.Adadelta(model.parameters(), lr=1)
    scheduler = lib.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.7)
    criterion = lib.nn.BCELoss()
    losses = []
    for epoch in range(epochs):
        model.train()
        for images_1, images_2, targets in pairs:
            images_1, images_2, targets = lib.from_numpy(images_1), lib.from_numpy(images_2), lib.from_numpy(targets)
            optimizer.zero_grad()
            outputs = model(images_1, images_2).squeeze()
            loss = criterion(outputs, targets)
            loss.backward()
            optimizer.step()
            losses.append(loss.item())
        scheduler.step()
    model.eval()
    test_loss = 0
    correct = 0
    with lib.no_grad():
        for images_1, images_2, targets in pairs:
            images_1, images_2, targets = lib.from_numpy(images_1), lib.from_numpy(images_2), lib.from_numpy(targets)
            outputs = model(images_1, images_2).squeeze()
            test_loss += criterion(outputs, targets).sum().item()
            pred = lib.where(outputs > 0.5, 1, 0)
            correct += pred.eq(targets.view_as(pred)).sum().item()
    return losses, test_loss, correct


def build_contrastive(lib):
    nn = lib.nn

    class SiameseNetwork(nn.Module):
        def __init__(self):
            super().__init__()
            self.cnn1 = nn.Sequential(
                nn.ReflectionPad2d(1), nn.Conv2d(1, 4, kernel_size=3), nn.ReLU(inplace=True), nn.BatchNorm2d(4),
                nn.ReflectionPad2d(1), nn.Conv2d(4, 8, kernel_size=3), nn.ReLU(inplace=True), nn.BatchNorm2d(8),
            )
            self.fc1 = nn.Sequential(nn.Linear(8 * 8 * 8, 32), nn.ReLU(inplace=True), nn.Linear(32, 5))

        def forward_once(self, x):
            output = self.cnn1(x)
            output = output.view(output.size()[0], -1)
            output = self.fc1(output)
            return output

        def forward(self, input1, input2):
            return self.forward_once(input1), self.forward_once(input2)

    return SiameseNetwork()


def contrastive_loss(lib, output1, output2, label, margin=2.0):
    F = lib.nn.functional
    euclidean_distance = F.pairwise_distance(output1, output2, keepdim=True)
    return lib.mean((1 - label) * lib.pow(euclidean_distance, 2)
                    + label * lib.pow(lib.clamp(margin - euclidean_distance, min=0.0), 2))


def train_contrastive(lib, net, pairs):
    F = lib.nn.functional
    optimizer = lib.optim.Adam(net.parameters(), lr=0.0005)
    losses, similarities = [], []
    for img0, img1, label in pairs:
        img0, img1, label = lib.from_numpy(img0), lib.from_numpy(img1), lib.from_numpy(label).unsqueeze(1)
        optimizer.zero_grad()
        output1, output2 = net(img0, img1)
        loss_contrastive = contrastive_loss(lib, output1, output2, label)
        loss_contrastive.backward()
        optimizer.step()
        losses.append(loss_contrastive.item())
        similarities.append(F.cosine_similarity(output1, output2).detach())
    return losses, similarities


def _pairs(seed, n=4, batch=4, size=8):
    rng = np.random.default_rng(seed)
    return [(rng.standard_normal((batch, 1, size, size)).astype(np.float32),
             rng.standard_normal((batch, 1, size, size)).astype(np.float32),
             rng.integers(0, 2, batch).astype(np.float32)) for _ in range(n)]


def test_siamese_network_trains_the_same_in_both_frameworks(torch):
    pairs = _pairs(0)
    theirs, ours = same_weights(torch, build)
    start = numpy_state(theirs)
    assert "fc.0.weight" in start and not any(name.startswith("resnet.4") for name in start)  # the fc was cut off
    their_losses, their_test_loss, their_correct = train_and_test(torch, theirs, pairs)
    our_losses, our_test_loss, our_correct = train_and_test(corenn, ours, pairs)
    assert len(our_losses) == 8
    assert_same_run(our_losses, their_losses)
    assert our_test_loss == pytest.approx(their_test_loss, rel=1e-4)
    assert our_correct == their_correct
    assert_same_state(ours, theirs, moved_from=start)


def test_contrastive_siamese_network_trains_the_same_in_both_frameworks(torch):
    pairs = _pairs(1)
    theirs, ours = same_weights(torch, build_contrastive)
    start = numpy_state(theirs)
    their_losses, their_similarities = train_contrastive(torch, theirs, pairs)
    our_losses, our_similarities = train_contrastive(corenn, ours, pairs)
    assert_same_run(our_losses, their_losses)
    assert_same_run(our_similarities, their_similarities)
    assert_same_state(ours, theirs, moved_from=start)
