"""corenn.nn.utils.parametrize: registration, chaining, right_inverse, assignment, removal, cached(), round trips, errors."""
from __future__ import annotations

import copy
import pickle

import pytest

import corenn
import corenn.nn.utils.parametrize as P
import corenn_parametrize
from corenn import nn
from corenn.nn.utils import parametrizations


class Symmetric(nn.Module):
    def forward(self, X):
        return X.triu() + X.triu(1).mT

    def right_inverse(self, A):
        return A.triu()


class Skew(nn.Module):
    def forward(self, X):
        A = X.triu(1)
        return A - A.mT


class Scale(nn.Module):
    """Doubles; its right_inverse halves. Counts its calls (for cached())."""

    def __init__(self):
        super().__init__()
        self.calls = 0

    def forward(self, X):
        self.calls += 1
        return 2 * X

    def right_inverse(self, X):
        return X / 2


class LowRank(nn.Module):
    """weight = U @ V: right_inverse returns a tuple, so the originals are original0 and original1."""

    def forward(self, U, V):
        return U @ V

    def right_inverse(self, W):
        return W[:, :1].clone(), corenn.ones(1, W.shape[1], dtype=W.dtype)


def linear(n=3, m=3):
    corenn.manual_seed(0)
    return nn.Linear(m, n)


def test_the_import_paths_are_the_plugins_modules():
    import corenn.nn.utils.parametrizations as PS
    assert P is corenn_parametrize.parametrize
    assert PS is corenn_parametrize.parametrizations
    assert corenn.nn.utils.parametrize is P
    assert corenn_parametrize.register_parametrization is P.register_parametrization
    assert corenn.plugins.records["parametrize"].status == "active"


def test_register_moves_the_parameter_and_keeps_the_class_and_the_object():
    layer = linear()
    weight = layer.weight
    P.register_parametrization(layer, "weight", Symmetric())
    assert type(layer) is nn.Linear and P.type_before_parametrizations(layer) is nn.Linear
    assert layer.parametrizations.weight.original is weight  # the optimizer's parameter stays the same
    assert corenn.equal(layer.weight, layer.weight.mT)
    assert [name for name, _ in layer.named_parameters()] == ["bias", "parametrizations.weight.original"]
    assert list(layer.state_dict()) == ["bias", "parametrizations.weight.original"]
    assert P.is_parametrized(layer) and P.is_parametrized(layer, "weight") and not P.is_parametrized(layer, "bias")
    assert not P.is_parametrized(nn.Linear(2, 2))
    assert "ParametrizationList(\n      (0): Symmetric()" in repr(layer)


def test_gradients_reach_the_original_through_the_forward():
    layer = linear()
    P.register_parametrization(layer, "weight", Skew())
    x = corenn.randn(5, 3)
    layer(x).sum().backward()
    grad_weight = corenn.ones(5, 3).mT @ x  # dL/dW for L = sum(x @ W.T)
    expected = (grad_weight - grad_weight.mT).triu(1)
    assert corenn.allclose(layer.parametrizations.weight.original.grad, expected, atol=1e-5)


def test_chained_parametrizations_apply_in_order_and_assignment_inverts_them_all():
    layer = linear()
    P.register_parametrization(layer, "weight", Symmetric())
    P.register_parametrization(layer, "weight", Scale())
    original = layer.parametrizations.weight.original
    assert corenn.allclose(layer.weight, 2 * (original.triu() + original.triu(1).mT))
    target = corenn.tensor([[2.0, 4.0, 6.0], [4.0, 8.0, 10.0], [6.0, 10.0, 12.0]])
    layer.weight = target
    assert corenn.allclose(layer.weight, target)
    assert layer.parametrizations.weight.original is original  # set in place
    assert corenn.allclose(original, (target / 2).triu())


def test_registration_runs_right_inverse_so_the_weight_keeps_its_value():
    layer = linear()
    before = layer.weight.detach().clone()
    P.register_parametrization(layer, "weight", Scale())
    assert corenn.allclose(layer.weight, before)
    assert corenn.allclose(layer.parametrizations.weight.original, before / 2)


