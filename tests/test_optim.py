"""Optimizer behaviour without PyTorch: groups, zero_grad, state dicts (by name and by position), hooks, errors."""
from __future__ import annotations

import copy
import pickle
import warnings

import numpy as np
import pytest

import corenn
import corenn.optim as optim

ALL = [("SGD", dict(lr=0.1, momentum=0.9)), ("Adam", dict(lr=0.01)), ("AdamW", dict(lr=0.01, amsgrad=True)),
       ("RMSprop", dict(lr=0.01, momentum=0.9, centered=True)), ("Adagrad", dict(lr=0.1))]


def _quadratic_step(params, opt, target=1.0):
    opt.zero_grad()
    loss = sum(((p - target) ** 2).sum() for p in params)
    loss.backward()
    opt.step()
    return loss.item()


@pytest.mark.parametrize("name,kwargs", ALL)
def test_minimises_a_quadratic(name, kwargs):
    params = [corenn.zeros(3, requires_grad=True), corenn.full((2, 2), 3.0, requires_grad=True)]
    opt = getattr(optim, name)(params, **kwargs)
    first = _quadratic_step(params, opt)
    for _ in range(300):
        last = _quadratic_step(params, opt)
    assert last < 0.05 * first
    assert params[0].requires_grad and params[0].is_leaf and params[0].grad_fn is None


def test_sgd_step_by_hand():
    w = corenn.tensor([1.0, -2.0], requires_grad=True)
    opt = optim.SGD([w], lr=0.1, momentum=0.5, weight_decay=0.1)
    w.grad = corenn.tensor([1.0, 1.0])
    opt.step()  # g = 1 + 0.1 w = [1.1, 0.8]; buf = g; w -= 0.1 g
    np.testing.assert_allclose(w.detach().numpy(), [0.89, -2.08], rtol=1e-6)
    opt.step()  # g = 1 + 0.1 w = [1.089, 0.792]; buf = 0.5 [1.1, 0.8] + g
    np.testing.assert_allclose(opt.state[w]["momentum_buffer"].numpy(), [1.639, 1.192], rtol=1e-6)
    np.testing.assert_allclose(w.detach().numpy(), [0.89 - 0.1639, -2.08 - 0.1192], rtol=1e-6)


def test_adam_first_step_moves_each_coordinate_by_lr():
    # bias correction makes Adam's first update lr * sign(g) (up to eps)
    w = corenn.tensor([0.0, 0.0, 0.0], requires_grad=True)
    opt = optim.Adam([w], lr=0.1)
    w.grad = corenn.tensor([3.0, -0.001, 50.0])
    opt.step()
    np.testing.assert_allclose(w.detach().numpy(), [-0.1, 0.1, -0.1], rtol=1e-4)
    assert opt.state[w]["step"].item() == 1.0
    assert opt.state[w]["step"].dtype == corenn.float32


def test_zero_grad_to_none_and_to_zeros():
    w = corenn.ones(3, requires_grad=True)
    opt = optim.SGD([w], lr=0.1)
    (w * 2).sum().backward()
    grad = w.grad
    opt.zero_grad(set_to_none=False)
    assert w.grad is grad and w.grad.tolist() == [0.0, 0.0, 0.0]
    opt.zero_grad()
    assert w.grad is None


def test_parameters_without_grad_are_skipped_and_keep_no_state():
    a, b = corenn.ones(2, requires_grad=True), corenn.ones(2, requires_grad=True)
    opt = optim.Adam([a, b], lr=0.1)
    a.grad = corenn.ones(2)
    opt.step()
    assert b.tolist() == [1.0, 1.0]
    assert b not in opt.state and a in opt.state


def test_param_groups_add_param_group_and_defaults():
    a, b = corenn.ones(2, requires_grad=True), corenn.ones(2, requires_grad=True)
    opt = optim.SGD([a], lr=0.1, momentum=0.9)
    opt.add_param_group({"params": b, "lr": 0.01})
    assert [g["lr"] for g in opt.param_groups] == [0.1, 0.01]
    assert opt.param_groups[1]["momentum"] == 0.9
    a.grad, b.grad = corenn.ones(2), corenn.ones(2)
    opt.step()
    np.testing.assert_allclose(a.detach().numpy(), [0.9, 0.9], rtol=1e-6)
    np.testing.assert_allclose(b.detach().numpy(), [0.99, 0.99], rtol=1e-6)


