"""corenn.nn.utils.prune against torch.nn.utils.prune 2.13 on the same weights: masks, keys, gradients, errors."""
from __future__ import annotations

import math

import numpy as np
import pytest

import corenn
import corenn.nn.utils.prune as prune
from prune_helpers import copy_weights, to_corenn, to_numpy, twin_layers

pytestmark = pytest.mark.torch


def assert_same_pruned_state(t, c, name="weight"):
    """Same parameter, buffer and state-dict names in the same order, same mask, same pruned tensor."""
    assert [n for n, _ in c.named_parameters()] == [n for n, _ in t.named_parameters()]
    assert [n for n, _ in c.named_buffers()] == [n for n, _ in t.named_buffers()]
    assert list(c.state_dict()) == list(t.state_dict())
    np.testing.assert_array_equal(to_numpy(getattr(c, name + "_mask")), to_numpy(getattr(t, name + "_mask")))
    np.testing.assert_array_equal(to_numpy(getattr(c, name)), to_numpy(getattr(t, name)))
    assert getattr(c, name + "_mask").dtype == corenn.float32


DETERMINISTIC = [
    ("identity", lambda P, m: P.identity(m, "weight")),
    ("l1 fraction", lambda P, m: P.l1_unstructured(m, "weight", amount=0.3)),
    ("l1 count", lambda P, m: P.l1_unstructured(m, "weight", amount=17)),
    ("l1 all", lambda P, m: P.l1_unstructured(m, "weight", amount=1.0)),
    ("l1 none", lambda P, m: P.l1_unstructured(m, "weight", amount=0)),
    ("l1 bias", lambda P, m: P.l1_unstructured(m, "bias", amount=2)),
    ("ln2 dim0", lambda P, m: P.ln_structured(m, "weight", amount=0.5, n=2, dim=0)),
    ("ln1 dim1", lambda P, m: P.ln_structured(m, "weight", amount=2, n=1, dim=1)),
    ("ln inf dim-1", lambda P, m: P.ln_structured(m, "weight", amount=0.4, n=math.inf, dim=-1)),
    ("ln -inf dim0", lambda P, m: P.ln_structured(m, "weight", amount=1, n=-math.inf, dim=0)),
    ("ln 3 dim0", lambda P, m: P.ln_structured(m, "weight", amount=3, n=3, dim=0)),
    ("ln fro dim0", lambda P, m: P.ln_structured(m, "weight", amount=2, n="fro", dim=0)),
]


