"""Port of Grad-CAM as jacobgil/pytorch-grad-cam's first ``grad-cam.py`` wrote it (after Selvaraju et al.):
class activation maps from a forward hook's activations and a backward hook's gradients.

Written once against ``lib`` and run with PyTorch and corenn from the same weights on generated
images (the original uses a pretrained VGG-19 and a photo). It keeps the program's pieces: hooks on
the target layer (``register_forward_hook`` saving the activations, ``register_full_backward_hook``
saving ``grad_output[0]``), a one-hot ``torch.zeros(...)`` with ``one_hot[0][index] = 1`` and
``torch.sum(one_hot * output)``, ``model.zero_grad()``, ``one_hot.backward(retain_graph=True)``,
channel weights ``grads.mean(dim=(2, 3), keepdim=True)``, ``F.relu`` of the weighted sum,
``F.interpolate(cam, size=..., mode='bilinear', align_corners=False)``, min-max normalization, and the
hooks' handles removed at the end (``handle.remove()``). The guided-backprop half (ReLU overrides) is
left out.
"""
from __future__ import annotations

import numpy as np
import pytest

import corenn
from _port import assert_same_run, same_weights

pytestmark = pytest.mark.torch


def build(lib):
    nn = lib.nn

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.features = nn.Sequential(
                nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(),
                nn.MaxPool2d(2),
                nn.Conv2d(8, 16, 3, padding=1), nn.ReLU(),
            )
            self.classifier = nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(16, 5))

        def forward(self, x):
            return self.classifier(self.features(x))

    return Net()


class GradCam:
    def __init__(self, lib, model, target_layer):
        self.lib = lib
        self.model = model.eval()
        self.activations = None
        self.gradients = None
        self.handles = [
            target_layer.register_forward_hook(self.save_activation),
            target_layer.register_full_backward_hook(self.save_gradient),
        ]

    def save_activation(self, module, input, output):
        self.activations = output

    def save_gradient(self, module, grad_input, grad_output):
        self.gradients = grad_output[0]

    def __call__(self, input, index=None):
        lib, F = self.lib, self.lib.nn.functional
        output = self.model(input)
        if index is None:
            index = int(output.argmax(dim=1)[0].item())
        one_hot = lib.zeros((1, output.size()[-1]), dtype=lib.float32)
        one_hot[0][index] = 1
        one_hot = lib.sum(one_hot * output)
        self.model.zero_grad()
        one_hot.backward(retain_graph=True)
        grads = self.gradients.detach()
        weights = grads.mean(dim=(2, 3), keepdim=True)
        cam = F.relu((weights * self.activations.detach()).sum(dim=1, keepdim=True))
        cam = F.interpolate(cam, size=tuple(input.shape[2:]), mode="bilinear", align_corners=False)
        cam = cam - cam.min()
        cam = cam / (cam.max() + 1e-8)
        return index, output.detach(), cam[0, 0]

    def remove(self):
        for handle in self.handles:
            handle.remove()


def run(lib, model, images):
    cam = GradCam(lib, model, target_layer=model.features[4])
    results = [cam(lib.from_numpy(image[None])) for image in images]
    results.append(cam(lib.from_numpy(images[0][None]), index=3))
    cam.remove()
    hooks_left = len(model.features[4]._forward_hooks) + len(model.features[4]._backward_hooks)
    return results, hooks_left


def test_grad_cam_is_the_same_in_both_frameworks(torch):
    images = np.random.default_rng(0).uniform(0, 1, (3, 3, 16, 16)).astype(np.float32)
    theirs, ours = same_weights(torch, build)
    their_results, their_hooks = run(torch, theirs, images)
    our_results, our_hooks = run(corenn, ours, images)
    assert our_hooks == their_hooks == 0
    for (our_index, our_output, our_cam), (their_index, their_output, their_cam) in zip(our_results, their_results):
        assert our_index == their_index
        assert_same_run([our_output, our_cam], [their_output, their_cam])
        assert tuple(our_cam.shape) == (16, 16) and float(our_cam.max()) == pytest.approx(1.0, abs=1e-3)  # max / (max + 1e-8)
