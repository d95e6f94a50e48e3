"""Adadelta, Adamax, NAdam, RAdam, ASGD, Rprop and LBFGS against PyTorch 2.13: the same start and the same
gradient rule give the same trajectory, compared after every step; state dicts; PyTorch's errors."""
from __future__ import annotations

import numpy as np
import pytest

import corenn
import corenn.optim as optim

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.torch

STEPS = 60
SHAPES = [(4, 3), (3,), (2, 2, 2)]


def _problem(seed):
    rng = np.random.default_rng(seed)
    init = [rng.standard_normal(s).astype(np.float32) for s in SHAPES]
    targets = [rng.standard_normal(s).astype(np.float32) for s in SHAPES]
    scales = [rng.uniform(0.5, 2.0, s).astype(np.float32) for s in SHAPES]
    noise = [[(0.1 * rng.standard_normal(s)).astype(np.float32) for s in SHAPES] for _ in range(STEPS)]
    return init, targets, scales, noise


def _trajectory(lib, module, name, kwargs, problem, groups):
    init, targets, scales, noise = problem
    params = [lib.tensor(a.copy(), requires_grad=True) for a in init]
    opt = getattr(module, name)(groups(params) if groups else params, **kwargs)
    out = []
    for t in range(STEPS):
        opt.zero_grad()
        for i, p in enumerate(params):
            if t % 7 == 3 and i == 1:   # a parameter without grad this step is skipped, state untouched
                continue
            g = (scales[i] * (p.detach().numpy() - targets[i]) + noise[t][i]).astype(np.float32)
            p.grad = lib.tensor(g)
        opt.step()
        out.append([p.detach().numpy().copy() for p in params])
    return out, opt


CASES = [
    ("Adadelta", {}), ("Adadelta", dict(lr=0.5, rho=0.8, weight_decay=0.1, maximize=False)),
    ("Adamax", {}), ("Adamax", dict(lr=0.01, betas=(0.8, 0.99), weight_decay=0.05)),
    ("NAdam", {}), ("NAdam", dict(lr=0.01, weight_decay=0.1)),
    ("NAdam", dict(lr=0.01, weight_decay=0.1, decoupled_weight_decay=True, momentum_decay=0.01)),
    ("RAdam", {}), ("RAdam", dict(lr=0.01, weight_decay=0.1, betas=(0.9, 0.9))),
    ("RAdam", dict(lr=0.01, weight_decay=0.1, decoupled_weight_decay=True)),
    ("ASGD", {}), ("ASGD", dict(lr=0.05, lambd=1e-3, alpha=0.6, t0=20, weight_decay=0.01)),
    ("Rprop", {}), ("Rprop", dict(lr=0.05, etas=(0.3, 1.5), step_sizes=(1e-4, 0.2))),
    ("Adamax", dict(maximize=True, lr=1e-3)), ("Rprop", dict(maximize=True)),
]


@pytest.mark.parametrize("name,kwargs", CASES)
def test_trajectory_matches_torch(name, kwargs):
    problem = _problem(0)
    ours, opt = _trajectory(corenn, optim, name, kwargs, problem, None)
    theirs, topt = _trajectory(torch, torch.optim, name, kwargs, problem, None)
    for step, (a_params, b_params) in enumerate(zip(ours, theirs)):
        for a, b in zip(a_params, b_params):
            np.testing.assert_allclose(a, b, rtol=3e-5, atol=3e-6, err_msg=f"{name} step {step}")
    # the state has PyTorch's keys, shapes and values
    ours_state, theirs_state = opt.state_dict(), topt.state_dict()
    assert ours_state["param_groups"][0].keys() >= {k for k in theirs_state["param_groups"][0]} - {"foreach"}
    for index, state in theirs_state["state"].items():
        assert list(ours_state["state"][index]) == list(state)
        for key, value in state.items():
            np.testing.assert_allclose(np.asarray(ours_state["state"][index][key]), value.numpy(), rtol=1e-4,
                                       atol=1e-5, err_msg=key)


