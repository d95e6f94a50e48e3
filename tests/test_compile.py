"""corenn.compile / corenn.jit: capture and replay equal eager (values, gradients, RNG, training steps)."""
from __future__ import annotations

import contextlib
import warnings

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import corenn
from corenn import nn
from corenn.compiler import Unsupported


def batch_gather(tensor, indices):
    output = []
    for i in range(tensor.size(0)):
        output += [tensor[i][indices[i]]]
    return corenn.stack(output)


@corenn.jit.script
def batch_gather_jit(tensor, indices):
    output = []
    for i in range(tensor.size(0)):
        output += [tensor[i][indices[i]]]
    return corenn.stack(output)


def batch_gather_vec(tensor, indices):
    shape = list(tensor.shape)
    flat_first = corenn.reshape(
        tensor, [shape[0] * shape[1]] + shape[2:])
    offset = corenn.reshape(
        corenn.arange(shape[0]) * shape[1],
        [shape[0]] + [1] * (len(indices.shape) - 1))
    output = flat_first[indices + offset]
    return output


def _equal(a, b):
    return a.shape == b.shape and np.array_equal(a.detach().numpy(), b.detach().numpy())


@pytest.mark.parametrize("index_shape", [(6,), (6, 4)])
def test_seed_004_batch_gather_three_ways_agree_with_gradients(index_shape):
    corenn.manual_seed(0)
    for call in range(3):  # capture, then replays on new values
        tensor = corenn.randn(6, 9, 3, requires_grad=True)
        indices = corenn.randint(0, 9, index_shape)
        grads = []
        results = []
        for function in (batch_gather, batch_gather_jit, batch_gather_vec):
            tensor.grad = None
            out = function(tensor, indices)
            (out * corenn.arange(out.numel()).reshape(out.shape)).sum().backward()
            results.append(out.detach())
            grads.append(tensor.grad.clone())
        assert _equal(results[0], results[1]) and _equal(results[0], results[2])
        assert _equal(grads[0], grads[1]) and _equal(grads[0], grads[2])
    assert batch_gather_jit.explain().stats["replays"] >= 2


def test_seed_batch_gather_matches_pytorch():
    torch = pytest.importorskip("torch")
    tensor = corenn.randn(4, 5, 2)
    indices = corenn.randint(0, 5, (4, 3))
    batch_gather_jit(tensor, indices)
    out = batch_gather_jit(tensor, indices)
    expected = torch.tensor(tensor.numpy())[torch.arange(4)[:, None], torch.tensor(indices.numpy())]
    np.testing.assert_array_equal(out.numpy(), expected.numpy())


OPS = [lambda x, y: x + y, lambda x, y: x * y, lambda x, y: x - y * 0.5, lambda x, y: x.sin(),
       lambda x, y: x.tanh(), lambda x, y: x.exp().clamp(max=3.0), lambda x, y: x.relu() + y,
       lambda x, y: (x * y).sigmoid(), lambda x, y: x / (y.abs() + 1)]


@settings(max_examples=25, deadline=None)
@given(st.lists(st.integers(0, len(OPS) - 1), min_size=1, max_size=12), st.sampled_from([(3,), (2, 4)]))
def test_random_chains_compiled_equal_eager_values_and_gradients(chain, shape):
    def f(x, y):
        for k in chain:
            x = OPS[k](x, y)
        return x.sum()

    compiled = corenn.compile(f)
    for seed in range(3):
        rng = np.random.default_rng(seed)
        x1 = corenn.tensor(rng.standard_normal(shape), requires_grad=True)
        y1 = corenn.tensor(rng.standard_normal(shape), requires_grad=True)
        x2 = x1.detach().requires_grad_()
        y2 = y1.detach().requires_grad_()
        eager, replayed = f(x1, y1), compiled(x2, y2)
        assert _equal(eager, replayed)  # fused chains make eager's numpy calls in eager's order
        eager.backward()
        replayed.backward()
        # A fused chain sums the gradients of a tensor it reads several times before the engine adds
        # the rest: the same terms, another association, so equal up to float64 rounding.
        np.testing.assert_allclose(x2.grad.numpy(), x1.grad.numpy(), rtol=1e-13, atol=1e-15)
        assert (y1.grad is None and y2.grad is None) or \
            np.allclose(y2.grad.numpy(), y1.grad.numpy(), rtol=1e-13, atol=1e-15)
    assert compiled.explain().stats["replays"] == 2


