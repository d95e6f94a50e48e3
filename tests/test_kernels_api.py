"""corenn.kernels, the public kernel API: the helpers, KernelOverride's fallback, ctx.needs_input_grad."""
from __future__ import annotations

import inspect

import numpy as np
import pytest

import corenn
import corenn.nn.functional as F
from corenn import kernels as K
from corenn.kernels import KernelOverride, core_kernel, fell_back
from corenn.testing import register_plugin


# -- the helpers --------------------------------------------------------------------------------------------------------

def test_check_targets_raises_pytorchs_index_error_for_kept_targets_only():
    target = np.array([0, 2, -100])
    K.check_targets(np, target, target != -100, 3)
    with pytest.raises(IndexError, match=r"Target 2 is out of bounds \(expected a class index in \[0, 1\]\)"):
        K.check_targets(np, target, target != -100, 2)
    with pytest.raises(IndexError, match="Target -100 is out of bounds"):
        K.check_targets(np, target, np.ones(3, dtype=bool), 3)


@pytest.mark.parametrize("size, kernel, stride, padding, dilation", [
    (7, 2, 2, 0, 1), (8, 3, 2, 1, 1), (10, 3, 3, 1, 2), (5, 5, 1, 2, 1), (6, 2, 4, 1, 1)])
@pytest.mark.parametrize("ceil_mode", [False, True])
def test_pool_output_size_is_what_the_pooling_ops_produce(size, kernel, stride, padding, dilation, ceil_mode):
    x = corenn.zeros(1, 1, size)
    out = F.max_pool1d(x, kernel, stride, padding, dilation, ceil_mode=ceil_mode)
    assert K.pool_output_size(size, kernel, stride, padding, dilation, ceil_mode) == out.shape[-1]


def test_pool_output_size_against_pytorch(torch):
    for size, kernel, stride, padding, ceil_mode in [(7, 2, 2, 0, True), (9, 3, 2, 1, True), (6, 2, 4, 1, True)]:
        out = torch.nn.functional.max_pool1d(torch.zeros(1, 1, size), kernel, stride, padding, ceil_mode=ceil_mode)
        assert K.pool_output_size(size, kernel, stride, padding, 1, ceil_mode) == out.shape[-1]


def test_full_index_gathers_and_scatters_like_the_ops():
    a = np.arange(12.0).reshape(3, 4)
    index = np.array([[3, 0], [1, 1], [2, 0]])
    np.testing.assert_array_equal(a[K.full_index(np, index, 1)], np.take_along_axis(a, index, 1))
    np.testing.assert_array_equal(a[K.full_index(np, index, 1)],
                                  corenn.gather(corenn.tensor(a), 1, corenn.tensor(index)).numpy())


def test_pad_modes_map_every_f_pad_mode_to_numpy():
    x = np.arange(4.0)
    for mode, numpy_mode in K.PAD_MODES.items():
        expected = F.pad(corenn.tensor(x[None, None]), (2, 1), mode=mode).numpy()[0, 0]
        np.testing.assert_array_equal(np.pad(x, (2, 1), mode=numpy_mode), expected)
    with pytest.raises(TypeError):
        K.PAD_MODES["zeros"] = "constant"  # read-only: the core's table


def test_core_kernel_names_the_closest_op_for_a_typo():
    assert core_kernel("relu") is K.core_kernels()["relu"]
    with pytest.raises(KeyError, match="corenn has no op 'reul' \\(did you mean 'relu'\\?\\)"):
        core_kernel("reul")


def test_every_public_name_has_a_docstring_with_an_example():
    for name in K.__all__:
        if name in ("Op", "KernelRegistration", "PAD_MODES"):
            continue
        doc = inspect.getdoc(getattr(K, name)) or ""
        assert "Example" in doc or "::" in doc, name


# -- ctx.needs_input_grad ----------------------------------------------------------------------------------------------

