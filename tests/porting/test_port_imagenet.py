"""Port of pytorch/examples ``imagenet/main.py``: the reference training loop (``train``/``validate``,
``AverageMeter``, ``ProgressMeter``, top-k ``accuracy``, SGD with momentum and weight decay, StepLR,
best-accuracy checkpointing).

Written once against ``lib`` and run under PyTorch and corenn from the same weights. ImageNet and
torchvision's architectures are downloads: the network is a small AlexNet-shaped
``features``/``avgpool``/``classifier`` model, the images are generated. It keeps the example's
``AverageMeter`` (``update(val, n)``, ``avg``, its format strings), ``accuracy`` (``output.topk(maxk,
1, True, True)``, ``pred.t()``, ``pred.eq(target.view(1, -1).expand_as(pred))``,
``correct[:k].reshape(-1).float().sum(0, keepdim=True)``, ``mul_(100.0 / batch_size)``),
``nn.CrossEntropyLoss``, ``optim.SGD(lr, momentum=0.9, weight_decay=1e-4)``,
``StepLR(step_size=30, gamma=0.1)``, ``validate`` under ``torch.no_grad()`` with ``model.eval()``,
``best_acc1 = max(acc1, best_acc1)`` and the checkpoint dict of ``state_dict()``s. Dropout is 0.
"""
from __future__ import annotations

import numpy as np
import pytest

import corenn
from _port import assert_same_run, assert_same_state, numpy_state, same_weights

pytestmark = pytest.mark.torch

NUM_CLASSES = 10


def build(lib, dropout=0.0):
    nn = lib.nn

    class AlexNet(nn.Module):
        def __init__(self, num_classes=NUM_CLASSES):
            super().__init__()
            self.features = nn.Sequential(
                nn.Conv2d(3, 8, kernel_size=5, stride=2, padding=2),
                nn.ReLU(inplace=True),
                nn.MaxPool2d(kernel_size=3, stride=2),
                nn.Conv2d(8, 12, kernel_size=3, padding=1),
                nn.ReLU(inplace=True),
                nn.MaxPool2d(kernel_size=3, stride=2),
            )
            self.avgpool = nn.AdaptiveAvgPool2d((2, 2))
            self.classifier = nn.Sequential(
                nn.Dropout(p=dropout),
                nn.Linear(12 * 2 * 2, 32),
                nn.ReLU(inplace=True),
                nn.Linear(32, num_classes),
            )

        def forward(self, x):
            x = self.features(x)
            x = self.avgpool(x)
            x = lib.flatten(x, 1)
            x = self.classifier(x)
            return x

    return AlexNet()


class AverageMeter:
    """Computes and stores the average and current value"""

    def __init__(self, name, fmt=":f"):
        self.name = name
        self.fmt = fmt
        self.reset()

    def reset(self):
        self.val = 0
        self.avg = 0
        self.sum = 0
        self.count = 0

    def update(self, val, n=1):
        self.val = val
        self.sum += val * n
        self.count += n
        self.avg = self.sum / self.count

    def __str__(self):
        fmtstr = "{name} {val" + self.fmt + "} ({avg" + self.fmt + "})"
        return fmtstr.format(**self.__dict__)


def accuracy(lib, output, target, topk=(1,)):
    """Computes the accuracy over the k top predictions for the specified values of k"""
    with lib.no_grad():
        maxk = max(topk)
        batch_size = target.size(0)
        _, pred = output.topk(maxk, 1, True, True)
        pred = pred.t()
        correct = pred.eq(target.view(1, -1).expand_as(pred))
        res = []
        for k in topk:
            correct_k = correct[:k].reshape(-1).float().sum(0, keepdim=True)
            res.append(correct_k.mul_(100.0 / batch_size))
        return res


