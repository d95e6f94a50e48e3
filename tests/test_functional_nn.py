"""Activations, normalization, losses, embedding, dropout, attention in corenn.nn.functional:
PyTorch oracle (float32 and float64), gradcheck in float64, and errors."""
from __future__ import annotations

import warnings

import numpy as np
import pytest

import corenn
import corenn.nn.functional as F
from corenn.autograd import gradcheck

RNG = np.random.default_rng(7)
TOL = {np.float32: dict(rtol=2e-4, atol=2e-5), np.float64: dict(rtol=1e-9, atol=1e-10)}


def _oracle(torch, name, arrays, grad_of=(0,), kwargs=None, dtype=np.float64, torch_name=None):
    kwargs = kwargs or {}
    arrays = [a.astype(dtype) if isinstance(a, np.ndarray) and a.dtype.kind == "f" else a for a in arrays]
    ours = [corenn.tensor(a, requires_grad=i in grad_of) if isinstance(a, np.ndarray) else a
            for i, a in enumerate(arrays)]
    theirs = [torch.tensor(a, requires_grad=i in grad_of) if isinstance(a, np.ndarray) else a
              for i, a in enumerate(arrays)]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        expected = getattr(torch.nn.functional, torch_name or name)(*theirs, **kwargs)
        got = getattr(F, name)(*ours, **kwargs)
    np.testing.assert_allclose(got.detach().numpy(), expected.detach().numpy(), **TOL[dtype], err_msg=name)
    seed = RNG.standard_normal(tuple(expected.shape)).astype(dtype)
    expected.backward(torch.tensor(seed))
    got.backward(corenn.tensor(seed))
    for i in grad_of:
        np.testing.assert_allclose(ours[i].grad.numpy(), theirs[i].grad.numpy(), **TOL[dtype],
                                   err_msg=f"{name}: gradient of input {i}")


ACTIVATIONS = [("relu", {}), ("leaky_relu", {"negative_slope": 0.2}), ("elu", {"alpha": 0.7}), ("selu", {}),
               ("celu", {"alpha": 1.5}), ("hardtanh", {"min_val": -0.5, "max_val": 2.0}), ("relu6", {}),
               ("hardswish", {}), ("hardsigmoid", {}), ("mish", {}), ("logsigmoid", {}), ("softsign", {}),
               ("tanhshrink", {}), ("gelu", {}), ("gelu", {"approximate": "tanh"}), ("silu", {}), ("sigmoid", {}),
               ("tanh", {}), ("softplus", {"beta": 2.0}), ("softmax", {"dim": 1}), ("log_softmax", {"dim": 0})]


@pytest.mark.torch
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("name,kwargs", ACTIVATIONS)
def test_activations_match_pytorch(torch, dtype, name, kwargs):
    x = RNG.standard_normal((4, 5, 3)) * 4
    if name == "hardsigmoid" and dtype is np.float64:
        dtype = np.float32  # PyTorch's float64 hardsigmoid backward uses a float32 1/6 (rel. error 3e-8)
    _oracle(torch, name, [x], kwargs=kwargs, dtype=dtype)


@pytest.mark.parametrize("name", ["leaky_relu", "elu", "selu", "celu", "hardswish", "mish", "logsigmoid",
                                  "softsign", "tanhshrink"])
def test_activation_gradcheck(name):
    x = corenn.tensor(RNG.standard_normal((3, 4)) * 3, requires_grad=True)
    assert gradcheck(getattr(F, name), (x,))


def test_inplace_activation_writes_input():
    x = corenn.tensor([-1.0, 2.0])
    out = F.relu(x, inplace=True)
    assert out is x and x.tolist() == [0.0, 2.0]


