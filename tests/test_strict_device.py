"""Real work on the test-only ``strict`` device (tests/strict_device): no silent host conversion anywhere.

The strict device wraps numpy arrays in a class that is not an ndarray, refuses
``np.asarray``/``float``/``bool``/``tolist`` on them and has two indices, so these
tests catch core code that reaches for numpy or the host behind the backend's back,
and arrays created on the wrong index.
"""
from __future__ import annotations

import numpy as np
import pytest

import corenn
from corenn import nn


def _on_its_index(t):
    """The array of a strict tensor lives on the tensor's device index."""
    return t._data._index == t.device.index


def test_strict_arrays_refuse_silent_host_conversion(strict_device):
    x = corenn.tensor([1.0, 2.0], device="strict:1")
    assert type(x._data) is strict_device.StrictArray and not isinstance(x._data, np.ndarray)
    for convert in (np.asarray, float, int, bool, list, lambda a: a.tolist(), lambda a: np.add(a, 1)):
        with pytest.raises(TypeError):
            convert(x._data[0] if convert in (float, int, bool) else x._data)
    with pytest.raises(TypeError, match="host numpy array"):
        x._data + np.ones(2, dtype=np.float32)
    with pytest.raises(ValueError, match="strict:0 used with arrays on strict:1"):
        x._data + corenn.ones(2, device="strict:0")._data
    # Through corenn, conversions are explicit and work.
    assert x.tolist() == [1.0, 2.0] and x[1].item() == 2.0 and float(x[0]) == 1.0 and bool(x[0])
    assert np.array_equal(x.cpu().numpy(), [1.0, 2.0])
    with pytest.raises(TypeError, match="can't convert strict:1 device type tensor to numpy"):
        x.numpy()


def test_to_cpu_between_indices_and_printing(strict_device):
    x = corenn.arange(6.0).reshape(2, 3)
    on1 = x.to("strict:1")
    assert on1.device == corenn.device("strict:1") and _on_its_index(on1)
    on0 = on1.to("strict:0")  # device to device, through the backend's own to_device
    assert on0.device == corenn.device("strict", 0) and _on_its_index(on0)
    assert on1.to("strict:1") is on1 and on1.to("strict") is not on1  # 'strict' is strict:0 (current)
    assert on0.cpu().tolist() == x.tolist() and on1.double().dtype is corenn.float64
    assert repr(on1) == "tensor([[0., 1., 2.],\n        [3., 4., 5.]], device='strict:1')"
    assert repr(corenn.tensor(2.5, device="strict")) == "tensor(2.5000, device='strict:0')"
    y = corenn.zeros(2, dtype=corenn.int64, device="strict:1")
    assert repr(y) == "tensor([0, 0], device='strict:1')"


@pytest.mark.parametrize("factory", [
    lambda d: corenn.zeros(2, 3, device=d), lambda d: corenn.ones(3, device=d),
    lambda d: corenn.full((2,), 7.0, device=d), lambda d: corenn.arange(4, device=d),
    lambda d: corenn.linspace(0, 1, 5, device=d), lambda d: corenn.eye(3, device=d),
    lambda d: corenn.randn(3, device=d), lambda d: corenn.rand(3, device=d),
    lambda d: corenn.randint(0, 5, (3,), device=d),
    lambda d: corenn.randperm(4, device=d), lambda d: corenn.tensor([1, 2], device=d),
    lambda d: corenn.empty(2, device=d).normal_(), lambda d: nn.functional.dropout(corenn.ones(8, device=d), 0.5),
], ids=["zeros", "ones", "full", "arange", "linspace", "eye", "randn", "rand", "randint", "randperm", "tensor",
        "normal_", "dropout"])
def test_creation_lands_on_the_named_index(strict_device, factory):
    for name in ("strict:1", "strict:0", "strict"):
        t = factory(name)
        assert t.device == corenn.dispatch.resolve_device(name) and _on_its_index(t)


