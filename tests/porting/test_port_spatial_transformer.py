"""Port of the PyTorch tutorial "Spatial Transformer Networks Tutorial" (``intermediate/spatial_transformer_tutorial``):
a classifier that first warps its input with an affine transform predicted by a localization network.

Written once against ``lib`` and run under PyTorch and corenn from the same weights on generated
28x28 images (MNIST is a download). It keeps the tutorial's ``localization`` and ``fc_loc``
``nn.Sequential`` networks, the identity start (``self.fc_loc[2].weight.data.zero_()``,
``bias.data.copy_(torch.tensor([1, 0, 0, 0, 1, 0], dtype=torch.float))``), ``stn`` with
``theta.view(-1, 2, 3)``, ``F.affine_grid(theta, x.size())`` and ``F.grid_sample(x, grid)``, the
classifier with ``nn.Dropout2d`` and ``F.dropout(x, training=self.training)``, ``F.nll_loss`` and
``optim.SGD(lr=0.01)``. Dropout is 0 in training (different masks per framework), and the runs start
slightly off the identity transform (see the test).
"""
from __future__ import annotations

import numpy as np
import pytest

import corenn
from _port import assert_same_run, assert_same_state, numpy_state, same_weights

pytestmark = [
    pytest.mark.torch,
    # PyTorch's note that align_corners' default changed in 1.3: the tutorial leaves it at the default
    pytest.mark.filterwarnings("ignore:Default grid_sample and affine_grid behavior"),
]


def build(lib, dropout=0.0):
    nn, F = lib.nn, lib.nn.functional

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv1 = nn.Conv2d(1, 10, kernel_size=5)
            self.conv2 = nn.Conv2d(10, 20, kernel_size=5)
            self.conv2_drop = nn.Dropout2d(dropout)
            self.fc1 = nn.Linear(320, 50)
            self.fc2 = nn.Linear(50, 10)
            # Spatial transformer localization-network
            self.localization = nn.Sequential(
                nn.Conv2d(1, 8, kernel_size=7),
                nn.MaxPool2d(2, stride=2),
                nn.ReLU(True),
                nn.Conv2d(8, 10, kernel_size=5),
                nn.MaxPool2d(2, stride=2),
                nn.ReLU(True),
            )
            # Regressor for the 3 * 2 affine matrix
            self.fc_loc = nn.Sequential(
                nn.Linear(10 * 3 * 3, 32),
                nn.ReLU(True),
                nn.Linear(32, 3 * 2),
            )
            # Initialize the weights/bias with identity transformation
            self.fc_loc[2].weight.data.zero_()
            self.fc_loc[2].bias.data.copy_(lib.tensor([1, 0, 0, 0, 1, 0], dtype=lib.float))

        def stn(self, x):
            xs = self.localization(x)
            xs = xs.view(-1, 10 * 3 * 3)
            theta = self.fc_loc(xs)
            theta = theta.view(-1, 2, 3)
            grid = F.affine_grid(theta, x.size())
            x = F.grid_sample(x, grid)
            return x

        def forward(self, x):
            x = self.stn(x)
            x = F.relu(F.max_pool2d(self.conv1(x), 2))
            x = F.relu(F.max_pool2d(self.conv2_drop(self.conv2(x)), 2))
            x = x.view(-1, 320)
            x = F.relu(self.fc1(x))
            x = F.dropout(x, p=dropout, training=self.training)
            x = self.fc2(x)
            return F.log_softmax(x, dim=1)

    return Net()


def train(lib, model, batches):
    F = lib.nn.functional
    optimizer = lib.optim.SGD(model.parameters(), lr=0.01)
    model.train()
    losses = []
    for data, target in batches:
        data, target = lib.from_numpy(data), lib.from_numpy(target)
        optimizer.zero_grad()
        output = model(data)
        loss = F.nll_loss(output, target)
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    with lib.no_grad():
        model.eval()
        transformed = model.stn(lib.from_numpy(batches[0][0])).cpu()
    return losses, transformed


def test_spatial_transformer_trains_the_same_in_both_frameworks(torch):
    rng = np.random.default_rng(0)
    batches = [(rng.uniform(0, 1, (4, 1, 28, 28)).astype(np.float32), rng.integers(0, 10, 4).astype(np.int64))
               for _ in range(4)]
    theirs, ours = same_weights(torch, build)
    # The tutorial starts from the identity transform, where every sample point lands on a pixel centre,
    # the kink of bilinear interpolation: which side the gradient takes there is decided by the last bit of
    # the base grid (PyTorch's vectorized linspace rounds differently per CPU). A start slightly off the
    # identity keeps the points off the kinks, so the two runs can be compared closely.
    off_identity = np.array([1.02, 0.03, 0.011, -0.02, 0.97, -0.013], np.float32)
    for lib, model in ((torch, theirs), (corenn, ours)):
        model.fc_loc[2].bias.data.copy_(lib.from_numpy(off_identity))
    start = numpy_state(theirs)
    assert start["fc_loc.2.weight"].max() == start["fc_loc.2.weight"].min() == 0  # the tutorial's identity start
    their_losses, their_transformed = train(torch, theirs, batches)
    our_losses, our_transformed = train(corenn, ours, batches)
    assert_same_run(our_losses, their_losses)
    assert_same_run([our_transformed], [their_transformed])
    assert_same_state(ours, theirs, moved_from=start)
    assert not np.array_equal(numpy_state(ours)["fc_loc.2.weight"], start["fc_loc.2.weight"])
