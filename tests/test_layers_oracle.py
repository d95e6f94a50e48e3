"""Every layer against PyTorch with weights copied through numpy: forward, input and parameter gradients,
train and eval mode, float32 and float64; reprs; default initialisation; BatchNorm running statistics."""
from __future__ import annotations

import math

import numpy as np
import pytest

import corenn
from corenn import nn

RNG = np.random.default_rng(11)
TOL = {np.float32: dict(rtol=2e-4, atol=2e-5), np.float64: dict(rtol=1e-8, atol=1e-10)}

# name, constructor args/kwargs (same for both frameworks), input shapes, integer-input flag
LAYERS = [
    ("Identity", (), {}, [(3, 4)]),
    ("Linear", (5, 3), {}, [(4, 5)]),
    ("Linear", (5, 3), {"bias": False}, [(2, 4, 5)]),
    ("Bilinear", (3, 4, 2), {}, [(5, 3), (5, 4)]),
    ("Flatten", (), {}, [(2, 3, 4)]),
    ("Unflatten", (1, (2, 3)), {}, [(4, 6)]),
    ("Conv1d", (4, 6, 3), {"stride": 2, "padding": 1, "groups": 2}, [(2, 4, 9)]),
    ("Conv2d", (3, 4, 3), {"padding": 1}, [(2, 3, 6, 5)]),
    ("Conv2d", (4, 6, (3, 2)), {"stride": (2, 1), "dilation": 2, "groups": 2, "bias": False}, [(2, 4, 9, 7)]),
    ("Conv2d", (3, 4, 3), {"padding": "same", "padding_mode": "reflect"}, [(2, 3, 6, 5)]),
    ("Conv2d", (3, 4, 2), {"padding": 1, "padding_mode": "circular"}, [(2, 3, 6, 5)]),
    ("ConvTranspose2d", (4, 6, 3), {"stride": 2, "padding": 1, "output_padding": 1, "groups": 2}, [(2, 4, 4, 3)]),
    ("ConvTranspose1d", (4, 3, 3), {"stride": 2}, [(2, 4, 5)]),
    ("MaxPool1d", (3,), {"stride": 2, "padding": 1}, [(2, 3, 9)]),
    ("MaxPool2d", (2,), {}, [(2, 3, 8, 6)]),
    ("MaxPool2d", (3,), {"stride": 2, "padding": 1, "ceil_mode": True}, [(2, 3, 8, 7)]),
    ("AvgPool1d", (3,), {"stride": 2, "padding": 1}, [(2, 3, 9)]),
    ("AvgPool2d", (2,), {}, [(2, 3, 8, 6)]),
    ("AvgPool2d", (3,), {"stride": 2, "padding": 1, "count_include_pad": False}, [(2, 3, 7, 7)]),
    ("AdaptiveAvgPool2d", ((3, 2),), {}, [(2, 3, 8, 7)]),
    ("AdaptiveAvgPool1d", (4,), {}, [(2, 3, 9)]),
    ("BatchNorm1d", (3,), {}, [(6, 3)]),
    ("BatchNorm1d", (3,), {"affine": False, "momentum": None}, [(4, 3, 5)]),
    ("BatchNorm2d", (3,), {}, [(4, 3, 5, 4)]),
    ("BatchNorm2d", (3,), {"track_running_stats": False}, [(4, 3, 5, 4)]),
    ("LayerNorm", ((4, 5),), {}, [(3, 4, 5)]),
    ("LayerNorm", (5,), {"elementwise_affine": False}, [(3, 4, 5)]),
    ("GroupNorm", (2, 4), {}, [(3, 4, 5)]),
    ("GroupNorm", (1, 4), {"bias": False}, [(3, 4, 2)]),
    ("BatchNorm1d", (3,), {"bias": False}, [(6, 3)]),
    ("LayerNorm", (5,), {"bias": False}, [(3, 4, 5)]),
    ("Dropout", (0.3,), {}, [(3, 4)]),
    ("Embedding", (6, 3), {"padding_idx": 1}, ["int"]),
    ("ReLU", (), {}, [(3, 4)]), ("LeakyReLU", (0.2,), {}, [(3, 4)]), ("ELU", (), {}, [(3, 4)]),
    ("GELU", (), {}, [(3, 4)]), ("GELU", (), {"approximate": "tanh"}, [(3, 4)]), ("SiLU", (), {}, [(3, 4)]),
    ("Sigmoid", (), {}, [(3, 4)]), ("Tanh", (), {}, [(3, 4)]), ("Softmax", (), {"dim": 1}, [(3, 4)]),
    ("LogSoftmax", (), {"dim": 1}, [(3, 4)]), ("Hardtanh", (-0.5, 0.5), {}, [(3, 4)]), ("ReLU6", (), {}, [(3, 4)]),
    ("SELU", (), {}, [(3, 4)]), ("CELU", (0.5,), {}, [(3, 4)]), ("Softplus", (2.0,), {}, [(3, 4)]),
    ("Mish", (), {}, [(3, 4)]), ("Hardswish", (), {}, [(3, 4)]), ("LogSigmoid", (), {}, [(3, 4)]),
    ("Softsign", (), {}, [(3, 4)]), ("Tanhshrink", (), {}, [(3, 4)]),
    ("MultiheadAttention", (8, 2), {"batch_first": True}, [(2, 5, 8), (2, 4, 8), (2, 4, 8)]),
    ("MultiheadAttention", (8, 4), {}, [(5, 2, 8), (5, 2, 8), (5, 2, 8)]),
    ("TransformerEncoderLayer", (8, 2), {"dim_feedforward": 16, "dropout": 0.0, "batch_first": True},
     [(2, 5, 8)]),
    ("TransformerEncoderLayer", (8, 2), {"dim_feedforward": 16, "dropout": 0.0, "norm_first": True,
                                         "activation": "gelu"}, [(5, 2, 8)]),
]


