"""The device-backend protocol (docs/writing-plugins.md, ``corenn.dispatch.Backend``) and PyTorch's device semantics.

The cpu backend and the test-only ``strict`` device (two indices, arrays that are not
numpy arrays) are both checked against the written protocol; the semantics tests run
on cpu and across strict's indices.
"""
from __future__ import annotations

import re

import numpy as np
import pytest

import corenn
from corenn import dispatch
from corenn.autograd.node import Op
from corenn.dispatch import Backend, KernelRegistration
from corenn.testing.backend import BackendProtocolError, check_backend


# -- the protocol, written down and checked ------------------------------------------------------------------------

def test_cpu_and_strict_backends_follow_the_protocol(strict_device):
    check_backend("cpu")
    check_backend("strict")


def test_the_protocol_lists_are_documented_where_authors_read():
    doc = open("docs/writing-plugins.md").read()
    section = doc[doc.index("## Writing a device backend: the protocol"):]
    for name in dispatch.ARRAY_PROTOCOL + dispatch.RNG_METHODS:
        assert f"`{name}`" in section or f"`{name}(" in section, name
    for field in ("xp_for_index", "device_guard", "current_device", "numpy_compatible", "random_generator",
                  "to_device", "to_host", "device_count", "default_index"):
        assert f"`{field}" in section and field in Backend.__doc__, field


def test_check_backend_names_what_a_backend_gets_wrong(corenn_plugin):
    class NoRng:
        @corenn.hookimpl
        def corenn_register_backends(self):
            return [Backend(type="bad", xp=np, to_device=lambda a, i=None: a.tolist(), to_host=np.asarray,
                            random_generator=lambda seed: object())]
    corenn_plugin(NoRng())
    with pytest.raises(BackendProtocolError) as error:
        check_backend("bad")
    assert "to_device gave a list" in str(error.value) and "RNG object lacks random" in str(error.value)


def test_a_random_generator_without_the_rng_interface_is_a_clear_error(corenn_plugin):
    class Plugin:
        @corenn.hookimpl
        def corenn_register_backends(self):
            return [Backend(type="norng", xp=np, to_device=lambda a, i=None: a, to_host=np.asarray,
                            random_generator=lambda seed: np.random.RandomState(seed % 2 ** 32))]
    corenn_plugin(Plugin())
    with pytest.raises(TypeError, match=r"returned a RandomState without integers.*RNG_METHODS"):
        corenn.randn(2, device="norng")


class OwnNeg(Op):
    @staticmethod
    def forward(ctx, a):
        return -a

    @staticmethod
    def backward(ctx, grad):
        return -grad


def test_a_backend_that_is_not_numpy_compatible_gets_only_its_own_kernels(corenn_plugin):
    class Plugin:
        @corenn.hookimpl
        def corenn_register_backends(self):
            return [Backend(type="alien", xp=np, to_device=lambda a, i=None: a, to_host=np.asarray,
                            numpy_compatible=False)]

        @corenn.hookimpl
        def corenn_register_kernels(self):
            return [KernelRegistration("neg", "alien", OwnNeg, priority=1)]
    corenn_plugin(Plugin())
    assert set(dispatch.kernels.table("alien")) == {"neg"}
    assert "neg" in dispatch.kernels.table("cpu") and len(dispatch.kernels.table("cpu")) > 100
    x = corenn.Tensor._wrap(np.ones(2, dtype=np.float32), corenn.device("alien"))
    assert (-x)._data.tolist() == [-1.0, -1.0]
    with pytest.raises(NotImplementedError, match="no kernel for op 'exp' on device type 'alien'"):
        x.exp()


# -- device indices ------------------------------------------------------------------------------------------------

def test_a_bare_device_means_its_current_index(strict_device):
    t = corenn.ones(2, device="strict")
    assert t.device == corenn.device("strict:0") and repr(t.device) == "device(type='strict', index=0)"
    with strict_device.device_guard(1):  # the backend's current index, as torch.cuda.set_device
        assert corenn.ones(2, device="strict").device == corenn.device("strict:1")
        assert corenn.ones(2).to("strict").device == corenn.device("strict:1")
    # As in PyTorch, the device objects differ: 'strict' is "whatever is current", 'strict:0' one device.
    assert corenn.device("strict") != corenn.device("strict:0") and corenn.device("strict").index is None
    assert dispatch.resolve_device("strict") == corenn.device("strict:0")
    assert corenn.tensor(1.0, device="cpu:0").device == corenn.device("cpu")


def test_device_indices_are_checked_against_device_count(strict_device):
    assert str(corenn.device("strict:5")) == "strict:5"  # may be named, as torch.device('cuda:5')
    message = "device index 5 out of range: strict has 2 devices (valid indices 0..1)"
    for make in (lambda: corenn.zeros(2, device="strict:5"), lambda: corenn.tensor([1.0], device="strict:5"),
                 lambda: corenn.ones(2).to("strict:5"), lambda: corenn.randn(2, device="strict:5")):
        with pytest.raises(RuntimeError, match=re.escape(message)):
            make()
    assert dispatch.available_devices()[-2:] == ["strict:0", "strict:1"]


