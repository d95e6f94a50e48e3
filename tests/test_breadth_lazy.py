"""Lazy modules (LazyLinear, LazyConv*, LazyConvTranspose*, LazyBatchNorm*, LazyInstanceNorm*) and
UninitializedParameter / UninitializedBuffer against PyTorch 2.13: repr before and after the dry run, the class
they become, inferred shapes, outputs and gradients with copied weights, state_dict, load_state_dict, dtype,
optimizers, errors."""
from __future__ import annotations

import numpy as np
import pytest

import corenn
from corenn import nn

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.torch
RNG = np.random.default_rng(7)

# (class name, constructor arguments, keyword arguments, input shape)
LAZY = [
    ("LazyLinear", (4,), {}, (2, 5)),
    ("LazyLinear", (3,), dict(bias=False), (2, 3, 6)),
    ("LazyConv1d", (4, 3), dict(stride=2, padding=1), (2, 3, 9)),
    ("LazyConv2d", (6, (3, 2)), dict(groups=2, dilation=(1, 2), bias=False), (2, 4, 7, 6)),
    ("LazyConv2d", (4, 3), dict(padding="same", padding_mode="reflect"), (3, 6, 5)),
    ("LazyConv3d", (2, 2), dict(stride=(1, 2, 1)), (1, 3, 4, 4, 3)),
    ("LazyConvTranspose1d", (5, 3), dict(stride=2, output_padding=1), (2, 4, 6)),
    ("LazyConvTranspose2d", (4, 3), dict(stride=2, padding=1, groups=2), (2, 4, 3, 4)),
    ("LazyConvTranspose3d", (2, 2), dict(dilation=2), (1, 3, 2, 3, 2)),
    ("LazyBatchNorm1d", (), {}, (6, 3)),
    ("LazyBatchNorm1d", (), dict(affine=False, momentum=None), (4, 3, 5)),
    ("LazyBatchNorm2d", (), dict(eps=1e-3, bias=False), (3, 4, 2, 3)),
    ("LazyBatchNorm3d", (), dict(track_running_stats=False), (2, 3, 2, 2, 2)),
    ("LazyInstanceNorm1d", (), {}, (2, 3, 5)),
    ("LazyInstanceNorm2d", (), dict(affine=False, track_running_stats=False), (2, 3, 4, 4)),
    ("LazyInstanceNorm3d", (), dict(momentum=0.3), (2, 2, 3, 2, 2)),
]


def _copy_state(ours, theirs):
    with corenn.no_grad():
        for name, tensor in theirs.state_dict().items():
            getattr(ours, name).copy_(corenn.tensor(tensor.numpy()))


@pytest.mark.filterwarnings("ignore:input's size at dim=1 does not match num_features")
@pytest.mark.parametrize("name,args,kwargs,shape", LAZY, ids=[f"{c[0]}-{i}" for i, c in enumerate(LAZY)])
def test_lazy_module_becomes_its_layer_as_in_torch(name, args, kwargs, shape):
    ours = getattr(nn, name)(*args, **kwargs)
    theirs = getattr(torch.nn, name)(*args, **kwargs).double()
    ours = ours.to(corenn.float64)
    assert repr(ours) == repr(theirs)
    assert list(ours.state_dict()) == list(theirs.state_dict())
    assert all(type(v).__name__ == type(theirs.state_dict()[k]).__name__ for k, v in ours.state_dict().items())
    assert ours.has_uninitialized_params() == theirs.has_uninitialized_params()
    x = RNG.standard_normal(shape)
    ours(corenn.tensor(x))  # the dry run
    theirs(torch.tensor(x))
    assert type(ours).__name__ == type(theirs).__name__ == name[4:]
    assert isinstance(ours, getattr(nn, name[4:]))
    assert repr(ours) == repr(theirs)
    for key, value in theirs.state_dict().items():
        assert tuple(ours.state_dict()[key].shape) == tuple(value.shape), key
        assert ours.state_dict()[key].dtype == getattr(corenn, str(value.dtype).split(".")[1])
    assert all(type(p) is nn.Parameter for p in ours.parameters())
    assert not hasattr(ours, "_initialize_hook")
    if "Norm" not in name:  # the layer's initialization: kaiming-uniform(a=sqrt(5)) and the bias both within
        fan_in, _ = torch.nn.init._calculate_fan_in_and_fan_out(theirs.weight)  # 1/sqrt(fan_in)
        for p in ours.parameters():
            assert 0 < np.abs(p.detach().numpy()).max() <= 1 / np.sqrt(fan_in)
    _copy_state(ours, theirs)
    ours.train(), theirs.train()
    x = RNG.standard_normal(shape)
    ours_x, theirs_x = corenn.tensor(x, requires_grad=True), torch.tensor(x, requires_grad=True)
    out, expected = ours(ours_x), theirs(theirs_x)
    np.testing.assert_allclose(out.detach().numpy(), expected.detach().numpy(), rtol=1e-9, atol=1e-10)
    weights = RNG.standard_normal(tuple(expected.shape))
    (out * corenn.tensor(weights)).sum().backward()
    (expected * torch.tensor(weights)).sum().backward()
    np.testing.assert_allclose(ours_x.grad.numpy(), theirs_x.grad.numpy(), rtol=1e-9, atol=1e-10)
    for (key, p), q in zip(ours.named_parameters(), theirs.parameters()):
        np.testing.assert_allclose(p.grad.numpy(), q.grad.numpy(), rtol=1e-9, atol=1e-10, err_msg=key)
    for key, value in theirs.state_dict().items():
        np.testing.assert_allclose(ours.state_dict()[key].numpy(), value.numpy(), rtol=1e-9, atol=1e-12)


