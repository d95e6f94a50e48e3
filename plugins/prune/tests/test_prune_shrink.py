"""shrink(): dead channels leave producers, BatchNorms and consumers; outputs equal the masked model's."""
from __future__ import annotations

import numpy as np
import pytest

import corenn
import corenn_prune
from corenn import nn


def digits_cnn():
    return nn.Sequential(nn.Conv2d(1, 16, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                         nn.Conv2d(16, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                         nn.Flatten(), nn.Linear(32 * 2 * 2, 10))


class Block(nn.Module):
    def __init__(self, channels):
        super().__init__()
        self.conv1 = nn.Conv2d(channels, channels, 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(channels)
        self.conv2 = nn.Conv2d(channels, channels, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(channels)

    def forward(self, x):
        out = self.bn1(self.conv1(x)).relu()
        return (self.bn2(self.conv2(out)) + x).relu()


class SmallResNet(nn.Module):
    """A stem, two residual blocks (adds), a concatenation of two branches, a linear head."""

    def __init__(self):
        super().__init__()
        self.stem = nn.Conv2d(3, 8, 3, padding=1)
        self.stem_bn = nn.BatchNorm2d(8)
        self.block1 = Block(8)
        self.block2 = Block(8)
        self.left = nn.Conv2d(8, 6, 1)
        self.right = nn.Conv2d(8, 6, 3, padding=1)
        self.head = nn.Linear(12, 5)

    def forward(self, x):
        x = self.stem_bn(self.stem(x)).relu()
        x = self.block2(self.block1(x))
        x = corenn.cat([self.left(x).relu(), self.right(x).relu()], 1)
        return self.head(x.mean((2, 3)))


def randomize_batch_norms(model):
    corenn.manual_seed(3)
    with corenn.no_grad():
        for module in model.modules():
            if isinstance(module, nn.BatchNorm2d):
                module.running_mean.copy_(corenn.randn(module.num_features) * 0.1)
                module.running_var.copy_(corenn.rand(module.num_features) + 0.5)
                module.weight.copy_(corenn.rand(module.num_features) + 0.5)
                module.bias.copy_(corenn.randn(module.num_features) * 0.1)
    return model.eval()


def assert_same_outputs(masked, small, x):
    with corenn.no_grad():
        np.testing.assert_allclose(small(x).numpy(), masked(x).numpy(), atol=1e-5, rtol=0)


def test_digits_cnn_half_the_channels_half_the_parameters():
    corenn.manual_seed(0)
    net, x = digits_cnn(), corenn.randn(8, 1, 8, 8)
    for i in (0, 3):
        corenn_prune.ln_structured(net[i], "weight", amount=0.5, n=2, dim=0)
    corenn_prune.complete_channel_pruning(net, x)
    assert corenn_prune.is_pruned(net) and sorted(net[0].state_dict()) == ["bias_mask", "bias_orig", "weight_mask",
                                                                           "weight_orig"]
    small = corenn_prune.shrink(net, x)
    assert (small[0].out_channels, small[3].in_channels, small[3].out_channels, small[7].in_features) == (8, 8, 16, 64)
    assert tuple(small[3].weight.shape) == (16, 8, 3, 3) and not corenn_prune.is_pruned(small)
    assert_same_outputs(net, small, x)
    dense_params = sum(p.numel() for p in digits_cnn().parameters())
    assert sum(p.numel() for p in small.parameters()) <= dense_params / 2
    assert type(small) is nn.Sequential and corenn_prune.is_pruned(net)   # the original is untouched


def test_mlp_neurons_removed_from_both_sides():
    corenn.manual_seed(1)
    net, x = nn.Sequential(nn.Linear(10, 32), nn.ReLU(), nn.Dropout(0.1), nn.Linear(32, 16), nn.GELU(),
                           nn.Linear(16, 3)).eval(), corenn.randn(5, 10)
    corenn_prune.ln_structured(net[0], "weight", amount=24, n=1, dim=0)
    corenn_prune.ln_structured(net[3], "weight", amount=0.25, n=2, dim=0)
    corenn_prune.complete_channel_pruning(net, x)
    small = corenn_prune.shrink(net, x)
    assert [small[0].out_features, small[3].in_features, small[3].out_features, small[5].in_features] == [8, 8, 12, 12]
    assert small[5].out_features == 3   # the output layer keeps its outputs
    assert_same_outputs(net, small, x)


def test_resnet_with_residual_adds_and_a_concatenation():
    corenn.manual_seed(2)
    net, x = randomize_batch_norms(SmallResNet()), corenn.randn(2, 3, 6, 6)
    # Inside the blocks: conv1's channels are consumed only by conv2. On the residual stream
    # (stem, both conv2): channel 5 pruned in all three producers -> removable; channel 1 only in
    # block1.conv2 -> kept everywhere. In the concatenation: 2 channels of each branch.
    for block in (net.block1, net.block2):
        corenn_prune.ln_structured(block.conv1, "weight", amount=4, n=2, dim=0)
    stream = [1.0] * 8
    stream[5] = 0.0
    for conv in (net.stem, net.block1.conv2, net.block2.conv2):
        corenn_prune.custom_from_mask(conv, "weight", mask=corenn.tensor(stream)[:, None, None, None]
                                      * corenn.ones(conv.weight.shape))
    only_one = corenn.ones(net.block1.conv2.weight.shape)
    only_one[1] = 0
    corenn_prune.custom_from_mask(net.block1.conv2, "weight", mask=only_one)
    corenn_prune.ln_structured(net.left, "weight", amount=2, n=2, dim=0)
    corenn_prune.ln_structured(net.right, "weight", amount=2, n=2, dim=0)
    corenn_prune.complete_channel_pruning(net, x)
    small = corenn_prune.shrink(net, x)
    assert small.stem.out_channels == 7 and small.stem_bn.num_features == 7       # channel 5 gone, channel 1 kept
    assert small.block1.conv1.in_channels == 7 and small.block1.conv1.out_channels == 4
    assert small.block1.conv2.in_channels == 4 and small.block1.bn2.num_features == 7
    assert (small.left.out_channels, small.right.out_channels, small.head.in_features) == (4, 4, 8)
    assert_same_outputs(net, small, x)


def test_constant_channels_are_kept_and_untraceable_models_are_refused():
    corenn.manual_seed(4)
    net, x = digits_cnn(), corenn.randn(2, 1, 8, 8)
    corenn_prune.ln_structured(net[0], "weight", amount=0.5, n=2, dim=0)
    # Without complete_channel_pruning the pruned channels still carry their bias: not dead, kept.
    small = corenn_prune.shrink(net, x)
    assert small[0].out_channels == 16
    assert_same_outputs(net, small, x)

    class Branchy(nn.Module):
        def forward(self, x):
            return x if x.sum() > 0 else -x
    with pytest.raises(corenn_prune.ShrinkError, match="does not trace with corenn.fx"):
        corenn_prune.shrink(Branchy(), x)