@pytest.mark.parametrize("inputs", [1, 2, 3, 4])
def test_needs_input_grad_has_one_bool_per_input(inputs):
    tensors = [corenn.ones(2, requires_grad=i % 2 == 0) for i in range(inputs)]
    out = tensors[0]
    for t in tensors[1:]:
        out = out + t
    if inputs == 3:
        out = corenn.where(corenn.tensor([True, False]), tensors[1], tensors[2])
        assert out.grad_fn.needs_input_grad == (False, False, True)
    elif inputs == 4:
        out = corenn.cat(tensors)
        assert out.grad_fn.needs_input_grad == (True, False, True, False)
    elif inputs == 2:
        assert out.grad_fn.needs_input_grad == (True, False)
    else:
        assert (out * 2).grad_fn.needs_input_grad == (True, False)
        assert out.exp().grad_fn.needs_input_grad == (True,)


def test_custom_function_ctx_has_needs_input_grad_in_forward_and_backward():
    seen = []

    class Scale(corenn.autograd.Function):
        @staticmethod
        def forward(ctx, a, b, factor):
            seen.append(ctx.needs_input_grad)
            return a * b * factor

        @staticmethod
        def backward(ctx, grad):
            seen.append(ctx.needs_input_grad)
            return grad, None, None

    a, b = corenn.ones(2, requires_grad=True), corenn.ones(2)
    Scale.apply(a, b, 3.0).sum().backward()
    assert seen == [(True, False, False), (True, False, False)]


def test_no_kernel_reads_next_edges_for_what_needs_input_grad_says():
    from pathlib import Path
    root = Path(corenn.__file__).parent.parent
    offenders = [f"{path.relative_to(root)}:{number}" for folder in ("corenn/ops", "plugins")
                 for path in sorted((root / folder).rglob("*.py"))
                 for number, line in enumerate(path.read_text().splitlines(), 1) if "ctx.next_edges" in line]
    assert not offenders, f"use ctx.needs_input_grad[i] instead of ctx.next_edges[i]: {offenders}"


# -- KernelOverride ------------------------------------------------------------------------------------------------------

class FastExp(KernelOverride, core_kernel("exp")):
    """exp for float32 only; every other dtype falls back to the core kernel."""

    calls = 0

    @staticmethod
    def handles(a):
        return a.dtype == np.float32

    @staticmethod
    def forward(ctx, a):
        FastExp.calls += 1
        out = np.exp(a)
        ctx.save_for_backward(out)
        return out

    @staticmethod
    def backward(ctx, grad):
        (out,) = ctx.saved
        return grad * out * 1  # the same as the core's; the test tells them apart by fell_back


class FastSoftmax(KernelOverride, core_kernel("softmax")):
    @staticmethod
    def handles(a, axis):
        return a.dtype == np.float32 and axis == a.ndim - 1

    @staticmethod
    def forward(ctx, a, axis):
        out = np.exp(a - a.max(axis=axis, keepdims=True))
        out /= out.sum(axis=axis, keepdims=True)
        ctx.save_for_backward(out)
        ctx.axis = axis
        return out

    @staticmethod
    def backward(ctx, grad):
        (out,) = ctx.saved
        return out * (grad - (grad * out).sum(axis=ctx.axis, keepdims=True))


class Plugin:
    @corenn.hookimpl
    def corenn_register_kernels(self):
        return [K.KernelRegistration("exp", "cpu", FastExp, priority=5),
                K.KernelRegistration("softmax", "cpu", FastSoftmax, priority=5)]


def test_override_runs_its_fast_path_for_what_it_handles_and_the_core_for_the_rest():
    with register_plugin(Plugin()):
        FastExp.calls = 0
        x = corenn.tensor([0.5, 1.0], dtype=corenn.float32, requires_grad=True)
        y = x.exp()
        assert FastExp.calls == 1 and type(y.grad_fn) is FastExp and not fell_back(y.grad_fn)
        y.sum().backward()
        np.testing.assert_allclose(x.grad.numpy(), np.exp([0.5, 1.0]), rtol=1e-6)

        x64 = corenn.tensor([0.5, 1.0], dtype=corenn.float64, requires_grad=True)
        y64 = x64.exp()
        assert FastExp.calls == 1 and fell_back(y64.grad_fn)  # the core's forward ran ...
        assert y64.grad_fn.backward is core_kernel("exp").backward  # ... and its backward will
        y64.sum().backward()
        np.testing.assert_allclose(x64.grad.numpy(), np.exp([0.5, 1.0]))


