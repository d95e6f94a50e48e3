"""Port of pytorch/examples ``vae/main.py``: a variational autoencoder (Kingma and Welling) on flattened images.

Written once against ``lib`` and run under PyTorch and corenn from the same weights on generated
images in [0, 1] (MNIST is not downloadable here; the widths are parameters so that it runs small).
It keeps the example's ``fc1``/``fc21``/``fc22``/``fc3``/``fc4`` network, ``reparameterize`` with
``torch.exp(0.5*logvar)`` and ``randn_like``, ``torch.sigmoid`` output, the loss
``F.binary_cross_entropy(recon_x, x.view(-1, 784), reduction='sum')`` plus the KL term
``-0.5 * torch.sum(1 + logvar - mu.pow(2) - logvar.exp())``, ``optim.Adam(lr=1e-3)``,
``train_loss += loss.item()`` and ``len(data)`` normalization, and the test-time ``torch.cat`` of
inputs and reconstructions. The noise of ``randn_like`` comes from numpy, the same in both frameworks
(the two frameworks' generators draw different numbers): ``reparameterize`` takes it as an argument.
"""
from __future__ import annotations

import numpy as np
import pytest

import corenn
from _port import assert_same_run, assert_same_state, numpy_state, same_weights

pytestmark = pytest.mark.torch

PIXELS, HIDDEN, LATENT = 64, 32, 4


def build(lib):
    nn, F = lib.nn, lib.nn.functional

    class VAE(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc1 = nn.Linear(PIXELS, HIDDEN)
            self.fc21 = nn.Linear(HIDDEN, LATENT)
            self.fc22 = nn.Linear(HIDDEN, LATENT)
            self.fc3 = nn.Linear(LATENT, HIDDEN)
            self.fc4 = nn.Linear(HIDDEN, PIXELS)

        def encode(self, x):
            h1 = F.relu(self.fc1(x))
            return self.fc21(h1), self.fc22(h1)

        def reparameterize(self, mu, logvar, noise=lib.randn_like):
            std = lib.exp(0.5 * logvar)
            eps = noise(std)
            return mu + eps * std

        def decode(self, z):
            h3 = F.relu(self.fc3(z))
            return lib.sigmoid(self.fc4(h3))

        def forward(self, x, noise=lib.randn_like):
            mu, logvar = self.encode(x.view(-1, PIXELS))
            z = self.reparameterize(mu, logvar, noise)
            return self.decode(z), mu, logvar

    return VAE()


def loss_function(lib, recon_x, x, mu, logvar):
    F = lib.nn.functional
    BCE = F.binary_cross_entropy(recon_x, x.view(-1, PIXELS), reduction="sum")
    KLD = -0.5 * lib.sum(1 + logvar - mu.pow(2) - logvar.exp())
    return BCE + KLD


def train(lib, model, batches, noises):
    optimizer = lib.optim.Adam(model.parameters(), lr=1e-3)
    model.train()
    losses = []
    train_loss = 0
    for (data, noise) in zip(batches, noises):
        data = lib.from_numpy(data)
        optimizer.zero_grad()
        recon_batch, mu, logvar = model(data, noise=lambda std, noise=noise: lib.from_numpy(noise))
        loss = loss_function(lib, recon_batch, data, mu, logvar)
        loss.backward()
        train_loss += loss.item()
        optimizer.step()
        losses.append(loss.item() / len(data))
    model.eval()
    with lib.no_grad():
        data = lib.from_numpy(batches[0])
        recon_batch, _mu, _logvar = model(data, noise=lambda std: lib.from_numpy(noises[0]))
        comparison = lib.cat([data.view(len(data), 1, 8, 8), recon_batch.view(len(data), 1, 8, 8)])
    return losses, train_loss, comparison


def test_vae_trains_the_same_in_both_frameworks(torch):
    rng = np.random.default_rng(0)
    batches = [rng.uniform(0, 1, (8, 1, 8, 8)).astype(np.float32) for _ in range(6)]
    noises = [rng.standard_normal((8, LATENT)).astype(np.float32) for _ in range(6)]
    theirs, ours = same_weights(torch, build)
    start = numpy_state(theirs)
    their_losses, their_total, their_comparison = train(torch, theirs, batches, noises)
    our_losses, our_total, our_comparison = train(corenn, ours, batches, noises)
    assert_same_run(our_losses, their_losses)
    assert our_total == pytest.approx(their_total, rel=1e-5)
    assert_same_run([our_comparison], [their_comparison])
    assert tuple(our_comparison.shape) == (16, 1, 8, 8)
    assert_same_state(ours, theirs, moved_from=start)


def test_vae_draws_its_noise_with_randn_like_by_default():
    corenn.manual_seed(0)
    model = build(corenn)
    recon, mu, logvar = model(corenn.rand(3, PIXELS))
    assert tuple(recon.shape) == (3, PIXELS) and tuple(mu.shape) == (3, LATENT)
    assert float(recon.min()) > 0 and float(recon.max()) < 1
