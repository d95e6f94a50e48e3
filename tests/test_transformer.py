"""nn.Transformer, TransformerDecoder(Layer) and MultiheadAttention's kdim/vdim, add_bias_kv and add_zero_attn
against PyTorch 2.13 on copied weights (float64): outputs, attention weights, input and parameter gradients,
with and without masks; float64 gradcheck; state-dict keys both ways."""
from __future__ import annotations

import numpy as np
import pytest

import corenn
from corenn import nn
from corenn.autograd import gradcheck

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.torch

TOL = dict(rtol=1e-9, atol=1e-11)


def _pair(cls_name, *args, **kwargs):
    torch.manual_seed(0)
    theirs = getattr(torch.nn, cls_name)(*args, **kwargs).double()
    ours = getattr(nn, cls_name)(*args, **kwargs).double()
    state = {k: corenn.tensor(v.detach().numpy().copy()) for k, v in theirs.state_dict().items()}
    assert list(state) == list(ours.state_dict())
    ours.load_state_dict(state)
    return ours, theirs


def _both(array, requires_grad=True):
    return (corenn.tensor(array.copy(), requires_grad=requires_grad),
            torch.tensor(array.copy(), requires_grad=requires_grad))


def _close(a, b, what=""):
    np.testing.assert_allclose(a.detach().numpy(), b.detach().numpy(), err_msg=what, **TOL)


def _check(ours, theirs, arrays, masks=(), **call):
    """Run both on the same inputs (``arrays`` require grad, ``masks`` do not); compare outputs and grads."""
    pairs = [_both(a) for a in arrays] + [_both(m, requires_grad=False) for m in masks]
    got = ours(*[p[0] for p in pairs], **call)
    expected = theirs(*[p[1] for p in pairs], **call)
    got = list(got) if isinstance(got, tuple) else [got]
    expected = list(expected) if isinstance(expected, tuple) else [expected]
    rng = np.random.default_rng(3)
    loss, tloss = 0, 0
    for i, (a, b) in enumerate(zip(got, expected)):
        assert (a is None) == (b is None)
        if b is None:
            continue
        assert tuple(a.shape) == tuple(b.shape), f"output {i}"
        _close(a, b, f"output {i}")
        w = rng.standard_normal(tuple(b.shape))
        loss = loss + (a * corenn.tensor(w)).sum()
        tloss = tloss + (b * torch.tensor(w)).sum()
    loss.backward()
    tloss.backward()
    for (name, p), (tname, tp) in zip(ours.named_parameters(), theirs.named_parameters()):
        assert name == tname
        _close(p.grad, tp.grad, f"grad of {name}")
    for i, (a, b) in enumerate(pairs[:len(arrays)]):
        _close(a.grad, b.grad, f"grad of input {i}")


RNG = np.random.default_rng(0)


@pytest.mark.parametrize("kwargs", [
    dict(kdim=3, vdim=5),
    dict(add_bias_kv=True),
    dict(add_zero_attn=True),
    dict(kdim=3, vdim=5, add_bias_kv=True, add_zero_attn=True, batch_first=True),
    dict(add_bias_kv=True, bias=False),
])
@pytest.mark.parametrize("masked", [False, True])
def test_multihead_attention_options_match_torch(kwargs, masked):
    ours, theirs = _pair("MultiheadAttention", 8, 2, **kwargs)
    batch_first = kwargs.get("batch_first", False)
    shape = lambda length, width: (2, length, width) if batch_first else (length, 2, width)
    arrays = [RNG.standard_normal(shape(4, 8)), RNG.standard_normal(shape(6, kwargs.get("kdim", 8))),
              RNG.standard_normal(shape(6, kwargs.get("vdim", 8)))]
    if not masked:
        _check(ours, theirs, arrays)
        return
    padding = np.zeros((2, 6), dtype=bool)
    padding[1, 4:] = True
    attn_mask = RNG.random((4, 6)) < 0.3     # True: may not attend
    attn_mask[:, 0] = False
    ours_pairs = [_both(a) for a in arrays]
    got, got_w = ours(*[p[0] for p in ours_pairs], key_padding_mask=corenn.tensor(padding),
                      attn_mask=corenn.tensor(attn_mask), average_attn_weights=False)
    exp, exp_w = theirs(*[p[1] for p in ours_pairs], key_padding_mask=torch.tensor(padding),
                        attn_mask=torch.tensor(attn_mask), average_attn_weights=False)
    _close(got, exp)
    _close(got_w, exp_w)
    got.sum().backward()
    exp.sum().backward()
    for (name, p), (_, tp) in zip(ours.named_parameters(), theirs.named_parameters()):
        _close(p.grad, tp.grad, name)


def test_multihead_attention_state_dict_keys_and_init():
    for kwargs in (dict(kdim=3, vdim=5), dict(add_bias_kv=True), dict()):
        ours = nn.MultiheadAttention(8, 2, **kwargs)
        theirs = torch.nn.MultiheadAttention(8, 2, **kwargs)
        assert [(k, tuple(v.shape)) for k, v in ours.state_dict().items()] == \
               [(k, tuple(v.shape)) for k, v in theirs.state_dict().items()]
        theirs.load_state_dict({k: torch.tensor(v.numpy()) for k, v in ours.state_dict().items()})
    mha = nn.MultiheadAttention(8, 2, kdim=3, vdim=5, add_bias_kv=True, add_zero_attn=True)
    assert mha.in_proj_weight is None and tuple(mha.k_proj_weight.shape) == (8, 3)
    assert mha.add_zero_attn and not mha._qkv_same_embed_dim
    with pytest.raises(AssertionError, match="kdim=3"):
        mha(corenn.randn(4, 2, 8), corenn.randn(6, 2, 8), corenn.randn(6, 2, 5))


