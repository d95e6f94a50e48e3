"""corenn-numba's fused optimizer updates (sgd_update, adam_update) against the core kernels and PyTorch.

The compiled loops must update parameters and state exactly as the core's numpy
updates do (same order of operations, float32 stays float32), on every code path:
serial and parallel loops, first momentum step, fallback for parameters the loops
do not take (float16, non-contiguous gradients), and through ``corenn.optim``.
"""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

import corenn
import corenn_numba
from corenn.dispatch import kernels
from corenn.ops import optim_update as core
from corenn_numba import optim as fused

SHAPES = st.lists(st.lists(st.integers(1, 9), min_size=0, max_size=3).map(tuple), min_size=1, max_size=4)
DTYPES = st.sampled_from([np.float32, np.float64])


def _tolerance(dtype):
    # The loops reproduce numpy's arithmetic operation for operation; a tolerance (rather than equality)
    # leaves room for a CPU whose vector and scalar square roots round differently.
    return dict(rtol=1e-6, atol=1e-7) if np.dtype(dtype) == np.float32 else dict(rtol=1e-13, atol=1e-15)


def _ctx(kernel):
    ctx = kernel()
    ctx.xp = np
    return ctx


def _sgd_steps(kernel, params, grads_per_step, momentum_buffers, **hyper):
    scratch = core.ScratchArrays()
    for grads in grads_per_step:
        kernel.forward(_ctx(kernel), params, grads, momentum_buffers if hyper["momentum"] else None,
                       scratch=scratch, **hyper)


def _adam_steps(kernel, params, grads_per_step, state, **hyper):
    scratch = core.ScratchArrays()
    for grads in grads_per_step:
        kernel.forward(_ctx(kernel), params, grads, *state, scratch=scratch, **hyper)


def _adam_state(params):
    return ([np.zeros_like(p) for p in params], [np.zeros_like(p) for p in params],
            [np.zeros_like(p) for p in params], [np.array(0.0, np.float32) for _ in params])


@pytest.fixture(params=["serial", "parallel"])
def loop_kind(request, monkeypatch):
    """Run each test once with the serial loops (the default) and once with every parameter on the parallel ones."""
    if request.param == "parallel":
        monkeypatch.setattr(fused, "PARALLEL_MIN_ELEMENTS", 0)
    return request.param


# loop_kind's setting is meant to hold for every drawn example of a test: the fixture check does not apply
@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(shapes=SHAPES, dtype=DTYPES, momentum=st.sampled_from([0.0, 0.9]), dampening=st.sampled_from([0.0, 0.3]),
       weight_decay=st.sampled_from([0.0, 0.01]), nesterov=st.booleans(), maximize=st.booleans(),
       seed=st.integers(0, 2**16))
def test_sgd_update_matches_the_core_kernel(loop_kind, shapes, dtype, momentum, dampening, weight_decay, nesterov,
                                            maximize, seed):
    if nesterov and (momentum == 0 or dampening != 0):
        nesterov = False  # what SGD itself rejects
    rng = np.random.default_rng(seed)
    start = [rng.standard_normal(s).astype(dtype) for s in shapes]
    grads = [[rng.standard_normal(s).astype(dtype) for s in shapes] for _ in range(3)]
    hyper = dict(lr=0.1, momentum=momentum, dampening=dampening, weight_decay=weight_decay, nesterov=nesterov,
                 maximize=maximize)
    expected, got = [p.copy() for p in start], [p.copy() for p in start]
    expected_buffers, got_buffers = [None] * len(shapes), [None] * len(shapes)
    _sgd_steps(core.SGDUpdate, expected, grads, expected_buffers, **hyper)
    _sgd_steps(fused.SGDUpdate, got, grads, got_buffers, **hyper)
    for e, g in zip(expected + [b for b in expected_buffers if b is not None],
                    got + [b for b in got_buffers if b is not None]):
        assert g.dtype == e.dtype and g.shape == e.shape
        np.testing.assert_allclose(g, e, **_tolerance(dtype))
    assert [b is None for b in got_buffers] == [b is None for b in expected_buffers]


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(shapes=SHAPES, dtype=DTYPES, amsgrad=st.booleans(), weight_decay=st.sampled_from([0.0, 0.1]),
       decoupled=st.booleans(), maximize=st.booleans(), seed=st.integers(0, 2**16))