def test_a_tuple_returning_right_inverse_stores_original0_original1():
    layer = linear(4, 3)
    P.register_parametrization(layer, "weight", LowRank())
    plist = layer.parametrizations.weight
    assert not plist.is_tensor and plist.ntensors == 2
    assert isinstance(plist.original0, nn.Parameter) and isinstance(plist.original1, nn.Parameter)
    assert list(layer.state_dict()) == ["bias", "parametrizations.weight.original0", "parametrizations.weight.original1"]
    assert layer.weight.shape == (4, 3)
    layer(corenn.randn(2, 3)).sum().backward()
    assert plist.original0.grad.shape == (4, 1) and plist.original1.grad.shape == (1, 3)
    rank_one = corenn.outer(corenn.arange(4.0), corenn.ones(3))
    layer.weight = rank_one
    assert corenn.allclose(layer.weight, rank_one)
    with pytest.raises(ValueError, match="Cannot leave unparametrized"):
        P.remove_parametrizations(layer, "weight", leave_parametrized=False)
    P.remove_parametrizations(layer, "weight")
    assert corenn.allclose(layer.weight, rank_one) and isinstance(layer.weight, nn.Parameter)


def test_buffers_can_be_parametrized_and_stay_buffers():
    module = nn.Module()
    module.register_buffer("scale", corenn.tensor([1.0, 2.0]))
    P.register_parametrization(module, "scale", Scale())
    assert list(module.state_dict()) == ["parametrizations.scale.original"]
    assert list(module.parameters()) == []
    assert corenn.allclose(module.scale, corenn.tensor([1.0, 2.0]))
    P.remove_parametrizations(module, "scale")
    assert [name for name, _ in module.named_buffers()] == ["scale"]


def test_remove_parametrizations_leaves_the_constrained_value_or_the_original():
    layer = linear()
    weight = layer.weight
    P.register_parametrization(layer, "weight", Skew())
    skew = layer.weight.detach().clone()
    P.remove_parametrizations(layer, "weight", leave_parametrized=True)
    assert not P.is_parametrized(layer) and not hasattr(layer, "parametrizations")
    assert layer.weight is weight and corenn.equal(layer.weight, skew)
    assert layer.computed_attribute_names() == []

    layer = linear()
    raw = layer.weight.detach().clone()
    P.register_parametrization(layer, "weight", Skew())
    P.remove_parametrizations(layer, "weight", leave_parametrized=False)
    assert corenn.equal(layer.weight, raw)
    assert list(layer.state_dict()) == ["bias", "weight"]


def test_removing_one_of_two_parametrized_tensors_keeps_the_other():
    layer = linear()
    P.register_parametrization(layer, "weight", Skew())
    P.register_parametrization(layer, "bias", Scale())
    P.remove_parametrizations(layer, "weight")
    assert P.is_parametrized(layer, "bias") and not P.is_parametrized(layer, "weight")
    assert list(layer.state_dict()) == ["weight", "parametrizations.bias.original"]


def test_cached_computes_each_parametrization_once_per_forward():
    class UsesWeightThreeTimes(nn.Module):
        def __init__(self):
            super().__init__()
            self.weight = nn.Parameter(corenn.randn(3, 3))

        def forward(self, x):
            for _ in range(3):
                x = x @ self.weight
            return x

    model = UsesWeightThreeTimes()
    scale = Scale()
    P.register_parametrization(model, "weight", scale)
    scale.calls = 0
    x = corenn.randn(2, 3)
    uncached = model(x)
    assert scale.calls == 3
    scale.calls = 0
    with P.cached():
        cached_out = model(x)
        with P.cached():          # nested blocks share the outer cache
            model(x)
        assert scale.calls == 1
        model.weight = 2 * model.weight.detach()   # assignment drops the cached value
        model(x)
        assert scale.calls == 2
    model(x)
    assert scale.calls == 5                        # the cache ended with the outermost block: 3 again
    assert corenn.allclose(uncached, cached_out)
    with P.cached():
        model(x).sum().backward()                  # one graph through the cached weight
    assert model.parametrizations.weight.original.grad is not None


