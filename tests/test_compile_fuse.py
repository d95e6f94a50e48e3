"""corenn.compiler.Program's backend surface: kernel_steps, slot_info, barriers and fuse (a backend's rewrite)."""
from __future__ import annotations

import numpy as np
import pytest

import corenn
from corenn.compiler import KernelStep, Program, SlotInfo
from corenn.kernels import Op


def _capturing_backend(store):
    def backend(program):
        store.append(program)
        return program.replay
    return backend


def _program_of(fn, *args):
    store = []
    compiled = corenn.compile(fn, backend=_capturing_backend(store))
    compiled(*args)
    return store[0]


def _affine_tanh_kernel(inputs, outputs):
    """tanh(x * w + b) as one numpy kernel, with its backward: what a backend's fused kernel would do."""
    class AffineTanh(Op):
        grad_fn_name = "AffineTanhBackward"

        @staticmethod
        def forward(ctx, x, w, b):
            out = np.tanh(x * w + b)
            ctx.save_for_backward(x, w, out)
            return out

        @staticmethod
        def backward(ctx, grad):
            x, w, out = ctx.saved
            inner = grad * (1 - out * out)
            wants = ctx.needs_input_grad
            return (inner * w if wants[0] else None, inner * x if wants[1] else None, inner if wants[2] else None)
    return AffineTanh


def test_kernel_steps_and_slots_describe_the_capture():
    x, w = corenn.randn(4, 3, requires_grad=True), corenn.randn(4, 3)
    program = _program_of(lambda x, w: (x * w + 1.5).tanh().sum(), x, w)
    steps = program.kernel_steps()
    assert [s.op for s in steps] == ["mul", "add", "tanh", "sum"]
    assert all(isinstance(s, KernelStep) for s in steps)
    mul, add, tanh, total = steps
    assert mul.inputs == (0, 1) and mul.needs_input_grad == (True, False)
    assert add.inputs[0] == mul.outputs[0]
    constant = program.slot_info(add.inputs[1])
    assert isinstance(constant, SlotInfo) and constant.is_constant and constant.value == 1.5
    assert program.slot_info(tanh.outputs[0]) == SlotInfo((4, 3), np.dtype(np.float32), False, None)
    assert program.slot_info(total.outputs[0]).shape == ()
    assert total.params == {"axes": None, "keepdim": False, "dtype": None}
    assert program.barriers() == []
    with pytest.raises(IndexError, match="slot 99"):
        program.slot_info(99)


def test_barriers_are_the_steps_a_group_cannot_span():
    model = corenn.nn.Linear(3, 2)
    optimizer = corenn.optim.SGD(model.parameters(), lr=0.1)

    def step(x):
        optimizer.zero_grad()
        loss = model(x).square().mean()
        loss.backward()
        optimizer.step()
        return loss
    program = _program_of(step, corenn.randn(5, 3))
    kinds = [index for index in program.barriers()]
    assert len(kinds) == 3  # zero_grad, backward, step
    kernels = [s.index for s in program.kernel_steps()]
    assert not set(kinds) & set(kernels)


@pytest.mark.parametrize("dtype", [corenn.float32, corenn.float64])
def test_fused_program_equals_eager_values_and_gradients(dtype):
    def fn(x, w, b):
        return (x * w + b).tanh().sum() * 2

    x = corenn.randn(5, 4, dtype=dtype, requires_grad=True)
    w = corenn.randn(5, 4, dtype=dtype, requires_grad=True)
    b = corenn.randn(5, 4, dtype=dtype)

    def backend(program):
        mul, add, tanh = program.kernel_steps()[:3]
        fused = program.fuse([mul.index, add.index, tanh.index], _affine_tanh_kernel, name="affine_tanh")
        assert isinstance(fused, Program) and fused is not program
        assert [s.op for s in fused.kernel_steps()] == ["affine_tanh", "sum", "mul"]
        assert fused.kernel_steps()[0].needs_input_grad == (True, True, False)
        assert len(program.kernel_steps()) == 5  # the original is unchanged
        return fused.replay

    compiled = corenn.compile(fn, backend=backend)
    expected = fn(x, w, b)
    expected.backward()
    want_x, want_w = x.grad.clone(), w.grad.clone()
    for _ in range(2):  # capture, then replay of the fused program
        x.grad = w.grad = None
        got = compiled(x, w, b)
        got.backward()
        np.testing.assert_allclose(got.detach().numpy(), expected.detach().numpy(), rtol=1e-6)
        np.testing.assert_allclose(x.grad.numpy(), want_x.numpy(), rtol=1e-6)
        np.testing.assert_allclose(w.grad.numpy(), want_w.numpy(), rtol=1e-6)
    assert "affine_tanh" in str(compiled.graph)
    assert any("runs it as 3 kernels" in event for event in compiled.explain().events)


