"""State dicts: keys and order, metadata, keep_vars, load_state_dict (strict / assign / errors), public hooks."""
from collections import OrderedDict

import numpy as np
import pytest

import corenn
from corenn import nn


def classes(lib):
    class Leaf(lib.nn.Module):
        def __init__(self):
            super().__init__()
            self.register_buffer("running", lib.zeros(2))
            self.weight = lib.nn.Parameter(lib.ones(2, 3))
            self.register_buffer("scratch", lib.zeros(1), persistent=False)
            self.register_parameter("unused", None)
            self.bias = lib.nn.Parameter(lib.zeros(2))

        def forward(self, x):
            return x

    class Tree(lib.nn.Module):
        def __init__(self):
            super().__init__()
            self.a = Leaf()
            self.p = lib.nn.Parameter(lib.ones(1))
            self.seq = lib.nn.Sequential(Leaf(), Leaf())
            self.register_buffer("count", lib.zeros(1, dtype=lib.int64))
            self.plist = lib.nn.ParameterList([lib.nn.Parameter(lib.ones(1)) for _ in range(2)])
            self.pdict = lib.nn.ParameterDict({"z": lib.nn.Parameter(lib.ones(1)), "y": lib.nn.Parameter(lib.ones(2))})
            self.mdict = lib.nn.ModuleDict({"second": Leaf(), "first": Leaf()})

    return Leaf, Tree


@pytest.mark.torch
def test_keys_order_and_metadata_match_torch(torch):
    t_sd = classes(torch)[1]().state_dict()
    c_sd = classes(corenn)[1]().state_dict()
    assert list(c_sd) == list(t_sd)
    assert dict(c_sd._metadata) == dict(t_sd._metadata)
    assert isinstance(c_sd, OrderedDict)


def test_values_are_detached_and_share_memory():
    Leaf = classes(corenn)[0]
    m = Leaf()
    sd = m.state_dict()
    assert type(sd["weight"]) is corenn.Tensor and not sd["weight"].requires_grad
    with corenn.no_grad():
        m.weight.add_(1.0)
    assert sd["weight"].tolist()[0][0] == 2.0
    kept = m.state_dict(keep_vars=True)
    assert kept["weight"] is m.weight
    assert list(m.state_dict(prefix="model.")) == ["model.weight", "model.bias", "model.running"]


def test_custom_version_in_metadata():
    class Versioned(nn.Module):
        _version = 3

    outer = nn.Module()
    outer.inner = Versioned()
    assert outer.state_dict()._metadata == OrderedDict([("", {"version": 1}), ("inner", {"version": 3})])


def test_round_trip_and_all_keys_matched():
    Tree = classes(corenn)[1]
    src, dst = Tree(), Tree()
    for p in src.parameters():
        p.data = corenn.randn(*p.shape)
    result = dst.load_state_dict(src.state_dict())
    assert repr(result) == "<All keys matched successfully>"
    assert result.missing_keys == [] and result.unexpected_keys == []
    for (name, a), (_, b) in zip(src.state_dict().items(), dst.state_dict().items()):
        np.testing.assert_array_equal(a.numpy(), b.numpy(), err_msg=name)


def test_load_copies_in_place_keeping_parameter_objects():
    Leaf = classes(corenn)[0]
    m = Leaf()
    weight = m.weight
    m.load_state_dict({"weight": corenn.full((2, 3), 5.0), "bias": corenn.zeros(2), "running": corenn.ones(2)})
    assert m.weight is weight and weight.tolist() == [[5.0] * 3] * 2 and weight.requires_grad


def test_load_with_assign_takes_the_given_tensors():
    Leaf = classes(corenn)[0]
    m = Leaf()
    new_weight = corenn.full((2, 3), 5.0)
    new_running = corenn.ones(2)
    m.load_state_dict({"weight": new_weight, "bias": corenn.zeros(2), "running": new_running}, assign=True)
    assert isinstance(m.weight, nn.Parameter) and m.weight.requires_grad
    new_weight.add_(1.0)
    assert m.weight.tolist()[0][0] == 6.0  # shares memory: assigned, not copied
    assert m.running is new_running


@pytest.mark.torch
def test_errors_list_every_problem_at_once_like_torch(torch):
    def attempt(lib):
        Leaf = classes(lib)[0]
        m = Leaf()
        bad = {"weight": lib.zeros(3, 3), "running": lib.zeros(2), "extra.key": lib.zeros(1), "other": lib.zeros(1)}
        with pytest.raises(RuntimeError) as info:
            m.load_state_dict(bad)
        return str(info.value)

    expected = attempt(torch).replace("torch.Size", "corenn.Size")
    assert attempt(corenn) == expected
    assert 'Missing key(s) in state_dict: "bias".' in expected


def test_non_strict_returns_missing_and_unexpected():
    Leaf = classes(corenn)[0]
    m = Leaf()
    result = m.load_state_dict({"weight": corenn.zeros(2, 3), "junk": corenn.zeros(1)}, strict=False)
    assert result.missing_keys == ["bias", "running"]
    assert result.unexpected_keys == ["junk"]
    assert "missing_keys=['bias', 'running']" in repr(result)


def test_size_mismatch_raises_even_when_not_strict():
    Leaf = classes(corenn)[0]
    with pytest.raises(RuntimeError, match=r"size mismatch for weight: copying a param with shape "
                                           r"corenn.Size\(\[1\]\) from checkpoint"):
        Leaf().load_state_dict({"weight": corenn.zeros(1)}, strict=False)