def test_param_groups_and_state_dict_round_trip():
    problem = _problem(1)
    groups = lambda ps: [{"params": ps[:1], "lr": 0.02}, {"params": ps[1:]}]
    ours, opt = _trajectory(corenn, optim, "NAdam", {"lr": 0.005}, problem, groups)
    theirs, _ = _trajectory(torch, torch.optim, "NAdam", {"lr": 0.005}, problem, groups)
    np.testing.assert_allclose(ours[-1][0], theirs[-1][0], rtol=3e-5, atol=3e-6)
    params = [corenn.tensor(a.copy(), requires_grad=True) for a in problem[0]]
    again = optim.NAdam(groups(params), lr=0.005)
    again.load_state_dict(opt.state_dict())
    assert float(again.state[params[0]]["step"]) == float(opt.state[opt.param_groups[0]["params"][0]]["step"])


def _rosenbrock(lib, xy):
    x, y = xy[0], xy[1]
    return (1 - x) ** 2 + 100 * (y - x * x) ** 2


@pytest.mark.parametrize("kwargs", [dict(lr=0.1, max_iter=5), dict(line_search_fn="strong_wolfe", max_iter=10),
                                    dict(line_search_fn="strong_wolfe", history_size=3, max_iter=7)])
def test_lbfgs_matches_torch_on_rosenbrock(kwargs):
    runs = []
    for lib, module in ((corenn, optim), (torch, torch.optim)):
        xy = lib.tensor(np.array([-1.5, 2.0]), requires_grad=True)   # float64 on both sides
        opt = module.LBFGS([xy], **kwargs)

        def closure():
            opt.zero_grad()
            loss = _rosenbrock(lib, xy)
            loss.backward()
            return loss
        path = []
        for _ in range(6):
            loss = opt.step(closure)
            path.append((float(loss.detach()), xy.detach().numpy().copy()))
        state = opt.state[opt.param_groups[0]["params"][0]]
        runs.append((path, state["func_evals"], state["n_iter"]))
    (ours, our_evals, our_iters), (theirs, their_evals, their_iters) = runs
    assert (our_evals, our_iters) == (their_evals, their_iters)
    for (la, xa), (lb, xb) in zip(ours, theirs):
        np.testing.assert_allclose(la, lb, rtol=1e-5, atol=1e-9)  # summation order differs
        np.testing.assert_allclose(xa, xb, rtol=1e-5, atol=1e-9)


def test_lbfgs_fits_a_linear_model():
    corenn.manual_seed(0)
    x = corenn.randn(64, 3)
    y = x @ corenn.tensor([[1.0], [-2.0], [0.5]]) + 0.3
    model = corenn.nn.Linear(3, 1)
    opt = optim.LBFGS(model.parameters(), line_search_fn="strong_wolfe")

    def closure():
        opt.zero_grad()
        loss = ((model(x) - y) ** 2).mean()
        loss.backward()
        return loss
    for _ in range(3):
        opt.step(closure)
    assert float(closure()) < 1e-8


def test_errors_match_torch():
    p = [corenn.zeros(2, requires_grad=True)]
    with pytest.raises(ValueError, match="Invalid rho value"):
        optim.Adadelta(p, rho=1.5)
    with pytest.raises(ValueError, match="Invalid beta parameter at index 1"):
        optim.Adamax(p, betas=(0.9, 1.0))
    with pytest.raises(ValueError, match="Invalid momentum_decay value"):
        optim.NAdam(p, momentum_decay=-1)
    with pytest.raises(ValueError, match="Invalid eta values: 1.5, 1.2"):
        optim.Rprop(p, etas=(1.5, 1.2))
    with pytest.raises(ValueError, match="Invalid learning rate"):
        optim.ASGD(p, lr=-1)
    with pytest.raises(ValueError, match="per-parameter options"):
        optim.LBFGS([{"params": p}, {"params": [corenn.zeros(1, requires_grad=True)]}])
    with pytest.raises(RuntimeError, match="strong_wolfe"):
        optim.LBFGS(p, line_search_fn="backtracking")
    with pytest.raises(RuntimeError, match="requires a closure"):
        optim.LBFGS(p).step()


def _schedule(lib, module, optimizer_name, optimizer_kwargs, scheduler_name, scheduler_kwargs, epochs):
    params = [lib.zeros(2, requires_grad=True), lib.zeros(1, requires_grad=True)]
    opt = getattr(module, optimizer_name)([{"params": params[:1]}, {"params": params[1:], "lr": 0.05}],
                                          **optimizer_kwargs)
    sched = getattr(module.lr_scheduler, scheduler_name)(opt, **scheduler_kwargs)
    values = []
    for epoch in epochs:
        opt.step()
        sched.step() if epoch is None else sched.step(epoch)
        values.append([(g["lr"], g.get("momentum"), g.get("betas")) for g in opt.param_groups]
                      + [tuple(sched.get_last_lr())])
    return values


