"""Tests of corenn-profiler: they need the plugin installed (pip install -e plugins/profiler)."""
import pytest

import corenn
import corenn.nn as nn

corenn_profiler = pytest.importorskip("corenn_profiler", reason="corenn-profiler is not installed")


class Block(nn.Module):
    """conv -> relu -> pool: three ops, one of them (relu) functional inside the module."""

    def __init__(self, channels_in, channels_out):
        super().__init__()
        self.conv = nn.Conv2d(channels_in, channels_out, 3, padding=1)
        self.pool = nn.MaxPool2d(2)

    def forward(self, x):
        return self.pool(corenn.relu(self.conv(x)))


class Net(nn.Module):
    """A model of known structure: two conv blocks, flatten, a two-layer head; the second head layer runs twice."""

    def __init__(self):
        super().__init__()
        self.features = nn.Sequential(Block(1, 4), Block(4, 8))
        self.head = nn.Sequential(nn.Linear(8 * 2 * 2, 16), nn.ReLU())
        self.out = nn.Linear(16, 16)

    def forward(self, x):
        x = self.features(x).flatten(1)
        return self.out(self.out(self.head(x)))


@pytest.fixture
def net():
    corenn.manual_seed(0)
    return Net()


@pytest.fixture
def batch():
    corenn.manual_seed(1)
    return corenn.randn(3, 1, 8, 8)
