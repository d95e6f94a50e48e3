"""corenn-parametrize against PyTorch 2.13 on the same originals: values, gradients, power iterations, keys, checkpoints."""
from __future__ import annotations

import warnings

import numpy as np
import pytest

import corenn
import corenn.nn.utils.parametrize as P
from corenn import nn
from corenn.nn.utils import parametrizations
from parametrize_helpers import corenn_state_from_torch, to_corenn, to_numpy

pytestmark = pytest.mark.torch

ORTHOGONAL_SHAPES = [(4, 4), (6, 3), (3, 6), (2, 5, 3)]


class HasWeight:
    """Builds one module holding ``weight`` of any shape (a batch of matrices too), in either framework."""

    @staticmethod
    def torch(torch, values):
        module = torch.nn.Module()
        module.weight = torch.nn.Parameter(torch.tensor(values))
        return module

    @staticmethod
    def corenn(values):
        module = nn.Module()
        module.weight = nn.Parameter(corenn.tensor(values))
        return module


def assert_close(corenn_tensor, torch_tensor, atol=1e-10, rtol=1e-8, what=""):
    np.testing.assert_allclose(to_numpy(corenn_tensor), to_numpy(torch_tensor), atol=atol, rtol=rtol, err_msg=what)


@pytest.mark.parametrize("shape", ORTHOGONAL_SHAPES, ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("orthogonal_map", ["matrix_exp", "cayley", "householder"])
@pytest.mark.parametrize("use_trivialization", [True, False], ids=["trivialization", "no-trivialization"])
def test_orthogonal_forward_and_gradient_match_pytorch(torch, shape, orthogonal_map, use_trivialization):
    rng = np.random.default_rng(sum(shape))
    values = rng.standard_normal(shape)
    theirs = torch.nn.utils.parametrizations.orthogonal(HasWeight.torch(torch, values), "weight", orthogonal_map,
                                                        use_trivialization=use_trivialization)
    ours = parametrizations.orthogonal(HasWeight.corenn(values), "weight", orthogonal_map,
                                       use_trivialization=use_trivialization)
    # The weight right after registration is fixed by the original weight alone (the random columns
    # that complete a rectangular base do not reach it).
    assert_close(ours.weight, theirs.weight, atol=1e-9, what="initial weight")
    assert list(ours.state_dict()) == list(theirs.state_dict())

    # Same originals (base included), moved off the initial point, then forward and backward. The
    # diagonal stays: householder reads signs there (training never changes it: no gradient reaches it).
    off_diagonal = 1.0 - np.eye(shape[-2], shape[-1])
    with torch.no_grad():
        theirs.parametrizations.weight.original.add_(torch.tensor(0.3 * rng.standard_normal(shape) * off_diagonal))
    ours.load_state_dict(corenn_state_from_torch(theirs.state_dict()))
    weights = rng.standard_normal(shape)
    (theirs.weight * torch.tensor(weights)).sum().backward()
    (ours.weight * corenn.tensor(weights)).sum().backward()
    assert_close(ours.weight, theirs.weight, atol=1e-9, what="weight")
    assert_close(ours.parametrizations.weight.original.grad, theirs.parametrizations.weight.original.grad,
                 atol=1e-8, what="gradient of original")
    W = ours.weight.detach()
    gram = W.mT @ W if shape[-2] >= shape[-1] else W @ W.mT
    assert float((gram - corenn.eye(gram.shape[-1])).abs().max()) < 1e-12


def test_orthogonal_float32_matches_pytorch(torch):
    torch.manual_seed(0)
    theirs = torch.nn.utils.parametrizations.orthogonal(torch.nn.Linear(8, 8))
    ours = parametrizations.orthogonal(nn.Linear(8, 8))
    with torch.no_grad():
        theirs.parametrizations.weight.original.add_(0.5 * torch.randn(8, 8))
    ours.load_state_dict(corenn_state_from_torch(theirs.state_dict()))
    x = torch.randn(3, 8)
    theirs(x).square().sum().backward()
    ours(to_corenn(x)).square().sum().backward()
    assert_close(ours.weight, theirs.weight, atol=2e-6, rtol=1e-5)
    assert_close(ours.parametrizations.weight.original.grad, theirs.parametrizations.weight.original.grad,
                 atol=2e-5, rtol=1e-4)


def test_orthogonal_assignment_matches_pytorch(torch):
    rng = np.random.default_rng(3)
    theirs = torch.nn.utils.parametrizations.orthogonal(HasWeight.torch(torch, rng.standard_normal((5, 5))),
                                                        orthogonal_map="householder", use_trivialization=False)
    ours = parametrizations.orthogonal(HasWeight.corenn(rng.standard_normal((5, 5))),
                                       orthogonal_map="householder", use_trivialization=False)
    target = np.linalg.qr(rng.standard_normal((5, 5)))[0]
    theirs.weight = torch.tensor(target)
    ours.weight = corenn.tensor(target)
    assert_close(ours.parametrizations.weight.original, theirs.parametrizations.weight.original, atol=1e-10)
    assert_close(ours.weight, theirs.weight, atol=1e-10)


@pytest.mark.parametrize("make, n_power_iterations", [
    (lambda lib: lib.nn.Linear(5, 4, dtype=lib.float64), 1),
    (lambda lib: lib.nn.Linear(6, 3, dtype=lib.float64), 3),
    (lambda lib: lib.nn.Conv2d(2, 3, 3, dtype=lib.float64), 2),
    (lambda lib: lib.nn.ConvTranspose2d(2, 3, 3, dtype=lib.float64), 1),
], ids=["linear", "linear-3-iterations", "conv2d", "conv-transpose2d"])
def test_spectral_norm_power_iterations_follow_pytorch_step_by_step(torch, make, n_power_iterations):
    torch.manual_seed(1)
    theirs = torch.nn.utils.parametrizations.spectral_norm(make(torch), n_power_iterations=n_power_iterations)
    ours = parametrizations.spectral_norm(make(corenn), n_power_iterations=n_power_iterations)
    assert list(ours.state_dict()) == list(theirs.state_dict())
    assert ours.parametrizations.weight[0].dim == theirs.parametrizations.weight[0].dim
    ours.load_state_dict(corenn_state_from_torch(theirs.state_dict()))
    theirs_sn, ours_sn = theirs.parametrizations.weight[0], ours.parametrizations.weight[0]
    for step in range(4):      # training mode: every read refines _u and _v
        assert_close(ours.weight, theirs.weight, atol=1e-12, what=f"weight at read {step}")
        assert_close(ours_sn._u, theirs_sn._u, atol=1e-12, what=f"_u at read {step}")
        assert_close(ours_sn._v, theirs_sn._v, atol=1e-12, what=f"_v at read {step}")
    theirs.eval(), ours.eval()
    u = ours_sn._u.clone()
    for _ in range(2):         # eval mode: no iteration, the same weight every time
        assert_close(ours.weight, theirs.weight, atol=1e-12, what="eval weight")
    assert corenn.equal(ours_sn._u, u)
    theirs.train(), ours.train()
    (theirs.weight.square()).sum().backward()
    (ours.weight.square()).sum().backward()
    assert_close(ours.parametrizations.weight.original.grad, theirs.parametrizations.weight.original.grad,
                 atol=1e-10, what="gradient of original")


def test_spectral_norm_power_method_from_the_same_start_matches_pytorch(torch):
    torch.manual_seed(2)
    theirs = torch.nn.utils.parametrizations.spectral_norm(torch.nn.Linear(7, 5, dtype=torch.float64))
    ours = parametrizations.spectral_norm(nn.Linear(7, 5, dtype=corenn.float64))
    ours.load_state_dict(corenn_state_from_torch(theirs.state_dict()))
    weight = theirs.parametrizations.weight.original.detach()
    theirs.parametrizations.weight[0]._power_method(weight, 15)       # the 15 iterations run at registration
    ours.parametrizations.weight[0]._power_method(to_corenn(weight), 15)
    assert_close(ours.parametrizations.weight[0]._u, theirs.parametrizations.weight[0]._u, atol=1e-12)
    assert_close(ours.parametrizations.weight[0]._v, theirs.parametrizations.weight[0]._v, atol=1e-12)


def test_spectral_norm_of_a_vector_is_exact(torch):
    module_t, module_c = torch.nn.Module(), nn.Module()
    module_t.register_buffer("scale", torch.tensor([3.0, 4.0]))
    module_c.register_buffer("scale", corenn.tensor([3.0, 4.0]))
    torch.nn.utils.parametrizations.spectral_norm(module_t, "scale")
    parametrizations.spectral_norm(module_c, "scale")
    assert_close(module_c.scale, module_t.scale, atol=1e-7)
    assert list(module_c.state_dict()) == list(module_t.state_dict())


@pytest.mark.parametrize("dim", [0, 1, None, -2])
def test_weight_norm_g_v_split_forward_and_gradients_match_pytorch(torch, dim):
    torch.manual_seed(3)
    theirs = torch.nn.utils.parametrizations.weight_norm(torch.nn.Linear(5, 4, dtype=torch.float64), dim=dim)
    ours = nn.Linear(5, 4, dtype=corenn.float64)
    ours.load_state_dict({"weight": to_corenn(theirs.weight), "bias": to_corenn(theirs.bias)})
    parametrizations.weight_norm(ours, dim=dim)
    assert list(ours.state_dict()) == list(theirs.state_dict())
    plist_t, plist_c = theirs.parametrizations.weight, ours.parametrizations.weight
    assert_close(plist_c.original0, plist_t.original0, what="g")   # g: the norms, shaped like PyTorch's
    assert_close(plist_c.original1, plist_t.original1, what="v")
    with torch.no_grad():
        plist_t.original0.mul_(torch.linspace(0.5, 2.0, plist_t.original0.numel()).reshape(plist_t.original0.shape))
    ours.load_state_dict(corenn_state_from_torch(theirs.state_dict()))
    x = torch.randn(3, 5, dtype=torch.float64)
    theirs(x).square().sum().backward()
    ours(to_corenn(x)).square().sum().backward()
    assert_close(ours.weight, theirs.weight)
    assert_close(plist_c.original0.grad, plist_t.original0.grad, what="gradient of g")
    assert_close(plist_c.original1.grad, plist_t.original1.grad, what="gradient of v")


def test_old_weight_g_weight_v_state_dicts_load(torch):
    torch.manual_seed(4)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")   # PyTorch deprecates the old weight_norm
        old = torch.nn.utils.weight_norm(torch.nn.Linear(5, 4))
    assert {"weight_g", "weight_v"} <= set(old.state_dict())
    ours = parametrizations.weight_norm(nn.Linear(5, 4))
    assert ours.load_state_dict(corenn_state_from_torch(old.state_dict())) is not None   # strict
    assert_close(ours.weight, old.weight, atol=1e-6)
    nested = nn.Sequential(parametrizations.weight_norm(nn.Linear(5, 4)))
    nested.load_state_dict({"0." + key: value for key, value in corenn_state_from_torch(old.state_dict()).items()})
    assert_close(nested[0].weight, old.weight, atol=1e-6)


class LowRank:
    """The same tuple-returning parametrization in both frameworks."""

    @staticmethod
    def build(lib):
        class Module(lib.nn.Module):
            def forward(self, U, V):
                return U @ V

            def right_inverse(self, W):
                return W[:, :2].clone(), W[:2, :].clone()
        return Module()


def test_custom_parametrization_keys_and_values_match_pytorch(torch):
    torch.manual_seed(5)
    theirs = torch.nn.Linear(4, 4)
    ours = nn.Linear(4, 4)
    ours.load_state_dict(corenn_state_from_torch(theirs.state_dict()))
    torch.nn.utils.parametrize.register_parametrization(theirs, "weight", LowRank.build(torch), unsafe=True)
    P.register_parametrization(ours, "weight", LowRank.build(corenn), unsafe=True)
    assert list(ours.state_dict()) == list(theirs.state_dict()) == [
        "bias", "parametrizations.weight.original0", "parametrizations.weight.original1"]
    assert_close(ours.weight, theirs.weight, atol=1e-6)


def torch_model(torch):
    return torch.nn.Sequential(
        torch.nn.utils.parametrizations.orthogonal(torch.nn.Linear(6, 6)),
        torch.nn.Tanh(),
        torch.nn.utils.parametrizations.spectral_norm(torch.nn.Linear(6, 4)),
        torch.nn.utils.parametrizations.weight_norm(torch.nn.Linear(4, 3)),
        torch.nn.utils.parametrizations.orthogonal(torch.nn.Linear(3, 5), orthogonal_map="cayley"))


def corenn_model():
    return nn.Sequential(
        parametrizations.orthogonal(nn.Linear(6, 6)),
        nn.Tanh(),
        parametrizations.spectral_norm(nn.Linear(6, 4)),
        parametrizations.weight_norm(nn.Linear(4, 3)),
        parametrizations.orthogonal(nn.Linear(3, 5), orthogonal_map="cayley"))


def test_a_pytorch_checkpoint_loads_into_corenn_through_safetensors_and_back(torch, tmp_path):
    safetensors_torch = pytest.importorskip("safetensors.torch")
    torch.manual_seed(6)
    theirs = torch_model(torch)
    theirs(torch.randn(2, 6))                         # one power-iteration step: _u/_v moved
    path = tmp_path / "torch.safetensors"
    safetensors_torch.save_file({k: v.contiguous() for k, v in theirs.state_dict().items()}, path)

    ours = corenn_model()
    assert list(ours.state_dict()) == list(theirs.state_dict())
    ours.load_state_dict(corenn.load(path))
    theirs.eval(), ours.eval()
    x = torch.randn(3, 6)
    assert_close(ours(to_corenn(x)), theirs(x), atol=1e-5, rtol=1e-5)

    # ... and a corenn checkpoint loads into PyTorch.
    with corenn.no_grad():
        ours[0].parametrizations.weight.original.add_(0.1)
    back = tmp_path / "corenn.safetensors"
    corenn.save(ours.state_dict(), back)
    fresh = torch_model(torch).eval()
    fresh.load_state_dict(safetensors_torch.load_file(back))
    assert_close(ours(to_corenn(x)), fresh(x), atol=1e-5, rtol=1e-5)
