"""Padding layers, Fold/Unfold, EmbeddingBag, CosineSimilarity/PairwiseDistance/pdist, ChannelShuffle,
LPPool1d/2d and AlphaDropout against PyTorch 2.13 (float64 values and gradients), gradcheck, errors."""
from __future__ import annotations

import numpy as np
import pytest

import corenn
import corenn.nn.functional as F
from corenn import nn
from corenn.autograd import gradcheck

from _breadth_oracle import compare_with_torch

torch = pytest.importorskip("torch")
TF = torch.nn.functional
pytestmark = pytest.mark.torch
RNG = np.random.default_rng(5)

PADS = [(kind, dims, padding) for kind in ("Zero", "Constant", "Reflection", "Replication", "Circular")
        for dims, padding in ((1, 2), (1, (1, 2)), (2, 1), (2, (1, 0, 2, 1)), (3, 1), (3, (1, 0, 0, 1, 1, 1)))]


@pytest.mark.parametrize("kind,dims,padding", PADS, ids=[f"{k}Pad{d}d-{p}" for k, d, p in PADS])
@pytest.mark.parametrize("batched", [True, False])
def test_padding_layers_match_torch(kind, dims, padding, batched):
    name = f"{kind}Pad{dims}d"
    args = (padding, 1.5) if kind == "Constant" else (padding,)
    ours, theirs = getattr(nn, name)(*args), getattr(torch.nn, name)(*args)
    assert repr(ours) == repr(theirs)
    shape = ((2,) if batched else ()) + (3,) + (4, 3, 3)[:dims]
    compare_with_torch(ours, theirs, [RNG.standard_normal(shape)], torch)


def test_padding_layer_errors():
    with pytest.raises(ValueError, match="ReflectionPad2d: expected 3D or 4D input"):
        nn.ReflectionPad2d(1)(corenn.zeros(3, 3))
    with pytest.raises(ValueError, match="CircularPad1d: padding must be an int or a tuple of 2 ints"):
        nn.CircularPad1d((1, 2, 3))
    with pytest.raises(RuntimeError, match="Padding size should be less than the corresponding input dimension"):
        nn.ReflectionPad1d(3)(corenn.zeros(1, 3))


FOLDS = [dict(kernel_size=2), dict(kernel_size=(2, 3), dilation=(1, 2), padding=1, stride=(2, 1)),
         dict(kernel_size=3, padding=(0, 1), stride=2)]


@pytest.mark.parametrize("options", FOLDS)
@pytest.mark.parametrize("batched", [True, False])
def test_fold_and_unfold_match_torch(options, batched):
    image = RNG.standard_normal(((2,) if batched else ()) + (3, 5, 6))
    columns = compare_with_torch(nn.Unfold(**options), torch.nn.Unfold(**options), [image], torch)
    assert repr(nn.Unfold(**options)) == repr(torch.nn.Unfold(**options))
    compare_with_torch(nn.Fold((5, 6), **options), torch.nn.Fold((5, 6), **options),
                       [RNG.standard_normal(tuple(columns.shape))], torch)
    assert repr(nn.Fold((5, 6), **options)) == repr(torch.nn.Fold((5, 6), **options))


def test_fold_errors():
    with pytest.raises(RuntimeError, match="fold: Expected size of input's dimension 1 to be divisible"):
        F.fold(corenn.zeros(1, 5, 9), (4, 4), 2)
    with pytest.raises(RuntimeError, match="match the calculated number of sliding blocks"):
        F.fold(corenn.zeros(1, 4, 8), (4, 4), 2)
    with pytest.raises(NotImplementedError, match="Only 3D or 4D input Tensors are supported"):
        F.unfold(corenn.zeros(4, 4), 2)
    with pytest.raises(RuntimeError, match="unfold: .*components must be at least one"):
        F.unfold(corenn.zeros(1, 1, 2, 2), 3)