def test_gradients_of_a_compiled_function_match_finite_differences():
    compiled = corenn.compile(lambda x: (x.sin() * x).tanh().sum())
    x = corenn.randn(5, dtype=corenn.float64)
    compiled(x.clone().requires_grad_())  # capture
    assert corenn.autograd.gradcheck(compiled, (x.requires_grad_(),))


def test_new_shape_recaptures_and_cache_is_limited(monkeypatch):
    from corenn import compiler
    monkeypatch.setattr(compiler, "cache_size_limit", 2)
    compiled = corenn.compile(lambda x: x * 2 + 1)
    for n in (2, 3, 4, 2):
        x = corenn.randn(n)
        assert _equal(compiled(x), x * 2 + 1)
    stats = compiled.explain().stats
    assert stats["captures"] == 4 and stats["evictions"] == 2


def test_grad_mode_is_part_of_the_signature():
    compiled = corenn.compile(lambda x: (x * 3).sum())
    x = corenn.randn(3, requires_grad=True)
    assert compiled(x).requires_grad
    with corenn.no_grad():
        assert not compiled(x).requires_grad
        assert not compiled(x).requires_grad
    out = compiled(x)
    assert out.requires_grad
    out.backward()
    assert _equal(x.grad, corenn.full((3,), 3.0))


def test_data_dependent_control_flow_falls_back_with_one_warning_naming_the_line():
    def f(x):
        if x.sum() > 0:  # the line the warning names
            return x * 2
        return x * -1

    compiled = corenn.compile(f)
    with pytest.warns(UserWarning, match=r"bool\(tensor\).*test_compile.py:\d+"):
        compiled(corenn.ones(3))
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no second warning
        assert _equal(compiled(-corenn.ones(3)), corenn.ones(3))
        assert _equal(compiled(corenn.ones(3)), corenn.full((3,), 2.0))
    assert "bool(tensor)" in str(compiled.explain())


def test_fullgraph_raises_naming_the_line():
    compiled = corenn.compile(lambda x: x * x.sum().item(), fullgraph=True)
    with pytest.raises(Unsupported, match=r"item\(\).*test_compile.py"):
        compiled(corenn.ones(2))


@pytest.mark.parametrize("body", [
    lambda x: x * corenn.randn(x.shape),
    lambda x: print(x) or x,
    lambda x: x * len(x.tolist()),
])
def test_uncapturable_calls_run_eagerly(body):
    compiled = corenn.compile(body)
    with pytest.warns(UserWarning, match="runs eagerly"):
        compiled(corenn.ones(2))
    compiled(corenn.ones(2))
    assert compiled.explain().stats["replays"] == 0


def test_in_place_write_outside_the_dispatcher_is_refused():
    def f(x):
        y = x * 2
        y[0] = 5.0  # no autograd: written straight into the array
        return y

    compiled = corenn.compile(f)
    with pytest.warns(UserWarning, match="in place"):
        compiled(corenn.ones(3))
    assert _equal(compiled(corenn.zeros(3)), corenn.tensor([5.0, 0.0, 0.0]))


def test_dropout_replays_draw_fresh_masks_with_eager_rng_state():
    model = nn.Sequential(nn.Linear(8, 8), nn.Dropout(0.5))
    compiled = corenn.compile(model)
    x = corenn.randn(4, 8)
    corenn.manual_seed(3)
    eager = [model(x) for _ in range(3)]
    corenn.manual_seed(3)
    replayed = [compiled(x) for _ in range(3)]
    for a, b in zip(eager, replayed):
        assert _equal(a, b)
    assert not _equal(replayed[1], replayed[2])  # fresh masks each call
    model.eval()
    assert _equal(compiled(x), model(x))  # training flag is guarded: a new capture


def _train_step_factory(model, optimizer):
    def step(x, y):
        optimizer.zero_grad()
        loss = nn.functional.cross_entropy(model(x), y)
        loss.backward()
        optimizer.step()
        return loss
    return step


@pytest.mark.parametrize("make_optimizer", [lambda p: corenn.optim.SGD(p, lr=0.1, momentum=0.9),
                                            lambda p: corenn.optim.Adam(p, lr=0.01)])
