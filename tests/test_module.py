"""Module and its state: registration, traversal, modes, to(), repr, attribute protocol, deepcopy."""
import copy

import numpy as np
import pytest

import corenn
from corenn import nn


class MyLinear(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.weight = nn.Parameter(corenn.randn(in_features, out_features))
        self.bias = nn.Parameter(corenn.randn(out_features))

    def forward(self, input):
        return (input @ self.weight) + self.bias


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.l0 = MyLinear(4, 3)
        self.l1 = MyLinear(3, 1)

    def forward(self, x):
        return self.l1(self.l0(x).relu())


# -- registration ------------------------------------------------------------------------------------

def test_assignment_registers_parameters_modules_and_buffers():
    m = nn.Module()
    m.w = nn.Parameter(corenn.zeros(2))
    m.child = MyLinear(2, 2)
    m.register_buffer("mean", corenn.zeros(2))
    m.mean = corenn.ones(2)  # a Tensor assigned to a registered buffer name stays a buffer
    m.plain = corenn.ones(1)  # a plain Tensor attribute is not registered
    assert list(m._parameters) == ["w"]
    assert list(m._modules) == ["child"]
    assert list(m._buffers) == ["mean"]
    assert m.mean.tolist() == [1.0, 1.0]
    assert "plain" not in m.state_dict()
    assert list(m.state_dict()) == ["w", "mean", "child.weight", "child.bias"]


def test_reassigning_kind_moves_the_name():
    m = nn.Module()
    m.x = MyLinear(1, 1)
    m.x = nn.Parameter(corenn.zeros(1))  # a Parameter takes over any name
    assert "x" in m._parameters and "x" not in m._modules
    with pytest.raises(TypeError, match="cannot assign 'test_module.MyLinear' as parameter 'x'"):
        m.x = MyLinear(1, 1)  # but a parameter name only takes a Parameter or None (as in PyTorch)


def test_none_reserves_names_and_type_errors():
    m = nn.Module()
    m.register_parameter("p", None)
    m.register_buffer("b", None)
    assert m.p is None and m.b is None
    assert list(m.state_dict()) == []
    with pytest.raises(TypeError, match="cannot assign 'corenn.FloatTensor' as parameter 'p'"):
        m.p = corenn.zeros(1)
    m.p = nn.Parameter(corenn.zeros(1))
    assert list(m.state_dict()) == ["p"]
    with pytest.raises(TypeError, match="as buffer 'b'"):
        m.b = 3
    with pytest.raises(TypeError, match="cannot assign 'int' object to parameter 'q'"):
        m.register_parameter("q", 3)


@pytest.mark.parametrize("method", ["register_parameter", "register_buffer", "add_module"])
def test_names_are_validated(method):
    m = nn.Module()
    m.existing = 1
    value = {"register_parameter": nn.Parameter(corenn.zeros(1)), "register_buffer": corenn.zeros(1),
             "add_module": nn.Module()}[method]
    with pytest.raises(KeyError, match=r"name can.*t contain"):
        getattr(m, method)("a.b", value)
    with pytest.raises(KeyError, match="empty string"):
        getattr(m, method)("", value)
    with pytest.raises(KeyError, match="attribute 'existing' already exists"):
        getattr(m, method)("existing", value)
    with pytest.raises(TypeError, match="should be a string"):
        getattr(m, method)(1, value)


def test_assign_before_init_is_a_clear_error():
    class Bad(nn.Module):
        def __init__(self):
            self.w = nn.Parameter(corenn.zeros(1))
    with pytest.raises(AttributeError, match=r"cannot assign parameters before Module.__init__\(\) call"):
        Bad()


def test_non_leaf_parameter_rejected():
    m = nn.Module()
    w = nn.Parameter(corenn.zeros(1))
    with pytest.raises(TypeError):
        m.register_parameter("y", w * 2)  # an op result is a plain Tensor, not a Parameter


def test_get_submodule_parameter_buffer():
    class Outer(nn.Module):
        def __init__(self):
            super().__init__()
            self.net = Net()
            self.register_buffer("steps", corenn.zeros(1))
    o = Outer()
    assert o.get_submodule("net.l0") is o.net.l0
    assert o.get_submodule("") is o
    assert o.get_parameter("net.l1.bias") is o.net.l1.bias
    assert o.get_buffer("steps") is o.steps
    with pytest.raises(AttributeError, match="Net has no attribute `l9`"):
        o.get_submodule("net.l9")
    with pytest.raises(AttributeError, match="`weight` is not an nn.Module"):
        o.get_submodule("net.l0.weight")
    with pytest.raises(AttributeError, match="`steps` is not an nn.Parameter"):
        o.get_parameter("steps")
    with pytest.raises(AttributeError, match="`weight` is not a buffer"):
        o.get_buffer("net.l0.weight")


def test_delattr_and_dir():
    m = MyLinear(2, 2)
    m.register_buffer("b", corenn.zeros(1), persistent=False)
    assert {"weight", "bias", "b", "forward"} <= set(dir(m))
    del m.weight
    del m.b
    assert "weight" not in m._parameters and "b" not in m._non_persistent_buffers_set
    with pytest.raises(AttributeError):
        m.weight


def test_property_attribute_error_surfaces_unchanged():
    class WithProperty(nn.Module):
        @property
        def derived(self):
            return self.missing_thing * 2

    with pytest.raises(AttributeError, match="has no attribute 'missing_thing'"):
        WithProperty().derived


def test_unknown_attribute_error_names_class():
    with pytest.raises(AttributeError, match="'Net' object has no attribute 'nope'"):
        Net().nope


# -- traversal -----------------------------------------------------------------------------------------

def test_shared_parameter_and_module_listed_once():
    m = nn.Module()
    shared = MyLinear(2, 2)
    m.a = shared
    m.b = shared
    m.c = MyLinear(2, 2)
    m.c.weight = shared.weight
    assert [n for n, _ in m.named_parameters()] == ["a.weight", "a.bias", "c.bias"]
    assert len(list(m.named_parameters(remove_duplicate=False))) == 6
    assert [n for n, _ in m.named_modules()] == ["", "a", "c"]
    assert [n for n, _ in m.named_children()] == ["a", "c"]
    assert [n for n, _ in m.named_parameters(prefix="model")][0] == "model.a.weight"
    assert [n for n, _ in m.named_parameters(recurse=False)] == []


def test_buffers_and_named_buffers():
    m = Net()
    m.l0.register_buffer("steps", corenn.zeros(1), persistent=False)
    assert [n for n, _ in m.named_buffers()] == ["l0.steps"]
    assert len(list(m.buffers(recurse=False))) == 0


def test_deep_chain_does_not_hit_recursion_limit():
    root = nn.Module()
    node = root
    for _ in range(3000):
        child = nn.Module()
        child.p = nn.Parameter(corenn.zeros(1))
        node.next = child
        node = child
    assert len(list(root.parameters())) == 3000


# -- modes and bulk operations ---------------------------------------------------------------------------

def test_train_eval_recursive_and_validates():
    net = Net()
    assert net.eval() is net
    assert not net.training and not net.l0.training
    net.train()
    assert net.l1.training
    with pytest.raises(ValueError, match="training mode is expected to be boolean"):
        net.train(1)


def test_train_asks_each_child_so_an_override_can_keep_a_part_frozen():
    # A common PyTorch idiom (frozen BatchNorm in detection backbones): a submodule's train() override
    # must be called by its parent's train(), not bypassed.
    class FrozenNorm(nn.Module):
        def __init__(self):
            super().__init__()
            self.bn = nn.BatchNorm1d(3)

        def train(self, mode=True):
            super().train(mode)
            self.bn.eval()
            return self

    model = nn.Sequential(nn.Linear(3, 3), FrozenNorm())
    model.train()
    assert model.training and model[0].training and model[1].training
    assert not model[1].bn.training
    model.eval()
    assert not model[1].training


def test_requires_grad_zero_grad_apply():
    net = Net()
    net(corenn.randn(4)).sum().backward()
    assert all(p.grad is not None for p in net.parameters())
    net.zero_grad(set_to_none=False)
    assert all(p.grad is not None and float(p.grad.abs().sum()) == 0 for p in net.parameters())
    net.zero_grad()
    assert all(p.grad is None for p in net.parameters())
    net.requires_grad_(False)
    assert not any(p.requires_grad for p in net.parameters())
    visited = []
    assert net.apply(lambda m: visited.append(type(m).__name__)) is net
    assert visited == ["MyLinear", "MyLinear", "Net"]


def test_to_keeps_parameter_identity_and_moves_grads():
    net = Net()
    net.l0.register_buffer("count", corenn.zeros(1, dtype=corenn.int64))
    net.l0.register_buffer("scale", corenn.ones(1))
    weight = net.l0.weight
    net(corenn.randn(4)).sum().backward()
    net.to(dtype=corenn.float64)
    assert net.l0.weight is weight
    assert weight.dtype is corenn.float64 and weight.grad.dtype is corenn.float64
    assert net.l0.count.dtype is corenn.int64  # integer buffers keep their dtype
    assert net.l0.scale.dtype is corenn.float64
    assert weight.requires_grad and isinstance(weight, nn.Parameter)
    out = net(corenn.randn(4, dtype=corenn.float64))
    assert out.dtype is corenn.float64
    net.float()
    assert weight.dtype is corenn.float32
    net.half()
    assert weight.dtype is corenn.float16
    net.double()
    assert weight.dtype is corenn.float64
    net.to(corenn.float32)
    assert weight.dtype is corenn.float32
    assert net.cpu() is net
    with pytest.raises(TypeError, match="only accepts floating point"):
        net.to(corenn.int32)


def test_optimizer_keeps_working_after_to():
    net = Net()
    opt = corenn.optim.SGD(net.parameters(), lr=0.1)
    net.double()
    before = net.l1.bias.detach().clone()
    net(corenn.randn(4, dtype=corenn.float64)).sum().backward()
    opt.step()
    assert not np.allclose(before.numpy(), net.l1.bias.detach().numpy())


# -- printing -----------------------------------------------------------------------------------------------

def test_repr_nested_with_extra_repr():
    class Scale(nn.Module):
        def __init__(self, factor):
            super().__init__()
            self.factor = factor

        def extra_repr(self):
            return f"factor={self.factor}"

    class Multi(nn.Module):
        def extra_repr(self):
            return "a=1\nb=2"

    outer = nn.Module()
    outer.s = Scale(2)
    outer.net = Net()
    outer.multi = Multi()
    assert repr(Scale(3)) == "Scale(factor=3)"
    assert repr(outer) == (
        "Module(\n"
        "  (s): Scale(factor=2)\n"
        "  (net): Net(\n"
        "    (l0): MyLinear()\n"
        "    (l1): MyLinear()\n"
        "  )\n"
        "  (multi): Multi(\n"
        "    a=1\n"
        "    b=2\n"
        "  )\n"
        ")")


def test_parameter_repr_and_identity():
    data = corenn.tensor([1.0, 2.0])
    p = nn.Parameter(data)
    assert repr(p) == "Parameter containing:\ntensor([1., 2.], requires_grad=True)"
    assert isinstance(p, corenn.Tensor) and p.is_leaf
    p.data.add_(1)
    assert data.tolist() == [2.0, 3.0]  # shares memory with data
    assert type(p * 2) is corenn.Tensor
    assert nn.Parameter(corenn.zeros(1), requires_grad=False).requires_grad is False
    assert nn.Parameter().shape == (0,)
    with pytest.raises(TypeError, match="must be a Tensor"):
        nn.Parameter([1.0])


# -- copying ---------------------------------------------------------------------------------------------

def test_deepcopy_copies_state_and_keeps_sharing_inside():
    m = nn.Module()
    m.a = MyLinear(2, 2)
    m.b = m.a
    m.register_buffer("mean", corenn.zeros(2))
    c = copy.deepcopy(m)
    assert c.a is c.b and c.a is not m.a
    assert isinstance(c.a.weight, nn.Parameter) and c.a.weight is not m.a.weight
    np.testing.assert_array_equal(c.a.weight.detach().numpy(), m.a.weight.detach().numpy())
    c.a.weight.data.add_(1)
    assert not np.allclose(c.a.weight.detach().numpy(), m.a.weight.detach().numpy())
    assert list(c.state_dict()) == list(m.state_dict())


def test_forward_unimplemented():
    with pytest.raises(NotImplementedError, match='missing the required "forward" function'):
        nn.Module()(1)


def test_init_rejects_arguments():
    with pytest.raises(TypeError, match="unexpected keyword argument 'foo'"):
        nn.Module(foo=1)
