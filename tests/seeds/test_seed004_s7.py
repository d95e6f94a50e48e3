"""Seed 004 section 7 (numerical stability) with ``corenn`` in place of ``torch``.

The seed's stable softmax calls ``torch.reduce_max``, which exists in neither PyTorch nor
corenn (it is TensorFlow's name); the code is tested with ``corenn.max`` instead.
"""
from __future__ import annotations

import numpy as np

import corenn


def test_float32_underflow_and_overflow_give_nan():
    x = corenn.tensor(1.0)
    for tiny_or_huge in (1e-50, 1e39):
        y = corenn.tensor(tiny_or_huge)  # stored as 0 / inf in float32
        z = x * y / y
        assert corenn.isnan(z).item()


def unstable_softmax(logits):
    exp = corenn.exp(logits)
    return exp / corenn.sum(exp)


def softmax(logits):
    exp = corenn.exp(logits - corenn.max(logits))  # the seed's torch.reduce_max
    return exp / corenn.sum(exp)


def test_unstable_softmax_gives_nan():
    with np.errstate(all="ignore"):
        result = unstable_softmax(corenn.tensor([1000., 0.])).numpy()
    assert np.isnan(result[0]) and result[1] == 0.0


def test_stable_softmax():
    assert softmax(corenn.tensor([1000., 0.])).numpy().tolist() == [1.0, 0.0]
    assert corenn.softmax(corenn.tensor([1000., 0.]), 0).tolist() == [1.0, 0.0]


def unstable_softmax_cross_entropy(labels, logits):
    logits = corenn.log(softmax(logits))
    return -corenn.sum(labels * logits)


def softmax_cross_entropy(labels, logits, dim=-1):
    scaled_logits = logits - corenn.max(logits)
    normalized_logits = scaled_logits - corenn.logsumexp(scaled_logits, dim)
    return -corenn.sum(labels * normalized_logits)


def test_unstable_cross_entropy_is_inf():
    labels = corenn.tensor([0.5, 0.5])
    logits = corenn.tensor([1000., 0.])
    with np.errstate(all="ignore"):
        xe = unstable_softmax_cross_entropy(labels, logits)
    assert xe.numpy() == np.inf


def test_stable_cross_entropy_and_its_gradient():
    labels = corenn.tensor([0.5, 0.5])
    logits = corenn.tensor([1000., 0.])
    xe = softmax_cross_entropy(labels, logits)
    assert xe.numpy() == 500.0
    logits.requires_grad_(True)
    xe = softmax_cross_entropy(labels, logits)
    g = corenn.autograd.grad(xe, logits)[0]
    assert g.numpy().tolist() == [0.5, -0.5]
    assert corenn.log_softmax(corenn.tensor([1000., 0.]), 0).tolist() == [0.0, -1000.0]
