"""Module.register_computed_attribute: the one reparametrization mechanism (parametrizations, pruning, fake quantization)."""
from __future__ import annotations

import copy
import functools
import pickle

import pytest

import corenn
from corenn import nn


def masked_weight(module):
    """A pruning-style computation: weight = weight_orig * weight_mask (module level, so it pickles)."""
    return module.weight_orig * module.weight_mask


def set_masked_weight(module, value):
    with corenn.no_grad():
        module.weight_orig.copy_(value)


def pruned_linear():
    layer = nn.Linear(3, 2)
    original = layer.weight
    del layer.weight
    layer.weight_orig = original
    layer.register_buffer("weight_mask", corenn.tensor([[1.0, 0.0, 1.0], [0.0, 1.0, 1.0]]))
    layer.register_computed_attribute("weight", masked_weight, set_masked_weight)
    return layer


def test_reading_computes_and_forward_uses_it_with_gradients_reaching_the_original():
    layer = pruned_linear()
    assert corenn.equal(layer.weight, layer.weight_orig * layer.weight_mask)
    x = corenn.randn(4, 3)
    layer(x).sum().backward()
    # d(sum(x @ (orig * mask).T))/d orig = mask * column sums of x
    expected = layer.weight_mask * x.sum(0)
    assert corenn.allclose(layer.weight_orig.grad, expected, atol=1e-6)


def test_computed_attribute_is_not_in_state_dict_and_the_class_is_unchanged():
    layer = pruned_linear()
    assert type(layer) is nn.Linear
    assert list(layer.state_dict()) == ["bias", "weight_orig", "weight_mask"]
    assert [name for name, _ in layer.named_parameters()] == ["bias", "weight_orig"]
    assert "weight" in dir(layer)
    assert layer.computed_attribute_names() == ["weight"]


def test_assignment_calls_assign_and_without_assign_raises():
    layer = pruned_linear()
    layer.weight = corenn.ones(2, 3)
    assert corenn.equal(layer.weight_orig, corenn.ones(2, 3))
    module = nn.Module()
    module.register_computed_attribute("answer", functools.partial(lambda offset, m: 40 + offset, 2))
    assert module.answer == 42
    with pytest.raises(AttributeError, match="can't set attribute 'answer'.*without assign"):
        module.answer = 3


def test_deepcopy_and_pickle_keep_the_computed_attribute():
    layer = pruned_linear()
    for clone in (copy.deepcopy(layer), pickle.loads(pickle.dumps(layer))):
        assert type(clone) is nn.Linear
        assert corenn.equal(clone.weight, layer.weight)
        with corenn.no_grad():
            clone.weight_mask.zero_()
        assert float(clone.weight.abs().sum()) == 0.0
        assert float(layer.weight.abs().sum()) > 0.0


def test_an_error_inside_compute_surfaces_with_its_own_message():
    def broken(module):
        return module.no_such_thing

    module = nn.Module()
    module.register_computed_attribute("weight", broken)
    with pytest.raises(AttributeError, match="no attribute 'no_such_thing'"):
        module.weight
    module.remove_computed_attribute("weight")
    module.register_computed_attribute("weight", lambda m: 1 / 0)
    with pytest.raises(ZeroDivisionError):
        module.weight


def test_names_are_checked_and_removal_frees_the_name():
    layer = pruned_linear()
    with pytest.raises(KeyError, match="attribute 'bias' already exists"):
        layer.register_computed_attribute("bias", masked_weight)
    with pytest.raises(KeyError, match="attribute 'weight' already exists \\(a computed attribute"):
        layer.register_computed_attribute("weight", masked_weight)
    with pytest.raises(KeyError, match="attribute 'weight' already exists \\(a computed attribute"):
        layer.weight = nn.Parameter(corenn.ones(2, 3))  # as in PyTorch: a Parameter can't replace it
    with pytest.raises(KeyError, match='contain "."'):
        layer.register_computed_attribute("a.b", masked_weight)
    with pytest.raises(TypeError, match="argument 'compute' must be callable"):
        layer.register_computed_attribute("other", 3)
    with pytest.raises(TypeError, match="argument 'assign' must be callable or None"):
        layer.register_computed_attribute("other", masked_weight, assign="x")
    with pytest.raises(AttributeError, match="can't delete attribute 'weight'.*computed attribute"):
        del layer.weight
    with pytest.raises(KeyError, match="'nothing' is not a computed attribute of Linear"):
        layer.remove_computed_attribute("nothing")
    layer.remove_computed_attribute("weight")
    assert not hasattr(layer, "weight")
    layer.weight = nn.Parameter(corenn.ones(2, 3))
    assert [name for name, _ in layer.named_parameters()] == ["bias", "weight_orig", "weight"]


def test_a_module_pickled_without_the_computed_dict_still_works():
    layer = nn.Linear(2, 2)
    state = dict(layer.__dict__)
    del state["_computed_attributes"]
    restored = nn.Linear.__new__(nn.Linear)
    restored.__setstate__(state)
    assert restored.computed_attribute_names() == []
    restored.register_computed_attribute("doubled", lambda m: m.weight * 2)
    assert corenn.equal(restored.doubled, layer.weight * 2)


def test_computed_attribute_returns_what_was_registered_also_on_a_copy():
    layer = pruned_linear()
    registered = layer.computed_attribute("weight")
    assert registered.compute is masked_weight and registered.assign is set_masked_weight
    assert registered == (masked_weight, set_masked_weight)
    clone = pickle.loads(pickle.dumps(layer))
    assert clone.computed_attribute("weight").compute is masked_weight
    with pytest.raises(KeyError, match=r"computed_attribute\(\): 'bias' is not a computed attribute of Linear "
                                       r"\(computed: \['weight'\]\)"):
        layer.computed_attribute("bias")
    layer.remove_computed_attribute("weight")
    with pytest.raises(KeyError, match="computed: none"):
        layer.computed_attribute("weight")