def test_deepcopy_pickle_and_save_load_round_trips():
    layer = parametrizations.orthogonal(linear(4, 4))
    P.register_parametrization(layer, "bias", Scale())
    for clone in (copy.deepcopy(layer), pickle.loads(pickle.dumps(layer))):
        assert type(clone) is nn.Linear
        assert corenn.equal(clone.weight, layer.weight) and corenn.equal(clone.bias, layer.bias)
        assert clone.parametrizations.weight.original is not layer.parametrizations.weight.original
        clone.weight = corenn.eye(4)            # the copy has its own state
        assert corenn.allclose(clone.weight, corenn.eye(4), atol=1e-6)
        assert not corenn.allclose(layer.weight, corenn.eye(4), atol=1e-3)


def test_state_dict_loads_into_a_freshly_parametrized_module(tmp_path):
    source = parametrizations.weight_norm(parametrizations.spectral_norm(linear(4, 3)), name="bias", dim=None)
    source(corenn.randn(2, 3))                    # a power-iteration step changes _u and _v
    path = tmp_path / "model.safetensors"
    corenn.save(source.state_dict(), path)
    target = parametrizations.weight_norm(parametrizations.spectral_norm(nn.Linear(3, 4)), name="bias", dim=None)
    target.load_state_dict(corenn.load(path))
    source.eval(), target.eval()
    assert corenn.allclose(target.weight, source.weight) and corenn.allclose(target.bias, source.bias)
    for key, value in source.state_dict().items():
        assert corenn.equal(target.state_dict()[key], value), key


def test_loading_only_the_computed_weight_restores_the_original_through_right_inverse():
    trained = parametrizations.orthogonal(linear(5, 5))
    with corenn.no_grad():
        trained.parametrizations.weight.original.add_(0.3 * corenn.randn(5, 5))
    saved = {"weight": trained.weight.detach().clone(), "bias": trained.bias.detach().clone()}
    resumed = parametrizations.orthogonal(nn.Linear(5, 5))
    assert resumed.load_state_dict(saved) is not None        # strict: no missing or unexpected key
    W = resumed.weight
    assert corenn.allclose(W, saved["weight"], atol=1e-5)
    assert corenn.allclose(W.mT @ W, corenn.eye(5), atol=1e-5)


def test_loading_a_computed_weight_without_right_inverse_fails_naming_the_key():
    layer = P.register_parametrization(linear(), "weight", Skew())
    with pytest.raises(RuntimeError, match='restoring "parametrizations.weight.original" from the computed value '
                                           '"weight".*Skew does not implement right_inverse'):
        layer.load_state_dict({"weight": corenn.zeros(3, 3), "bias": corenn.zeros(3)}, strict=False)


def test_errors_inside_a_parametrization_surface_with_their_message():
    class Broken(nn.Module):
        def forward(self, X):
            return X.no_such_method()

    layer = P.register_parametrization(linear(), "weight", Broken(), unsafe=True)
    with pytest.raises(AttributeError, match="no_such_method"):
        layer.weight
    with pytest.raises(AttributeError, match="no_such_method"):
        layer(corenn.randn(1, 3))


