"""Containers: Sequential, ModuleList, ModuleDict, ParameterList, ParameterDict (behaviour and reprs vs PyTorch)."""
from collections import OrderedDict

import numpy as np
import pytest

import corenn
from corenn import nn


def leaf_cls(lib):
    class Scale(lib.nn.Module):
        def __init__(self, factor):
            super().__init__()
            self.factor = factor

        def forward(self, x):
            return x * self.factor

        def extra_repr(self):
            return f"factor={self.factor}"

    return Scale


Scale = leaf_cls(corenn)


# -- Sequential ------------------------------------------------------------------------------------------

def test_sequential_runs_in_order_and_indexes():
    seq = nn.Sequential(Scale(2), Scale(3), Scale(5))
    assert seq(corenn.ones(1)).item() == 30.0
    assert seq[0].factor == 2 and seq[-1].factor == 5
    assert len(seq) == 3
    assert [m.factor for m in seq] == [2, 3, 5]
    sliced = seq[1:]
    assert isinstance(sliced, nn.Sequential) and [m.factor for m in sliced] == [3, 5]
    assert list(sliced._modules) == ["1", "2"]  # slicing keeps names, as in PyTorch
    with pytest.raises(IndexError, match="index 3 is out of range"):
        seq[3]
    with pytest.raises(TypeError):
        seq["a"]


def test_sequential_from_ordered_dict_and_mutation():
    seq = nn.Sequential(OrderedDict([("first", Scale(2)), ("second", Scale(3))]))
    assert [n for n, _ in seq.named_children()] == ["first", "second"]
    assert seq.first.factor == 2
    seq[1] = Scale(7)
    assert seq.second.factor == 7
    seq = nn.Sequential(Scale(1), Scale(2), Scale(3))
    seq.append(Scale(4))
    seq.insert(0, Scale(0))
    seq.insert(-1, Scale(35))
    assert [m.factor for m in seq] == [0, 1, 2, 3, 35, 4]
    seq.extend([Scale(5), Scale(6)])
    del seq[1]
    assert [m.factor for m in seq] == [0, 2, 3, 35, 4, 5, 6]
    assert list(seq._modules) == [str(i) for i in range(7)]
    assert seq.pop(3).factor == 35
    del seq[::2]
    assert [m.factor for m in seq] == [2, 4, 6]
    with pytest.raises(IndexError, match="Index out of range"):
        seq.insert(5, Scale(0))
    with pytest.raises(TypeError, match="should be of type nn.Module"):
        seq.insert(0, 3)


def test_sequential_add_mul():
    a = nn.Sequential(Scale(2))
    b = nn.Sequential(Scale(3))
    assert [m.factor for m in a + b] == [2, 3]
    assert [m.factor for m in a * 3] == [2, 2, 2]
    assert [m.factor for m in 2 * a] == [2, 2]
    a += b
    assert [m.factor for m in a] == [2, 3]
    with pytest.raises(ValueError, match="supports only objects of Sequential class"):
        a + nn.ModuleList()
    with pytest.raises(ValueError, match="Non-positive multiplication factor"):
        a * 0


def test_sequential_dir_hides_numeric_names():
    assert "0" not in dir(nn.Sequential(Scale(1)))


def test_sequential_rejects_non_modules():
    with pytest.raises(TypeError, match="int is not a Module subclass"):
        nn.Sequential(3)


@pytest.mark.torch
def test_sequential_repr_matches_torch(torch):
    def build(lib):
        S = leaf_cls(lib)
        return lib.nn.Sequential(S(1), lib.nn.Sequential(S(2), S(3)), S(4))
    assert repr(build(corenn)) == repr(build(torch))


# -- ModuleList -----------------------------------------------------------------------------------------

def test_module_list_behaviour():
    layers = nn.ModuleList([Scale(i) for i in range(3)])
    assert len(layers) == 3 and layers[-1].factor == 2
    layers.append(Scale(3))
    layers.extend([Scale(4)])
    layers.insert(1, Scale(10))
    assert [m.factor for m in layers] == [0, 10, 1, 2, 3, 4]
    assert layers.pop(1).factor == 10
    del layers[0]
    assert [m.factor for m in layers] == [1, 2, 3, 4]
    assert list(layers._modules) == ["0", "1", "2", "3"]
    assert isinstance(layers[1:3], nn.ModuleList) and [m.factor for m in layers[1:3]] == [2, 3]
    layers[0] = Scale(9)
    assert layers[0].factor == 9
    combined = layers + nn.ModuleList([Scale(8)])
    assert [m.factor for m in combined] == [9, 2, 3, 4, 8]
    layers += [Scale(7)]
    assert len(layers) == 5
    with pytest.raises(IndexError, match="out of range"):
        layers[5]
    with pytest.raises(TypeError, match="ModuleList.extend should be called with an iterable, but got int"):
        layers.extend(3)
    with pytest.raises(NotImplementedError):
        layers(corenn.ones(1))


@pytest.mark.torch
def test_module_list_repr_compresses_repeats_like_torch(torch):
    def build(lib):
        S = leaf_cls(lib)
        return lib.nn.ModuleList([S(1), S(1), S(1), S(2), lib.nn.Sequential(S(3)), S(1)])
    assert repr(build(corenn)) == repr(build(torch))
    assert repr(nn.ModuleList()) == repr(torch.nn.ModuleList()) == "ModuleList()"