def test_closure_loss_is_returned():
    w = corenn.tensor([2.0], requires_grad=True)
    opt = optim.SGD([w], lr=0.25)

    def closure():
        opt.zero_grad()
        loss = (w * w).sum()
        loss.backward()
        return loss

    assert opt.step(closure).item() == 4.0
    assert w.item() == pytest.approx(1.0)
    assert opt.step() is None


def test_construction_errors_are_clear():
    w = corenn.ones(2, requires_grad=True)
    with pytest.raises(TypeError, match="iterable of Tensors or dicts, but got corenn.FloatTensor"):
        optim.SGD(w, lr=0.1)
    with pytest.raises(ValueError, match="empty parameter list"):
        optim.Adam([])
    with pytest.raises(TypeError, match="can only optimize Tensors, but one of the params is int"):
        optim.SGD([w, 3], lr=0.1)
    with pytest.raises(ValueError, match="can't optimize a non-leaf Tensor"):
        optim.SGD([w * 2], lr=0.1)
    with pytest.raises(TypeError, match="ordered collections"):
        optim.SGD({w}, lr=0.1)
    with pytest.raises(ValueError, match="more than one parameter group"):
        optim.SGD([{"params": [w]}, {"params": [w]}], lr=0.1)
    with pytest.raises(ValueError, match="Invalid learning rate: -1"):
        optim.SGD([w], lr=-1)
    with pytest.raises(ValueError, match="Nesterov momentum requires a momentum and zero dampening"):
        optim.SGD([w], lr=0.1, nesterov=True)
    with pytest.raises(ValueError, match="Invalid beta parameter at index 1: 1.0"):
        optim.Adam([w], betas=(0.9, 1.0))
    with pytest.raises(ValueError, match="Invalid epsilon value"):
        optim.Adam([w], eps=-1e-8)
    with pytest.raises(ValueError, match="Invalid weight_decay value"):
        optim.AdamW([w], weight_decay=-0.1)
    with pytest.raises(ValueError, match="Invalid alpha value"):
        optim.RMSprop([w], alpha=-0.5)
    with pytest.raises(ValueError, match="Invalid lr_decay value"):
        optim.Adagrad([w], lr_decay=-1)
    with pytest.raises(ValueError, match="differentiable=True is not supported"):
        optim.Adam([w], differentiable=True)
    with pytest.raises(ValueError, match="some param names are missing|Some param names are missing"):
        optim.SGD([("a", w), corenn.ones(2, requires_grad=True)], lr=0.1)
    with pytest.raises(ValueError, match="cannot add param group without names"):
        optim.SGD([{"params": [("a", w)]}, {"params": [corenn.ones(2, requires_grad=True)]}], lr=0.1)
    with pytest.raises(TypeError, match="param_group must be a dict"):
        optim.SGD([w], lr=0.1).add_param_group([w])


def test_duplicate_parameters_in_a_group_warn():
    w = corenn.ones(2, requires_grad=True)
    with pytest.warns(UserWarning, match="duplicate parameters"):
        optim.SGD([w, w], lr=0.1)


def _trained(name, kwargs, named, seed=0, steps=5):
    rng = np.random.default_rng(seed)
    params = {"fc.weight": corenn.tensor(rng.standard_normal((3, 2)).astype(np.float32), requires_grad=True),
              "fc.bias": corenn.tensor(rng.standard_normal(3).astype(np.float32), requires_grad=True),
              "head.weight": corenn.tensor(rng.standard_normal((1, 3)).astype(np.float32), requires_grad=True)}
    opt = getattr(optim, name)(list(params.items()) if named else list(params.values()), **kwargs)
    for _ in range(steps):
        _quadratic_step(list(params.values()), opt)
    return params, opt


@pytest.mark.parametrize("name,kwargs", ALL)
def test_state_dict_round_trips_through_corenn_save(name, kwargs, tmp_path):
    params, opt = _trained(name, kwargs, named=True)
    corenn.save(opt.state_dict(), tmp_path / "opt.safetensors")
    copies = {k: corenn.tensor(v.detach().numpy().copy(), requires_grad=True) for k, v in params.items()}
    opt2 = getattr(optim, name)(list(copies.items()), **{**kwargs, "lr": 123.0})
    result = opt2.load_state_dict(corenn.load(tmp_path / "opt.safetensors"))
    assert result.missing_keys == [] and result.unexpected_keys == []
    assert opt2.param_groups[0]["lr"] == kwargs["lr"]
    # both continue identically, and the loaded state shares no memory with the original
    for _ in range(5):
        _quadratic_step(list(params.values()), opt)
        _quadratic_step(list(copies.values()), opt2)
    for key in params:
        np.testing.assert_array_equal(params[key].detach().numpy(), copies[key].detach().numpy())
    for p, p2 in zip(params.values(), copies.values()):
        for k, v in opt.state[p].items():
            assert v is not opt2.state[p2][k]