def test_non_tensor_value_and_non_mapping_are_clear_errors():
    Leaf = classes(corenn)[0]
    with pytest.raises(RuntimeError, match='While copying the parameter named "weight", expected corenn.Tensor'):
        Leaf().load_state_dict({"weight": [1, 2]}, strict=False)
    with pytest.raises(TypeError, match="Expected state_dict to be dict-like"):
        Leaf().load_state_dict([("weight", corenn.zeros(2, 3))])


def test_failed_load_does_not_touch_the_callers_dict():
    Leaf = classes(corenn)[0]
    m = Leaf()

    def rename(module, state_dict, prefix, *rest):
        if prefix + "w" in state_dict:
            state_dict[prefix + "weight"] = state_dict.pop(prefix + "w")

    m.register_load_state_dict_pre_hook(rename)
    given = {"w": corenn.zeros(2, 3), "bias": corenn.zeros(2), "running": corenn.zeros(2)}
    assert repr(m.load_state_dict(given)) == "<All keys matched successfully>"
    assert list(given) == ["w", "bias", "running"]


def test_state_dict_hooks_shape_what_is_saved_and_loaded():
    Leaf = classes(corenn)[0]
    outer = nn.Module()
    outer.leaf = Leaf()
    calls = []
    outer.leaf.register_state_dict_pre_hook(lambda m, prefix, keep_vars: calls.append(("pre", prefix)))

    def post(module, state_dict, prefix, local_metadata):
        # a plugin that stores a derived entry instead of a raw one
        state_dict[prefix + "weight_scaled"] = state_dict.pop(prefix + "weight") * 2
        calls.append(("post", prefix, local_metadata["version"]))

    outer.leaf.register_state_dict_post_hook(post)
    sd = outer.state_dict()
    assert list(sd) == ["leaf.bias", "leaf.running", "leaf.weight_scaled"]
    assert calls == [("pre", "leaf."), ("post", "leaf.", 1)]

    def pre_load(module, state_dict, prefix, local_metadata, strict, missing, unexpected, errors):
        state_dict[prefix + "weight"] = state_dict.pop(prefix + "weight_scaled") / 2

    seen_keys = []

    def post_load(module, incompatible_keys):
        seen_keys.append((list(incompatible_keys.missing_keys), list(incompatible_keys.unexpected_keys)))

    fresh = nn.Module()
    fresh.leaf = Leaf()
    fresh.leaf.register_load_state_dict_pre_hook(pre_load)
    fresh.leaf.register_load_state_dict_post_hook(post_load)
    with corenn.no_grad():
        outer.leaf.weight.fill_(3.0)
    fresh.load_state_dict(outer.state_dict())
    assert fresh.leaf.weight.tolist() == [[3.0] * 3] * 2
    assert seen_keys == [([], [])]


def test_post_hooks_must_return_none():
    m = classes(corenn)[0]()
    m.register_state_dict_post_hook(lambda *a: {})
    with pytest.raises(RuntimeError, match="must return None"):
        m.state_dict()
    m2 = classes(corenn)[0]()
    m2.register_load_state_dict_post_hook(lambda *a: 1)
    with pytest.raises(RuntimeError, match="must return None"):
        m2.load_state_dict(m2.state_dict())


def test_root_load_post_hook_can_forgive_unexpected_keys():
    m = classes(corenn)[0]()

    def forgive(module, incompatible_keys):
        incompatible_keys.unexpected_keys[:] = [k for k in incompatible_keys.unexpected_keys if k != "legacy"]

    m.register_load_state_dict_post_hook(forgive)
    sd = m.state_dict()
    sd["legacy"] = corenn.zeros(1)
    assert repr(m.load_state_dict(sd)) == "<All keys matched successfully>"


def test_extra_state_round_trip():
    class Counter(nn.Module):
        def __init__(self):
            super().__init__()
            self.calls = 0
            self.w = nn.Parameter(corenn.zeros(1))

        def get_extra_state(self):
            return {"calls": self.calls}

        def set_extra_state(self, state):
            self.calls = state["calls"]

    a = Counter()
    a.calls = 7
    sd = a.state_dict()
    assert list(sd) == ["w", "_extra_state"]
    b = Counter()
    b.load_state_dict(sd)
    assert b.calls == 7
    with pytest.raises(RuntimeError, match='Missing key\\(s\\) in state_dict: "_extra_state"'):
        Counter().load_state_dict({"w": corenn.zeros(1)})


def test_save_load_files_round_trip(tmp_path):
    Tree = classes(corenn)[1]
    src = Tree()
    for p in src.parameters():
        p.data = corenn.randn(*p.shape)
    corenn.save(src.state_dict(), tmp_path / "tree.pt")
    dst = Tree()
    assert repr(dst.load_state_dict(corenn.load(tmp_path / "tree.pt"))) == "<All keys matched successfully>"
    np.testing.assert_array_equal(dst.a.weight.detach().numpy(), src.a.weight.detach().numpy())


def test_missing_child_none_is_skipped():
    m = nn.Module()
    m.child = classes(corenn)[0]()
    sd = m.state_dict()
    m.child = None
    assert repr(m.load_state_dict(sd)) == "<All keys matched successfully>"
    assert list(m.state_dict()) == []