def _ids():
    return [f"{name}-{i}" for i, (name, *_) in enumerate(LAYERS)]


def _copy_weights(torch_module, module):
    state = {k: corenn.tensor(v.detach().numpy().copy()) for k, v in torch_module.state_dict().items()}
    module.load_state_dict(state)


def _inputs(shapes, dtype):
    arrays = []
    for shape in shapes:
        if shape == "int":
            arrays.append(np.array([[0, 1, 5], [2, 2, 1]]))
        else:
            arrays.append(RNG.standard_normal(shape).astype(dtype) * 2)
    return arrays


def _output(out):
    return out[0] if isinstance(out, tuple) else out


@pytest.mark.torch
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("training", [True, False])
@pytest.mark.parametrize("name,args,kwargs,shapes", LAYERS, ids=_ids())
def test_layer_matches_pytorch(torch, dtype, training, name, args, kwargs, shapes):
    torch_dtype = torch.float32 if dtype is np.float32 else torch.float64
    theirs = getattr(torch.nn, name)(*args, **kwargs).to(torch_dtype)
    ours = getattr(nn, name)(*args, **kwargs, **({} if name in {"Identity", "Flatten", "Unflatten"} or "Pool" in name
                                                   or name == "Dropout" or not _has_factory(name)
                                                   else {"dtype": corenn.float32 if dtype is np.float32
                                                         else corenn.float64}))
    _copy_weights(theirs, ours)
    theirs.train(training)
    ours.train(training)
    if name == "Dropout" and training:
        pytest.skip("random in training: covered by test_dropout_layer")
    arrays = _inputs(shapes, dtype)
    their_in = [torch.tensor(a, requires_grad=a.dtype.kind == "f") for a in arrays]
    our_in = [corenn.tensor(a, requires_grad=a.dtype.kind == "f") for a in arrays]
    expected = _output(theirs(*their_in))
    got = _output(ours(*our_in))
    assert got.dtype is (corenn.float32 if dtype is np.float32 else corenn.float64) or name == "Embedding"
    np.testing.assert_allclose(got.detach().numpy(), expected.detach().numpy(), **TOL[dtype])
    seed = RNG.standard_normal(tuple(expected.shape)).astype(dtype)
    expected.backward(torch.tensor(seed))
    got.backward(corenn.tensor(seed))
    for a, e in zip(our_in, their_in):
        if e.requires_grad:
            np.testing.assert_allclose(a.grad.numpy(), e.grad.numpy(), **TOL[dtype], err_msg="input gradient")
    their_params = dict(theirs.named_parameters())
    our_params = dict(ours.named_parameters())
    assert sorted(our_params) == sorted(their_params)
    for key, p in our_params.items():
        assert p.grad is not None, key
        np.testing.assert_allclose(p.grad.numpy(), their_params[key].grad.numpy(), **TOL[dtype], err_msg=key)
    for key, buffer in theirs.state_dict().items():  # running statistics after the step
        np.testing.assert_allclose(ours.state_dict()[key].numpy(), buffer.numpy(), **TOL[dtype], err_msg=key)