# -- gradients: device, shape, dtype (PyTorch's validate_outputs and the .grad setter) ------------------------------

@pytest.fixture(params=["cpu", "strict:1"])
def device(request):
    if request.param != "cpu":
        request.getfixturevalue("strict_device")
    return request.param


def test_backward_and_grad_check_the_gradient_shape(device):
    x = corenn.ones(3, device=device, requires_grad=True)
    message = ("Mismatch in shape: grad_output[0] has a shape of corenn.Size([2]) and output[0] has a shape of "
               "corenn.Size([3])")
    with pytest.raises(RuntimeError, match=re.escape(message)):
        (x * 2).backward(corenn.ones(2, device=device))
    with pytest.raises(RuntimeError, match=re.escape(message)):
        corenn.autograd.grad(x * 2, x, corenn.ones(2, device=device))
    with pytest.raises(RuntimeError, match="Mismatch in shape"):  # no broadcasting, as in PyTorch
        (x * 2).backward(corenn.ones(1, device=device))


def test_backward_casts_a_gradient_of_another_dtype(device):
    x = corenn.ones(3, device=device, requires_grad=True)
    (x * 2).backward(corenn.ones(3, dtype=corenn.float64, device=device))
    assert x.grad.dtype is corenn.float32 and x.grad.tolist() == [2.0, 2.0, 2.0]
    (g,) = corenn.autograd.grad(x * 2, x, corenn.ones(3, dtype=corenn.int64, device=device))
    assert g.dtype is corenn.float32 and g.device == x.device


def test_backward_checks_the_gradient_device(strict_device):
    x = corenn.ones(3, device="strict:1", requires_grad=True)
    for other, name in ((corenn.ones(3), "cpu"), (corenn.ones(3, device="strict:0"), "strict:0")):
        message = f"invalid gradient at index 0 - expected device strict:1 but got {name}"
        with pytest.raises(RuntimeError, match=re.escape(message)):
            (x * 2).backward(other)
        with pytest.raises(RuntimeError, match=re.escape(message)):
            corenn.autograd.grad(x * 2, x, other)
    # A 0-dim gradient moves to the output's device (PyTorch's validate_outputs does the same).
    (x * 2).sum().backward(corenn.tensor(3.0))
    assert x.grad.device == x.device and x.grad.cpu().tolist() == [6.0, 6.0, 6.0]


def test_assigning_grad_checks_type_device_shape_and_dtype(device):
    p = corenn.nn.Parameter(corenn.ones(4, device=device))
    with pytest.raises(TypeError, match="assigned grad expected to be a Tensor or None but got grad of type list"):
        p.grad = [1.0, 2.0, 3.0, 4.0]
    with pytest.raises(RuntimeError, match=re.escape("attempting to assign a gradient of size '[1]' to a tensor of "
                                                     "size '[4]'")):
        p.grad = corenn.ones(1, device=device)
    with pytest.raises(RuntimeError, match="attempting to assign a gradient with dtype 'corenn.float64' to a tensor "
                                           "with dtype 'corenn.float32'"):
        p.grad = corenn.ones(4, dtype=corenn.float64, device=device)
    p.grad = corenn.full((4,), 2.0, device=device)
    assert p.grad.tolist() == [2.0] * 4
    p.grad = None
    assert p.grad is None


def test_assigning_grad_checks_the_device(strict_device):
    p = corenn.nn.Parameter(corenn.ones(4, device="strict:1"))
    with pytest.raises(RuntimeError, match="gradient with device type 'cpu' to a tensor with device type 'strict'"):
        p.grad = corenn.ones(4)
    with pytest.raises(RuntimeError, match="gradient located on device with index '0' to a tensor located on device "
                                           "with index '1'"):
        p.grad = corenn.ones(4, device="strict:0")
    q = corenn.nn.Parameter(corenn.ones(4))
    with pytest.raises(RuntimeError, match="gradient with device type 'strict' to a tensor with device type 'cpu'"):
        q.grad = corenn.ones(4, device="strict")


# -- cpu index tensors, 0-dim cpu tensors as scalars ---------------------------------------------------------------

def test_cpu_index_tensors_index_a_device_tensor(strict_device):
    x = corenn.arange(12.0, device="strict:1").reshape(3, 4).requires_grad_()
    rows = corenn.tensor([2, 0])
    picked = x[rows]
    assert picked.device == x.device and picked.cpu().tolist() == [[8, 9, 10, 11], [0, 1, 2, 3]]
    assert x[corenn.tensor([True, False, True])].cpu().tolist() == [[0, 1, 2, 3], [8, 9, 10, 11]]
    assert x[[1], np.array([3])].cpu().tolist() == [7.0]
    x[rows, corenn.tensor([0, 0])].sum().backward()
    assert x.grad.cpu()[:, 0].tolist() == [1.0, 0.0, 1.0]
    y = corenn.zeros(3, device="strict:1")
    y[corenn.tensor([0, 2])] = 5.0
    assert y.cpu().tolist() == [5.0, 0.0, 5.0]
    with pytest.raises(RuntimeError, match=r"indices should be either on cpu or on the same device as the indexed "
                                           r"tensor \(strict:1\), got strict:0"):
        x[corenn.tensor([0], device="strict:0")]


