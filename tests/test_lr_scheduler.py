"""Learning-rate schedulers: the same lr sequences as PyTorch, state dicts that resume, clear errors."""
from __future__ import annotations

import math
import warnings

import numpy as np
import pytest

import corenn
import corenn.optim as optim
from corenn.optim import lr_scheduler as sched

EPOCHS = 60


def _corenn_optimizer(kind="SGD", groups=2):
    params = [corenn.zeros(2, requires_grad=True) for _ in range(groups)]
    cls = getattr(optim, kind)
    return cls([{"params": [p], "lr": 0.1 * (i + 1)} for i, p in enumerate(params)],
               **({"momentum": 0.9} if kind == "SGD" else {}))


def _lrs(optimizer, scheduler, epochs=EPOCHS, metrics=None):
    """The lr of every group after each epoch (optimizer.step then scheduler.step, as documented)."""
    seen = [[g["lr"] for g in optimizer.param_groups]]
    for epoch in range(epochs):
        optimizer.step()
        if metrics is None:
            scheduler.step()
        else:
            scheduler.step(metrics[epoch])
        seen.append([g["lr"] for g in optimizer.param_groups])
    return np.array(seen, dtype=np.float64)


# Each case builds a scheduler from a module (corenn.optim.lr_scheduler or torch.optim.lr_scheduler)
CASES = {
    "StepLR": lambda m, o: m.StepLR(o, step_size=7, gamma=0.5),
    "MultiStepLR": lambda m, o: m.MultiStepLR(o, milestones=[5, 12, 12, 30], gamma=0.3),
    "ExponentialLR": lambda m, o: m.ExponentialLR(o, gamma=0.93),
    "CosineAnnealingLR": lambda m, o: m.CosineAnnealingLR(o, T_max=13, eta_min=1e-3),
    "LambdaLR": lambda m, o: m.LambdaLR(o, lr_lambda=[lambda e: 0.97 ** e, lambda e: 1 / (1 + e)]),
    "MultiplicativeLR": lambda m, o: m.MultiplicativeLR(o, lr_lambda=lambda e: 0.95),
    "LinearLR": lambda m, o: m.LinearLR(o, start_factor=0.2, end_factor=0.9, total_iters=10),
    "ConstantLR": lambda m, o: m.ConstantLR(o, factor=0.25, total_iters=6),
    "PolynomialLR": lambda m, o: m.PolynomialLR(o, total_iters=20, power=2.0),
    "OneCycleLR-cos": lambda m, o: m.OneCycleLR(o, max_lr=[1.0, 0.5], total_steps=EPOCHS),
    "OneCycleLR-linear-3phase": lambda m, o: m.OneCycleLR(o, max_lr=0.8, epochs=6, steps_per_epoch=10,
                                                          anneal_strategy="linear", three_phase=True,
                                                          pct_start=0.25, div_factor=10.0, final_div_factor=100.0),
    "SequentialLR": lambda m, o: m.SequentialLR(
        o, schedulers=[m.LinearLR(o, start_factor=0.1, total_iters=5), m.CosineAnnealingLR(o, T_max=20),
                       m.ExponentialLR(o, gamma=0.9)], milestones=[5, 25]),
    "ChainedScheduler": lambda m, o: m.ChainedScheduler(
        [m.ConstantLR(o, factor=0.5, total_iters=4), m.ExponentialLR(o, gamma=0.95)]),
}


@pytest.mark.torch
@pytest.mark.parametrize("name", sorted(CASES))
@pytest.mark.parametrize("kind", ["SGD", "Adam"])
def test_lr_sequence_matches_pytorch(name, kind):
    torch = pytest.importorskip("torch")
    ours_opt = _corenn_optimizer(kind)
    tparams = [torch.zeros(2, requires_grad=True) for _ in range(2)]
    theirs_opt = getattr(torch.optim, kind)([{"params": [p], "lr": 0.1 * (i + 1)} for i, p in enumerate(tparams)],
                                             **({"momentum": 0.9} if kind == "SGD" else {}))
    ours = _lrs(ours_opt, CASES[name](sched, ours_opt))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        theirs = _lrs(theirs_opt, CASES[name](torch.optim.lr_scheduler, theirs_opt))
    np.testing.assert_allclose(ours, theirs, rtol=1e-12, atol=1e-15)
    assert len(np.unique(ours[:, 0])) >= 2, "the schedule never changed the lr: the comparison proves nothing"
    if name.startswith("OneCycleLR"):
        key = "betas" if kind == "Adam" else "momentum"
        assert ours_opt.param_groups[0][key] == pytest.approx(theirs_opt.param_groups[0][key], rel=1e-12)


