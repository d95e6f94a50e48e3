"""Port of pytorch/examples ``super_resolution`` (``model.py`` and ``main.py``): the efficient sub-pixel
convolutional network (ESPCN), upscaling with ``nn.PixelShuffle``.

Written once against ``lib`` and run under PyTorch and corenn from the same weights on generated
images (BSDS300 is not downloadable here; channels are 16/16/8 instead of 64/64/32). It keeps the
example's ``Net(upscale_factor)`` with ``nn.Conv2d(1, 64, (5, 5), (1, 1), (2, 2))``-shaped layers,
``nn.ReLU()``, ``_initialize_weights`` with ``init.orthogonal_(..., init.calculate_gain('relu'))``
(PyTorch's draws are then copied into corenn), ``nn.MSELoss``, ``optim.Adam(lr=0.01)``, the
``epoch_loss`` sum and the validation PSNR ``10 * log10(1 / mse.item())`` under ``torch.no_grad()``.
"""
from __future__ import annotations

from math import log10

import numpy as np
import pytest

import corenn
from _port import assert_same_run, assert_same_state, numpy_state, same_weights

pytestmark = pytest.mark.torch

UPSCALE = 2


def build(lib, upscale_factor=UPSCALE):
    nn, init = lib.nn, lib.nn.init

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.relu = nn.ReLU()
            self.conv1 = nn.Conv2d(1, 16, (5, 5), (1, 1), (2, 2))
            self.conv2 = nn.Conv2d(16, 16, (3, 3), (1, 1), (1, 1))
            self.conv3 = nn.Conv2d(16, 8, (3, 3), (1, 1), (1, 1))
            self.conv4 = nn.Conv2d(8, upscale_factor ** 2, (3, 3), (1, 1), (1, 1))
            self.pixel_shuffle = nn.PixelShuffle(upscale_factor)
            self._initialize_weights()

        def forward(self, x):
            x = self.relu(self.conv1(x))
            x = self.relu(self.conv2(x))
            x = self.relu(self.conv3(x))
            x = self.pixel_shuffle(self.conv4(x))
            return x

        def _initialize_weights(self):
            init.orthogonal_(self.conv1.weight, init.calculate_gain("relu"))
            init.orthogonal_(self.conv2.weight, init.calculate_gain("relu"))
            init.orthogonal_(self.conv3.weight, init.calculate_gain("relu"))
            init.orthogonal_(self.conv4.weight)

    return Net()


def run(lib, model, batches, validation):
    criterion = lib.nn.MSELoss()
    optimizer = lib.optim.Adam(model.parameters(), lr=0.01)
    losses = []
    epoch_loss = 0
    for low, high in batches:
        input, target = lib.from_numpy(low), lib.from_numpy(high)
        optimizer.zero_grad()
        loss = criterion(model(input), target)
        epoch_loss += loss.item()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    avg_psnr = 0
    with lib.no_grad():
        for low, high in validation:
            input, target = lib.from_numpy(low), lib.from_numpy(high)
            prediction = model(input)
            mse = criterion(prediction, target)
            psnr = 10 * log10(1 / mse.item())
            avg_psnr += psnr
    return losses, epoch_loss, avg_psnr / len(validation), prediction


def _pairs(rng, n):
    pairs = []
    for _ in range(n):
        high = rng.uniform(0, 1, (2, 1, 16, 16)).astype(np.float32)
        low = high.reshape(2, 1, 8, 2, 8, 2).mean(axis=(3, 5))  # a 2x2 box-filtered, downsampled copy
        pairs.append((low, high))
    return pairs


def test_super_resolution_trains_the_same_in_both_frameworks(torch):
    rng = np.random.default_rng(0)
    batches, validation = _pairs(rng, 5), _pairs(rng, 2)
    theirs, ours = same_weights(torch, build)
    start = numpy_state(theirs)
    their_losses, their_epoch_loss, their_psnr, their_prediction = run(torch, theirs, batches, validation)
    our_losses, our_epoch_loss, our_psnr, our_prediction = run(corenn, ours, batches, validation)
    assert_same_run(our_losses, their_losses)
    assert our_epoch_loss == pytest.approx(their_epoch_loss, rel=1e-4)
    assert our_psnr == pytest.approx(their_psnr, rel=1e-5)
    assert tuple(our_prediction.shape) == (2, 1, 16, 16)
    assert_same_run([our_prediction], [their_prediction])
    assert_same_state(ours, theirs, moved_from=start)


def test_super_resolution_initializes_orthogonally():
    model = build(corenn)
    flat = model.conv2.weight.detach().numpy().reshape(16, -1)
    gain = np.sqrt(2.0)  # calculate_gain('relu')
    np.testing.assert_allclose(flat @ flat.T, gain ** 2 * np.eye(16), atol=1e-4)