@pytest.mark.parametrize("mode", ["sum", "mean", "max"])
@pytest.mark.parametrize("layout", ["2d", "offsets", "last_offset", "padding_idx"])
def test_embedding_bag_matches_torch(mode, layout):
    weight = RNG.standard_normal((10, 3))
    options = dict(mode=mode)
    if layout == "2d":
        inputs = [np.array([[1, 2, 4, 5], [4, 3, 2, 9]])]
    else:
        indices = np.array([1, 2, 4, 5, 4, 3, 2, 9, 0, 0])
        offsets = np.array([0, 4, 4, 8, 10]) if layout == "last_offset" else np.array([0, 4, 4, 8])
        inputs = [indices, offsets]
        options["include_last_offset"] = layout == "last_offset"
        if layout == "padding_idx":
            options["padding_idx"] = 0
    ours, theirs = nn.EmbeddingBag(10, 3, **options).double(), torch.nn.EmbeddingBag(10, 3, **options).double()
    assert repr(ours) == repr(theirs)
    with torch.no_grad():
        theirs.weight.copy_(torch.tensor(weight))
    ours.weight.data = corenn.tensor(weight.copy())
    compare_with_torch(ours, theirs, inputs, torch)
    np.testing.assert_allclose(ours.weight.grad.numpy(), theirs.weight.grad.numpy(), rtol=1e-12, atol=1e-14)


def test_embedding_bag_per_sample_weights_and_max_norm():
    weight = RNG.standard_normal((6, 4)) * 3
    indices, offsets, samples = np.array([0, 2, 5, 2, 1]), np.array([0, 2]), RNG.standard_normal(5)
    compare_with_torch(
        lambda w, s: F.embedding_bag(corenn.tensor(indices), w, corenn.tensor(offsets), mode="sum",
                                     per_sample_weights=s),
        lambda w, s: TF.embedding_bag(torch.tensor(indices), w, torch.tensor(offsets), mode="sum",
                                      per_sample_weights=s), [weight, samples], torch)
    ours_weight, theirs_weight = corenn.tensor(weight.copy()), torch.tensor(weight.copy())
    out = F.embedding_bag(corenn.tensor(indices), ours_weight, corenn.tensor(offsets), max_norm=1.0)
    reference = TF.embedding_bag(torch.tensor(indices), theirs_weight, torch.tensor(offsets), max_norm=1.0)
    np.testing.assert_allclose(out.numpy(), reference.numpy(), rtol=1e-6)
    np.testing.assert_allclose(ours_weight.numpy(), theirs_weight.numpy(), rtol=1e-6)   # rows renormed in place
    pretrained = nn.EmbeddingBag.from_pretrained(corenn.tensor(weight), mode="max")
    assert not pretrained.weight.requires_grad
    assert repr(pretrained) == repr(torch.nn.EmbeddingBag.from_pretrained(torch.tensor(weight), mode="max"))


def test_embedding_bag_errors():
    weight = corenn.randn(5, 2)
    with pytest.raises(ValueError, match="offsets has to be a 1D Tensor but got None"):
        F.embedding_bag(corenn.tensor([0, 1]), weight)
    with pytest.raises(ValueError, match="if input is 2D, then offsets has to be None"):
        F.embedding_bag(corenn.tensor([[0, 1]]), weight, corenn.tensor([0]))
    with pytest.raises(NotImplementedError, match="per_sample_weights is only supported for mode='sum'"):
        F.embedding_bag(corenn.tensor([[0, 1]]), weight, per_sample_weights=corenn.ones(1, 2))
    with pytest.raises(ValueError, match="mode has to be one of sum, mean or max"):
        F.embedding_bag(corenn.tensor([[0, 1]]), weight, mode="min")
    with pytest.raises(RuntimeError, match="offsets\\[0\\] has to be 0"):
        F.embedding_bag(corenn.tensor([0, 1]), weight, corenn.tensor([1]))


@pytest.mark.parametrize("shapes,dim", [(((4, 3), (4, 3)), 1), (((2, 3, 4), (1, 3, 4)), 2), (((5,), (5,)), 0)])
def test_cosine_similarity_matches_torch(shapes, dim):
    arrays = [RNG.standard_normal(shape) for shape in shapes]
    compare_with_torch(nn.CosineSimilarity(dim), torch.nn.CosineSimilarity(dim), arrays, torch)
    # a zero vector: the norm is clamped at eps without masking the gradient, as PyTorch
    arrays[0][tuple(slice(None) if axis == dim else 0 for axis in range(arrays[0].ndim))] = 0.0
    compare_with_torch(lambda a, b: F.cosine_similarity(a, b, dim, eps=1e-3),
                       lambda a, b: TF.cosine_similarity(a, b, dim, eps=1e-3), arrays, torch)