def test_uninitialized_parameter_and_buffer():
    p = nn.UninitializedParameter(dtype=corenn.float64)
    assert repr(p) == repr(torch.nn.UninitializedParameter()) == "<UninitializedParameter>"
    assert isinstance(p, nn.Parameter) and p.requires_grad and p.dtype == corenn.float64
    with pytest.raises(RuntimeError, match="Can't access the shape of an uninitialized parameter or buffer"):
        p.shape
    with pytest.raises(ValueError, match="Attempted to use an uninitialized parameter"):
        p + 1
    p.materialize((2, 3))
    assert type(p) is nn.Parameter and p.shape == (2, 3) and p.dtype == corenn.float64 and p.requires_grad
    b = nn.UninitializedBuffer()
    assert repr(b) == "<UninitializedBuffer>" and not b.requires_grad and b.dtype == corenn.float32
    b.materialize(4, dtype=corenn.float64)
    assert type(b) is corenn.Tensor and b.shape == (4,) and b.dtype == corenn.float64


def test_optimizer_built_before_the_dry_run_keeps_working_as_in_torch():
    # PyTorch documents building the optimizer after the dry run; one built before holds the same parameter
    # objects, which the dry run fills in place, so it steps them (as in PyTorch)
    ours, theirs = nn.LazyLinear(3), torch.nn.LazyLinear(3)
    ours_opt, theirs_opt = corenn.optim.SGD(ours.parameters(), lr=0.5), torch.optim.SGD(theirs.parameters(), lr=0.5)
    x = RNG.standard_normal((4, 2)).astype(np.float32)
    ours(corenn.tensor(x)), theirs(torch.tensor(x))
    _copy_state(ours, theirs)
    ours(corenn.tensor(x)).pow(2).sum().backward()
    theirs(torch.tensor(x)).pow(2).sum().backward()
    ours_opt.step(), theirs_opt.step()
    np.testing.assert_allclose(ours.weight.detach().numpy(), theirs.weight.detach().numpy(), rtol=1e-5)
    assert ours_opt.param_groups[0]["params"][0] is ours.weight


def test_load_state_dict_into_a_lazy_module():
    source = nn.LazyConv2d(4, 3)
    source(corenn.randn(1, 2, 5, 5))
    target = nn.LazyConv2d(4, 3)
    assert repr(target.load_state_dict(source.state_dict())) == "<All keys matched successfully>"
    assert type(target).__name__ == "LazyConv2d"  # as PyTorch: it becomes Conv2d at its next forward
    assert target.weight.shape == (4, 2, 3, 3) and corenn.equal(target.weight, source.weight)
    target(corenn.randn(1, 2, 5, 5))
    assert type(target) is nn.Conv2d and corenn.equal(target.weight, source.weight)  # the loaded values stay
    untouched = nn.LazyBatchNorm2d()
    untouched.load_state_dict(nn.LazyBatchNorm2d().state_dict())  # uninitialized into uninitialized
    assert untouched.has_uninitialized_params()
    with pytest.raises(RuntimeError, match="Can't access the shape of an uninitialized parameter"):
        source.load_state_dict(nn.LazyConv2d(4, 3).state_dict())


def test_dtype_and_errors():
    m = nn.LazyLinear(2, dtype=corenn.float64)
    m(corenn.randn(3, 4, dtype=corenn.float64))
    assert m.weight.dtype == corenn.float64
    with pytest.raises(RuntimeError, match="Expected 3D \\(unbatched\\) or 4D \\(batched\\) input to LazyConv2d"):
        nn.LazyConv2d(2, 3)(corenn.randn(5, 5))
    with pytest.raises(ValueError, match="in_channels must be divisible by groups"):
        nn.LazyConv1d(4, 3, groups=2)(corenn.randn(1, 3, 5))
    with pytest.raises(TypeError, match="initialize_parameters\\(\\) takes 2 positional arguments"):
        nn.LazyLinear(2)(corenn.randn(1, 2), 5)


def test_lazy_modules_deepcopy_and_pickle_uninitialized():
    import copy
    import pickle
    original = nn.LazyConv2d(4, 3, dtype=corenn.float64)
    copied, unpickled = copy.deepcopy(original), pickle.loads(pickle.dumps(original))
    for clone in (copied, unpickled):
        assert type(clone.weight) is nn.UninitializedParameter and clone.weight is not original.weight
        assert clone.weight.dtype == corenn.float64
        clone(corenn.randn(1, 2, 5, 5, dtype=corenn.float64))
        assert type(clone) is nn.Conv2d and clone.weight.shape == (4, 2, 3, 3)
    assert type(original) is nn.LazyConv2d and original.has_uninitialized_params()
    buffer = copy.deepcopy(nn.UninitializedBuffer(persistent=False))
    assert type(buffer) is nn.UninitializedBuffer and buffer.persistent is False


def test_nn_parameter_import_path_as_torch():
    from corenn.nn.parameter import Parameter, UninitializedBuffer, UninitializedParameter, is_lazy
    assert Parameter is nn.Parameter and UninitializedParameter is nn.UninitializedParameter
    assert is_lazy(UninitializedBuffer()) and not is_lazy(Parameter(corenn.zeros(1)))
    assert set(torch.nn.parameter.__all__) <= set(corenn.nn.parameter.__all__)
