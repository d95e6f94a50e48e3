"""What the digits-accuracy tests of eager and FX quantization share: the data split, training, accuracy."""
from __future__ import annotations

import numpy as np
import pytest

import corenn
from corenn import nn


def load_digits_split():
    """scikit-learn's digits as (train images, train labels, test images, test labels), a fixed shuffle."""
    sklearn = pytest.importorskip("sklearn.datasets")
    data = sklearn.load_digits()
    images = (data.images / 16.0).astype(np.float32).reshape(-1, 1, 8, 8)
    labels = data.target.astype(np.int64)
    order = np.random.default_rng(1).permutation(len(labels))
    images, labels = images[order], labels[order]
    return images[:1400], labels[:1400], images[1400:], labels[1400:]


def train(model, images, labels, epochs=6):
    """Adam, batches of 64, a fixed order; returns the model in eval mode."""
    optimizer = corenn.optim.Adam(model.parameters(), lr=3e-3)
    model.train()
    rng = np.random.default_rng(2)
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


def accuracy(model, images, labels) -> float:
    with corenn.no_grad():
        return float((model(corenn.from_numpy(images)).numpy().argmax(1) == labels).mean())
