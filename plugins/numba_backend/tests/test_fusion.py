"""corenn.compile(backend="numba"): fused pointwise chains equal eager, forward and backward."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import corenn
from corenn_numba import calibration, fusion

UNARY = ["neg", "exp", "tanh", "sin", "cos", "sigmoid", "relu", "abs", "square", "sqrt_abs", "log_abs", "reciprocal_shift"]
BINARY = ["add", "sub", "mul", "div_shift", "add_alpha", "sub_alpha", "radd_const", "rsub_const", "mul_const",
          "div_const"]


def apply(name, y, other):
    """One step of a random chain: ops whose inputs stay in their domains (sqrt, log and division see |y| + 1)."""
    return {
        "neg": lambda: -y, "exp": lambda: (y * 0.1).exp(), "tanh": lambda: y.tanh(), "sin": lambda: y.sin(),
        "cos": lambda: y.cos(), "sigmoid": lambda: y.sigmoid(), "relu": lambda: y.relu(), "abs": lambda: y.abs(),
        "square": lambda: y.square() * 0.5, "sqrt_abs": lambda: (y.abs() + 1).sqrt(),
        "log_abs": lambda: (y.abs() + 1).log(), "reciprocal_shift": lambda: (y.abs() + 1).reciprocal(),
        "add": lambda: y + other, "sub": lambda: y - other, "mul": lambda: y * other,
        "div_shift": lambda: y / (other.abs() + 1), "add_alpha": lambda: corenn.add(y, other, alpha=0.5),
        "sub_alpha": lambda: corenn.sub(y, other, alpha=2), "radd_const": lambda: 1.5 + y,
        "rsub_const": lambda: 1 - y, "mul_const": lambda: y * 3, "div_const": lambda: y / 4,
    }[name]()


def _fused_kernel_count(compiled) -> int | None:
    for event in compiled.explain().events:
        if "runs it as" in event:
            return int(event.split("runs it as ")[1].split()[0])
    return None


def _step_names(compiled) -> list:
    return [n.target.__name__ for n in compiled.graph.nodes if n.op == "call_function"]


def _loops(compiled) -> int:
    """How many chains run as numba loops (the others as the core's numpy chains, ``fused_...``)."""
    return sum(name.startswith("numba_fused_") for name in _step_names(compiled))


def _check(fn, inputs, *, rtol, atol, grads=True):
    compiled = corenn.compile(fn, backend="numba")
    for t in inputs:
        t.grad = None
    expected = fn(*inputs)
    if grads:
        expected.sum().backward() if expected.dim() else expected.backward()
    want = [None if t.grad is None else t.grad.numpy().copy() for t in inputs]
    for _ in range(2):  # the capture, then a replay of the fused program
        for t in inputs:
            t.grad = None
        got = compiled(*inputs)
        np.testing.assert_allclose(got.detach().numpy(), expected.detach().numpy(), rtol=rtol, atol=atol)
        if grads:
            got.sum().backward() if got.dim() else got.backward()
            for t, w in zip(inputs, want):
                if w is None:
                    assert t.grad is None
                else:
                    np.testing.assert_allclose(t.grad.numpy(), w, rtol=rtol, atol=atol)
    return compiled


@settings(max_examples=12, deadline=None)
@given(ops=st.lists(st.sampled_from(UNARY + BINARY), min_size=2, max_size=8),
       reduce=st.sampled_from([None, "sum", "mean"]), double=st.booleans(), seed=st.integers(0, 2**16))
def test_random_chains_equal_eager(ops, reduce, double, seed):
    dtype = corenn.float64 if double else corenn.float32
    gen = corenn.Generator().manual_seed(seed)
    x = corenn.randn(3, 5, dtype=dtype, generator=gen, requires_grad=True)
    other = corenn.randn(3, 5, dtype=dtype, generator=gen, requires_grad=True)

    def fn(x, other):
        y = x
        for name in ops:
            y = apply(name, y, other)
        return y if reduce is None else getattr(y, reduce)()

    tolerance = dict(rtol=1e-9, atol=1e-12) if double else dict(rtol=2e-4, atol=2e-5)
    compiled = _check(fn, [x, other], **tolerance)
    assert compiled.explain().stats["replays"] == 1
    assert _loops(compiled) >= 1  # every chain here is fusable, and CORENN_NUMBA_CHOOSE=kernel takes the loop


def test_the_per_op_chain_becomes_one_kernel():
    def chain(x, a, b):
        y = x
        for i in range(20):
            y = (y * b + a).tanh() if i % 2 else (y + a).tanh() * b
        return y.sum()
    x = corenn.randn(64, requires_grad=True)
    a, b = corenn.randn(64), corenn.randn(64)
    compiled = _check(chain, [x, a, b], rtol=1e-4, atol=1e-6)
    assert _fused_kernel_count(compiled) == 1
    assert _step_names(compiled) == ["numba_fused_add_tanh_mul_etc"]


def test_an_intermediate_read_outside_the_chain_is_kept():
    def fn(x, w):
        hidden = (x * w).sin()
        return (hidden.exp() + 1).log().sum() + hidden.matmul(w.t()).sum()
    x, w = corenn.randn(4, 4, requires_grad=True), corenn.randn(4, 4, requires_grad=True)
    compiled = _check(fn, [x, w], rtol=1e-5, atol=1e-6)
    assert _fused_kernel_count(compiled) < 9


def test_a_reduction_nothing_reads_is_left_out():
    def fn(x):
        y = (x * 2).sin()
        y.sum()  # computed, never read
        return y
    _check(fn, [corenn.randn(8, requires_grad=True)], rtol=1e-5, atol=1e-6)


def test_inference_noncontiguous_and_broadcast_inputs():
    x = corenn.randn(6, 5)
    with corenn.no_grad():
        _check(lambda x: (x.t() * 2 + 1).tanh().relu(), [x], rtol=1e-5, atol=1e-6, grads=False)
    # a broadcast operand is not fused (its gradient would need a reduction), the rest still is
    row = corenn.randn(5, requires_grad=True)
    y = corenn.randn(6, 5, requires_grad=True)
    compiled = _check(lambda y, row: ((y + row) * 2).sin().cos().sum(), [y, row], rtol=1e-5, atol=1e-6)
    assert _fused_kernel_count(compiled) is not None


def test_a_training_step_compiled_with_numba_equals_eager():
    def make(seed):
        corenn.manual_seed(seed)
        model = corenn.nn.Sequential(corenn.nn.Linear(8, 16), corenn.nn.Tanh(), corenn.nn.Linear(16, 3))
        optimizer = corenn.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)

        def step(x, y):
            optimizer.zero_grad()
            loss = corenn.nn.functional.cross_entropy(model(x), y)
            loss.backward()
            optimizer.step()
            return loss
        return model, step

    eager_model, eager_step = make(0)
    fused_model, fused_step = make(0)
    fused_step = corenn.compile(fused_step, backend="numba")
    x, y = corenn.randn(10, 8), corenn.randint(0, 3, (10,))
    for _ in range(3):
        np.testing.assert_allclose(fused_step(x, y).item(), eager_step(x, y).item(), rtol=1e-5)
    for p, q in zip(fused_model.parameters(), eager_model.parameters()):
        np.testing.assert_allclose(p.detach().numpy(), q.detach().numpy(), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("mode, loop", [("kernel", True), ("core", False), ("cached", False)])
def test_the_choice_follows_corenn_numba_mode(mode, loop):
    def fn(x):  # sin and exp are libm calls: `cached` takes only loops that vectorise
        return (x.sin() * 2).exp().sum()
    x = corenn.randn(100, requires_grad=True)
    with calibration.choosing(mode):
        compiled = _check(fn, [x], rtol=1e-5, atol=1e-6)
    assert _step_names(compiled) == (["numba_fused_sin_mul_exp_etc"] if loop else ["fused_sin_mul_exp_etc"])


def test_cached_mode_takes_loops_that_vectorise():
    x = corenn.randn(100, requires_grad=True)
    with calibration.choosing("cached"):
        # tanh32 is a few ulp from numpy's tanh, and 1 - tanh^2 loses digits where tanh is near 1: an
        # absolute tolerance against gradients of up to 6
        compiled = _check(lambda x: ((x * 2 + 1).tanh() * 3).sum(), [x], rtol=1e-5, atol=1e-5)
    assert _loops(compiled) == 1


def test_measure_mode_keeps_the_faster():
    """On a large float32 array numba's scalar sin (libm) loses to numpy's vectorised one: the numpy chain stays."""
    x = corenn.randn(1 << 18, requires_grad=True)
    with calibration.choosing("measure"):
        large = _check(lambda x: x.sin().cos().sin().sum(), [x], rtol=1e-4, atol=1e-5)
        small = _check(lambda x: ((x * 2 + 1).relu().square() * 3 - 1).sum(), [corenn.randn(64, requires_grad=True)],
                       rtol=1e-5, atol=1e-6)
    assert _step_names(large) == ["fused_sin_cos_sin_etc"]
    assert _loops(small) == 1  # a tiny arithmetic chain: one loop beats six numpy calls


def test_the_fused_kernel_checks_its_inputs():
    captured = {}

    def spy(program):
        runner = fusion.numba_backend(program)
        captured["program"] = runner.__self__
        return runner
    compiled = corenn.compile(lambda x, y: (x * y).tanh() + 1, backend=spy)
    x, y = corenn.randn(4), corenn.randn(4)
    compiled(x, y)
    step = captured["program"].kernel_steps()[0]
    ctx = corenn.kernels.detached_context(step.kernel, np, (False, False, False))
    assert len(step.inputs) == 3  # x, y and the constant 1, which the loop inlines
    with pytest.raises(ValueError, match="input 1 is float64"):
        step.kernel.forward(ctx, np.zeros(4, np.float32), np.zeros(4, np.float64), None)
    with pytest.raises(ValueError, match="input 0"):
        step.kernel.forward(ctx, np.zeros(5, np.float32), np.zeros(4, np.float32), None)
    with pytest.raises(TypeError, match="takes 3 inputs, got 2"):
        step.kernel.forward(ctx, np.zeros(4, np.float32), np.zeros(4, np.float32))


def test_tanh32_is_close_to_exact():
    numba = pytest.importorskip("numba")
    namespace = {"np": np, "numba": numba, "T": np.float32}
    exec("\n".join(fusion.TANH_FLOAT32), namespace)
    tanh32 = numba.njit(namespace["tanh32"].py_func)
    x = np.concatenate([np.linspace(-12, 12, 20001), [0.0, -0.0, 1e-30, -1e-40, 1e-4]]).astype(np.float32)
    got = np.array([tanh32(v) for v in x], np.float32)
    exact = np.tanh(x.astype(np.float64))
    ulps = np.abs(got - exact) / np.spacing(np.maximum(np.abs(exact), np.finfo(np.float32).tiny).astype(np.float32))
    assert ulps.max() <= 6
    assert np.isnan(tanh32(np.float32("nan")))
    assert tanh32(np.float32("inf")) == pytest.approx(1) and tanh32(np.float32("-inf")) == pytest.approx(-1)