@pytest.mark.torch
@pytest.mark.parametrize("mode,threshold_mode", [("min", "rel"), ("min", "abs"), ("max", "rel"), ("max", "abs")])
def test_reduce_lr_on_plateau_matches_pytorch(mode, threshold_mode):
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(0)
    trend = np.linspace(1.0, 0.2, EPOCHS) if mode == "min" else np.linspace(0.2, 1.0, EPOCHS)
    metrics = (trend + 0.05 * rng.standard_normal(EPOCHS)).tolist()
    metrics[20:40] = [metrics[20]] * 20  # a plateau
    kwargs = dict(mode=mode, factor=0.5, patience=3, threshold=0.01, threshold_mode=threshold_mode, cooldown=2,
                  min_lr=[0.01, 0.002])
    ours_opt = _corenn_optimizer()
    tparams = [torch.zeros(2, requires_grad=True) for _ in range(2)]
    theirs_opt = torch.optim.SGD([{"params": [p], "lr": 0.1 * (i + 1)} for i, p in enumerate(tparams)], momentum=0.9)
    ours = _lrs(ours_opt, sched.ReduceLROnPlateau(ours_opt, **kwargs), metrics=metrics)
    theirs = _lrs(theirs_opt, torch.optim.lr_scheduler.ReduceLROnPlateau(theirs_opt, **kwargs), metrics=metrics)
    np.testing.assert_allclose(ours, theirs, rtol=1e-12)
    assert ours[-1, 0] < ours[0, 0]


@pytest.mark.torch
@pytest.mark.parametrize("name", ["StepLR", "MultiStepLR", "ExponentialLR", "CosineAnnealingLR", "LinearLR",
                                  "PolynomialLR", "ConstantLR"])
def test_closed_form_step_epoch_matches_pytorch(name):
    torch = pytest.importorskip("torch")
    ours_opt = _corenn_optimizer()
    tparams = [torch.zeros(2, requires_grad=True) for _ in range(2)]
    theirs_opt = torch.optim.SGD([{"params": [p], "lr": 0.1 * (i + 1)} for i, p in enumerate(tparams)])
    ours_s, theirs_s = CASES[name](sched, ours_opt), CASES[name](torch.optim.lr_scheduler, theirs_opt)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for epoch in [3, 9, 17, 4, 40]:
            ours_opt.step()
            theirs_opt.step()
            ours_s.step(epoch)
            theirs_s.step(epoch)
            assert ours_s.get_last_lr() == pytest.approx(theirs_s.get_last_lr(), rel=1e-12)


def test_step_lr_sequence_and_get_last_lr():
    opt = _corenn_optimizer(groups=1)
    scheduler = sched.StepLR(opt, step_size=2, gamma=0.5)
    got = []
    for _ in range(6):
        got.append(scheduler.get_last_lr()[0])
        opt.step()
        scheduler.step()
    assert got == pytest.approx([0.1, 0.1, 0.05, 0.05, 0.025, 0.025])
    assert opt.param_groups[0]["initial_lr"] == 0.1


def test_cosine_annealing_reaches_eta_min_at_t_max():
    opt = _corenn_optimizer(groups=1)
    scheduler = sched.CosineAnnealingLR(opt, T_max=10, eta_min=0.001)
    lrs = _lrs(opt, scheduler, epochs=10)[:, 0]
    assert lrs[0] == pytest.approx(0.1)
    assert lrs[5] == pytest.approx(0.001 + 0.099 * (1 + math.cos(math.pi / 2)) / 2)
    assert lrs[10] == pytest.approx(0.001)


@pytest.mark.parametrize("name", sorted(CASES))
def test_state_dict_resumes_the_same_sequence(name, tmp_path):
    # run 25 epochs, save optimizer + scheduler with corenn.save, rebuild both, load, and continue
    opt = _corenn_optimizer()
    scheduler = CASES[name](sched, opt)
    _lrs(opt, scheduler, epochs=25)
    corenn.save({"optimizer": opt.state_dict(), "scheduler": scheduler.state_dict()}, tmp_path / "ckpt.safetensors")
    expected = _lrs(opt, scheduler, epochs=20)

    loaded = corenn.load(tmp_path / "ckpt.safetensors")
    opt2 = _corenn_optimizer()
    scheduler2 = CASES[name](sched, opt2)
    opt2.load_state_dict(loaded["optimizer"])
    scheduler2.load_state_dict(loaded["scheduler"])
    resumed = _lrs(opt2, scheduler2, epochs=20)
    np.testing.assert_allclose(resumed, expected, rtol=1e-12)


