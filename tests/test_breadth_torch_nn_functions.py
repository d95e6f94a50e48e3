"""The torch-level spellings of the layer functions (corenn.layer_norm, corenn.dropout, corenn.kl_div, ...) with
ATen's signatures, against PyTorch 2.13 (float64 values and gradients), gradcheck, errors."""
from __future__ import annotations

import numpy as np
import pytest

import corenn
from corenn.autograd import gradcheck

from _breadth_oracle import compare_with_torch

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.torch
RNG = np.random.default_rng(2213)


def normal(*shape):
    return RNG.standard_normal(shape)


def positive(*shape):
    return RNG.uniform(0.5, 2.0, shape)


def signs(*shape):
    return np.where(RNG.random(shape) < 0.5, -1.0, 1.0)


# (name, arrays, extra positional arguments after the arrays, frozen array indices)
CASES = [
    ("layer_norm", lambda: [normal(2, 3, 4)], lambda lib: [[3, 4]], ()),
    ("layer_norm", lambda: [normal(2, 3, 4), normal(4), normal(4)], "affine", ()),
    ("group_norm", lambda: [normal(2, 4, 3), normal(4), normal(4)], "affine", ()),
    ("rms_norm", lambda: [normal(2, 3, 4), normal(4)], "affine", ()),
    ("prelu", lambda: [normal(2, 3, 4), positive(3)], None, ()),
    ("hardshrink", lambda: [normal(3, 4)], lambda lib: [0.3], ()),
    ("threshold", lambda: [normal(3, 4)], lambda lib: [0.1, -2.0], ()),
    ("rrelu", lambda: [normal(3, 4)], lambda lib: [0.1, 0.3, False], ()),
    ("pixel_shuffle", lambda: [normal(2, 8, 2, 3)], lambda lib: [2], ()),
    ("pixel_unshuffle", lambda: [normal(2, 2, 4, 6)], lambda lib: [2], ()),
    ("channel_shuffle", lambda: [normal(2, 6, 3)], lambda lib: [3], ()),
    ("constant_pad_nd", lambda: [normal(2, 3, 4)], lambda lib: [[1, -1, 2, 0], 0.5], ()),
    ("bilinear", lambda: [normal(3, 2), normal(3, 4), normal(5, 2, 4), normal(5)], None, ()),
    ("cosine_similarity", lambda: [normal(3, 4), normal(3, 4)], lambda lib: [1, 1e-8], ()),
    ("pairwise_distance", lambda: [normal(3, 4), normal(3, 4)], lambda lib: [3.0, 1e-6, True], ()),
    ("rnn_tanh_cell", lambda: [normal(3, 2), normal(3, 4), normal(4, 2), normal(4, 4), normal(4), normal(4)],
     None, ()),
    ("rnn_relu_cell", lambda: [normal(1, 2), normal(1, 4), normal(4, 2), normal(4, 4)], None, ()),
    ("kl_div", lambda: [normal(3, 4), RNG.uniform(0.1, 1, (3, 4))], lambda lib: [0], (1,)),
    ("kl_div", lambda: [normal(3, 4), positive(3, 4)], lambda lib: [2], ()),
    ("margin_ranking_loss", lambda: [normal(5), normal(5), signs(5)], lambda lib: [0.2, 2], (2,)),
    ("hinge_embedding_loss", lambda: [normal(3, 4), signs(3, 4)], lambda lib: [0.5, 0], (1,)),
    ("triplet_margin_loss", lambda: [normal(3, 4), normal(3, 4), normal(3, 4)],
     lambda lib: [0.5, 3.0, 1e-6, True, 1], ()),
    ("poisson_nll_loss", lambda: [normal(3, 4), positive(3, 4)], lambda lib: [True, True, 1e-8, 2], (1,)),
    ("poisson_nll_loss", lambda: [positive(3, 4), positive(3, 4)], lambda lib: [False, False, 1e-8, 0], (1,)),
    ("cosine_embedding_loss", lambda: [normal(3, 4), normal(3, 4), signs(3)], lambda lib: [0.1, 1], (2,)),
    ("binary_cross_entropy_with_logits", lambda: [normal(3, 4), RNG.uniform(0, 1, (3, 4)), positive(4),
                                                  positive(4)], lambda lib: [0], (1, 2, 3)),
]