def _train(device, optimizer, steps=3):
    corenn.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(1, 4, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(),
                          nn.Linear(4 * 4 * 4, 3)).to(device)
    opt = (corenn.optim.SGD(model.parameters(), lr=0.1, momentum=0.9) if optimizer == "sgd"
           else corenn.optim.Adam(model.parameters(), lr=0.01))
    rng = np.random.default_rng(0)
    x = corenn.tensor(rng.standard_normal((8, 1, 8, 8)).astype(np.float32)).to(device)
    y = corenn.tensor(rng.integers(0, 3, 8)).to(device)
    loss_fn = nn.CrossEntropyLoss()
    losses = []
    for _ in range(steps):
        opt.zero_grad()
        loss = loss_fn(model(x), y)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return model, opt, losses


@pytest.mark.parametrize("optimizer", ["sgd", "adam"])
def test_cnn_training_loop_matches_cpu(strict_device, optimizer):
    cpu_model, _, cpu_losses = _train("cpu", optimizer)
    model, _, losses = _train("strict:1", optimizer)
    np.testing.assert_allclose(losses, cpu_losses, rtol=1e-5)
    assert losses[-1] < losses[0]
    for (name, p), q in zip(model.named_parameters(), cpu_model.parameters()):
        assert p.device == corenn.device("strict:1") and _on_its_index(p) and _on_its_index(p.grad), name
        np.testing.assert_allclose(p.detach().cpu().numpy(), q.detach().numpy(), rtol=1e-4, atol=1e-6)


def test_save_and_load_with_map_location(strict_device, tmp_path):
    model, opt, _ = _train("strict:1", "adam", steps=1)
    path = tmp_path / "model.safetensors"
    corenn.save(model.state_dict(), path)
    on_cpu = corenn.load(path, map_location="cpu")
    assert all(t.device == corenn.device("cpu") for t in on_cpu.values())
    for key, t in model.state_dict().items():
        np.testing.assert_array_equal(on_cpu[key].numpy(), t.cpu().numpy())
    back = corenn.load(path, map_location="strict:1")
    assert all(t.device == corenn.device("strict:1") and _on_its_index(t) for t in back.values())
    fresh = nn.Sequential(nn.Conv2d(1, 4, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(),
                          nn.Linear(4 * 4 * 4, 3)).to("strict:0")
    fresh.load_state_dict(on_cpu)  # cpu values into strict:0 parameters
    assert all(p.device == corenn.device("strict:0") and _on_its_index(p) for p in fresh.parameters())
    corenn.save(opt.state_dict(), tmp_path / "opt.safetensors")
    state = corenn.load(tmp_path / "opt.safetensors", map_location="strict:1")
    assert state["state"][0]["exp_avg"].device == corenn.device("strict:1")


def test_conformance_kit_passes_on_the_strict_device(strict_device):
    from corenn.testing import run_conformance
    run_conformance(device="strict:1")


@pytest.mark.parametrize("use", [
    lambda d: [getattr(nn.init, name)(corenn.empty(4, 5, device=d)) for name in
               ("xavier_uniform_", "kaiming_normal_", "orthogonal_", "trunc_normal_", "eye_")],
    lambda d: nn.Sequential(nn.Linear(5, 4), nn.BatchNorm1d(4), nn.LayerNorm(4), nn.GELU(), nn.Dropout(0.2)).to(d)(
        corenn.randn(3, 5, device=d)).sum().backward(),
    lambda d: nn.utils.clip_grad_norm_([nn.Parameter(corenn.ones(3, device=d))], 1.0),
    lambda d: nn.functional.one_hot(corenn.tensor([0, 2], device=d)),
    lambda d: nn.functional.cross_entropy(corenn.randn(3, 4, device=d, requires_grad=True),
                                          corenn.tensor([-100, 1, -100], device=d), ignore_index=-100).backward(),
    lambda d: (corenn.randn(5, device=d).sort(), corenn.randn(5, device=d).topk(2), corenn.ones(3, device=d).nonzero()),
    lambda d: (corenn.multinomial(corenn.ones(4, device=d), 2), corenn.bernoulli(corenn.full((3,), 0.5, device=d))),
    lambda d: corenn.allclose(corenn.ones(2, device=d), corenn.ones(2, device=d)) and 1.0 in corenn.ones(2, device=d),
], ids=["init", "norms-gelu-dropout", "clip_grad_norm", "one_hot", "cross_entropy-ignore", "sort-topk-nonzero",
        "multinomial-bernoulli", "allclose-contains"])
def test_more_of_the_api_runs_strictly(strict_device, use):
    use("strict:1")