def test_bad_input_raises_pytorch_exception_types_naming_function_and_argument():
    layer = linear()
    with pytest.raises(ValueError, match="does not have a parameter, a buffer, or a parametrized element with name "
                                         "'nope'"):
        P.register_parametrization(layer, "nope", Skew())
    with pytest.raises(TypeError, match="register_parametrization\\(\\): argument 'parametrization' must be "
                                        "corenn.nn.Module, not function"):
        P.register_parametrization(layer, "weight", lambda x: x)
    with pytest.raises(TypeError, match="register_parametrization\\(\\): argument 'module' must be"):
        P.register_parametrization("layer", "weight", Skew())
    with pytest.raises(TypeError, match="argument 'tensor_name' must be str, not int"):
        P.register_parametrization(layer, 0, Skew())

    class Shrink(nn.Module):
        def forward(self, X):
            return X[:1]

    with pytest.raises(ValueError, match="may not change the shape of the tensor, unless `unsafe`"):
        P.register_parametrization(layer, "weight", Shrink())
    assert not P.is_parametrized(layer) and isinstance(layer.weight, nn.Parameter)  # a failed registration changes nothing
    P.register_parametrization(layer, "weight", Shrink(), unsafe=True)
    assert layer.weight.shape == (1, 3)

    layer = P.register_parametrization(linear(), "weight", Skew())
    with pytest.raises(RuntimeError, match="parametrization Skew does not implement right_inverse"):
        layer.weight = corenn.zeros(3, 3)
    with pytest.raises(KeyError, match="attribute 'weight' already exists"):
        layer.weight = nn.Parameter(corenn.zeros(3, 3))       # as in PyTorch
    with pytest.raises(TypeError, match="cannot assign 'int' to the parametrized tensor 'weight' of Linear"):
        layer.weight = 3
    with pytest.raises(ValueError, match="does not have a parametrization on bias"):
        P.remove_parametrizations(layer, "bias")
    with pytest.raises(TypeError, match="argument 'leave_parametrized' must be bool"):
        P.remove_parametrizations(layer, "weight", leave_parametrized="yes")
    with pytest.raises(AttributeError, match="remove_parametrizations"):
        del layer.weight

    scaled = P.register_parametrization(linear(), "weight", Scale())
    with pytest.raises(ValueError, match="has shape \\(2, 2\\) while `original` has shape \\(3, 3\\)"):
        scaled.weight = corenn.zeros(2, 2)
    with pytest.raises(ValueError, match="has dtype corenn.float64 while `original` has dtype corenn.float32"):
        scaled.weight = corenn.zeros(3, 3, dtype=corenn.float64)


def test_transfer_parametrizations_and_params():
    source = P.register_parametrization(linear(), "weight", Symmetric())
    target = P.transfer_parametrizations_and_params(source, nn.Linear(3, 3))
    assert corenn.equal(target.weight, source.weight)
    assert target.parametrizations.weight.original is source.parametrizations.weight.original
    assert P.transfer_parametrizations_and_params(nn.Linear(2, 2), nn.Linear(2, 2)).computed_attribute_names() == []


def test_train_and_eval_reach_the_parametrizations():
    layer = parametrizations.spectral_norm(linear())
    layer.eval()
    assert not layer.parametrizations.weight[0].training
    u = layer.parametrizations.weight[0]._u.clone()
    layer.weight
    assert corenn.equal(layer.parametrizations.weight[0]._u, u)  # eval: no power iteration


def test_fx_traces_a_parametrized_tensor_as_one_call_of_its_parametrization_list():
    import corenn.fx

    class MatMul(nn.Module):
        def __init__(self):
            super().__init__()
            self.weight = nn.Parameter(corenn.randn(3, 3))

        def forward(self, x):
            return x @ self.weight

    model = parametrizations.spectral_norm(parametrizations.orthogonal(MatMul())).eval()
    graph_module = corenn.fx.symbolic_trace(model)
    calls = [node.target for node in graph_module.graph.nodes if node.op == "call_module"]
    assert calls == ["parametrizations.weight"]
    x = corenn.randn(2, 3)
    assert corenn.allclose(graph_module(x), model(x))
    with corenn.no_grad():
        model.parametrizations.weight.original.add_(0.1)
    assert corenn.allclose(graph_module(x), model(x))   # the graph reads the current originals
    assert corenn.plugins.records["parametrize"].to_dict()["fx_leaf_rules"] == 1   # the plugin registers its rule
