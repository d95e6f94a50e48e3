"""corenn.distributions against torch.distributions: log_prob, entropy, moments, KL and gradients on the same
parameters; samples by their shapes and statistics (corenn's generator draws other numbers than PyTorch's)."""
from __future__ import annotations

import numpy as np
import pytest

import corenn
from corenn import distributions as D

RNG = np.random.default_rng(8)


def _pair(torch, cls_name, leaves=None, **params):
    """The distribution in both frameworks on the same parameters (leaves that require grad, kept in ``leaves``)."""
    ours_leaves = {k: corenn.tensor(v, requires_grad=v.dtype.kind == "f") for k, v in params.items()}
    theirs_leaves = {k: torch.tensor(v, requires_grad=v.dtype.kind == "f") for k, v in params.items()}
    if leaves is not None:
        leaves.update({k: (ours_leaves[k], theirs_leaves[k]) for k in params})
    return getattr(D, cls_name)(**ours_leaves), getattr(torch.distributions, cls_name)(**theirs_leaves)


def _close(ours, theirs, **kw):
    np.testing.assert_allclose(ours.detach().numpy(), theirs.detach().numpy(), rtol=1e-6, atol=1e-6, **kw)


CASES = {
    "Normal": (dict(loc=RNG.standard_normal((2, 3)), scale=RNG.uniform(0.5, 2, (3,))), RNG.standard_normal((4, 2, 3))),
    "Uniform": (dict(low=np.array([0.0, -1.0]), high=np.array([1.0, 3.0])), np.array([[0.5, 2.0], [0.1, -0.5]])),
    "Bernoulli": (dict(probs=RNG.uniform(0.1, 0.9, (3,))), np.array([[1.0, 0.0, 1.0], [0.0, 0.0, 1.0]])),
    "Categorical": (dict(logits=RNG.standard_normal((2, 4))), np.array([[3, 0], [1, 2], [0, 0]])),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_log_prob_entropy_moments_and_gradients_match_torch(torch, name):
    params, value = CASES[name]
    leaves = {}
    ours, theirs = _pair(torch, name, leaves, **params)
    assert tuple(ours.batch_shape) == tuple(theirs.batch_shape)
    assert tuple(ours.event_shape) == tuple(theirs.event_shape)
    log_prob = ours.log_prob(corenn.tensor(value))
    t_log_prob = theirs.log_prob(torch.tensor(value))
    _close(log_prob, t_log_prob)
    _close(ours.entropy(), theirs.entropy())
    if name != "Categorical":  # PyTorch's categorical mean and variance are nan
        _close(ours.mean, theirs.mean)
        _close(ours.variance, theirs.variance)
    weights = RNG.standard_normal(tuple(t_log_prob.shape))
    ((log_prob * corenn.tensor(weights)).sum() + ours.entropy().sum()).backward()
    ((t_log_prob * torch.tensor(weights)).sum() + theirs.entropy().sum()).backward()
    for ours_leaf, theirs_leaf in leaves.values():
        if theirs_leaf.grad is not None:
            _close(ours_leaf.grad, theirs_leaf.grad)
    assert repr(ours) == repr(theirs).replace("torch.", "corenn.")


@pytest.mark.parametrize("name", sorted(CASES))
def test_samples_have_the_right_shape_and_statistics(torch, name):
    params, _ = CASES[name]
    ours, theirs = _pair(torch, name, **params)
    corenn.manual_seed(0)
    draws = ours.sample((20000,))
    assert tuple(draws.shape) == tuple(theirs.sample((20000,)).shape)
    if name == "Categorical":
        frequencies = np.stack([(draws.numpy() == k).mean(0) for k in range(4)], -1)
        np.testing.assert_allclose(frequencies, ours.probs.detach().numpy(), atol=0.015)
    else:
        np.testing.assert_allclose(draws.numpy().mean(0), ours.mean.detach().numpy(), atol=0.05)
        np.testing.assert_allclose(draws.numpy().var(0), ours.variance.detach().numpy(), rtol=0.05, atol=0.01)
    assert not draws.requires_grad


def test_rsample_carries_gradients_to_the_parameters():
    loc, scale = corenn.tensor([0.5], requires_grad=True), corenn.tensor([2.0], requires_grad=True)
    corenn.manual_seed(1)
    sample = D.Normal(loc, scale).rsample((1000,))
    sample.mean().backward()
    assert loc.grad.item() == pytest.approx(1.0)
    with pytest.raises(NotImplementedError, match="Categorical has no rsample"):
        D.Categorical(logits=corenn.zeros(3)).rsample()


@pytest.mark.parametrize("name", sorted(CASES))
def test_kl_divergence_matches_torch(torch, name):
    params, _ = CASES[name]
    other = {k: (v + 0.3 if k != "high" else v + 1.0) if v.dtype.kind == "f" else v for k, v in params.items()}
    if name == "Bernoulli":
        other = {"probs": np.clip(params["probs"] + 0.05, 0, 1)}
    p, tp = _pair(torch, name, **params)
    q, tq = _pair(torch, name, **other)
    _close(D.kl_divergence(p, q), torch.distributions.kl_divergence(tp, tq))


def test_invalid_parameters_and_values_raise_value_errors_as_pytorch():
    with pytest.raises(ValueError, match="scale"):
        D.Normal(corenn.zeros(2), corenn.tensor([1.0, -1.0]))
    with pytest.raises(ValueError, match="Either `probs` or `logits`"):
        D.Categorical()
    with pytest.raises(ValueError, match="support"):
        D.Categorical(logits=corenn.zeros(3)).log_prob(corenn.tensor(5))
    with pytest.raises(NotImplementedError, match="Normal and Categorical"):
        D.kl_divergence(D.Normal(0.0, 1.0), D.Categorical(logits=corenn.zeros(2)))