@pytest.mark.torch
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("training", [True, False])
@pytest.mark.parametrize("shape", [(6, 3), (4, 3, 5), (2, 3, 4, 5)])
def test_batch_norm_matches_pytorch_with_running_stats(torch, dtype, training, shape):
    x = RNG.standard_normal(shape).astype(dtype)
    w, b = RNG.standard_normal(3).astype(dtype), RNG.standard_normal(3).astype(dtype)
    rm, rv = RNG.standard_normal(3).astype(dtype), (RNG.random(3) + 0.5).astype(dtype)
    ours = [corenn.tensor(a, requires_grad=True) for a in (x, w, b)]
    theirs = [torch.tensor(a, requires_grad=True) for a in (x, w, b)]
    our_stats, their_stats = [corenn.tensor(rm), corenn.tensor(rv)], [torch.tensor(rm), torch.tensor(rv)]
    got = F.batch_norm(ours[0], *our_stats, ours[1], ours[2], training, 0.3, 1e-3)
    expected = torch.nn.functional.batch_norm(theirs[0], *their_stats, theirs[1], theirs[2], training, 0.3, 1e-3)
    seed = RNG.standard_normal(shape).astype(dtype)
    got.backward(corenn.tensor(seed))
    expected.backward(torch.tensor(seed))
    np.testing.assert_allclose(got.detach().numpy(), expected.detach().numpy(), **TOL[dtype])
    for a, e in zip(ours, theirs):
        np.testing.assert_allclose(a.grad.numpy(), e.grad.numpy(), **TOL[dtype])
    for a, e in zip(our_stats, their_stats):  # running stats updated in place (unbiased variance) or untouched
        np.testing.assert_allclose(a.numpy(), e.numpy(), **TOL[dtype])


@pytest.mark.torch
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_layer_and_group_norm_match_pytorch(torch, dtype):
    x = RNG.standard_normal((4, 6, 3, 2))
    _oracle(torch, "layer_norm", [x, (3, 2), RNG.standard_normal((3, 2)), RNG.standard_normal((3, 2))],
            grad_of=(0, 2, 3), dtype=dtype)
    _oracle(torch, "layer_norm", [x, (2,)], dtype=dtype)
    _oracle(torch, "group_norm", [x, 3, RNG.standard_normal(6), RNG.standard_normal(6)], grad_of=(0, 2, 3),
            dtype=dtype)
    _oracle(torch, "group_norm", [x, 6], dtype=dtype)


def test_norm_gradcheck():
    x = corenn.tensor(RNG.standard_normal((4, 3, 2)), requires_grad=True)
    w = corenn.tensor(RNG.standard_normal(3), requires_grad=True)
    b = corenn.tensor(RNG.standard_normal(3), requires_grad=True)
    assert gradcheck(lambda x, w, b: F.batch_norm(x, None, None, w, b, training=True), (x, w, b))
    assert gradcheck(lambda x, w, b: F.group_norm(x, 1, w, b), (x, w, b))
    lw = corenn.tensor(RNG.standard_normal(2), requires_grad=True)
    assert gradcheck(lambda x, w: F.layer_norm(x, (2,), w), (x, lw))


def _class_targets(shape, classes):
    target = RNG.integers(0, classes, shape)
    target.flat[0] = -100
    return target


@pytest.mark.torch
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("reduction", ["none", "mean", "sum"])
@pytest.mark.parametrize("label_smoothing", [0.0, 0.25])
@pytest.mark.parametrize("weighted", [False, True])
def test_cross_entropy_matches_pytorch(torch, dtype, reduction, label_smoothing, weighted):
    logits = RNG.standard_normal((5, 4, 3)) * 3
    weight = RNG.random(4) + 0.1 if weighted else None
    kwargs = dict(reduction=reduction, label_smoothing=label_smoothing)
    _oracle(torch, "cross_entropy", [logits, _class_targets((5, 3), 4), weight], kwargs=kwargs, dtype=dtype)
    probs = RNG.random((5, 4, 3))
    probs /= probs.sum(1, keepdims=True)
    _oracle(torch, "cross_entropy", [logits, probs, weight], grad_of=(0, 1), kwargs=kwargs, dtype=dtype)
    _oracle(torch, "cross_entropy", [logits[:, :, 0], _class_targets((5,), 4), weight], kwargs=kwargs, dtype=dtype)
    _oracle(torch, "nll_loss", [logits, _class_targets((5, 3), 4), weight], kwargs=dict(reduction=reduction),
            dtype=dtype)


@pytest.mark.torch
def test_cross_entropy_unbatched_and_extreme_logits(torch):
    _oracle(torch, "cross_entropy", [RNG.standard_normal(4), np.array(2)])
    # 1e4-scale logits: the fused kernel stays finite where exp() would overflow.
    logits = corenn.tensor([[1e4, -1e4, 0.0]], requires_grad=True)
    loss = F.cross_entropy(logits, corenn.tensor([1]))
    loss.backward()
    assert loss.item() == pytest.approx(2e4)
    assert np.isfinite(logits.grad.numpy()).all()