def test_state_dict_layout_mirrors_pytorch_and_keeps_names():
    params, opt = _trained("SGD", dict(lr=0.1, momentum=0.9), named=True)
    state = opt.state_dict()
    assert sorted(state) == ["param_groups", "state"]
    assert sorted(state["state"]) == [0, 1, 2]
    assert sorted(state["state"][0]) == ["momentum_buffer"]
    group = state["param_groups"][0]
    assert group["params"] == [0, 1, 2]
    assert group["param_names"] == ["fc.weight", "fc.bias", "head.weight"]
    assert group["lr"] == 0.1 and group["momentum"] == 0.9 and group["nesterov"] is False


def test_load_by_name_follows_parameters_that_moved_and_reports_mismatches():
    params, opt = _trained("Adam", dict(lr=0.01), named=True)
    saved = opt.state_dict()
    rng = np.random.default_rng(1)
    # the rebuilt model lists its parameters in another order, lost "head.weight" and gained "extra"
    rebuilt = {"extra": corenn.zeros(4, requires_grad=True),
               "fc.bias": corenn.tensor(params["fc.bias"].detach().numpy().copy(), requires_grad=True),
               "fc.weight": corenn.tensor(rng.standard_normal((3, 2)).astype(np.float32), requires_grad=True)}
    opt2 = optim.Adam(list(rebuilt.items()), lr=0.5)
    with pytest.warns(UserWarning, match=r"no saved state for \['extra'\].*\['head.weight'\]"):
        result = opt2.load_state_dict(saved)
    assert result.missing_keys == ["extra"]
    assert result.unexpected_keys == ["head.weight"]
    for name in ("fc.weight", "fc.bias"):
        for key in ("exp_avg", "exp_avg_sq", "step"):
            np.testing.assert_array_equal(opt2.state[rebuilt[name]][key].numpy(), opt.state[params[name]][key].numpy())
    assert rebuilt["extra"] not in opt2.state
    assert opt2.param_groups[0]["param_names"] == ["extra", "fc.bias", "fc.weight"]
    rebuilt["extra"].grad = corenn.ones(4)
    opt2.step()  # the fresh parameter starts its own state
    assert opt2.state[rebuilt["extra"]]["step"].item() == 1.0


def test_load_by_name_strict_raises_before_changing_anything():
    params, opt = _trained("SGD", dict(lr=0.1, momentum=0.9), named=True)
    saved = opt.state_dict()
    w = corenn.zeros(3, 2, requires_grad=True)
    opt2 = optim.SGD([("fc.weight", w), ("other", corenn.zeros(2, requires_grad=True))], lr=0.5, momentum=0.9)
    with pytest.raises(RuntimeError, match=r"missing parameters \['other'\], unexpected parameters "
                                           r"\['fc.bias', 'head.weight'\]"):
        opt2.load_state_dict(saved, strict=True)
    assert opt2.param_groups[0]["lr"] == 0.5 and len(opt2.state) == 0


def test_load_by_position_without_names_matches_pytorch_rules():
    params, opt = _trained("SGD", dict(lr=0.1, momentum=0.9), named=False)
    saved = opt.state_dict()
    assert "param_names" not in saved["param_groups"][0]
    fresh = [corenn.zeros(3, 2, requires_grad=True), corenn.zeros(3, requires_grad=True),
             corenn.zeros(1, 3, requires_grad=True)]
    opt2 = optim.SGD(fresh, lr=1.0, momentum=0.9)
    result = opt2.load_state_dict(saved)
    assert result == ([], [])
    np.testing.assert_array_equal(opt2.state[fresh[2]]["momentum_buffer"].numpy(),
                                  opt.state[params["head.weight"]]["momentum_buffer"].numpy())
    with pytest.raises(ValueError, match="doesn't match the size of optimizer's group"):
        optim.SGD(fresh[:2], lr=0.1).load_state_dict(saved)
    with pytest.raises(ValueError, match="different number of parameter groups"):
        optim.SGD([{"params": fresh[:1]}, {"params": fresh[1:]}], lr=0.1).load_state_dict(saved)


