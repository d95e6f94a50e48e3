"""Port of pytorch/examples ``mnist_forward_forward/main.py``: Hinton's forward-forward algorithm, each
layer trained on its own with its own Adam to tell positive data (the right label written into the
image) from negative data (a wrong label).

Written once against ``lib`` and run under PyTorch and corenn from the same weights on generated
64-pixel "images" (MNIST is a download; 6 epochs per layer instead of 1000). It keeps the example's
``overlay_y_on_x`` (``x.clone()``, ``x_[:, :10] *= 0.0``, ``x_[range(x.shape[0]), y] = x.max()``), the
``Layer(nn.Linear)`` subclass holding its own ``Adam(self.parameters(), lr=0.03)`` and overriding
``train(x_pos, x_neg)`` (the module method's name, as the example does), its ``forward`` with
``x.norm(2, 1, keepdim=True)``, ``torch.mm(x_direction, self.weight.T)`` and ``self.bias.unsqueeze(0)``,
the loss ``torch.log(1 + torch.exp(torch.cat([-g_pos + threshold, g_neg - threshold]))).mean()``, the
``Net`` keeping its layers in a plain list and predicting by ``goodness_per_label`` with
``sum(goodness).unsqueeze(1)``, ``torch.cat(..., 1)`` and ``argmax(1)``, and the error
``1.0 - net.predict(x).eq(y).float().mean().item()``. The negative labels are shuffled by numpy.
"""
from __future__ import annotations

import numpy as np
import pytest

import corenn
from _port import assert_same_run, load_numpy_state, numpy_state

pytestmark = pytest.mark.torch

DIMS = [64, 32, 32]


def overlay_y_on_x(x, y):
    """Replace the first 10 pixels of data [x] with one-hot-encoded label [y]."""
    x_ = x.clone()
    x_[:, :10] *= 0.0
    x_[range(x.shape[0]), y] = x.max()
    return x_


def build(lib, num_epochs=6):
    nn = lib.nn

    class Layer(nn.Linear):
        def __init__(self, in_features, out_features, bias=True, device=None, dtype=None):
            super().__init__(in_features, out_features, bias, device, dtype)
            self.relu = lib.nn.ReLU()
            self.opt = lib.optim.Adam(self.parameters(), lr=0.03)
            self.threshold = 2.0
            self.num_epochs = num_epochs
            self.losses = []

        def forward(self, x):
            x_direction = x / (x.norm(2, 1, keepdim=True) + 1e-4)
            return self.relu(lib.mm(x_direction, self.weight.T) + self.bias.unsqueeze(0))

        def train(self, x_pos, x_neg):
            for i in range(self.num_epochs):
                g_pos = self.forward(x_pos).pow(2).mean(1)
                g_neg = self.forward(x_neg).pow(2).mean(1)
                # push positive goodness above the threshold and negative goodness below it
                loss = lib.log(1 + lib.exp(lib.cat([-g_pos + self.threshold, g_neg - self.threshold]))).mean()
                self.opt.zero_grad()
                loss.backward()
                self.opt.step()
                self.losses.append(loss.item())
            return self.forward(x_pos).detach(), self.forward(x_neg).detach()

    class Net(nn.Module):
        def __init__(self, dims):
            super().__init__()
            self.layers = []
            for d in range(len(dims) - 1):
                self.layers = self.layers + [Layer(dims[d], dims[d + 1])]

        def predict(self, x):
            goodness_per_label = []
            for label in range(10):
                h = overlay_y_on_x(x, label)
                goodness = []
                for layer in self.layers:
                    h = layer(h)
                    goodness = goodness + [h.pow(2).mean(1)]
                goodness_per_label += [sum(goodness).unsqueeze(1)]
            goodness_per_label = lib.cat(goodness_per_label, 1)
            return goodness_per_label.argmax(1)

        def train(self, x_pos, x_neg):
            h_pos, h_neg = x_pos, x_neg
            for i, layer in enumerate(self.layers):
                h_pos, h_neg = layer.train(h_pos, h_neg)

    return Net(DIMS)


def run(lib, net, x, y, shuffle, x_te, y_te):
    x, y = lib.from_numpy(x), lib.from_numpy(y)
    x_pos = overlay_y_on_x(x, y)
    x_neg = overlay_y_on_x(x, y[lib.from_numpy(shuffle)])
    net.train(x_pos, x_neg)
    train_error = 1.0 - net.predict(x).eq(y).float().mean().item()
    test_error = 1.0 - net.predict(lib.from_numpy(x_te)).eq(lib.from_numpy(y_te)).float().mean().item()
    return [loss for layer in net.layers for loss in layer.losses], train_error, test_error


def test_forward_forward_trains_the_same_in_both_frameworks(torch):
    rng = np.random.default_rng(0)
    x, x_te = (rng.uniform(0, 1, (n, DIMS[0])).astype(np.float32) for n in (32, 16))
    y, y_te = (rng.integers(0, 10, n).astype(np.int64) for n in (32, 16))
    shuffle = rng.permutation(32)
    torch.manual_seed(0)
    theirs, ours = build(torch), build(corenn)
    starts = [numpy_state(layer) for layer in theirs.layers]
    for layer, state in zip(ours.layers, starts):
        load_numpy_state(corenn, layer, state)  # in place: each layer's own Adam keeps its parameters
    assert numpy_state(theirs) == {} == numpy_state(ours)  # layers in a plain list are not submodules
    their_losses, their_train_error, their_test_error = run(torch, theirs, x, y, shuffle, x_te, y_te)
    our_losses, our_train_error, our_test_error = run(corenn, ours, x, y, shuffle, x_te, y_te)
    assert len(our_losses) == 12
    assert_same_run(our_losses, their_losses)
    assert (our_train_error, our_test_error) == pytest.approx((their_train_error, their_test_error))
    for ours_layer, theirs_layer, start in zip(ours.layers, theirs.layers, starts):
        for name, value in numpy_state(theirs_layer).items():
            np.testing.assert_allclose(numpy_state(ours_layer)[name], value, rtol=1e-4, atol=1e-5, err_msg=name)
            assert not np.array_equal(value, start[name])