def test_a_0_dim_cpu_tensor_acts_as_a_scalar_next_to_a_device_tensor(strict_device):
    x = corenn.tensor([1.0, 2.0], device="strict:1", requires_grad=True)
    w = corenn.tensor(3.0, requires_grad=True)
    y = x * w + corenn.tensor(1.0)
    assert y.device == x.device and y.cpu().tolist() == [4.0, 7.0]
    assert (corenn.tensor(2.0) - x).cpu().tolist() == [1.0, 0.0]  # on either side
    assert corenn.where(x > 1, x, corenn.tensor(0.0)).cpu().tolist() == [0.0, 2.0]  # through run()
    y.sum().backward()
    assert w.grad.device == corenn.device("cpu") and w.grad.item() == 3.0  # the gradient comes back to the cpu
    assert x.grad.cpu().tolist() == [3.0, 3.0]
    z = corenn.zeros(2, device="strict:1")
    z += corenn.tensor(2.0)
    assert z.cpu().tolist() == [2.0, 2.0]
    with pytest.raises(RuntimeError, match="same device, but found at least two devices, strict:1 and cpu"):
        x + corenn.ones(1)  # a 1-element, 1-dim cpu tensor is not a scalar
    with pytest.raises(RuntimeError, match="same device, but found at least two devices, cpu and strict:0"):
        corenn.ones(2) + corenn.tensor(1.0, device="strict")  # only *cpu* 0-dim tensors are scalars
    with pytest.raises(RuntimeError, match="strict:1 and strict:0"):
        x + corenn.ones(2, device="strict:0")


def test_xp_names_list_everything_corenn_uses_of_xp(strict_device):
    """``corenn.dispatch.XP_NAMES`` (and the docs' copy of it) is what corenn really uses of a backend's ``xp``."""
    import pathlib
    listed = set(dispatch.XP_NAMES)
    root = pathlib.Path(corenn.__file__).parent
    written = {match.rstrip(".") for path in root.rglob("*.py")
               for match in re.findall(r"\bxp\.([a-z_][a-z_0-9.]*)", path.read_text())}
    assert written <= listed, f"xp names used in corenn's source but not in XP_NAMES: {sorted(written - listed)}"

    # Names reached through getattr(xp, name) show only at run time: ask the strict device, whose xp records them.
    from corenn.testing.opcheck import run_conformance
    import corenn.nn as nn
    import corenn.nn.functional as F
    run_conformance(device="strict")
    model = nn.Sequential(nn.Conv2d(1, 2, 3), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(), nn.Linear(18, 3)).to("strict")
    optimizer = corenn.optim.Adam(model.parameters())
    x, y = corenn.randn(4, 1, 8, 8, device="strict"), corenn.randint(0, 3, (4,), device="strict")
    F.cross_entropy(model(x), y).backward()
    optimizer.step()
    asked = {name for name in strict_device.XP_USED if name not in ("lib", "lib.stride_tricks")}
    assert asked <= listed, f"xp names corenn asked the strict device for but XP_NAMES lacks: {sorted(asked - listed)}"

    doc = open("docs/writing-plugins.md").read()
    section = doc[doc.index("**`xp`.**"):doc.index("**`numpy_compatible`.**")]
    assert [name for name in dispatch.XP_NAMES if f"`{name}`" not in section] == []


def test_manual_seed_after_a_device_plugin_is_removed():
    """A removed device's default generator is dropped, not re-seeded (which would look its backend up)."""
    import strict_device
    from corenn.testing import register_plugin
    with register_plugin(strict_device.StrictPlugin(), name="strict"):
        corenn.randn(2, device="strict")
    corenn.manual_seed(0)
    assert corenn.initial_seed() == 0


def test_a_backend_without_random_generator_draws_on_the_host_and_moves_the_result(corenn_plugin):
    moved = []

    def to_device(array, index=None):
        moved.append(array.shape)
        return np.array(array, copy=True)

    class NoRng:
        @corenn.hookimpl
        def corenn_register_backends(self):
            return [Backend(type="norngdev", xp=np, to_device=to_device, to_host=np.asarray)]
    corenn_plugin(NoRng())
    corenn.manual_seed(3)
    first = corenn.randn(2, 3, device="norngdev")
    assert first.device.type == "norngdev" and (2, 3) in moved
    corenn.manual_seed(3)
    assert corenn.randn(2, 3, device="norngdev").tolist() == first.tolist()  # seeded like any device
    dropped = corenn.nn.functional.dropout(corenn.ones(1000, device="norngdev"), 0.5)
    assert set(np.unique(dropped.cpu().numpy())) == {0.0, 2.0}
    assert corenn.poisson(corenn.full((4,), 3.0, device="norngdev")).device.type == "norngdev"
