"""Seed note "Modules", section "Module State": state_dict, buffers, persistence, StatefulModule."""
import re

import pytest

import corenn as torch
from corenn import nn


class MyLinear(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(in_features, out_features))
        self.bias = nn.Parameter(torch.randn(out_features))

    def forward(self, input):
        return (input @ self.weight) + self.bias


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.l0 = MyLinear(4, 3)
        self.l1 = MyLinear(3, 1)

    def forward(self, x):
        return self.l1(self.l0(x).relu())


class RunningMean(nn.Module):
    def __init__(self, num_features, momentum=0.9):
        super().__init__()
        self.momentum = momentum
        self.register_buffer('mean', torch.zeros(num_features))

    def forward(self, x):
        self.mean = self.momentum * self.mean + (1.0 - self.momentum) * x
        return self.mean


class StatefulModule(nn.Module):
    def __init__(self):
        super().__init__()
        # Setting a nn.Parameter as an attribute of the module automatically registers the tensor
        # as a parameter of the module.
        self.param1 = nn.Parameter(torch.randn(2))

        # Alternative string-based way to register a parameter.
        self.register_parameter('param2', nn.Parameter(torch.randn(3)))

        # Reserves the "param3" attribute as a parameter, preventing it from being set to anything
        # except a parameter. "None" entries like this will not be present in the module's state_dict.
        self.register_parameter('param3', None)

        # Registers a list of parameters.
        self.param_list = nn.ParameterList([nn.Parameter(torch.randn(2)) for i in range(3)])

        # Registers a dictionary of parameters.
        self.param_dict = nn.ParameterDict({
            'foo': nn.Parameter(torch.randn(3)),
            'bar': nn.Parameter(torch.randn(4))
        })

        # Registers a persistent buffer (one that appears in the module's state_dict).
        self.register_buffer('buffer1', torch.randn(4), persistent=True)

        # Registers a non-persistent buffer (one that does not appear in the module's state_dict).
        self.register_buffer('buffer2', torch.randn(5), persistent=False)

        # Reserves the "buffer3" attribute as a buffer, preventing it from being set to anything
        # except a buffer. "None" entries like this will not be present in the module's state_dict.
        self.register_buffer('buffer3', None)

        # Adding a submodule registers its parameters as parameters of the module.
        self.linear = nn.Linear(2, 3)


def test_save_and_load_net(tmp_path, capsys):
    net = Net()
    torch.save(net.state_dict(), tmp_path / 'net.pt')
    new_net = Net()
    print(new_net.load_state_dict(torch.load(tmp_path / 'net.pt')))
    assert capsys.readouterr().out == "<All keys matched successfully>\n"
    for (_, a), (_, b) in zip(net.named_parameters(), new_net.named_parameters()):
        assert torch.equal(a, b)


def test_running_mean_buffer_is_saved_and_restored(tmp_path, capsys):
    m = RunningMean(4)
    for _ in range(10):
        input = torch.randn(4)
        m(input)
    assert list(m.buffers()) == [m.mean] and not m.mean.requires_grad
    print(m.state_dict())
    printed = capsys.readouterr().out
    assert re.fullmatch(r"OrderedDict\(\[\('mean', tensor\(\[[-\d., ]+\]\)\)\]\)\n", printed)
    torch.save(m.state_dict(), tmp_path / 'mean.pt')
    m_loaded = RunningMean(4)
    m_loaded.load_state_dict(torch.load(tmp_path / 'mean.pt'))
    assert (torch.all(m.mean == m_loaded.mean))


def test_non_persistent_buffer_is_left_out_but_moved():
    m = RunningMean(4)
    m.register_buffer('unserialized_thing', torch.randn(5), persistent=False)
    assert list(m.state_dict()) == ['mean']
    m.to(dtype=torch.float64)
    assert m.unserialized_thing.dtype is torch.float64 and m.mean.dtype is torch.float64
    assert [name for name, _ in m.named_buffers()] == ['mean', 'unserialized_thing']


def test_stateful_module_state_dict_keys(tmp_path, capsys):
    m = StatefulModule()
    torch.save(m.state_dict(), tmp_path / 'state.pt')
    m_loaded = StatefulModule()
    m_loaded.load_state_dict(torch.load(tmp_path / 'state.pt'))
    sd = m_loaded.state_dict()
    assert list(sd) == ['param1', 'param2', 'buffer1', 'param_list.0', 'param_list.1', 'param_list.2',
                        'param_dict.bar', 'param_dict.foo', 'linear.weight', 'linear.bias']
    for key in sd:
        assert torch.equal(sd[key], m.state_dict()[key]), key
    print(sd)
    printed = capsys.readouterr().out
    assert printed.startswith("OrderedDict([('param1', tensor([")
    assert re.findall(r"\('([\w.]+)', tensor", printed) == list(sd)


def test_stateful_module_reserved_names():
    m = StatefulModule()
    assert m.param3 is None and m.buffer3 is None
    with pytest.raises(TypeError, match="cannot assign 'corenn.FloatTensor' as parameter 'param3'"):
        m.param3 = torch.zeros(1)
    m.buffer3 = torch.zeros(1)
    assert 'buffer3' in m.state_dict()
    assert 'buffer2' not in m.state_dict() and m.buffer2.shape == (5,)


@pytest.mark.torch
def test_stateful_module_keys_match_torch(torch):
    import corenn
    from collections import OrderedDict

    class TorchStateful(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.param1 = torch.nn.Parameter(torch.randn(2))
            self.register_parameter('param2', torch.nn.Parameter(torch.randn(3)))
            self.register_parameter('param3', None)
            self.param_list = torch.nn.ParameterList([torch.nn.Parameter(torch.randn(2)) for i in range(3)])
            self.param_dict = torch.nn.ParameterDict({'foo': torch.nn.Parameter(torch.randn(3)),
                                                      'bar': torch.nn.Parameter(torch.randn(4))})
            self.register_buffer('buffer1', torch.randn(4), persistent=True)
            self.register_buffer('buffer2', torch.randn(5), persistent=False)
            self.register_buffer('buffer3', None)
            self.linear = torch.nn.Linear(2, 3)

    t_sd = TorchStateful().state_dict()
    c_sd = StatefulModule().state_dict()
    assert list(c_sd) == list(t_sd)
    assert isinstance(c_sd, OrderedDict) and dict(c_sd._metadata) == dict(t_sd._metadata)
    assert [tuple(v.shape) for v in c_sd.values()] == [tuple(v.shape) for v in t_sd.values()]
    assert all(isinstance(v, corenn.Tensor) for v in c_sd.values())
