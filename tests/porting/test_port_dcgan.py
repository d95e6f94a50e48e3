"""Port of pytorch/examples ``dcgan/main.py``: a deep convolutional GAN, generator and discriminator
trained against each other with two Adam optimizers and ``BCELoss``.

Written once against ``lib`` and run under PyTorch and corenn from the same weights. It keeps the
example's ``weights_init`` applied with ``model.apply`` (``classname.find('Conv')``,
``torch.nn.init.normal_``/``zeros_``), the generator of ``ConvTranspose2d(..., bias=False)`` +
``BatchNorm2d`` + ``ReLU(True)`` ending in ``Tanh``, the discriminator of ``Conv2d`` +
``LeakyReLU(0.2, inplace=True)`` ending in ``Sigmoid`` with ``.view(-1, 1).squeeze(1)``,
``torch.full((batch_size,), real_label, dtype=real_cpu.dtype)`` and ``label.fill_``,
``fake.detach()`` for the discriminator step, ``D_x = output.mean().item()``, and
``optim.Adam(lr=0.0002, betas=(0.5, 0.999))``. The images are 16x16 instead of 64x64 (one
up-sampling stage fewer each side); the latent noise comes from numpy instead of ``torch.randn``.
"""
from __future__ import annotations

import numpy as np
import pytest

import corenn
from _port import assert_same_run, assert_same_state, numpy_state, same_weights

pytestmark = pytest.mark.torch

NZ, NGF, NDF, NC = 8, 8, 8, 3


def weights_init(lib):
    def init(m):
        classname = m.__class__.__name__
        if classname.find("Conv") != -1:
            lib.nn.init.normal_(m.weight, 0.0, 0.02)
        elif classname.find("BatchNorm") != -1:
            lib.nn.init.normal_(m.weight, 1.0, 0.02)
            lib.nn.init.zeros_(m.bias)
    return init


def build(lib):
    nn = lib.nn

    class Generator(nn.Module):
        def __init__(self):
            super().__init__()
            self.main = nn.Sequential(
                nn.ConvTranspose2d(NZ, NGF * 2, 4, 1, 0, bias=False),   # (NGF*2) x 4 x 4
                nn.BatchNorm2d(NGF * 2),
                nn.ReLU(True),
                nn.ConvTranspose2d(NGF * 2, NGF, 4, 2, 1, bias=False),  # NGF x 8 x 8
                nn.BatchNorm2d(NGF),
                nn.ReLU(True),
                nn.ConvTranspose2d(NGF, NC, 4, 2, 1, bias=False),       # NC x 16 x 16
                nn.Tanh(),
            )

        def forward(self, input):
            return self.main(input)

    class Discriminator(nn.Module):
        def __init__(self):
            super().__init__()
            self.main = nn.Sequential(
                nn.Conv2d(NC, NDF, 4, 2, 1, bias=False),                # NDF x 8 x 8
                nn.LeakyReLU(0.2, inplace=True),
                nn.Conv2d(NDF, NDF * 2, 4, 2, 1, bias=False),           # (NDF*2) x 4 x 4
                nn.BatchNorm2d(NDF * 2),
                nn.LeakyReLU(0.2, inplace=True),
                nn.Conv2d(NDF * 2, 1, 4, 1, 0, bias=False),
                nn.Sigmoid(),
            )

        def forward(self, input):
            output = self.main(input)
            return output.view(-1, 1).squeeze(1)

    class GAN(nn.Module):
        """Both networks in one module, so that one state dict carries both."""

        def __init__(self):
            super().__init__()
            self.netG = Generator()
            self.netG.apply(weights_init(lib))
            self.netD = Discriminator()
            self.netD.apply(weights_init(lib))

    return GAN()


def train(lib, gan, real_batches, noises):
    netG, netD = gan.netG, gan.netD
    criterion = lib.nn.BCELoss()
    real_label, fake_label = 1, 0
    optimizerD = lib.optim.Adam(netD.parameters(), lr=0.0002, betas=(0.5, 0.999))
    optimizerG = lib.optim.Adam(netG.parameters(), lr=0.0002, betas=(0.5, 0.999))
    history = []
    for real, noise in zip(real_batches, noises):
        # (1) Update D network: maximize log(D(x)) + log(1 - D(G(z)))
        netD.zero_grad()
        real_cpu = lib.from_numpy(real)
        batch_size = real_cpu.size(0)
        label = lib.full((batch_size,), real_label, dtype=real_cpu.dtype)
        output = netD(real_cpu)
        errD_real = criterion(output, label)
        errD_real.backward()
        D_x = output.mean().item()

        noise = lib.from_numpy(noise)
        fake = netG(noise)
        label.fill_(fake_label)
        output = netD(fake.detach())
        errD_fake = criterion(output, label)
        errD_fake.backward()
        D_G_z1 = output.mean().item()
        errD = errD_real + errD_fake
        optimizerD.step()

        # (2) Update G network: maximize log(D(G(z)))
        netG.zero_grad()
        label.fill_(real_label)  # fake labels are real for generator cost
        output = netD(fake)
        errG = criterion(output, label)
        errG.backward()
        D_G_z2 = output.mean().item()
        optimizerG.step()
        history.append([errD.item(), errG.item(), D_x, D_G_z1, D_G_z2])
    return history


def test_dcgan_trains_the_same_in_both_frameworks(torch):
    rng = np.random.default_rng(0)
    real_batches = [np.tanh(rng.standard_normal((4, NC, 16, 16))).astype(np.float32) for _ in range(4)]
    noises = [rng.standard_normal((4, NZ, 1, 1)).astype(np.float32) for _ in range(4)]
    theirs, ours = same_weights(torch, build)
    start = numpy_state(theirs)
    their_history = train(torch, theirs, real_batches, noises)
    our_history = train(corenn, ours, real_batches, noises)
    assert_same_run(our_history, their_history)
    # running statistics and num_batches_tracked of every BatchNorm2d included
    assert_same_state(ours, theirs, moved_from=start)
    assert int(ours.netD.main[3].num_batches_tracked) == 4 * 3
