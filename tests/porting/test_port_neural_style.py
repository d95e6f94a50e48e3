"""Port of the PyTorch tutorial "Neural Transfer Using PyTorch" (``advanced/neural_style_tutorial``):
optimize an image, not weights, with L-BFGS so that its features match one image's content and
another's style (Gram matrices).

Written once against ``lib`` and run under PyTorch and corenn from the same weights (VGG-19 and the
pictures are downloads: the feature extractor is a small ``nn.Sequential`` of ``Conv2d``/``ReLU``/
``MaxPool2d`` layers, the images are generated). It keeps the tutorial's ``ContentLoss`` and
``StyleLoss`` modules (targets ``.detach()``-ed, ``F.mse_loss``, passing their input through),
``gram_matrix`` (``input.size()``, ``view(a * b, c * d)``, ``torch.mm(features, features.t())``,
``G.div(...)``), the ``Normalization`` module with ``torch.tensor(mean).view(-1, 1, 1)``,
``get_style_model_and_losses`` walking ``cnn.children()`` with ``isinstance`` checks into
``model.add_module(name, layer)`` (``nn.ReLU(inplace=False)``), the trim ``model[:(i + 1)]``, and
``run_style_transfer``: ``input_img.requires_grad_(True)``, ``model.eval()``,
``model.requires_grad_(False)``, ``optim.LBFGS([input_img])`` with a closure that clamps
``input_img.clamp_(0, 1)`` under ``torch.no_grad()``, ``run = [0]`` counting the evaluations.
"""
from __future__ import annotations

import numpy as np
import pytest

import corenn
from _port import assert_same_run, same_weights

pytestmark = pytest.mark.torch

content_layers_default = ["conv_2"]
style_layers_default = ["conv_1", "conv_2", "conv_3"]


def build(lib):
    nn = lib.nn
    return nn.Sequential(
        nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(inplace=True),
        nn.Conv2d(8, 8, 3, padding=1), nn.ReLU(inplace=True),
        nn.MaxPool2d(2, 2),
        nn.Conv2d(8, 16, 3, padding=1), nn.ReLU(inplace=True),
        nn.Conv2d(16, 16, 3, padding=1), nn.ReLU(inplace=True),
    )


def gram_matrix(lib, input):
    a, b, c, d = input.size()  # a=batch size(=1), b=number of feature maps, (c,d)=dimensions of a map
    features = input.view(a * b, c * d)
    G = lib.mm(features, features.t())
    return G.div(a * b * c * d)


def style_transfer_modules(lib):
    nn, F = lib.nn, lib.nn.functional

    class ContentLoss(nn.Module):
        def __init__(self, target):
            super().__init__()
            self.target = target.detach()

        def forward(self, input):
            self.loss = F.mse_loss(input, self.target)
            return input

    class StyleLoss(nn.Module):
        def __init__(self, target_feature):
            super().__init__()
            self.target = gram_matrix(lib, target_feature).detach()

        def forward(self, input):
            G = gram_matrix(lib, input)
            self.loss = F.mse_loss(G, self.target)
            return input

    class Normalization(nn.Module):
        def __init__(self, mean, std):
            super().__init__()
            self.mean = lib.tensor(mean).view(-1, 1, 1)
            self.std = lib.tensor(std).view(-1, 1, 1)

        def forward(self, img):
            return (img - self.mean) / self.std

    return ContentLoss, StyleLoss, Normalization


def get_style_model_and_losses(lib, cnn, style_img, content_img, content_layers=content_layers_default,
                               style_layers=style_layers_default):
    nn = lib.nn
    ContentLoss, StyleLoss, Normalization = style_transfer_modules(lib)
    normalization = Normalization([0.485, 0.456, 0.406], [0.229, 0.224, 0.225])
    content_losses = []
    style_losses = []
    model = nn.Sequential(normalization)
    i = 0  # increment every time we see a conv
    for layer in cnn.children():
        if isinstance(layer, nn.Conv2d):
            i += 1
            name = f"conv_{i}"
        elif isinstance(layer, nn.ReLU):
            name = f"relu_{i}"
            layer = nn.ReLU(inplace=False)  # the in-place version doesn't play well with the losses inserted
        elif isinstance(layer, nn.MaxPool2d):
            name = f"pool_{i}"
        else:
            raise RuntimeError(f"Unrecognized layer: {layer.__class__.__name__}")
        model.add_module(name, layer)
        if name in content_layers:
            target = model(content_img).detach()
            content_loss = ContentLoss(target)
            model.add_module(f"content_loss_{i}", content_loss)
            content_losses.append(content_loss)
        if name in style_layers:
            target_feature = model(style_img).detach()
            style_loss = StyleLoss(target_feature)
            model.add_module(f"style_loss_{i}", style_loss)
            style_losses.append(style_loss)
    for i in range(len(model) - 1, -1, -1):  # trim off the layers after the last content and style losses
        if isinstance(model[i], ContentLoss) or isinstance(model[i], StyleLoss):
            break
    model = model[:(i + 1)]
    return model, style_losses, content_losses


def run_style_transfer(lib, cnn, content_img, style_img, input_img, num_steps=3, style_weight=1000,
                       content_weight=1):
    model, style_losses, content_losses = get_style_model_and_losses(lib, cnn, style_img, content_img)
    input_img.requires_grad_(True)
    model.eval()
    model.requires_grad_(False)
    optimizer = lib.optim.LBFGS([input_img], max_iter=4)
    run = [0]
    scores = []
    while run[0] <= num_steps:
        def closure():
            with lib.no_grad():
                input_img.clamp_(0, 1)
            optimizer.zero_grad()
            model(input_img)
            style_score = 0
            content_score = 0
            for sl in style_losses:
                style_score += sl.loss
            for cl in content_losses:
                content_score += cl.loss
            style_score *= style_weight
            content_score *= content_weight
            loss = style_score + content_score
            loss.backward()
            run[0] += 1
            scores.append([style_score.item(), content_score.item()])
            return style_score + content_score
        optimizer.step(closure)
    with lib.no_grad():
        input_img.clamp_(0, 1)
    return input_img, scores, [name for name, _ in model.named_children()]


def test_neural_style_transfer_is_the_same_in_both_frameworks(torch):
    rng = np.random.default_rng(0)
    content, style = (rng.uniform(0, 1, (1, 3, 16, 16)).astype(np.float32) for _ in range(2))
    theirs, ours = same_weights(torch, build)
    results = {}
    for lib, cnn in ((torch, theirs), (corenn, ours)):
        content_img, style_img = lib.from_numpy(content), lib.from_numpy(style)
        input_img = content_img.clone()
        results[lib.__name__] = run_style_transfer(lib, cnn, content_img, style_img, input_img)
    our_img, our_scores, our_layers = results["corenn"]
    their_img, their_scores, their_layers = results["torch"]
    assert our_layers == their_layers == ["0", "conv_1", "style_loss_1", "relu_1", "conv_2", "content_loss_2",
                                          "style_loss_2", "relu_2", "pool_2", "conv_3", "style_loss_3"]
    assert_same_run(our_scores, their_scores)
    assert_same_run([our_img], [their_img])
    assert not np.array_equal(our_img.detach().numpy(), content)
    assert float(our_img.min()) >= 0 and float(our_img.max()) <= 1