@pytest.mark.parametrize("kind", ["linear", "conv"])
@pytest.mark.parametrize("label, apply", DETERMINISTIC, ids=[d[0] for d in DETERMINISTIC])
def test_deterministic_methods_give_pytorchs_masks_and_keys(torch, kind, label, apply):
    import torch.nn.utils.prune as torch_prune
    t, c = twin_layers(torch, kind)
    if label == "ln fro dim0" and kind == "conv":   # a matrix norm over 3 dims: both refuse
        for P, m in ((torch_prune, t), (prune, c)):
            with pytest.raises(RuntimeError, match="linalg.matrix_norm: dim must be a 2-tuple. Got 1 2 3"):
                apply(P, m)
        return
    assert apply(torch_prune, t) is t
    assert apply(prune, c) is c
    assert_same_pruned_state(t, c, "bias" if "bias" in label else "weight")
    x = np.random.default_rng(0).standard_normal((2, 12) if kind == "linear" else (2, 3, 6, 6)).astype(np.float32)
    np.testing.assert_allclose(to_numpy(c(corenn.tensor(x))), to_numpy(t(torch.tensor(x))), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("seed", range(12))
def test_ties_are_broken_as_pytorch_breaks_them(torch, seed):
    """Few distinct values (zeros left by an earlier round, quantized weights): PyTorch's topk order decides."""
    import torch.nn.utils.prune as torch_prune
    rng = np.random.default_rng(seed)
    values = rng.integers(-2, 3, 7 * 12) * 0.5
    t, c = twin_layers(torch, "linear", values=values)
    amount = int(rng.integers(1, 7 * 12))
    torch_prune.l1_unstructured(t, "weight", amount=amount)
    prune.l1_unstructured(c, "weight", amount=amount)
    assert_same_pruned_state(t, c)
    # Structured: identical channels have identical norms.
    t, c = twin_layers(torch, "conv", values=np.tile(rng.integers(0, 2, 3 * 9), 6) * (1 + rng.integers(0, 2, 6 * 27)))
    torch_prune.ln_structured(t, "weight", amount=int(rng.integers(1, 6)), n=1, dim=0)
    prune.ln_structured(c, "weight", amount=t.weight_mask.sum((1, 2, 3)).eq(0).sum().item(), n=1, dim=0)
    assert_same_pruned_state(t, c)


def test_ties_in_large_tensors_both_pytorch_algorithms(torch):
    """k * 64 <= n takes partial_sort in PyTorch, otherwise nth_element: both replayed."""
    from corenn_prune._selection import topk_indices
    rng = np.random.default_rng(3)
    for n, k in [(5000, 20), (5000, 2000), (50_000, 30_000), (640, 10), (639, 10)]:
        values = rng.integers(0, 4, n).astype(np.float32)
        for largest in (False, True):
            expected = np.sort(torch.topk(torch.from_numpy(values), k, largest=largest).indices.numpy())
            np.testing.assert_array_equal(topk_indices(values, k, largest), expected)


def test_iterative_pruning_composes_masks_like_pytorchs_container(torch):
    import torch.nn.utils.prune as torch_prune
    t, c = twin_layers(torch, "conv")
    for P, m in ((torch_prune, t), (prune, c)):
        P.l1_unstructured(m, "weight", amount=0.3)
        P.ln_structured(m, "weight", amount=2, n=2, dim=0)
        P.l1_unstructured(m, "weight", amount=0.25)          # a quarter of what remains
        P.ln_structured(m, "weight", amount=0.5, n=1, dim=1)  # half of the input channels not yet pruned
        P.custom_from_mask(m, "weight", mask=(torch if m is t else corenn).ones(6, 3, 3, 3))
        P.identity(m, "weight")
    assert_same_pruned_state(t, c)
    torch_hook = next(h for h in t._forward_pre_hooks.values() if h._tensor_name == "weight")
    corenn_hook = next(h for h in c._forward_pre_hooks.values() if h._tensor_name == "weight")
    assert [type(m).__name__ for m in corenn_hook] == [type(m).__name__ for m in torch_hook]
    assert corenn_hook is prune.pruning_method(c, "weight") and len(c._forward_pre_hooks) == 1
    # amounts applied to what remained: the second l1 round pruned a quarter of the entries left then
    remaining_after_two = 6 * 27 - int((to_numpy(t.weight_mask) == 0).sum())
    assert remaining_after_two == int(c.weight_mask.sum().item())


def test_importance_scores_and_global_unstructured_match(torch):
    import torch.nn.utils.prune as torch_prune
    torch.manual_seed(1)
    tnet = torch.nn.Sequential(torch.nn.Linear(10, 8), torch.nn.ReLU(), torch.nn.Linear(8, 4))
    cnet = corenn.nn.Sequential(corenn.nn.Linear(10, 8), corenn.nn.ReLU(), corenn.nn.Linear(8, 4))
    copy_weights(tnet, cnet)
    scores = torch.rand(8, 10)
    torch_prune.l1_unstructured(tnet[0], "bias", amount=3, importance_scores=torch.arange(8.0))
    prune.l1_unstructured(cnet[0], "bias", amount=3, importance_scores=corenn.arange(8.0))
    for P, net, s in ((torch_prune, tnet, scores), (prune, cnet, to_corenn(scores))):
        P.global_unstructured([(net[0], "weight"), (net[2], "weight"), (net[0], "bias")],
                              pruning_method=P.L1Unstructured, amount=0.4, importance_scores={(net[0], "weight"): s})
        P.global_unstructured([(net[0], "weight"), (net[2], "weight")], pruning_method=P.L1Unstructured, amount=9)
    for i in (0, 2):
        assert_same_pruned_state(tnet[i], cnet[i])
    assert_same_pruned_state(tnet[0], cnet[0], "bias")


def test_gradients_reach_weight_orig_masked(torch):
    import torch.nn.utils.prune as torch_prune
    t, c = twin_layers(torch, "conv")
    torch_prune.l1_unstructured(t, "weight", amount=0.5)
    prune.l1_unstructured(c, "weight", amount=0.5)
    x = np.random.default_rng(1).standard_normal((2, 3, 5, 5)).astype(np.float32)
    (t(torch.tensor(x)) ** 2).sum().backward()
    (c(corenn.tensor(x)) ** 2).sum().backward()
    np.testing.assert_allclose(to_numpy(c.weight_orig.grad), to_numpy(t.weight_orig.grad), rtol=1e-4, atol=1e-5)
    assert np.all(to_numpy(c.weight_orig.grad)[to_numpy(c.weight_mask) == 0] == 0)
    assert c.weight_mask.grad is None and c.weight.grad_fn is not None


def test_remove_leaves_a_plain_parameter_like_pytorch(torch):
    import torch.nn.utils.prune as torch_prune
    t, c = twin_layers(torch, "linear")
    for P, m in ((torch_prune, t), (prune, c)):
        P.ln_structured(m, "weight", amount=3, n=2, dim=0)
        orig = m.weight_orig
        assert P.remove(m, "weight") is m
        assert m.weight is orig                                   # the same Parameter object
    assert [n for n, _ in c.named_parameters()] == [n for n, _ in t.named_parameters()] == ["bias", "weight"]
    assert not list(c.named_buffers()) and isinstance(c.weight, corenn.nn.Parameter)
    np.testing.assert_array_equal(to_numpy(c.weight), to_numpy(t.weight))
    assert not c._forward_pre_hooks and not c.computed_attribute_names() and not prune.is_pruned(c)


def test_random_methods_prune_the_amounts_pytorch_prunes(torch):
    import torch.nn.utils.prune as torch_prune
    corenn.manual_seed(0)
    torch.manual_seed(0)
    t, c = twin_layers(torch, "conv")
    for P, m in ((torch_prune, t), (prune, c)):
        P.random_unstructured(m, "weight", amount=0.3)
        P.random_structured(m, "weight", amount=2, dim=0)
        P.random_unstructured(m, "weight", amount=10)
    tm, cm = to_numpy(t.weight_mask), to_numpy(c.weight_mask)
    assert (cm == 0).sum() == (tm == 0).sum()
    assert (cm.sum((1, 2, 3)) == 0).sum() == (tm.sum((1, 2, 3)) == 0).sum() >= 2
    assert set(np.unique(cm)) <= {0.0, 1.0}
    assert list(c.state_dict()) == list(t.state_dict())
    # Seeded: the same seed gives the same mask again.
    one, two = corenn.nn.Conv2d(3, 6, 3), corenn.nn.Conv2d(3, 6, 3)
    corenn.manual_seed(5)
    first = to_numpy(prune.random_unstructured(one, "weight", amount=0.5).weight_mask)
    corenn.manual_seed(5)
    np.testing.assert_array_equal(to_numpy(prune.random_unstructured(two, "weight", amount=0.5).weight_mask), first)


BAD_AMOUNTS = [
    (lambda P, m: P.l1_unstructured(m, "weight", amount=-1), ValueError),
    (lambda P, m: P.l1_unstructured(m, "weight", amount=1.5), ValueError),
    (lambda P, m: P.l1_unstructured(m, "weight", amount=-0.1), ValueError),
    (lambda P, m: P.l1_unstructured(m, "weight", amount="half"), TypeError),
    (lambda P, m: P.random_unstructured(m, "weight", amount=None), TypeError),
    (lambda P, m: P.l1_unstructured(m, "weight", amount=1000), ValueError),
    (lambda P, m: P.ln_structured(m, "weight", amount=8, n=2, dim=0), ValueError),
    (lambda P, m: P.ln_structured(m, "bias", amount=1, n=2, dim=0), ValueError),
    (lambda P, m: P.random_structured(m, "weight", amount=1, dim=2), IndexError),
    (lambda P, m: P.random_structured(m, "weight", amount=1.2, dim=0), ValueError),
    (lambda P, m: P.l1_unstructured(m, "weight", amount=2, importance_scores=(m.weight[:2])), AssertionError),
    (lambda P, m: P.remove(m, "weight"), ValueError),
    (lambda P, m: P.global_unstructured(3, pruning_method=P.L1Unstructured, amount=1), TypeError),
    (lambda P, m: P.global_unstructured([(m, "weight")], P.L1Unstructured, importance_scores=[1], amount=1),
     TypeError),
    (lambda P, m: P.global_unstructured([(m, "weight")], P.RandomStructured, amount=1), TypeError),
]


@pytest.mark.parametrize("index", range(len(BAD_AMOUNTS)))
def test_bad_arguments_raise_pytorchs_errors(torch, index):
    import torch.nn.utils.prune as torch_prune
    apply, error = BAD_AMOUNTS[index]
    t, c = twin_layers(torch, "linear")
    with pytest.raises(error) as torch_error:
        apply(torch_prune, t)
    with pytest.raises(error) as corenn_error:
        apply(prune, c)
    # The same message, up to the library's name (torch.Size -> corenn.Size, the classes' modules).
    expected = str(torch_error.value).replace("torch.nn.utils.prune", "corenn_prune.prune").replace("torch.", "corenn.")
    assert str(corenn_error.value) == expected
    # Nothing changed: a failed prune leaves the module as it was.
    assert list(c.state_dict()) == ["weight", "bias"] and not prune.is_pruned(c)


def test_a_failed_round_leaves_earlier_pruning_as_it_was(torch):
    c = corenn.nn.Linear(12, 7)
    prune.l1_unstructured(c, "weight", amount=0.5)
    prune.l1_unstructured(c, "weight", amount=0.1)
    before = to_numpy(c.weight_mask).copy()
    with pytest.raises(ValueError, match="amount=100 should be smaller"):
        prune.l1_unstructured(c, "weight", amount=100)
    np.testing.assert_array_equal(to_numpy(c.weight_mask), before)
    assert [type(m).__name__ for m in prune.pruning_method(c, "weight")] == ["L1Unstructured", "L1Unstructured"]


def test_custom_method_by_subclassing_compute_mask(torch):
    import torch.nn.utils.prune as torch_prune

    def every_other(base, lib):
        class EveryOther(base.BasePruningMethod):
            PRUNING_TYPE = "unstructured"

            def compute_mask(self, t, default_mask):
                mask = default_mask.clone()
                mask.view(-1)[::2] = 0
                return mask
        return EveryOther

    t, c = twin_layers(torch, "linear")
    every_other(torch_prune, torch).apply(t, "bias")
    every_other(prune, corenn).apply(c, "bias")
    torch_prune.l1_unstructured(t, "bias", amount=1)   # iterative on top of a custom method
    prune.l1_unstructured(c, "bias", amount=1)
    assert_same_pruned_state(t, c, "bias")
    method = prune.L1Unstructured(amount=0.5)
    x = np.random.default_rng(2).standard_normal(10).astype(np.float32)
    np.testing.assert_array_equal(to_numpy(method.prune(corenn.tensor(x))),
                                  to_numpy(torch_prune.L1Unstructured(amount=0.5).prune(torch.tensor(x))))


def test_pruned_pytorch_checkpoint_through_safetensors_loads_and_goes_back(torch, tmp_path):
    import safetensors.numpy
    import safetensors.torch
    import torch.nn.utils.prune as torch_prune
    t, c = twin_layers(torch, "conv")
    fresh_t, _ = twin_layers(torch, "conv", seed=9)
    torch_prune.ln_structured(t, "weight", amount=2, n=2, dim=0)
    torch_prune.l1_unstructured(t, "weight", amount=0.2)
    path = tmp_path / "torch_pruned.safetensors"
    safetensors.numpy.save_file({k: v.detach().numpy() for k, v in t.state_dict().items()}, str(path))
    # corenn: reparametrize (identity) and load -- the masks come from the checkpoint.
    prune.identity(c, "weight")
    assert c.load_state_dict(corenn.load(str(path))) is not None
    assert_same_pruned_state(t, c)
    x = np.random.default_rng(3).standard_normal((1, 3, 5, 5)).astype(np.float32)
    np.testing.assert_allclose(to_numpy(c(corenn.tensor(x))), to_numpy(t(torch.tensor(x))), rtol=1e-5, atol=1e-6)
    # ...and back into a PyTorch pruned module.
    back = tmp_path / "corenn_pruned.safetensors"
    corenn.save(c.state_dict(), str(back))
    torch_prune.identity(fresh_t, "weight")
    fresh_t.load_state_dict(safetensors.torch.load_file(str(back)))
    np.testing.assert_array_equal(to_numpy(fresh_t(torch.tensor(x))), to_numpy(t(torch.tensor(x))))
    # (PyTorch's fresh_t.weight was stale until that forward; corenn's c.weight never is.)
    np.testing.assert_array_equal(to_numpy(fresh_t.weight), to_numpy(t.weight))
