"""Autograd semantics: leaves, .grad accumulation, grad_fn, backward/grad options, grad modes, hooks, Function."""
from __future__ import annotations

import gc
import sys
import tracemalloc

import numpy as np
import pytest

import corenn
from corenn import autograd


def test_leaf_semantics_and_requires_grad_propagation():
    x = corenn.tensor([1.0, 2.0], requires_grad=True)
    c = corenn.tensor([3.0, 4.0])
    y = x * c
    assert x.is_leaf and c.is_leaf and not y.is_leaf
    assert y.requires_grad and not (c * 2).requires_grad
    assert y.grad_fn.name() == "MulBackward0" and x.grad_fn is None
    (node, _), (other, _) = y.grad_fn.next_functions
    assert node.name() == "torch::autograd::AccumulateGrad" and node.variable is x and other is None


def test_grad_accumulates_across_backward_calls():
    x = corenn.tensor([1.0, 2.0], requires_grad=True)
    (x * x).sum().backward()
    (x * 3).sum().backward()
    assert x.grad.tolist() == [5.0, 7.0]
    x.grad = None
    (x * 3).sum().backward()
    assert x.grad.tolist() == [3.0, 3.0]


def test_backward_with_gradient_argument():
    x = corenn.tensor([1.0, 2.0, 3.0], requires_grad=True)
    y = x * 2
    y.backward(gradient=corenn.tensor([1.0, 0.5, 0.0]))
    assert x.grad.tolist() == [2.0, 1.0, 0.0]
    with pytest.raises(RuntimeError, match="grad can be implicitly created only for scalar outputs"):
        (x * 2).backward()
    with pytest.raises(RuntimeError, match="Mismatch in shape"):
        (x * 2).backward(corenn.ones(2))


def test_second_backward_through_freed_graph_raises_and_retain_graph_allows_it():
    x = corenn.tensor([1.0, 2.0], requires_grad=True)
    y = (x.exp() * x).sum()
    y.backward(retain_graph=True)
    first = x.grad.numpy().copy()
    y.backward()
    np.testing.assert_allclose(x.grad.numpy(), 2 * first)
    with pytest.raises(RuntimeError, match="Trying to backward through the graph a second time"):
        y.backward()


def test_backward_on_tensor_without_grad_raises():
    with pytest.raises(RuntimeError, match="does not require grad and does not have a grad_fn"):
        corenn.ones(2).sum().backward()


def test_autograd_grad_options():
    x = corenn.tensor([1.0, 2.0], requires_grad=True)
    z = corenn.tensor([5.0], requires_grad=True)
    y = x * x
    (g,) = autograd.grad(y, x, grad_outputs=corenn.tensor([1.0, 1.0]), retain_graph=True)
    assert g.tolist() == [2.0, 4.0] and x.grad is None  # returned, not accumulated
    with pytest.raises(RuntimeError, match="appears to not have been used in the graph"):
        autograd.grad(y.sum(), [x, z], retain_graph=True)
    gx, gz = autograd.grad(y.sum(), [x, z], allow_unused=True)
    assert gx.tolist() == [2.0, 4.0] and gz is None
    # gradients with respect to an intermediate tensor
    x2 = corenn.tensor([3.0], requires_grad=True)
    h = x2 * 2
    out = h * h
    assert autograd.grad(out.sum(), h)[0].tolist() == [12.0]


def test_seed_example_autograd_grad():
    """Seed 004 section 1: d/dx of -(x*x) at 1 is -2."""
    x = corenn.tensor(1.0, requires_grad=True)
    assert autograd.grad(-(x * x), x)[0].item() == -2.0


def test_grad_modes_as_context_managers_and_decorators():
    x = corenn.ones(2, requires_grad=True)
    with corenn.no_grad():
        assert not (x * 2).requires_grad and not corenn.is_grad_enabled()
        with corenn.enable_grad():
            assert (x * 2).requires_grad
    assert corenn.is_grad_enabled()

    @corenn.no_grad()
    def f(t):
        return t * 2

    assert not f(x).requires_grad
    with corenn.set_grad_enabled(False):
        assert not (x * 2).requires_grad
    assert corenn.is_grad_enabled()
    corenn.set_grad_enabled(False)  # as a function call it takes effect at once
    try:
        assert not corenn.is_grad_enabled()
    finally:
        corenn.set_grad_enabled(True)
    with corenn.inference_mode():
        assert corenn.is_inference_mode_enabled() and not (x * 2).requires_grad
    assert not corenn.is_inference_mode_enabled()

    @corenn.inference_mode()
    def g(t):
        return t * 2

    assert not g(x).requires_grad

    @corenn.enable_grad()
    def h(t):
        return t * 2

    with corenn.no_grad():
        assert h(x).requires_grad


def test_grad_mode_restored_after_exception():
    with pytest.raises(ValueError):
        with corenn.no_grad():
            raise ValueError("boom")
    assert corenn.is_grad_enabled()