@pytest.mark.parametrize("p,keepdim", [(2.0, False), (1.0, True), (3.0, False), (float("inf"), False)])
def test_pairwise_distance_and_pdist_match_torch(p, keepdim):
    a, b = RNG.standard_normal((4, 3)), RNG.standard_normal((4, 3))
    compare_with_torch(nn.PairwiseDistance(p, keepdim=keepdim), torch.nn.PairwiseDistance(p, keepdim=keepdim),
                       [a, b], torch)
    compare_with_torch(lambda x: F.pdist(x, p), lambda x: TF.pdist(x, p), [RNG.standard_normal((5, 3))], torch)
    assert repr(nn.PairwiseDistance(p)) == repr(torch.nn.PairwiseDistance(p))


def test_channel_shuffle_and_lp_pool_match_torch():
    compare_with_torch(nn.ChannelShuffle(3), torch.nn.ChannelShuffle(3), [RNG.standard_normal((2, 6, 2, 3))], torch)
    assert repr(nn.ChannelShuffle(3)) == repr(torch.nn.ChannelShuffle(3))
    with pytest.raises(RuntimeError, match="channel_shuffle: Number of channels must be divisible by groups"):
        F.channel_shuffle(corenn.zeros(1, 5, 2), 2)
    for ours, theirs, shape in [(nn.LPPool1d(2, 3, 2), torch.nn.LPPool1d(2, 3, 2), (2, 3, 9)),
                                (nn.LPPool2d(3, 2), torch.nn.LPPool2d(3, 2), (2, 3, 4, 6)),
                                (nn.LPPool2d(1.5, (2, 3), ceil_mode=True), torch.nn.LPPool2d(1.5, (2, 3), ceil_mode=True),
                                 (1, 2, 5, 7))]:
        assert repr(ours) == repr(theirs)
        compare_with_torch(ours, theirs, [np.abs(RNG.standard_normal(shape)) + 0.1], torch)


def test_alpha_dropout_keeps_selu_statistics():
    corenn.manual_seed(0)
    x = corenn.randn(200000, dtype=corenn.float64)
    out = F.alpha_dropout(x, 0.3, training=True)
    assert abs(float(out.mean())) < 0.01 and abs(float(out.std()) - 1.0) < 0.01
    assert F.alpha_dropout(x, 0.3, training=False) is x
    feature = F.feature_alpha_dropout(corenn.ones(50, 40, 3), 0.5, training=True).numpy()
    assert np.all(feature.max(-1) == feature.min(-1))          # whole channels share the draw
    assert repr(nn.AlphaDropout(0.2)) == repr(torch.nn.AlphaDropout(0.2))
    assert repr(nn.FeatureAlphaDropout(0.2)) == repr(torch.nn.FeatureAlphaDropout(0.2))


def test_gradcheck_float64():
    def t(*shape):
        return corenn.tensor(RNG.standard_normal(shape), requires_grad=True)

    assert gradcheck(lambda x: F.unfold(x, (2, 3), dilation=(2, 1), padding=1, stride=(1, 2)), (t(1, 2, 5, 5),))
    assert gradcheck(lambda x: F.fold(x, (4, 5), 2, stride=(2, 1)), (t(2, 8, 8),))
    assert gradcheck(lambda w, s: F.embedding_bag(corenn.tensor([0, 2, 2, 1]), w, corenn.tensor([0, 1]),
                                                  mode="sum", per_sample_weights=s), (t(3, 2), t(4)))
    assert gradcheck(lambda a, b: F.cosine_similarity(a, b), (t(3, 4), t(3, 4)))
    assert gradcheck(lambda a, b: F.pairwise_distance(a, b, 3.0), (t(3, 4), t(3, 4)))
    assert gradcheck(lambda x: F.pdist(x), (t(4, 3),))
    assert gradcheck(lambda x: nn.ReflectionPad2d((1, 2, 0, 1))(x) * nn.CircularPad2d((1, 2, 0, 1))(x),
                     (t(1, 2, 3, 3),))