def _has_factory(name):
    return name in {"Linear", "Bilinear", "Conv1d", "Conv2d", "ConvTranspose1d", "ConvTranspose2d", "BatchNorm1d",
                    "BatchNorm2d", "LayerNorm", "GroupNorm", "Embedding", "MultiheadAttention",
                    "TransformerEncoderLayer"}


@pytest.mark.torch
@pytest.mark.parametrize("name,args,kwargs,shapes", LAYERS, ids=_ids())
def test_repr_matches_pytorch(torch, name, args, kwargs, shapes):
    assert repr(getattr(nn, name)(*args, **kwargs)) == repr(getattr(torch.nn, name)(*args, **kwargs))


@pytest.mark.torch
def test_batch_norm_running_stats_over_steps_and_eval(torch):
    theirs, ours = torch.nn.BatchNorm2d(3, momentum=None).double(), nn.BatchNorm2d(3, momentum=None,
                                                                                   dtype=corenn.float64)
    for _ in range(4):
        x = RNG.standard_normal((4, 3, 2, 2)) * 3 + 1
        theirs(torch.tensor(x))
        ours(corenn.tensor(x))
    assert ours.num_batches_tracked.item() == 4
    for key, value in theirs.state_dict().items():
        np.testing.assert_allclose(ours.state_dict()[key].numpy(), value.numpy(), rtol=1e-10)
    theirs.eval()
    ours.eval()
    x = RNG.standard_normal((2, 3, 2, 2))
    np.testing.assert_allclose(ours(corenn.tensor(x)).detach().numpy(), theirs(torch.tensor(x)).detach().numpy(),
                               rtol=1e-10)
    before = ours.running_mean.numpy().copy()
    ours(corenn.tensor(x))
    np.testing.assert_array_equal(ours.running_mean.numpy(), before)  # eval leaves the statistics alone


def test_default_initialisation_follows_pytorch():
    corenn.manual_seed(0)
    layer = nn.Linear(400, 300)
    bound = 1 / math.sqrt(400)  # kaiming_uniform_(a=sqrt(5)) gives U(-1/sqrt(fan_in), 1/sqrt(fan_in))
    w = layer.weight.detach().numpy()
    assert np.abs(w).max() <= bound and np.abs(w).max() > 0.99 * bound
    assert w.std() == pytest.approx(bound / math.sqrt(3), rel=0.02)
    assert np.abs(layer.bias.detach().numpy()).max() <= bound
    conv = nn.Conv2d(16, 32, 3)
    conv_bound = 1 / math.sqrt(16 * 9)
    assert np.abs(conv.weight.detach().numpy()).max() <= conv_bound
    assert conv.weight.detach().numpy().std() == pytest.approx(conv_bound / math.sqrt(3), rel=0.05)
    bn = nn.BatchNorm2d(5)
    assert bn.weight.tolist() == [1.0] * 5 and bn.bias.tolist() == [0.0] * 5
    assert bn.running_var.tolist() == [1.0] * 5 and bn.num_batches_tracked.dtype is corenn.int64
    emb = nn.Embedding(1000, 8, padding_idx=3)
    assert emb.weight[3].tolist() == [0.0] * 8
    assert emb.weight.detach().numpy().std() == pytest.approx(1.0, rel=0.05)
    mha = nn.MultiheadAttention(8, 2)
    assert mha.in_proj_bias.tolist() == [0.0] * 24 and mha.out_proj.bias.tolist() == [0.0] * 8