def test_cross_entropy_gradcheck():
    logits = corenn.tensor(RNG.standard_normal((3, 4)), requires_grad=True)
    target = corenn.tensor([1, -100, 3])
    weight = corenn.tensor(RNG.random(4) + 0.5)
    assert gradcheck(lambda x: F.cross_entropy(x, target, weight=weight, label_smoothing=0.1), (logits,))
    probs = corenn.tensor(RNG.dirichlet(np.ones(4), 3), requires_grad=True)
    assert gradcheck(lambda x, p: F.cross_entropy(x, p, reduction="sum"), (logits, probs))


REGRESSION = [("mse_loss", {}), ("l1_loss", {}), ("smooth_l1_loss", {"beta": 0.5}), ("smooth_l1_loss", {"beta": 0.0}),
              ("huber_loss", {"delta": 0.7})]


@pytest.mark.torch
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("reduction", ["none", "mean", "sum"])
def test_regression_and_binary_losses_match_pytorch(torch, dtype, reduction):
    a, t = RNG.standard_normal((3, 5)), RNG.standard_normal((3, 5))
    for name, kwargs in REGRESSION:
        _oracle(torch, name, [a, t], grad_of=(0, 1), kwargs=dict(reduction=reduction, **kwargs), dtype=dtype)
    p, q, w = RNG.random((3, 5)) * 0.98 + 0.01, RNG.random((3, 5)), RNG.random((3, 5))
    _oracle(torch, "binary_cross_entropy", [p, q, w], grad_of=(0, 1), kwargs=dict(reduction=reduction), dtype=dtype)
    for weight, pos_weight in [(None, None), (w, RNG.random(5) + 0.5)]:
        _oracle(torch, "binary_cross_entropy_with_logits", [a * 5, q, weight, None, None, reduction, pos_weight],
                grad_of=(0, 1), dtype=dtype)
    _oracle(torch, "kl_div", [np.log(p), q], grad_of=(0, 1), kwargs=dict(reduction=reduction), dtype=dtype)
    _oracle(torch, "kl_div", [np.log(p), np.log(q)], grad_of=(0, 1), kwargs=dict(reduction=reduction,
                                                                                 log_target=True), dtype=dtype)


@pytest.mark.torch
def test_kl_div_batchmean_matches_pytorch(torch):
    p, q = RNG.random((4, 3)), RNG.random((4, 3))
    _oracle(torch, "kl_div", [np.log(p), q], grad_of=(0, 1), kwargs=dict(reduction="batchmean"))


def test_losses_gradcheck():
    a = corenn.tensor(RNG.standard_normal((2, 3)), requires_grad=True)
    t = corenn.tensor(RNG.standard_normal((2, 3)), requires_grad=True)
    for name, kwargs in REGRESSION:
        assert gradcheck(lambda a, t: getattr(F, name)(a, t, **kwargs), (a, t)), name
    p = corenn.tensor(RNG.random((2, 3)) * 0.8 + 0.1, requires_grad=True)
    q = corenn.tensor(RNG.random((2, 3)), requires_grad=True)
    assert gradcheck(F.binary_cross_entropy, (p, q))
    pos_weight = corenn.tensor(RNG.random(3) + 0.5, requires_grad=True)
    assert gradcheck(lambda a, q, pw: F.binary_cross_entropy_with_logits(a, q, pos_weight=pw), (a, q, pos_weight))


@pytest.mark.torch
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_embedding_bilinear_attention_match_pytorch(torch, dtype):
    indices = np.array([[0, 2, 2], [1, 0, 3]])
    _oracle(torch, "embedding", [indices, RNG.standard_normal((4, 3))], grad_of=(1,), kwargs=dict(padding_idx=0),
            dtype=dtype)
    _oracle(torch, "bilinear", [RNG.standard_normal((2, 3)), RNG.standard_normal((2, 4)),
                                RNG.standard_normal((5, 3, 4)), RNG.standard_normal(5)], grad_of=(0, 1, 2, 3),
            dtype=dtype)
    q, k, v = (RNG.standard_normal(s) for s in [(2, 3, 4, 8), (2, 3, 5, 8), (2, 3, 5, 8)])
    _oracle(torch, "scaled_dot_product_attention", [q, k, v], grad_of=(0, 1, 2), dtype=dtype)
    _oracle(torch, "scaled_dot_product_attention", [q, q, q], kwargs=dict(is_causal=True), dtype=dtype)
    mask = RNG.random((4, 5)) > 0.3
    mask[:, 0] = True
    _oracle(torch, "scaled_dot_product_attention", [q, k, v, mask], grad_of=(0, 1, 2), dtype=dtype)