def test_fallback_decides_on_keyword_parameters_too():
    with register_plugin(Plugin()):
        x = corenn.randn(3, 4, requires_grad=True)
        last = F.softmax(x, dim=-1)
        first = F.softmax(x, dim=0)
        assert not fell_back(last.grad_fn) and fell_back(first.grad_fn)
        (last * corenn.arange(4.0)).sum().backward()
        (first * corenn.arange(3.0)[:, None]).sum().backward()
        expected = x.grad.clone()
    x2 = x.detach().clone().requires_grad_()
    (F.softmax(x2, dim=-1) * corenn.arange(4.0)).sum().backward()
    (F.softmax(x2, dim=0) * corenn.arange(3.0)[:, None]).sum().backward()
    np.testing.assert_allclose(expected.numpy(), x2.grad.numpy(), rtol=1e-5, atol=1e-6)


def test_the_wrapper_keeps_the_signature_and_docstring_of_the_fast_forward():
    assert inspect.signature(FastSoftmax.forward) == inspect.signature(FastSoftmax.fast_forward)
    assert FastSoftmax.forward.__qualname__ == "FastSoftmax.forward"
    assert FastSoftmax.core_kernel is core_kernel("softmax")

    class Conv(KernelOverride, core_kernel("conv")):
        @staticmethod
        def handles(x, weight, bias=None, *, stride, padding, dilation, groups):
            return False

        @staticmethod
        def forward(ctx, x, weight, bias=None, *, stride, padding, dilation, groups):
            """the fast path"""
            raise AssertionError("not handled, never called")

    assert str(inspect.signature(Conv.forward)) == "(ctx, x, weight, bias=None, *, stride, padding, dilation, groups)"
    assert Conv.forward.__doc__ == "the fast path"
    x, w = corenn.randn(1, 2, 5, 5, requires_grad=True), corenn.randn(3, 2, 3, 3)
    ctx = Conv()
    ctx.xp = np
    out = Conv.forward(ctx, x.detach().numpy(), w.numpy(), stride=(1, 1), padding=((1, 1), (1, 1)), dilation=(1, 1),
                       groups=1)
    assert fell_back(ctx) and out.shape == (1, 3, 5, 5)


def test_variadic_forward_and_subclasses_of_overrides():
    class Cat(KernelOverride, core_kernel("cat")):
        @staticmethod
        def handles(*arrays, axis=0):
            return len(arrays) == 2

        @staticmethod
        def forward(ctx, *arrays, axis=0):
            ctx.sizes = [a.shape[axis] for a in arrays]
            ctx.axis = axis
            return np.concatenate(arrays, axis=axis) * 1

    for count, falls in [(2, False), (3, True)]:
        ctx = Cat()
        ctx.xp = np
        out = Cat.forward(ctx, *[np.ones(2)] * count, axis=0)
        assert out.shape == (2 * count,) and fell_back(ctx) is falls

    class Traced(Cat):  # changes backward only: the inherited wrapper and fast path serve
        @staticmethod
        def backward(ctx, grad):
            return Cat.backward(ctx, grad)

    assert Traced.fast_forward is Cat.fast_forward and Traced.core_kernel is core_kernel("cat")


def test_an_override_must_name_its_core_kernel():
    with pytest.raises(TypeError, match=r"no core kernel: write class Orphan\(KernelOverride, "
                                        r"corenn.kernels.core_kernel\('<op>'\)\)"):
        class Orphan(KernelOverride):
            @staticmethod
            def forward(ctx, a):
                return a


def test_a_detached_context_runs_forward_and_backward_outside_the_graph():
    import numpy as np

    from corenn.kernels import core_kernel, detached_context
    x, y = np.array([1.0, -2.0, 3.0]), np.array([0.5, 0.25, 2.0])
    ctx = detached_context(core_kernel("mul"), np, (True, False))
    out = ctx.forward(ctx, x, y)
    assert ctx.needs_input_grad == (True, False)
    grad_x, grad_y = ctx.backward(ctx, np.ones_like(out))
    np.testing.assert_array_equal(out, x * y)
    np.testing.assert_array_equal(grad_x, y)
    assert grad_y is None