@pytest.mark.parametrize("norm_first", [False, True])
def test_decoder_layer_matches_torch(norm_first):
    ours, theirs = _pair("TransformerDecoderLayer", 8, 2, dim_feedforward=16, dropout=0.0, norm_first=norm_first,
                         activation="gelu")
    arrays = [RNG.standard_normal((5, 2, 8)), RNG.standard_normal((7, 2, 8))]
    _check(ours, theirs, arrays)
    causal = np.triu(np.ones((5, 5), dtype=bool), 1)
    memory_padding = np.zeros((2, 7), dtype=bool)
    memory_padding[0, 5:] = True
    ours.zero_grad()
    theirs.zero_grad()
    pairs = [_both(a) for a in arrays]
    got = ours(*[p[0] for p in pairs], tgt_mask=corenn.tensor(causal),
               memory_key_padding_mask=corenn.tensor(memory_padding))
    exp = theirs(*[p[1] for p in pairs], tgt_mask=torch.tensor(causal),
                 memory_key_padding_mask=torch.tensor(memory_padding))
    _close(got, exp)
    got.sum().backward()
    exp.sum().backward()
    for (name, p), (_, tp) in zip(ours.named_parameters(), theirs.named_parameters()):
        _close(p.grad, tp.grad, name)
    for a, b in pairs:
        _close(a.grad, b.grad)


def test_decoder_stack_matches_torch():
    torch.manual_seed(0)
    layer = torch.nn.TransformerDecoderLayer(8, 2, 16, dropout=0.0, batch_first=True)
    theirs = torch.nn.TransformerDecoder(layer, 2, norm=torch.nn.LayerNorm(8)).double()
    ours = nn.TransformerDecoder(nn.TransformerDecoderLayer(8, 2, 16, dropout=0.0, batch_first=True), 2,
                                 norm=nn.LayerNorm(8)).double()
    ours.load_state_dict({k: corenn.tensor(v.detach().numpy()) for k, v in theirs.state_dict().items()})
    _check(ours, theirs, [RNG.standard_normal((2, 5, 8)), RNG.standard_normal((2, 7, 8))])


@pytest.mark.parametrize("kwargs", [dict(), dict(batch_first=True, norm_first=True)])
def test_transformer_matches_torch(kwargs):
    ours, theirs = _pair("Transformer", 8, 2, 2, 2, 16, 0.0, **kwargs)
    batch_first = kwargs.get("batch_first", False)
    src = RNG.standard_normal((2, 7, 8) if batch_first else (7, 2, 8))
    tgt = RNG.standard_normal((2, 5, 8) if batch_first else (5, 2, 8))
    _check(ours, theirs, [src, tgt])
    mask = nn.Transformer.generate_square_subsequent_mask(5, dtype=corenn.float64)
    tmask = torch.nn.Transformer.generate_square_subsequent_mask(5, dtype=torch.float64)
    np.testing.assert_array_equal(mask.numpy(), tmask.numpy())
    got = ours(corenn.tensor(src), corenn.tensor(tgt), tgt_mask=mask)
    exp = theirs(torch.tensor(src), torch.tensor(tgt), tgt_mask=tmask)
    _close(got, exp)


def test_transformer_default_init_and_errors():
    model = nn.Transformer(8, 2, 1, 1, 16)
    weight = model.encoder.layers[0].linear1.weight
    bound = (6 / (8 + 16)) ** 0.5          # xavier_uniform_ re-initialises every matrix
    assert float(weight.abs().max()) <= bound
    with pytest.raises(RuntimeError, match="the batch number of src and tgt must be equal"):
        model(corenn.randn(7, 2, 8), corenn.randn(5, 3, 8))
    with pytest.raises(RuntimeError, match="the feature number of src and tgt must be equal to d_model"):
        model(corenn.randn(7, 2, 8), corenn.randn(5, 2, 6))
    with pytest.raises(RuntimeError, match="activation should be relu/gelu"):
        nn.TransformerDecoderLayer(8, 2, activation="tanh")

    class Subclassed(nn.Transformer):  # programs subclass it at import time
        def __init__(self):
            super().__init__(d_model=8, nhead=2, num_encoder_layers=1, num_decoder_layers=1, dim_feedforward=8)
    assert tuple(Subclassed()(corenn.randn(3, 1, 8), corenn.randn(2, 1, 8)).shape) == (2, 1, 8)


def test_gradcheck_float64():
    corenn.manual_seed(0)
    mha = nn.MultiheadAttention(4, 2, kdim=3, vdim=2, add_bias_kv=True, add_zero_attn=True).double()
    q = corenn.randn(3, 1, 4, dtype=corenn.float64, requires_grad=True)
    k = corenn.randn(2, 1, 3, dtype=corenn.float64, requires_grad=True)
    v = corenn.randn(2, 1, 2, dtype=corenn.float64, requires_grad=True)
    assert gradcheck(lambda q, k, v: mha(q, k, v)[0], (q, k, v))
    layer = nn.TransformerDecoderLayer(4, 2, 6, dropout=0.0).double()
    memory = corenn.randn(2, 1, 4, dtype=corenn.float64, requires_grad=True)
    assert gradcheck(lambda q, m: layer(q, m), (q, memory))