def test_reduce_lr_on_plateau_state_dict_round_trip(tmp_path):
    opt = _corenn_optimizer(groups=1)
    scheduler = sched.ReduceLROnPlateau(opt, patience=1, factor=0.5)
    for metric in [1.0, 0.9, 0.9, 0.9]:
        scheduler.step(metric)
    corenn.save(scheduler.state_dict(), tmp_path / "s.safetensors")
    scheduler2 = sched.ReduceLROnPlateau(_corenn_optimizer(groups=1))
    scheduler2.load_state_dict(corenn.load(tmp_path / "s.safetensors"))
    assert (scheduler2.best, scheduler2.num_bad_epochs, scheduler2.patience) == (0.9, 0, 1)
    assert scheduler2._is_better(0.5, 0.9)


def test_lambda_lr_saves_state_of_callable_objects_not_functions():
    class Warmup:
        def __init__(self):
            self.scale = 2.0

        def __call__(self, epoch):
            return self.scale * min(1.0, (epoch + 1) / 5)

    opt = _corenn_optimizer()
    warmup = Warmup()
    scheduler = sched.LambdaLR(opt, [warmup, lambda epoch: 1.0])
    warmup.scale = 3.0
    state = scheduler.state_dict()
    assert state["lr_lambdas"] == [{"scale": 3.0}, None]
    other = Warmup()
    scheduler2 = sched.LambdaLR(_corenn_optimizer(), [other, lambda epoch: 1.0])
    scheduler2.load_state_dict(state)
    assert other.scale == 3.0


def test_one_cycle_cycles_momentum_and_refuses_to_step_past_total():
    opt = _corenn_optimizer(groups=1)
    scheduler = sched.OneCycleLR(opt, max_lr=1.0, total_steps=10)
    assert opt.param_groups[0]["momentum"] == pytest.approx(0.95)
    lrs = _lrs(opt, scheduler, epochs=9)[:, 0]
    assert lrs.max() == pytest.approx(1.0)
    assert lrs[0] == pytest.approx(1.0 / 25)
    assert lrs[-1] == pytest.approx(1.0 / 25 / 1e4)
    with pytest.raises(ValueError, match="Tried to step 11 times"):
        opt.step()
        scheduler.step()
        scheduler.step()


def test_warns_when_scheduler_steps_before_optimizer():
    opt = _corenn_optimizer()
    scheduler = sched.StepLR(opt, step_size=3)
    with pytest.warns(UserWarning, match="before `optimizer.step\\(\\)`"):
        scheduler.step()


def test_bad_arguments_raise_clear_errors():
    opt = _corenn_optimizer()
    with pytest.raises(TypeError, match="is not an Optimizer"):
        sched.StepLR(object(), step_size=3)
    with pytest.raises(ValueError, match="step_size must be a positive integer"):
        sched.StepLR(opt, step_size=0)
    with pytest.raises(ValueError, match="Expected 2 lr_lambdas, but got 1"):
        sched.LambdaLR(opt, [lambda e: 1.0])
    with pytest.raises(TypeError, match="lr_lambda should be a function"):
        sched.LambdaLR(opt, 3)
    with pytest.raises(ValueError, match="Starting multiplicative factor"):
        sched.LinearLR(opt, start_factor=0)
    with pytest.raises(ValueError, match="You must define either total_steps"):
        sched.OneCycleLR(opt, max_lr=0.1)
    with pytest.raises(ValueError, match="anneal_strategy must be one of"):
        sched.OneCycleLR(opt, max_lr=0.1, total_steps=10, anneal_strategy="step")
    with pytest.raises(ValueError, match="max_lr must have the same length"):
        sched.OneCycleLR(opt, max_lr=[0.1, 0.2, 0.3], total_steps=10)
    with pytest.raises(ValueError, match="Factor should be < 1.0"):
        sched.ReduceLROnPlateau(opt, factor=1.5)
    with pytest.raises(ValueError, match="mode maximum is unknown"):
        sched.ReduceLROnPlateau(opt, mode="maximum")
    with pytest.raises(ValueError, match="number of milestone points"):
        sched.SequentialLR(opt, [sched.StepLR(opt, 3), sched.StepLR(opt, 4)], milestones=[1, 2])
    with pytest.raises(ValueError, match="does not support `ReduceLROnPlateau`"):
        sched.SequentialLR(opt, [sched.StepLR(opt, 3), sched.ReduceLROnPlateau(opt)], milestones=[1])
    with pytest.raises(ValueError, match="same optimizer"):
        sched.SequentialLR(opt, [sched.StepLR(opt, 3), sched.StepLR(_corenn_optimizer(), 3)], milestones=[1])
    fresh = _corenn_optimizer()
    with pytest.raises(KeyError, match="initial_lr"):
        sched.StepLR(fresh, step_size=3, last_epoch=5)