def test_embedding_max_norm_renormalises_looked_up_rows():
    weight = corenn.tensor([[3.0, 4.0], [0.3, 0.4], [6.0, 8.0]])
    F.embedding(corenn.tensor([0, 1]), weight, max_norm=1.0)
    norms = np.linalg.norm(weight.numpy(), axis=1)
    np.testing.assert_allclose(norms[:2], [1.0, 0.5], rtol=1e-5)
    assert norms[2] == pytest.approx(10.0)  # not looked up: untouched


def test_dropout_uses_corenn_rng_and_scales():
    x = corenn.ones(10000)
    corenn.manual_seed(0)
    a = F.dropout(x, 0.3)
    corenn.manual_seed(0)
    b = F.dropout(x, 0.3)
    assert a.tolist() == b.tolist()
    values = a.numpy()
    np.testing.assert_allclose(np.unique(values), [0.0, 1 / 0.7], rtol=1e-6)
    assert abs((values == 0).mean() - 0.3) < 0.03
    assert F.dropout(x, 0.3, training=False) is x
    assert F.dropout(x, 1.0).sum().item() == 0.0
    y = corenn.ones(4, requires_grad=True)
    out = F.dropout(y, 0.5)
    out.sum().backward()
    np.testing.assert_array_equal(y.grad.numpy(), out.detach().numpy())


def test_errors_name_what_is_wrong():
    with pytest.raises(IndexError, match="Target 7 is out of bounds"):
        F.cross_entropy(corenn.randn(2, 4), corenn.tensor([1, 7]))
    with pytest.raises(ValueError, match="batch_size"):
        F.cross_entropy(corenn.randn(3, 4), corenn.tensor([1, 2]))
    with pytest.raises(RuntimeError, match="same shape as input"):
        F.cross_entropy(corenn.randn(3, 4), corenn.rand(3, 5))
    with pytest.raises(ValueError, match="label_smoothing"):
        F.cross_entropy(corenn.randn(3, 4), corenn.tensor([0, 1, 2]), label_smoothing=1.5)
    with pytest.raises(ValueError, match="not a valid value for reduction"):
        F.mse_loss(corenn.randn(3), corenn.randn(3), reduction="avg")
    with pytest.raises(RuntimeError, match="between 0 and 1"):
        F.binary_cross_entropy(corenn.tensor([1.5]), corenn.tensor([1.0]))
    with pytest.raises(ValueError, match="dropout probability"):
        F.dropout(corenn.randn(3), 1.5)
    with pytest.raises(IndexError, match="index out of range"):
        F.embedding(corenn.tensor([5]), corenn.randn(3, 2))
    with pytest.raises(RuntimeError, match="indices"):
        F.embedding(corenn.tensor([0.0]), corenn.randn(3, 2))
    with pytest.raises(RuntimeError, match="normalized_shape"):
        F.layer_norm(corenn.randn(2, 3), (4,))
    with pytest.raises(RuntimeError, match="divisible by num_groups"):
        F.group_norm(corenn.randn(2, 3, 4), 2)
    with pytest.raises(ValueError, match="more than 1 value per channel"):
        F.batch_norm(corenn.randn(1, 3), None, None, training=True)
    with pytest.raises(UserWarning, match="target size"):
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            F.mse_loss(corenn.randn(3, 1), corenn.randn(3))


def test_cross_entropy_with_every_target_ignored_has_nan_loss_and_zero_gradient():
    """PyTorch: the mean over no targets is nan, and the ignored rows get a zero gradient (not nan)."""
    import corenn.nn.functional as F
    logits = corenn.tensor([[-2.37, 1.0]], requires_grad=True)
    loss = F.cross_entropy(logits, corenn.tensor([0]), ignore_index=0)
    assert loss.item() != loss.item()  # nan
    loss.backward()
    assert logits.grad.tolist() == [[0.0, 0.0]]