@pytest.mark.parametrize("optimizer_name,optimizer_kwargs,scheduler_name,scheduler_kwargs,epochs", [
    ("SGD", dict(lr=0.1, momentum=0.9), "CyclicLR", dict(base_lr=0.01, max_lr=0.1, step_size_up=4), [None] * 25),
    ("SGD", dict(lr=0.1, momentum=0.9), "CyclicLR",
     dict(base_lr=[0.01, 0.02], max_lr=0.1, step_size_up=3, step_size_down=5, mode="triangular2"), [None] * 30),
    ("Adam", dict(lr=0.1), "CyclicLR", dict(base_lr=0.001, max_lr=0.01, step_size_up=3, mode="exp_range",
                                            gamma=0.95, base_momentum=0.85, max_momentum=0.95), [None] * 20),
    ("SGD", dict(lr=0.1), "CyclicLR", dict(base_lr=0.01, max_lr=0.1, step_size_up=2, cycle_momentum=False,
                                           scale_fn=lambda x: 0.5 ** x, scale_mode="iterations"), [None] * 12),
    ("SGD", dict(lr=0.1), "CosineAnnealingWarmRestarts", dict(T_0=5, eta_min=0.001), [None] * 23),
    ("SGD", dict(lr=0.1), "CosineAnnealingWarmRestarts", dict(T_0=3, T_mult=2, eta_min=0.001), [None] * 30),
    ("SGD", dict(lr=0.1), "CosineAnnealingWarmRestarts", dict(T_0=3, T_mult=2),
     [e + i / 4 for e in range(12) for i in range(4)]),
])
def test_schedulers_match_torch(optimizer_name, optimizer_kwargs, scheduler_name, scheduler_kwargs, epochs):
    ours = _schedule(corenn, optim, optimizer_name, optimizer_kwargs, scheduler_name, scheduler_kwargs, epochs)
    theirs = _schedule(torch, torch.optim, optimizer_name, optimizer_kwargs, scheduler_name, scheduler_kwargs, epochs)
    assert len(ours) == len(theirs)
    for step, (a, b) in enumerate(zip(ours, theirs)):
        np.testing.assert_allclose(np.array([x for x in _numbers(a)]), np.array([x for x in _numbers(b)]),
                                   rtol=1e-12, atol=1e-15, err_msg=f"step {step}")


def _numbers(nested):
    for item in nested:
        if isinstance(item, (tuple, list)):
            yield from _numbers(item)
        elif item is not None:
            yield float(item)


def test_scheduler_errors_and_state():
    opt = optim.Adagrad([corenn.zeros(1, requires_grad=True)], lr=0.1)
    with pytest.raises(ValueError, match="optimizer must support momentum or beta1"):
        optim.lr_scheduler.CyclicLR(opt, 0.01, 0.1)
    with pytest.raises(ValueError, match="mode is invalid and scale_fn is None"):
        optim.lr_scheduler.CyclicLR(opt, 0.01, 0.1, mode="sawtooth", cycle_momentum=False)
    with pytest.raises(ValueError, match="Expected positive integer T_0"):
        optim.lr_scheduler.CosineAnnealingWarmRestarts(opt, T_0=0)
    with pytest.raises(ValueError, match="Expected integer T_mult >= 1"):
        optim.lr_scheduler.CosineAnnealingWarmRestarts(opt, T_0=2, T_mult=0)
    sched = optim.lr_scheduler.CyclicLR(opt, 0.01, 0.1, step_size_up=3, cycle_momentum=False)
    for _ in range(4):
        opt.step()
        sched.step()
    other = optim.lr_scheduler.CyclicLR(optim.Adagrad([corenn.zeros(1, requires_grad=True)]), 0.01, 0.1,
                                        step_size_up=3, cycle_momentum=False)
    other.load_state_dict(sched.state_dict())
    assert other.last_epoch == 4 and other.get_last_lr() == sched.get_last_lr()