def train(lib, loader, model, criterion, optimizer, history):
    losses = AverageMeter("Loss", ":.4e")
    top1 = AverageMeter("Acc@1", ":6.2f")
    top5 = AverageMeter("Acc@5", ":6.2f")
    model.train()
    for i, (images, target) in enumerate(loader):
        output = model(images)
        loss = criterion(output, target)
        acc1, acc5 = accuracy(lib, output, target, topk=(1, 5))
        losses.update(loss.item(), images.size(0))
        top1.update(acc1[0], images.size(0))
        top5.update(acc5[0], images.size(0))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        history.append(loss.item())
    return str(losses)


def validate(lib, loader, model, criterion):
    losses = AverageMeter("Loss", ":.4e")
    top1 = AverageMeter("Acc@1", ":6.2f")
    top5 = AverageMeter("Acc@5", ":6.2f")
    model.eval()
    with lib.no_grad():
        for i, (images, target) in enumerate(loader):
            output = model(images)
            loss = criterion(output, target)
            acc1, acc5 = accuracy(lib, output, target, topk=(1, 5))
            losses.update(loss.item(), images.size(0))
            top1.update(acc1[0], images.size(0))
            top5.update(acc5[0], images.size(0))
    return top1.avg, top5.avg, losses.avg


def main(lib, model, images, labels, epochs=2):
    data = lib.utils.data
    train_loader = data.DataLoader(data.TensorDataset(lib.from_numpy(images[:16]), lib.from_numpy(labels[:16])),
                                   batch_size=8)
    val_loader = data.DataLoader(data.TensorDataset(lib.from_numpy(images[16:]), lib.from_numpy(labels[16:])),
                                 batch_size=8)
    criterion = lib.nn.CrossEntropyLoss()
    optimizer = lib.optim.SGD(model.parameters(), 0.05, momentum=0.9, weight_decay=1e-4)
    scheduler = lib.optim.lr_scheduler.StepLR(optimizer, step_size=30, gamma=0.1)
    best_acc1 = 0
    history, summaries, checkpoint = [], [], None
    for epoch in range(epochs):
        summaries.append(train(lib, train_loader, model, criterion, optimizer, history))
        acc1, acc5, val_loss = validate(lib, val_loader, model, criterion)
        scheduler.step()
        is_best = acc1 > best_acc1
        best_acc1 = max(acc1, best_acc1)
        summaries.append((float(acc1), float(acc5), val_loss))
        if is_best:
            checkpoint = {"epoch": epoch + 1, "state_dict": model.state_dict(), "best_acc1": best_acc1,
                          "optimizer": optimizer.state_dict(), "scheduler": scheduler.state_dict()}
    return history, summaries, checkpoint


def test_imagenet_loop_trains_the_same_in_both_frameworks(torch):
    rng = np.random.default_rng(0)
    images = rng.standard_normal((32, 3, 24, 24)).astype(np.float32)
    labels = rng.integers(0, NUM_CLASSES, 32).astype(np.int64)
    theirs, ours = same_weights(torch, build)
    start = numpy_state(theirs)
    their_history, their_summaries, their_checkpoint = main(torch, theirs, images, labels)
    our_history, our_summaries, our_checkpoint = main(corenn, ours, images, labels)
    assert len(our_history) == 4
    assert_same_run(our_history, their_history)
    for ours_summary, theirs_summary in zip(our_summaries, their_summaries):
        if isinstance(theirs_summary, str):  # "Loss 2.3012e+00 (2.3051e+00)": compare the numbers, not the digits
            assert ours_summary.startswith("Loss ") and theirs_summary.startswith("Loss ")
            numbers = [[float(word.strip("()")) for word in summary.split()[1:]]
                       for summary in (ours_summary, theirs_summary)]
            assert numbers[0] == pytest.approx(numbers[1], rel=2e-4)
        else:
            assert_same_run(ours_summary, theirs_summary)
    assert_same_state(ours, theirs, moved_from=start)
    assert (our_checkpoint is None) == (their_checkpoint is None)
    if their_checkpoint is not None:
        assert our_checkpoint["epoch"] == their_checkpoint["epoch"]
        assert sorted(our_checkpoint["state_dict"]) == sorted(their_checkpoint["state_dict"])