def test_adam_update_matches_the_core_kernel(loop_kind, shapes, dtype, amsgrad, weight_decay, decoupled, maximize,
                                             seed):
    rng = np.random.default_rng(seed)
    start = [rng.standard_normal(s).astype(dtype) for s in shapes]
    grads = [[rng.standard_normal(s).astype(dtype) for s in shapes] for _ in range(3)]
    hyper = dict(amsgrad=amsgrad, beta1=0.9, beta2=0.999, lr=0.01, weight_decay=weight_decay, eps=1e-8,
                 maximize=maximize, decoupled_weight_decay=decoupled)
    expected, got = [p.copy() for p in start], [p.copy() for p in start]
    expected_state, got_state = _adam_state(start), _adam_state(start)
    _adam_steps(core.AdamUpdate, expected, grads, expected_state, **hyper)
    _adam_steps(fused.AdamUpdate, got, grads, got_state, **hyper)
    np.testing.assert_equal([float(s) for s in got_state[3]], [3.0] * len(shapes))
    for e, g in zip(expected + sum(expected_state[:3], []), got + sum(got_state[:3], [])):
        np.testing.assert_allclose(g, e, **_tolerance(dtype))


class _CountingLoops:
    """Stands in for corenn_numba.optim.jit and counts which parameters reached the compiled loops."""

    def __init__(self, real):
        self.real, self.sizes = real, []

    def __getattr__(self, name):
        loop = getattr(self.real, name)

        def counted(p, *args):
            self.sizes.append(p.size)
            return loop(p, *args)
        return counted


@pytest.mark.parametrize("which", ["sgd", "adam"])
def test_parameters_the_loops_cannot_take_fall_back_to_the_core_in_the_same_step(which, monkeypatch):
    counting = _CountingLoops(fused.jit)
    monkeypatch.setattr(fused, "jit", counting)
    rng = np.random.default_rng(0)
    start = [rng.standard_normal((4, 5)).astype(np.float32),     # compiled
             rng.standard_normal((3, 7)).astype(np.float16),     # float16: core
             rng.standard_normal((6, 2)).astype(np.float64)]     # compiled; non-contiguous gradient: core
    grads = [[rng.standard_normal((4, 5)).astype(np.float32), rng.standard_normal((3, 7)).astype(np.float16),
              rng.standard_normal((2, 6)).T.astype(np.float64, order="K")] for _ in range(2)]
    assert not grads[0][2].flags.c_contiguous
    expected, got = [p.copy() for p in start], [p.copy() for p in start]
    if which == "sgd":
        hyper = dict(lr=0.1, momentum=0.9, dampening=0.0, weight_decay=0.01, nesterov=True, maximize=False)
        _sgd_steps(core.SGDUpdate, expected, grads, [None] * 3, **hyper)
        _sgd_steps(fused.SGDUpdate, got, grads, [None] * 3, **hyper)
    else:
        hyper = dict(amsgrad=True, beta1=0.9, beta2=0.999, lr=0.01, weight_decay=0.1, eps=1e-8, maximize=False,
                     decoupled_weight_decay=True)
        _adam_steps(core.AdamUpdate, expected, grads, _adam_state(start), **hyper)
        _adam_steps(fused.AdamUpdate, got, grads, _adam_state(start), **hyper)
    assert counting.sizes == [20, 20]  # only the float32 parameter, once per step
    for e, g in zip(expected, got):
        assert g.dtype == e.dtype
        np.testing.assert_allclose(g.astype(np.float64), e.astype(np.float64), **_tolerance(np.float32))


def test_a_gradient_of_another_size_never_reaches_the_compiled_loop():
    # a compiled loop indexes by the parameter's size; a smaller gradient must go to numpy, which raises
    p = np.zeros(12, np.float32)
    g = np.ones(6, np.float32)
    hyper = dict(lr=0.1, momentum=0.0, dampening=0.0, weight_decay=0.0, nesterov=False, maximize=False)
    for kernel in (core.SGDUpdate, fused.SGDUpdate):
        with pytest.raises(ValueError, match="broadcast"):
            _sgd_steps(kernel, [p.copy()], [[g]], None, **hyper)


def test_the_updates_have_no_backward():
    for kernel in (fused.SGDUpdate, fused.AdamUpdate):
        assert kernel.differentiable is False
        with pytest.raises(RuntimeError, match="outside autograd"):
            kernel.backward(_ctx(kernel), None)