def test_whole_training_step_compiled_equals_eager(make_optimizer):
    corenn.manual_seed(0)
    eager_model = nn.Sequential(nn.Linear(6, 16), nn.ReLU(), nn.Linear(16, 3))
    compiled_model = nn.Sequential(nn.Linear(6, 16), nn.ReLU(), nn.Linear(16, 3))
    compiled_model.load_state_dict(eager_model.state_dict())
    eager_step = _train_step_factory(eager_model, make_optimizer(eager_model.parameters()))
    compiled_step = corenn.compile(_train_step_factory(compiled_model, make_optimizer(compiled_model.parameters())))
    for i in range(5):
        x, y = corenn.randn(8, 6), corenn.randint(0, 3, (8,))
        assert _equal(eager_step(x, y), compiled_step(x, y))
    for a, b in zip(eager_model.parameters(), compiled_model.parameters()):
        assert _equal(a, b)
    assert compiled_step.explain().stats["replays"] == 4


def test_hand_written_sgd_under_no_grad_is_replayed():
    w = corenn.randn(4, requires_grad=True)
    w_eager = w.detach().clone().requires_grad_()

    def step(x, w):
        loss = ((x * w).sum() - 1) ** 2
        loss.backward()
        with corenn.no_grad():
            w -= 0.1 * w.grad
            w.grad = None
        return loss

    compiled = corenn.compile(lambda x: step(x, w))
    for _ in range(4):
        x = corenn.randn(4)
        assert _equal(step(x, w_eager), compiled(x))
    assert _equal(w, w_eager)


def test_non_leaf_inputs_keep_their_history():
    compiled = corenn.compile(lambda h: (h * h).sum())
    for _ in range(3):
        x = corenn.randn(3, requires_grad=True)
        compiled(x * 2).backward()
        assert _equal(x.grad, 8 * x.detach())


def _conv_block(x, w, b):
    # Shared intermediates, a parameter read twice, a multi-input kernel that reads needs_input_grad,
    # and two outputs, one of which also feeds the other.
    h = corenn.nn.functional.conv2d(x, w, b, padding=1).tanh()
    return h, (h * w.sum() + h.exp()).mean()


def test_a_replayed_call_has_one_backward_node_and_eager_gradients():
    rng = np.random.default_rng(0)
    x_np, w_np, b_np = (rng.standard_normal(s).astype(np.float64) for s in ((2, 3, 5, 5), (4, 3, 3, 3), (4,)))
    compiled = corenn.compile(_conv_block)
    for call in range(3):  # the first call captures, the others replay
        grads = []
        for fn in (_conv_block, compiled):
            x, w, b = (corenn.tensor(a, requires_grad=True) for a in (x_np, w_np, b_np))
            h, loss = fn(x, w, b)
            (loss + (h ** 2).sum()).backward()
            grads.append((x.grad, w.grad, b.grad, h, loss))
        for ours, eager in zip(grads[1], grads[0]):
            np.testing.assert_allclose(ours.detach().numpy(), eager.detach().numpy(), rtol=1e-12, atol=1e-12)
    assert h.grad_fn.name() == "CompiledFunctionBackward" and loss.grad_fn is h.grad_fn
    assert [edge[0] for edge in h.grad_fn.next_functions if edge[0] is not None] != []


def test_a_replayed_call_frees_its_graph_after_backward_unless_retained():
    compiled = corenn.compile(lambda x, w: (x * w).sin().sum())
    x, w = corenn.randn(4, requires_grad=True), corenn.randn(4, requires_grad=True)
    compiled(x, w)  # capture
    out = compiled(x, w)
    out.backward(retain_graph=True)
    first = w.grad.clone()
    out.backward()
    assert _equal(w.grad, 2 * first)
    with pytest.raises(RuntimeError, match="backward through the graph a second time"):
        out.backward()
    assert out.grad_fn.ctxs is None  # the captured nodes and their saved arrays are gone


def test_autograd_grad_and_output_hooks_through_a_replayed_call():
    compiled = corenn.compile(lambda x: (x * x).sum() * 3)
    x = corenn.randn(5, requires_grad=True)
    compiled(x)
    out = compiled(x)
    seen = []
    out.register_hook(lambda g: seen.append(float(g)) or g * 2)
    (grad,) = corenn.autograd.grad(out, [x])
    assert seen == [1.0]
    np.testing.assert_allclose(grad.numpy(), 12 * x.detach().numpy(), rtol=1e-6)