def test_load_with_wrong_shapes_names_the_parameter():
    params, opt = _trained("Adam", dict(lr=0.01), named=True)
    opt2 = optim.Adam([("fc.weight", corenn.zeros(2, 3, requires_grad=True)),
                       ("fc.bias", corenn.zeros(3, requires_grad=True)),
                       ("head.weight", corenn.zeros(1, 3, requires_grad=True))])
    with pytest.raises(RuntimeError, match=r"'exp_avg' for parameter fc.weight has shape \[3, 2\], but the parameter "
                                           r"has shape \[2, 3\]"):
        opt2.load_state_dict(opt.state_dict())


def test_load_converts_state_to_the_parameter_dtype():
    params, opt = _trained("SGD", dict(lr=0.1, momentum=0.9), named=True)
    doubles = [(k, corenn.tensor(v.detach().numpy().astype(np.float64), requires_grad=True)) for k, v in params.items()]
    opt2 = optim.SGD(doubles, lr=0.1, momentum=0.9)
    opt2.load_state_dict(opt.state_dict())
    assert opt2.state[doubles[0][1]]["momentum_buffer"].dtype == corenn.float64


def test_load_state_dict_rejects_what_is_not_an_optimizer_state():
    w = corenn.ones(2, requires_grad=True)
    opt = optim.SGD([w], lr=0.1)
    with pytest.raises(ValueError, match="has no 'param_groups' entry"):
        opt.load_state_dict({"state": {}})
    with pytest.raises(TypeError, match="must be a dict"):
        opt.load_state_dict([1, 2])


def test_named_parameters_of_a_module_are_recorded():
    nn = corenn.nn

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.a = nn.Parameter(corenn.ones(2))
            self.b = nn.Parameter(corenn.zeros(1))

    net = Net()
    opt = optim.SGD(net.named_parameters(), lr=0.1)
    assert opt.param_groups[0]["param_names"] == ["a", "b"]
    assert opt.param_groups[0]["params"][0] is net.a


def test_step_hooks_run_in_order_and_can_be_removed():
    w = corenn.ones(2, requires_grad=True)
    opt = optim.SGD([w], lr=0.1)
    calls = []
    pre = opt.register_step_pre_hook(lambda o, args, kwargs: calls.append(("pre", w.tolist())))
    post = opt.register_step_post_hook(lambda o, args, kwargs: calls.append(("post", w.tolist())))
    w.grad = corenn.ones(2)
    opt.step()
    assert calls == [("pre", [1.0, 1.0]), ("post", [0.8999999761581421, 0.8999999761581421])]
    pre.remove()
    post.remove()
    opt.step()
    assert len(calls) == 2


def test_state_dict_and_load_hooks():
    w = corenn.ones(2, requires_grad=True)
    opt = optim.SGD([w], lr=0.1)
    opt.register_state_dict_post_hook(lambda o, sd: {**sd, "extra": 1})
    seen = []
    opt.register_load_state_dict_pre_hook(lambda o, sd: seen.append(sd.get("extra")))
    opt.register_load_state_dict_post_hook(lambda o: seen.append("post"))
    opt.load_state_dict(opt.state_dict())
    assert seen == [1, "post"]


def test_repr_deepcopy_and_pickle():
    params, opt = _trained("Adam", dict(lr=0.01, amsgrad=True), named=True)
    text = repr(opt)
    assert text.startswith("Adam (\nParameter Group 0\n") and "    amsgrad: True\n" in text and "    lr: 0.01\n" in text
    clone = copy.deepcopy(opt)
    assert clone.param_groups[0]["lr"] == 0.01 and len(clone.state) == 3
    restored = pickle.loads(pickle.dumps(opt))
    assert restored.param_groups[0]["param_names"] == ["fc.weight", "fc.bias", "head.weight"]
    p = restored.param_groups[0]["params"][0]
    p.grad = corenn.ones(3, 2)
    restored.step()  # hooks dicts came back: step works after unpickling
    assert restored.state[p]["step"].item() == 6.0


def test_step_does_not_record_autograd_history():
    w = corenn.ones(2, requires_grad=True)
    opt = optim.RMSprop([w], lr=0.1, momentum=0.9, centered=True, weight_decay=0.1)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for _ in range(3):
            (w * w).sum().backward()
            opt.step()
            opt.zero_grad()
    assert w.grad_fn is None and w.is_leaf