def test_optimizers_find_the_fused_kernels_through_the_registry():
    assert corenn_numba.is_enabled()
    assert issubclass(kernels.lookup("sgd_update", "cpu"), fused.SGDUpdate)  # the calibrated subclass of the override
    assert issubclass(kernels.lookup("adam_update", "cpu"), fused.AdamUpdate)  # the calibrated subclass of the override
    try:
        corenn_numba.disable()
        assert kernels.lookup("sgd_update", "cpu") is core.SGDUpdate
        assert kernels.lookup("adam_update", "cpu") is core.AdamUpdate
    finally:
        corenn_numba.enable()
    assert issubclass(kernels.lookup("adam_update", "cpu"), fused.AdamUpdate)  # the calibrated subclass of the override


def _train(optimizer_factory, steps=4, seed=0):
    """Parameters after ``steps`` optimizer steps on a fixed sequence of gradients.

    The gradients are given, not computed: other kernels of the plugin (softmax, ...) may
    round differently in float32, and Adam would amplify that; this isolates the update.
    """
    rng = np.random.default_rng(seed)
    shapes = [(400, 400), (400,), (3, 400), (3,)]
    params = [corenn.tensor(rng.standard_normal(s).astype(np.float32), requires_grad=True) for s in shapes]
    opt = optimizer_factory(params)
    for _ in range(steps):
        for p in params:
            p.grad = corenn.tensor(rng.standard_normal(tuple(p.shape)).astype(np.float32))
        opt.step()
    return [p.detach().numpy().copy() for p in params]


OPTIMIZERS = {
    "SGD": lambda params: corenn.optim.SGD(params, lr=0.05),
    "SGD momentum nesterov wd": lambda params: corenn.optim.SGD(params, lr=0.05, momentum=0.9, nesterov=True,
                                                                weight_decay=1e-3),
    "SGD dampening maximize": lambda params: corenn.optim.SGD(params, lr=0.05, momentum=0.9, dampening=0.5,
                                                              maximize=True),
    "Adam": lambda params: corenn.optim.Adam(params, lr=1e-3),
    "Adam amsgrad L2": lambda params: corenn.optim.Adam(params, lr=1e-3, amsgrad=True, weight_decay=1e-2),
    "AdamW": lambda params: corenn.optim.AdamW(params, lr=1e-3, weight_decay=1e-2),
}


@pytest.mark.parametrize("name", sorted(OPTIMIZERS))
def test_training_gives_the_same_parameters_with_the_plugin_disabled(name, loop_kind):
    with_plugin = _train(OPTIMIZERS[name])
    try:
        corenn_numba.disable()
        without = _train(OPTIMIZERS[name])
    finally:
        corenn_numba.enable()
    for a, b in zip(with_plugin, without):
        np.testing.assert_allclose(a, b, **_tolerance(np.float32))
    untrained = _train(lambda params: corenn.optim.SGD(params, lr=0.0))
    assert all(not np.allclose(a, b) for a, b in zip(with_plugin, untrained)), "a parameter did not move"


@pytest.mark.torch
@pytest.mark.parametrize("name", ["SGD momentum nesterov wd", "Adam amsgrad L2", "AdamW"])
def test_optimizer_trajectories_match_pytorch_with_the_plugin(name, loop_kind):
    torch = pytest.importorskip("torch")
    torch_optimizers = {
        "SGD momentum nesterov wd": lambda params: torch.optim.SGD(params, lr=0.05, momentum=0.9, nesterov=True,
                                                                   weight_decay=1e-3),
        "Adam amsgrad L2": lambda params: torch.optim.Adam(params, lr=1e-3, amsgrad=True, weight_decay=1e-2),
        "AdamW": lambda params: torch.optim.AdamW(params, lr=1e-3, weight_decay=1e-2),
    }
    rng = np.random.default_rng(1)
    shapes = [(400, 400), (400,), (7, 3)]
    start = [rng.standard_normal(s).astype(np.float32) for s in shapes]
    grads = [[rng.standard_normal(s).astype(np.float32) for s in shapes] for _ in range(5)]

    ours = [corenn.tensor(p.copy(), requires_grad=True) for p in start]
    theirs = [torch.tensor(p.copy(), requires_grad=True) for p in start]
    opt_ours, opt_theirs = OPTIMIZERS[name](ours), torch_optimizers[name](theirs)
    for step_grads in grads:
        for p, q, g in zip(ours, theirs, step_grads):
            p.grad = corenn.tensor(g.copy())
            q.grad = torch.tensor(g.copy())
        opt_ours.step()
        opt_theirs.step()
    for p, q in zip(ours, theirs):
        np.testing.assert_allclose(p.detach().numpy(), q.detach().numpy(), rtol=1e-5, atol=1e-6)