@pytest.mark.parametrize("name,arrays,extra,frozen", CASES, ids=[c[0] for c in CASES])
def test_torch_level_function_matches_torch(name, arrays, extra, frozen):
    arrays = arrays()
    extra_for = extra or (lambda lib: [])
    ours = getattr(corenn, name)
    theirs = getattr(torch, name)
    if extra == "affine":  # the normalized shape (or group count) goes between the input and the weights
        size = {"group_norm": 2}.get(name, [4])
        extra_for = lambda lib: []  # noqa: E731
        ours = (lambda f: lambda x, *w: f(x, size, *w))(ours)
        theirs = (lambda f: lambda x, *w: f(x, size, *w))(theirs)
    compare_with_torch(lambda *t: ours(*t, *extra_for(corenn)), lambda *t: theirs(*t, *extra_for(torch)), arrays,
                       torch, frozen=frozen)
    inputs = [corenn.tensor(a, requires_grad=i not in frozen) for i, a in enumerate(arrays)]
    assert gradcheck(lambda *t: ours(*t, *extra_for(corenn)), tuple(inputs))


def test_losses_default_to_no_reduction_as_torch_does():
    # ATen's schemas say reduction=Mean, but PyTorch's Python binding gives no reduction when it is left out
    a, b, signs_ = normal(3, 4), normal(3, 4), signs(3)
    calls = [("kl_div", (a, positive(3, 4))), ("margin_ranking_loss", (a, b, signs(3, 4))),
             ("hinge_embedding_loss", (a, signs(3, 4))), ("triplet_margin_loss", (a, b, normal(3, 4))),
             ("cosine_embedding_loss", (a, b, signs_)),
             ("binary_cross_entropy_with_logits", (a, RNG.uniform(0, 1, (3, 4))))]
    for name, arrays in calls:
        ours = getattr(corenn, name)(*[corenn.tensor(x) for x in arrays])
        theirs = getattr(torch, name)(*[torch.tensor(x) for x in arrays])
        assert tuple(ours.shape) == tuple(theirs.shape), name
        np.testing.assert_allclose(ours.numpy(), theirs.numpy(), rtol=1e-10, equal_nan=True)


def test_batch_and_instance_norm_take_aten_argument_order():
    x, w, b = normal(4, 3, 5), positive(3), normal(3)
    for training in (True, False):
        ours_stats = [corenn.tensor(normal(3)), corenn.tensor(positive(3))]
        theirs_stats = [torch.tensor(s.numpy()) for s in ours_stats]
        compare_with_torch(lambda *t: corenn.batch_norm(*t, *ours_stats, training, 0.2, 1e-4, False),
                           lambda *t: torch.batch_norm(*t, *theirs_stats, training, 0.2, 1e-4, False), [x, w, b], torch)
        for ours, theirs in zip(ours_stats, theirs_stats):
            np.testing.assert_allclose(ours.numpy(), theirs.numpy(), rtol=1e-12)
        ours_stats = [corenn.tensor(normal(3)), corenn.tensor(positive(3))]
        theirs_stats = [torch.tensor(s.numpy()) for s in ours_stats]
        compare_with_torch(lambda *t: corenn.instance_norm(*t, *ours_stats, training, 0.2, 1e-4, False),
                           lambda *t: torch.instance_norm(*t, *theirs_stats, training, 0.2, 1e-4, False), [x, w, b],
                           torch)
        for ours, theirs in zip(ours_stats, theirs_stats):
            np.testing.assert_allclose(ours.numpy(), theirs.numpy(), rtol=1e-12)


@pytest.mark.parametrize("padding_idx", [-1, 2])
def test_embedding_takes_weight_first_and_negative_padding_means_none(padding_idx):
    indices = np.array([[0, 2, 4], [2, 1, 2]])
    compare_with_torch(lambda w: corenn.embedding(w, corenn.tensor(indices), padding_idx),
                       lambda w: torch.embedding(w, torch.tensor(indices), padding_idx), [normal(5, 3)], torch)


def test_embedding_renorm_matches_torch():
    weight = normal(6, 3) * 3
    ours, theirs = corenn.tensor(weight), torch.tensor(weight)
    assert corenn.embedding_renorm_(ours, corenn.tensor([0, 2, 2, 5]), 1.5, 3.0) is ours
    torch.embedding_renorm_(theirs, torch.tensor([0, 2, 2, 5]), 1.5, 3.0)
    np.testing.assert_allclose(ours.numpy(), theirs.numpy(), rtol=1e-6)


@pytest.mark.parametrize("transposed,dims", [(False, 1), (False, 2), (False, 3), (True, 1), (True, 2), (True, 3)])
def test_convolution_matches_torch(transposed, dims):
    x = normal(2, 4, *(5, 4, 3)[:dims])
    weight = normal(4, 3, *(3, 2, 2)[:dims]) if transposed else normal(6, 2, *(3, 2, 2)[:dims])
    stride, padding, dilation = [2] * dims, [1] * dims, [1] * dims
    output_padding = [1] * dims if transposed else [0] * dims
    args = (stride, padding, dilation, transposed, output_padding, 2)
    compare_with_torch(lambda *t: corenn.convolution(*t, *args), lambda *t: torch.convolution(*t, *args),
                       [x, weight, normal(6)], torch)