def test_fused_intermediate_read_outside_becomes_an_output():
    def fn(x, w, b):
        inner = x * w
        return (inner + b).tanh() + inner

    x, w, b = (corenn.randn(6, requires_grad=True) for _ in range(3))
    seen = {}

    def make(inputs, outputs):
        seen["io"] = (inputs, outputs)

        class MulAdd(Op):
            num_outputs = 2

            @staticmethod
            def forward(ctx, x, w, b):
                ctx.save_for_backward(x, w)
                inner = x * w
                return inner, inner + b

            @staticmethod
            def backward(ctx, grads):
                x, w = ctx.saved
                g_inner = (grads[0] if grads[0] is not None else 0) + (grads[1] if grads[1] is not None else 0)
                return g_inner * w, g_inner * x, grads[1]
        return MulAdd

    def backend(program):
        mul, add = program.kernel_steps()[:2]
        return program.fuse([mul.index, add.index], make).replay

    compiled = corenn.compile(fn, backend=backend)
    compiled(x, w, b)
    got = compiled(x, w, b)
    got.sum().backward()
    grads = [t.grad.clone() for t in (x, w, b)]
    inputs, outputs = seen["io"]
    assert inputs == (0, 1, 2) and len(outputs) == 2
    for t in (x, w, b):
        t.grad = None
    fn(x, w, b).sum().backward()
    for g, t in zip(grads, (x, w, b)):
        np.testing.assert_allclose(g.numpy(), t.grad.numpy(), rtol=1e-6)
    np.testing.assert_allclose(got.detach().numpy(), fn(x, w, b).detach().numpy(), rtol=1e-6)


def test_fuse_refuses_what_cannot_move():
    x = corenn.randn(4, requires_grad=True)
    program = _program_of(lambda x: (x.exp() * 2).sin() + x.exp().sum(), x)
    steps = program.kernel_steps()
    with pytest.raises(ValueError, match="empty"):
        program.fuse([], _affine_tanh_kernel)
    with pytest.raises(ValueError, match="not a kernel step"):
        program.fuse([len(program.steps) + 3], _affine_tanh_kernel)
    # exp -> mul -> sin, with the second exp (which reads x, not the group) between: fine to span;
    # but a step between that reads the group's value cannot run before the fused kernel.
    first_exp, mul, sin = steps[0], steps[1], steps[2]
    assert (first_exp.op, mul.op, sin.op) == ("exp", "mul", "sin")
    with pytest.raises(ValueError, match="independent of the group"):
        program.fuse([first_exp.index, sin.index], _affine_tanh_kernel)


def test_replay_runs_pointwise_chains_as_numpy_code_equal_to_eager():
    def fn(x, w):
        y = (x * w + 1).tanh()
        y.sum()  # a reduction nothing reads
        z = (1 - y).relu().sigmoid()
        return z.mean() + (y @ w.t()).sum()

    x, w = corenn.randn(3, 3, requires_grad=True), corenn.randn(3, 3, requires_grad=True)
    compiled = corenn.compile(fn)
    expected = fn(x, w)
    expected.backward()
    want = [x.grad.clone(), w.grad.clone()]
    for _ in range(2):
        x.grad = w.grad = None
        got = compiled(x, w)
        assert np.array_equal(got.detach().numpy(), expected.detach().numpy())  # eager's numpy calls, in order
        got.backward()
        for t, g in zip((x, w), want):
            np.testing.assert_allclose(t.grad.numpy(), g.numpy(), rtol=1e-6, atol=1e-7)
    names = [n.target.__name__ for n in compiled.graph.nodes if n.op == "call_function"]
    assert names[0] == "fused_mul_add_tanh_etc" and "matmul" in names