# -- ModuleDict -----------------------------------------------------------------------------------------

def test_module_dict_behaviour():
    d = nn.ModuleDict({"b": Scale(1), "a": Scale(2)})
    assert list(d) == ["b", "a"]  # insertion order, even for a plain dict
    assert d["a"].factor == 2 and "a" in d and len(d) == 2
    d["c"] = Scale(3)
    d.update([("d", Scale(4))])
    d.update(nn.ModuleDict({"e": Scale(5)}))
    assert list(d.keys()) == ["b", "a", "c", "d", "e"]
    assert [m.factor for m in d.values()] == [1, 2, 3, 4, 5]
    assert d.pop("c").factor == 3
    del d["d"]
    assert [k for k, _ in d.items()] == ["b", "a", "e"]
    assert [n for n, _ in d.named_modules()] == ["", "b", "a", "e"]
    d.clear()
    assert len(d) == 0
    with pytest.raises(TypeError, match="should be called with an iterable of key/value pairs"):
        d.update(3)
    with pytest.raises(ValueError, match="element #0 has length 3; 2 is required"):
        d.update([("a", Scale(1), 3)])
    with pytest.raises(KeyError):
        d["missing"]


# -- ParameterList / ParameterDict ---------------------------------------------------------------------

def test_parameter_list_behaviour():
    plist = nn.ParameterList([nn.Parameter(corenn.ones(2)) for _ in range(2)])
    plist.append(corenn.zeros(3))  # a plain tensor becomes a Parameter
    assert isinstance(plist[2], nn.Parameter) and plist[2].requires_grad
    assert [n for n, _ in plist.named_parameters()] == ["0", "1", "2"]
    plist.extend([corenn.ones(1)])
    assert len(plist) == 4 and plist[-1].shape == (1,)
    assert isinstance(plist[1:3], nn.ParameterList) and len(plist[1:3]) == 2
    plist[0] = corenn.full((2,), 5.0)
    assert plist[0].tolist() == [5.0, 5.0]
    plist.append("not a tensor")  # kept as a plain attribute, like PyTorch
    assert plist[4] == "not a tensor" and len(list(plist.parameters())) == 4
    with pytest.raises(TypeError, match="ParameterList.extend should be called with an iterable"):
        plist.extend(corenn.ones(2))
    with pytest.raises(RuntimeError, match="ParameterList should not be called"):
        plist(1)


def test_parameter_dict_behaviour():
    pd = nn.ParameterDict({"foo": corenn.ones(3), "bar": nn.Parameter(corenn.ones(4))})
    assert list(pd) == ["bar", "foo"]  # a plain dict is added in sorted order (PyTorch's rule)
    pd2 = nn.ParameterDict(OrderedDict([("foo", corenn.ones(1)), ("bar", corenn.ones(1))]))
    assert list(pd2) == ["foo", "bar"]
    assert isinstance(pd["foo"], nn.Parameter)
    pd["baz"] = corenn.zeros(2)
    assert list(pd.keys()) == ["bar", "foo", "baz"]
    assert pd.get("nope") is None and "baz" in pd
    assert pd.pop("baz").shape == (2,)
    assert pd.setdefault("new", corenn.ones(1)).shape == (1,)
    assert pd.popitem()[0] == "new"
    merged = pd | nn.ParameterDict(OrderedDict([("zzz", corenn.ones(1))]))
    assert list(merged) == ["bar", "foo", "zzz"]
    assert [n for n, _ in pd.named_parameters()] == ["bar", "foo"]
    assert list(pd.copy()) == ["bar", "foo"]
    assert list(pd.fromkeys(["x", "y"], corenn.ones(1))) == ["x", "y"]
    with pytest.raises(KeyError):
        pd["missing"]
    with pytest.raises(TypeError, match="not a string"):
        pd[1] = corenn.ones(1)
    with pytest.raises(RuntimeError, match="ParameterDict should not be called"):
        pd(1)
    pd.clear()
    assert len(pd) == 0 and list(pd.parameters()) == []


@pytest.mark.torch
def test_parameter_container_reprs_match_torch(torch):
    def build(lib):
        holder = lib.nn.Module()
        holder.plist = lib.nn.ParameterList([lib.nn.Parameter(lib.ones(2, 3)), lib.ones(4)])
        holder.plist.append("text")
        holder.pdict = lib.nn.ParameterDict({"b": lib.nn.Parameter(lib.ones(2)), "a": lib.ones(1, dtype=lib.float64)})
        return holder
    assert repr(build(corenn)) == repr(build(torch)).replace("torch.", "corenn.")


def test_containers_in_state_dict_and_to():
    holder = nn.Module()
    holder.layers = nn.ModuleList([Scale(1)])
    holder.layers[0].w = nn.Parameter(corenn.ones(1))
    holder.params = nn.ParameterDict({"x": corenn.ones(2)})
    assert list(holder.state_dict()) == ["layers.0.w", "params.x"]
    holder.double()
    assert holder.params["x"].dtype is corenn.float64
    np.testing.assert_array_equal(holder.params["x"].detach().numpy(), [1.0, 1.0])