def test_dropouts_keep_or_zero_whole_slices_and_scale():
    corenn.manual_seed(0)
    x = corenn.ones(40, 30, 2)
    out = corenn.dropout(x, 0.25, True)
    assert set(np.unique(out.numpy()).tolist()) <= {0.0, np.float32(1 / 0.75)} and 0.6 < (out.numpy() > 0).mean() < 0.9
    assert corenn.dropout(x, 0.25, False) is x
    feature = corenn.feature_dropout(x, 0.5, True).numpy()
    assert (feature[..., 0] == feature[..., 1]).all() and set(np.unique(feature).tolist()) == {0.0, 2.0}
    alpha = corenn.alpha_dropout(corenn.randn(200, 200), 0.3, True)
    assert abs(alpha.mean().item()) < 0.05 and abs(alpha.std().item() - 1) < 0.05
    feature_alpha = corenn.feature_alpha_dropout(x, 0.5, True).numpy()
    assert (feature_alpha[..., 0] == feature_alpha[..., 1]).all()
    for name in ("dropout_", "feature_dropout_", "alpha_dropout_", "feature_alpha_dropout_"):
        y = corenn.ones(4, 5, 2)
        assert getattr(corenn, name)(y, 0.5, True) is y and (y.numpy() != 1).any()
    y = corenn.tensor([-1.0, 2.0])
    assert corenn.threshold_(y, 0.0, 5.0) is y and y.tolist() == [5.0, 2.0]
    assert corenn.celu_(corenn.tensor([-1.0]), 2.0).tolist() == pytest.approx([2 * np.expm1(-0.5)])
    assert corenn.selu_(corenn.tensor([1.0])).tolist() == pytest.approx([torch.selu(torch.tensor(1.0)).item()])
    y = corenn.tensor([-2.0, 2.0])
    assert corenn.rrelu_(y, 0.1, 0.3) is y and y.tolist() == pytest.approx([-0.4, 2.0])


def test_errors():
    with pytest.raises(RuntimeError, match="Feature dropout requires at least 2 dimensions in the input"):
        corenn.feature_dropout(corenn.ones(3), 0.5, True)
    with pytest.raises(RuntimeError, match="dropout probability has to be between 0 and 1, but got 1.5"):
        corenn.dropout(corenn.ones(3), 1.5, True)
    with pytest.raises(ValueError, match="kl_div\\(\\): reduction must be 0 \\(none\\), 1 \\(mean\\) or 2"):
        corenn.kl_div(corenn.ones(3), corenn.ones(3), 3)
    with pytest.raises(NotImplementedError, match="rrelu\\(\\): the 'generator' argument"):
        corenn.rrelu(corenn.ones(3), generator=corenn.Generator())
    with pytest.raises(RuntimeError, match="rnn_tanh_cell\\(\\): weights of sizes"):
        corenn.rnn_tanh_cell(corenn.ones(1, 2), corenn.ones(1, 3), corenn.ones(3, 5), corenn.ones(3, 3))
    with pytest.raises(IndexError, match="rnn_relu_cell\\(\\): expected input and hx of 2 dims"):
        corenn.rnn_relu_cell(corenn.ones(2), corenn.ones(3), corenn.ones(3, 2), corenn.ones(3, 3))
    with pytest.raises(TypeError, match="layer_norm\\(\\): argument 'cudnn_enable' must be bool"):
        corenn.layer_norm(corenn.ones(2, 3), [3], cudnn_enable=1)


@pytest.mark.parametrize("name,mode", [("rnn_tanh", "RNN_TANH"), ("rnn_relu", "RNN_RELU"), ("lstm", "LSTM"),
                                       ("gru", "GRU")])
@pytest.mark.parametrize("layers,bidirectional,biases,batch_first", [(1, False, True, False), (2, True, False, True),
                                                                     (2, False, True, True)])