def test_factory_kwargs_and_parameters():
    layer = nn.Conv2d(2, 4, 3, dtype=corenn.float64, device="cpu")
    assert layer.weight.dtype is corenn.float64 and layer.bias.device == corenn.device("cpu")
    assert [name for name, _ in nn.Linear(3, 2, bias=False).named_parameters()] == ["weight"]
    assert [name for name, _ in nn.BatchNorm1d(3).named_buffers()] == ["running_mean", "running_var",
                                                                       "num_batches_tracked"]


def test_dropout_layer_train_and_eval():
    layer = nn.Dropout(0.5)
    x = corenn.ones(1000)
    out = layer(x)
    assert 0.4 < (out.numpy() == 0).mean() < 0.6
    layer.eval()
    assert layer(x) is x


def test_conv_transpose_output_size():
    layer = nn.ConvTranspose2d(4, 2, 3, stride=2, padding=1)
    x = corenn.randn(1, 4, 5, 5)
    assert layer(x).shape == (1, 2, 9, 9)
    assert layer(x, output_size=[10, 10]).shape == (1, 2, 10, 10)
    with pytest.raises(ValueError, match="valid sizes range from 9 to 10"):
        layer(x, output_size=[12, 12])


def test_transformer_encoder_trains_a_small_model():
    """A 2-layer encoder learns to copy the argmax of each token through attention (loss falls)."""
    corenn.manual_seed(0)
    layer = nn.TransformerEncoderLayer(16, 2, dim_feedforward=32, dropout=0.0, batch_first=True)
    model = nn.Sequential(nn.Embedding(8, 16), nn.TransformerEncoder(layer, 2), nn.Linear(16, 8))
    tokens = corenn.randint(0, 8, (16, 6))
    params = list(model.parameters())
    losses = []
    for _ in range(30):
        loss = nn.functional.cross_entropy(model(tokens).reshape(-1, 8), tokens.reshape(-1))
        for p in params:
            p.grad = None
        loss.backward()
        with corenn.no_grad():
            for p in params:
                p -= 0.05 * p.grad
        losses.append(loss.item())
    assert losses[-1] < 0.5 * losses[0]


def test_layer_errors_name_what_is_wrong():
    with pytest.raises(ValueError, match="in_channels must be divisible by groups"):
        nn.Conv2d(3, 4, 3, groups=2)
    with pytest.raises(ValueError, match="strided"):
        nn.Conv2d(3, 4, 3, stride=2, padding="same")
    with pytest.raises(ValueError, match="padding_mode"):
        nn.Conv2d(3, 4, 3, padding_mode="mirror")
    with pytest.raises(ValueError, match="expected 4D input"):
        nn.BatchNorm2d(3)(corenn.randn(2, 3, 4))
    with pytest.raises(ValueError, match="dropout probability"):
        nn.Dropout(2.0)
    with pytest.raises(ValueError, match="num_channels must be divisible"):
        nn.GroupNorm(3, 4)
    with pytest.raises(AssertionError, match="divisible by num_heads"):
        nn.MultiheadAttention(10, 3)
    with pytest.raises(RuntimeError, match="mat1 and mat2 shapes cannot be multiplied"):
        nn.Linear(3, 2)(corenn.randn(4, 5))