def test_detach_requires_grad_and_retain_grad():
    x = corenn.tensor([1.0, 2.0], requires_grad=True)
    d = (x * 2).detach()
    assert not d.requires_grad and d.is_leaf
    d2 = x.detach()
    d2[0] = 10.0  # shares memory with x
    assert x[0].item() == 10.0
    leaf = corenn.zeros(2).requires_grad_()
    assert leaf.requires_grad and leaf.is_leaf
    with pytest.raises(RuntimeError, match="you can only change requires_grad flags of leaf variables"):
        (leaf * 2).requires_grad_(False)
    y = leaf * 3
    y.retain_grad()
    z = (y * y).sum()
    z.backward()
    assert y.grad.tolist() == [0.0, 0.0] and leaf.grad.tolist() == [0.0, 0.0]
    assert y.retains_grad


def test_register_hook_replaces_and_observes_gradients():
    x = corenn.tensor([1.0, 2.0], requires_grad=True)
    seen = []
    handle = x.register_hook(lambda g: g * 10)
    y = x * 2
    y.register_hook(lambda g: seen.append(g.tolist()))
    y.sum().backward()
    assert seen == [[1.0, 1.0]] and x.grad.tolist() == [20.0, 20.0]
    handle.remove()
    x.grad = None
    (x * 2).sum().backward()
    assert x.grad.tolist() == [2.0, 2.0]
    with pytest.raises(RuntimeError, match="cannot register a hook on a tensor that doesn't require gradient"):
        corenn.ones(1).register_hook(lambda g: g)


class _Cube(autograd.Function):
    @staticmethod
    def forward(ctx, x, scale):
        ctx.save_for_backward(x)
        ctx.scale = scale
        return x ** 3 * scale

    @staticmethod
    def backward(ctx, grad_output):
        (x,) = ctx.saved_tensors
        assert ctx.needs_input_grad == (True, False)
        return grad_output * 3 * x ** 2 * ctx.scale, None


def test_custom_function_gradcheck_and_name():
    x = corenn.tensor([0.5, -1.0, 2.0], dtype=corenn.float64, requires_grad=True)
    y = _Cube.apply(x, 2.0)
    assert y.grad_fn.name() == "_CubeBackward"
    assert autograd.gradcheck(lambda t: _Cube.apply(t, 2.0), (x,))


def test_custom_function_mark_non_differentiable():
    class SortWithIndex(autograd.Function):
        @staticmethod
        def forward(ctx, x):
            values, indices = x.sort()
            ctx.mark_non_differentiable(indices)
            ctx.save_for_backward(indices)
            return values, indices

        @staticmethod
        def backward(ctx, grad_values, grad_indices):
            (indices,) = ctx.saved_tensors
            grad = corenn.zeros_like(grad_values)
            grad[indices] = grad_values
            return grad

    x = corenn.tensor([3.0, 1.0, 2.0], requires_grad=True)
    values, indices = SortWithIndex.apply(x)
    assert values.requires_grad and not indices.requires_grad
    (values * corenn.tensor([1.0, 2.0, 3.0])).sum().backward()
    assert x.grad.tolist() == [3.0, 1.0, 2.0]


def test_custom_function_wrong_number_of_gradients():
    class Bad(autograd.Function):
        @staticmethod
        def forward(ctx, a, b):
            return a * b

        @staticmethod
        def backward(ctx, grad):
            return grad

    a = corenn.ones(2, requires_grad=True)
    with pytest.raises(RuntimeError, match="returned an incorrect number of gradients \\(expected 2, got 1\\)"):
        Bad.apply(a, corenn.ones(2, requires_grad=True)).sum().backward()


def test_gradcheck_detects_wrong_gradient():
    class Wrong(autograd.Function):
        @staticmethod
        def forward(ctx, x):
            return x * 2

        @staticmethod
        def backward(ctx, grad):
            return grad * 3

    x = corenn.ones(3, dtype=corenn.float64, requires_grad=True)
    with pytest.raises(autograd.GradcheckError, match="Jacobian mismatch"):
        autograd.gradcheck(Wrong.apply, (x,))
    assert autograd.gradcheck(Wrong.apply, (x,), raise_exception=False) is False


def test_deep_chain_does_not_hit_the_recursion_limit():
    x = corenn.tensor([1.0], requires_grad=True)
    y = x
    for _ in range(10_000):
        y = y * 1.0001 + 0.0
    y.sum().backward()
    assert x.grad.item() == pytest.approx(1.0001 ** 10_000, rel=1e-3)
    assert sys.getrecursionlimit() < 20_000 * 2


def test_graph_is_freed_after_backward():
    import weakref
    x = corenn.ones(1000, requires_grad=True)
    y = (x * 2).exp()
    node = weakref.ref(y.grad_fn)
    y.sum().backward()
    del y
    gc.collect()
    assert node() is None


def test_memory_stays_flat_over_training_like_iterations():
    rng = np.random.default_rng(0)
    w = corenn.tensor(rng.standard_normal((32, 16)).astype(np.float32), requires_grad=True)
    data = corenn.tensor(rng.standard_normal((8, 32)).astype(np.float32))

    def step():
        loss = ((data @ w).tanh() ** 2).mean()
        loss.backward()
        with corenn.no_grad():
            w.sub_(0.01 * w.grad)
        w.grad = None

    for _ in range(200):
        step()
    gc.collect()
    tracemalloc.start()
    baseline = tracemalloc.get_traced_memory()[0]
    for _ in range(10_000):
        step()
    gc.collect()
    grown = tracemalloc.get_traced_memory()[0] - baseline
    tracemalloc.stop()
    assert grown < 256 * 1024, f"memory grew by {grown} bytes over 10,000 iterations"