def test_recurrent_networks_match_torch(name, mode, layers, bidirectional, biases, batch_first):
    gates = {"RNN_TANH": 1, "RNN_RELU": 1, "LSTM": 4, "GRU": 3}[mode]
    hidden, features, directions = 4, 3, 2 if bidirectional else 1
    arrays = []
    for layer in range(layers):
        for _ in range(directions):
            width = features if layer == 0 else hidden * directions
            arrays += [RNG.standard_normal((gates * hidden, width)) * 0.5, RNG.standard_normal((gates * hidden,
                                                                                                hidden)) * 0.5]
            if biases:
                arrays += [RNG.standard_normal(gates * hidden) * 0.5, RNG.standard_normal(gates * hidden) * 0.5]
    count = len(arrays)
    x = RNG.standard_normal((2, 5, features) if batch_first else (5, 2, features))
    states = [RNG.standard_normal((layers * directions, 2, hidden)) for _ in range(2 if mode == "LSTM" else 1)]
    arrays += [x] + states

    def call(lib, *tensors):
        params, (x, *state) = list(tensors[:count]), tensors[count:]
        hx = state if mode == "LSTM" else state[0]
        result = getattr(lib, name)(x, hx, params, biases, layers, 0.0, False, bidirectional, batch_first)
        return lib.cat([t.reshape(-1) for t in result])

    compare_with_torch(lambda *t: call(corenn, *t), lambda *t: call(torch, *t), arrays, torch, rtol=1e-9, atol=1e-11)


def test_recurrent_network_over_a_packed_sequence_matches_torch():
    from torch.nn.utils.rnn import pack_padded_sequence
    packed = pack_padded_sequence(torch.tensor(normal(4, 3, 2)), [4, 3, 1])
    weights = [normal(9, 2), normal(9, 3), normal(9), normal(9)]

    def call(lib, data, *tensors):
        return lib.cat([t.reshape(-1) for t in lib.gru(data, lib.tensor(packed.batch_sizes.numpy()),
                                                       tensors[-1], list(tensors[:-1]), True, 1, 0.0, False, False)])
    compare_with_torch(lambda *t: call(corenn, *t), lambda *t: call(torch, *t),
                       [packed.data.numpy()] + weights + [normal(1, 3, 3)], torch, rtol=1e-9, atol=1e-11)


@pytest.mark.parametrize("dim", [0, 1, 2, -1])
def test_norm_except_dim_matches_torch(dim):
    compare_with_torch(lambda v: corenn.norm_except_dim(v, 2, dim), lambda v: torch.norm_except_dim(v, 2, dim),
                       [normal(3, 4, 2)], torch)
    compare_with_torch(lambda v: corenn.norm_except_dim(v, 3, dim), lambda v: torch.norm_except_dim(v, 3, dim),
                       [normal(3, 4, 2)], torch)


@pytest.mark.parametrize("mode", [0, 1, 2])
# with include_last_offset the last offset is the number of indices (PyTorch's result for other values
# depends on the dtype)
@pytest.mark.parametrize("offsets,last", [([0, 4], False), ([0, 0, 4, 8], True), ([0, 3, 3], False),
                                          ([0, 3, 3, 8], True), ([0, 8], True)])
@pytest.mark.parametrize("padding_idx", [None, 2])
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_embedding_bag_matches_torch_with_its_auxiliary_outputs(mode, offsets, last, padding_idx, dtype):
    indices = np.array([1, 2, 4, 5, 4, 3, 2, 9])
    weight = normal(10, 3).astype(dtype)
    ours = corenn.embedding_bag(corenn.tensor(weight), corenn.tensor(indices), corenn.tensor(offsets), False, mode,
                                False, None, last, padding_idx)
    theirs = torch.embedding_bag(torch.tensor(weight), torch.tensor(indices), torch.tensor(offsets), False, mode,
                                 False, None, last, padding_idx)
    np.testing.assert_allclose(ours[0].numpy(), theirs[0].numpy(), rtol=1e-6)
    for mine, expected in zip(ours[1:], theirs[1:]):
        assert mine.dtype == corenn.int64
        np.testing.assert_array_equal(mine.numpy(), expected.numpy())
    if dtype == np.float32:
        return
    compare_with_torch(
        lambda w: corenn.embedding_bag(w, corenn.tensor(indices), corenn.tensor(offsets), False, mode, False, None,
                                       last, padding_idx)[0],
        lambda w: torch.embedding_bag(w, torch.tensor(indices), torch.tensor(offsets), False, mode, False, None,
                                      last, padding_idx)[0], [weight], torch)


def test_embedding_bag_per_sample_weights_match_torch():
    indices, offsets, psw = np.array([1, 2, 4, 5, 4]), np.array([0, 2]), RNG.uniform(0.5, 1.5, 5)
    compare_with_torch(
        lambda w, p: corenn.embedding_bag(w, corenn.tensor(indices), corenn.tensor(offsets), False, 0, False, p)[0],
        lambda w, p: torch.embedding_bag(w, torch.tensor(indices), torch.tensor(offsets), False, 0, False, p)[0],
        [normal(6, 3), psw], torch)
