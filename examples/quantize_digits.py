"""Train a small CNN on scikit-learn's digits, then quantize it three ways: dynamic, static and QAT.

For each, prints accuracy, state-dict size and inference time against fp32.

    python examples/quantize_digits.py
"""
from __future__ import annotations

import copy
import os
import tempfile
import time

import numpy as np
from sklearn.datasets import load_digits

import corenn
import corenn.ao.quantization as tq
from corenn import nn


class DigitsCNN(nn.Module):
    def __init__(self):
        super().__init__()
        self.quant = tq.QuantStub()
        self.conv = nn.Conv2d(1, 8, 3, padding=1)
        self.bn = nn.BatchNorm2d(8)
        self.relu = nn.ReLU()
        self.pool = nn.MaxPool2d(2)
        self.flatten = nn.Flatten()
        self.fc1 = nn.Linear(8 * 4 * 4, 64)
        self.relu1 = nn.ReLU()
        self.fc2 = nn.Linear(64, 10)
        self.dequant = tq.DeQuantStub()

    def forward(self, x):
        x = self.pool(self.relu(self.bn(self.conv(self.quant(x)))))
        return self.dequant(self.fc2(self.relu1(self.fc1(self.flatten(x)))))


FUSE = [["conv", "bn", "relu"], ["fc1", "relu1"]]


def train(model, images, labels, epochs):
    optimizer = corenn.optim.Adam(model.parameters(), lr=3e-3)
    model.train()
    rng = np.random.default_rng(0)
    for _ in range(epochs):
        order = rng.permutation(len(labels))
        for start in range(0, len(order), 64):
            batch = order[start:start + 64]
            loss = nn.functional.cross_entropy(model(corenn.from_numpy(images[batch])),
                                               corenn.from_numpy(labels[batch]))
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
    return model.eval()


def report(name, model, images, labels):
    x = corenn.from_numpy(images)
    with corenn.no_grad():
        model(x)
        start = time.perf_counter()
        predictions = model(x).numpy().argmax(1)
        elapsed = time.perf_counter() - start
    with tempfile.TemporaryDirectory() as folder:
        path = os.path.join(folder, "model.safetensors")
        corenn.save(model.state_dict(), path)
        size = os.path.getsize(path)
    print(f"{name:>8}: accuracy {100 * (predictions == labels).mean():5.1f}%  size {size / 1024:6.1f} KiB  "
          f"inference {1e3 * elapsed:6.1f} ms for {len(labels)} images")


def main():
    digits = load_digits()
    images = (digits.images / 16.0).astype(np.float32).reshape(-1, 1, 8, 8)
    labels = digits.target.astype(np.int64)
    order = np.random.default_rng(1).permutation(len(labels))
    images, labels = images[order], labels[order]
    train_x, train_y, test_x, test_y = images[:1400], labels[:1400], images[1400:], labels[1400:]
    corenn.manual_seed(0)
    fp32 = train(DigitsCNN(), train_x, train_y, epochs=6)
    report("fp32", fp32, test_x, test_y)

    dynamic = tq.quantize_dynamic(fp32, {nn.Linear}, dtype=corenn.qint8)
    report("dynamic", dynamic, test_x, test_y)

    fused = tq.fuse_modules(fp32, FUSE)
    fused.qconfig = tq.get_default_qconfig("x86")
    prepared = tq.prepare(fused)
    prepared(corenn.from_numpy(train_x[:512]))          # calibration
    report("static", tq.convert(prepared), test_x, test_y)

    qat_model = tq.fuse_modules(copy.deepcopy(fp32), FUSE).train()
    qat_model.qconfig = tq.get_default_qat_qconfig("x86")
    qat_model = train(tq.prepare_qat(qat_model), train_x, train_y, epochs=2)
    report("qat", tq.convert(qat_model), test_x, test_y)


if __name__ == "__main__":
    main()