def test_parameters_changed_between_calls_are_read_live():
    layer = nn.Linear(3, 2)
    compiled = corenn.compile(layer)
    x = corenn.randn(5, 3)
    compiled(x)
    with corenn.no_grad():
        layer.weight.mul_(2)
    assert _equal(compiled(x), layer(x))


def test_compile_disable_environment_variable(monkeypatch):
    monkeypatch.setenv("CORENN_COMPILE_DISABLE", "1")
    compiled = corenn.compile(lambda x: x + 1)
    compiled(corenn.ones(1))
    compiled(corenn.ones(1))
    assert compiled.explain().stats["eager_calls"] == 2 and compiled.explain().disabled


def test_graph_is_an_fx_graph_of_the_kernels():
    compiled = corenn.compile(lambda x: x.sin() + 1)
    compiled(corenn.ones(2))
    graph = compiled.graph
    assert isinstance(graph, corenn.fx.Graph)
    # what runs: the pointwise chain as one fused kernel
    assert [n.target.__name__ for n in graph.nodes if n.op == "call_function"] == ["fused_sin_add"]
    compiled = corenn.compile(lambda x: (x.sin() @ x).exp())
    compiled(corenn.ones(2, 2))
    assert [n.target.__name__ for n in compiled.graph.nodes if n.op == "call_function"] == ["sin", "matmul", "exp"]


def test_backends_and_their_errors():
    from corenn import compiler
    assert {"replay", "eager"} <= set(compiler.list_backends())
    numba_active = any(record.name == "numba" and record.status == "active"
                       for record in corenn.plugins.records.values())
    assert ("numba" in compiler.list_backends()) == numba_active
    # Without the plugin (or with it turned off) the error names the plugin to install.
    with corenn.plugins.disabled("numba") if numba_active else contextlib.nullcontext():
        with pytest.raises(RuntimeError, match="corenn-numba"):
            corenn.compile(lambda x: x, backend="numba")
    with pytest.raises(RuntimeError, match="unknown backend 'nope'"):
        corenn.compile(lambda x: x, backend="nope")
    with pytest.raises(TypeError, match="'backend'"):
        corenn.compile(lambda x: x, backend=3)


def test_corenn_register_compile_backends_hook():
    seen = []

    class Plugin:
        @corenn.hookimpl
        def corenn_register_compile_backends(self):
            def counting(program):
                seen.append(program.kernel_count)
                return program.replay
            return {"counting": counting}

    plugin = Plugin()
    corenn.plugins.register(plugin, name="test-compile-backend")
    try:
        assert "counting" in corenn.compiler.list_backends()
        compiled = corenn.compile(lambda x: x * 2 + 1, backend="counting")
        x = corenn.ones(2)
        compiled(x)
        assert _equal(compiled(x), x * 2 + 1) and seen == [2]
        with corenn.plugins.disabled("test-compile-backend"):  # a disabled plugin's backends are gone
            assert "counting" not in corenn.compiler.list_backends()
    finally:
        corenn.plugins.unregister("test-compile-backend")


def test_jit_surface():
    jit = corenn.jit
    assert jit.is_scripting() is False and jit.is_tracing() is False
    assert jit.ignore(len) is len and jit.unused(len) is len and jit.export(len) is len
    traced = jit.trace(lambda x, y: x * y + 1, (corenn.ones(2), corenn.ones(2)))
    assert traced.explain().stats["captures"] == 1
    assert _equal(traced(corenn.ones(2), corenn.full((2,), 3.0)), corenn.full((2,), 4.0))
    seen = []
    compiled = corenn.compile(lambda x: seen.append(jit.is_tracing()) or x)
    compiled(corenn.ones(1))
    assert seen == [True]
    with pytest.raises(NotImplementedError, match="jit.save"):
        jit.save(traced, "f.pt")
    with pytest.raises(TypeError, match="class"):
        jit.script(nn.Linear)
    module = jit.script(nn.Linear(2, 2))
    x = corenn.ones(1, 2)
    assert _equal(module(x), module(x)) and module.weight.shape == (2, 2)


def test_profiler_observers_see_every_op_of_a_compiled_call():
    compiled = corenn.compile(lambda x: x.sin() + 1)
    compiled(corenn.ones(2))
    seen = []

    class Observer:
        def op_start(self, op_name, device, arrays):
            seen.append(op_name)

        def op_end(self, op_name, device, out):
            pass

    with corenn.plugins.observe_ops(Observer()):
        compiled(corenn.ones(2))
    assert seen == ["sin", "add"]
