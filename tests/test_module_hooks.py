"""Module hooks: forward pre/post hooks, full backward (pre) hooks, global hooks, handles, ordering.

Oracle tests build the same modules in PyTorch and corenn (weights copied through
numpy) and compare outputs, gradients and the order in which hooks run.
"""
import warnings

import numpy as np
import pytest

import corenn
from corenn import nn
from corenn.nn import module_hooks


def module_classes(lib):
    """The same small modules written against ``lib`` (torch or corenn)."""

    class Affine(lib.nn.Module):
        def __init__(self, n):
            super().__init__()
            self.weight = lib.nn.Parameter(lib.ones(n) * 0.5)
            self.bias = lib.nn.Parameter(lib.zeros(n))

        def forward(self, x):
            return x * self.weight + self.bias

    class TwoInTwoOut(lib.nn.Module):
        def __init__(self, n):
            super().__init__()
            self.scale = lib.nn.Parameter(lib.ones(n) * 2.0)

        def forward(self, a, b, c=None):
            return a * self.scale + b * b, (a * b).sum()

    class Chain(lib.nn.Module):
        def __init__(self, n):
            super().__init__()
            self.first = Affine(n)
            self.second = TwoInTwoOut(n)

        def forward(self, x, y):
            h = self.first(x)
            out, total = self.second(h, y)
            return out.sum() + total

    return Affine, TwoInTwoOut, Chain


def copy_weights(source_torch, target):
    params = dict(target.named_parameters())
    for name, p in source_torch.named_parameters():
        params[name].data = corenn.tensor(p.detach().numpy())


def pair(torch, cls_index, *args):
    torch.manual_seed(0)
    t_module = module_classes(torch)[cls_index](*args)
    c_module = module_classes(corenn)[cls_index](*args)
    copy_weights(t_module, c_module)
    return t_module, c_module


def grads_of(tensors):
    return [None if t.grad is None else t.grad.detach().numpy().copy() for t in tensors]


def assert_close_lists(a, b):
    assert len(a) == len(b)
    for x, y in zip(a, b):
        if x is None or y is None:
            assert x is None and y is None
        else:
            np.testing.assert_allclose(np.asarray(x), np.asarray(y), rtol=1e-5, atol=1e-6)


def as_numpy(value):
    if value is None:
        return None
    return value.detach().numpy().copy()


# -- forward hooks ----------------------------------------------------------------------------------------

def test_forward_pre_hook_replaces_input_and_forward_hook_output():
    Affine = module_classes(corenn)[0]
    m = Affine(2)
    x = corenn.tensor([1.0, 2.0])
    h1 = m.register_forward_pre_hook(lambda mod, args: args[0] + 1.0)   # single value -> wrapped in a tuple
    assert m(x).tolist() == [1.0, 1.5]
    h2 = m.register_forward_hook(lambda mod, args, out: out + args[0])
    assert m(x).tolist() == [3.0, 4.5]  # inputs seen by the forward hook are the replaced ones
    h1.remove()
    h2.remove()
    assert m(x).tolist() == [0.5, 1.0]


def test_hook_handles_are_context_managers_and_remove_twice_is_harmless():
    Affine = module_classes(corenn)[0]
    m = Affine(1)
    calls = []
    with m.register_forward_hook(lambda *a: calls.append(1)) as handle:
        m(corenn.ones(1))
    m(corenn.ones(1))
    handle.remove()
    assert calls == [1]
    assert not m._forward_hooks and not m._forward_hooks_with_kwargs


class RecordingPreHook:
    """A picklable forward pre-hook (a lambda would not pickle)."""

    def __call__(self, module, args):
        return None


def test_hook_handles_pickle_and_deepcopy_with_their_module():
    import copy
    import pickle

    from corenn.utils.hooks import RemovableHandle
    m = nn.Identity()
    handle = m.register_forward_pre_hook(RecordingPreHook(), with_kwargs=True)
    for m_copy, handle_copy in (copy.deepcopy((m, handle)), pickle.loads(pickle.dumps((m, handle)))):
        assert handle_copy.id == handle.id and len(m_copy._forward_pre_hooks) == 1
        handle_copy.remove()   # removes the copy's hook and its with_kwargs flag, not the original's
        assert not m_copy._forward_pre_hooks and not m_copy._forward_pre_hooks_with_kwargs
        assert len(m._forward_pre_hooks) == 1 and len(m._forward_pre_hooks_with_kwargs) == 1
    # Ids of unpickled handles are never handed out again in this process.
    state = (m._forward_pre_hooks, RemovableHandle.next_id + 100, ())
    unpickled = RemovableHandle.__new__(RemovableHandle)
    unpickled.__setstate__(state)
    assert m.register_forward_hook(RecordingPreHook()).id > unpickled.id
    handle.remove()
    assert not m._forward_pre_hooks


def test_with_kwargs_hooks():
    TwoInTwoOut = module_classes(corenn)[1]
    m = TwoInTwoOut(2)
    seen = {}

    def pre(mod, args, kwargs):
        seen["pre"] = dict(kwargs)
        return (args[0] * 0, args[1]), {"c": "changed"}

    def post(mod, args, kwargs, output):
        seen["post"] = dict(kwargs)
        return output[0]

    m.register_forward_pre_hook(pre, with_kwargs=True)
    m.register_forward_hook(post, with_kwargs=True)
    out = m(corenn.ones(2), corenn.full((2,), 3.0), c="given")
    assert seen == {"pre": {"c": "given"}, "post": {"c": "changed"}}
    assert out.tolist() == [9.0, 9.0]


def test_bad_pre_hook_result_with_kwargs_is_a_clear_error():
    m = module_classes(corenn)[0](1)
    m.register_forward_pre_hook(lambda mod, args, kwargs: 5, with_kwargs=True)
    with pytest.raises(RuntimeError, match=r"must return None or a tuple of \(new_args, new_kwargs\)"):
        m(corenn.ones(1))


def test_hook_must_be_callable():
    with pytest.raises(TypeError, match="hook must be callable"):
        module_classes(corenn)[0](1).register_forward_hook(3)


def test_always_call_runs_when_forward_raises():
    class Failing(nn.Module):
        def forward(self, x):
            raise ValueError("boom")

    m = Failing()
    calls = []
    m.register_forward_hook(lambda mod, args, out: calls.append(("always", out)), always_call=True)
    m.register_forward_hook(lambda mod, args, out: calls.append(("normal", out)))
    with pytest.raises(ValueError, match="boom"):
        m(corenn.ones(1))
    assert calls == [("always", None)]


def test_always_call_hook_that_raises_is_reported_and_original_error_kept():
    class Failing(nn.Module):
        def forward(self, x):
            raise ValueError("boom")

    m = Failing()

    def bad(mod, args, out):
        raise KeyError("hook failed")

    m.register_forward_hook(bad, always_call=True)
    with pytest.warns(UserWarning, match="hook failed"):
        with pytest.raises(ValueError, match="boom"):
            m(corenn.ones(1))


def test_no_hooks_fast_path_calls_forward_directly():
    m = module_classes(corenn)[0](2)
    calls = []
    original = type(m)._call_with_hooks

    def spy(self, args, kwargs):
        calls.append(1)
        return original(self, args, kwargs)

    type(m)._call_with_hooks = spy
    try:
        m(corenn.ones(2))
        assert calls == []
        with m.register_forward_hook(lambda *a: None):
            m(corenn.ones(2))
        assert calls == [1]
    finally:
        type(m)._call_with_hooks = original


def _record_order(lib, register_global_pre, register_global, events):
    Affine, _, _ = module_classes(lib)
    outer = lib.nn.Sequential(Affine(2))
    inner = outer[0]
    inner.register_forward_pre_hook(lambda m, a: events.append("pre-1"))
    inner.register_forward_pre_hook(lambda m, a: events.append("pre-0"), prepend=True)
    inner.register_forward_pre_hook(lambda m, a, k: events.append("pre-kw"), with_kwargs=True)
    inner.register_forward_hook(lambda m, a, o: events.append("post-1"))
    inner.register_forward_hook(lambda m, a, o: events.append("post-0"), prepend=True)
    inner.register_forward_hook(lambda m, a, k, o: events.append("post-kw"), with_kwargs=True)
    handles = [register_global_pre(lambda m, a: events.append(f"global-pre:{type(m).__name__}")),
               register_global(lambda m, a, o: events.append(f"global-post:{type(m).__name__}"))]
    try:
        outer(lib.ones(2))
    finally:
        for h in handles:
            h.remove()


@pytest.mark.torch
def test_forward_hook_order_matches_torch(torch):
    import torch.nn.modules.module as tmm
    expected, actual = [], []
    _record_order(torch, tmm.register_module_forward_pre_hook, tmm.register_module_forward_hook, expected)
    _record_order(corenn, module_hooks.register_module_forward_pre_hook,
                  module_hooks.register_module_forward_hook, actual)
    assert actual == expected
    assert actual[:2] == ["global-pre:Sequential", "global-pre:Affine"]


def test_global_forward_hooks_apply_to_every_module_and_remove():
    Affine, _, _ = module_classes(corenn)
    net = nn.Sequential(Affine(1), Affine(1))
    with module_hooks.register_module_forward_hook(lambda m, args, out: out * 10):
        out = net(corenn.ones(1))
    # each Affine output *10, then Sequential's output *10: ((1*.5)*10*.5)*10*10
    assert out.item() == pytest.approx(250.0)
    assert net(corenn.ones(1)).item() == pytest.approx(0.25)
    assert not module_hooks._global_forward_hooks


# -- backward hooks ----------------------------------------------------------------------------------------

def test_seed_backward_hook_gives_42():
    corenn.manual_seed(1)
    m = module_classes(corenn)[0](3)
    x = corenn.randn(2, 3, requires_grad=True)
    m.register_full_backward_hook(lambda mod, gi, go: [corenn.ones_like(g) * 42.0 for g in gi])
    m(x).sum().backward()
    assert x.grad.tolist() == [[42.0] * 3] * 2
    assert m.weight.grad is not None  # parameter gradients are untouched by grad_input replacement
    np.testing.assert_allclose(m.weight.grad.numpy(), x.detach().sum(0).numpy(), rtol=1e-6)


def test_backward_hook_wrong_number_of_grads_is_a_clear_error():
    m = module_classes(corenn)[0](3)
    m.register_full_backward_hook(lambda mod, gi, go: (gi[0], gi[0]))
    with pytest.raises(RuntimeError, match="Backward hook returned an invalid number of grad_input, got 2, but "
                                           "expected 1"):
        m(corenn.randn(3, requires_grad=True)).sum().backward()


def test_backward_pre_hook_wrong_number_is_a_clear_error():
    m = module_classes(corenn)[0](3)
    m.register_full_backward_pre_hook(lambda mod, go: (go[0], go[0]))
    with pytest.raises(RuntimeError, match="Backward pre hook returned an invalid number of grad_output"):
        m(corenn.randn(3, requires_grad=True)).sum().backward()


def test_cannot_register_old_style_backward_hook():
    with pytest.raises(NotImplementedError, match="register_full_backward_hook"):
        module_classes(corenn)[0](1).register_backward_hook(lambda *a: None)


def _run_backward_scenario(lib, register_global_pre, register_global):
    """Multiple inputs/outputs, a non-tensor arg, nested modules, global and local hooks; returns the record."""
    Affine, TwoInTwoOut, Chain = module_classes(lib)
    lib.manual_seed(0)
    chain = Chain(3)
    events = []

    def describe(grads):
        return tuple(None if g is None else as_numpy(g) for g in grads)

    def local_hook(name):
        def hook(mod, grad_input, grad_output):
            events.append((name, "hook", describe(grad_input), describe(grad_output)))
        return hook

    def local_pre_hook(name):
        def hook(mod, grad_output):
            events.append((name, "pre", describe(grad_output)))
        return hook

    def doubling_pre_hook(mod, grad_output):
        # replace grad_output: doubles what flows into TwoInTwoOut's forward
        return tuple(None if g is None else g * 2 for g in grad_output)

    def replace_second_input(mod, grad_input, grad_output):
        return (grad_input[0], None if grad_input[1] is None else grad_input[1] * 0 + 7.0)

    chain.second.register_full_backward_pre_hook(local_pre_hook("second"))
    chain.second.register_full_backward_pre_hook(doubling_pre_hook)
    chain.second.register_full_backward_hook(local_hook("second"))
    chain.second.register_full_backward_hook(replace_second_input)
    chain.first.register_full_backward_hook(local_hook("first"))
    chain.register_full_backward_hook(local_hook("chain"))
    handles = [register_global_pre(lambda m, go: events.append((type(m).__name__, "global-pre"))),
               register_global(lambda m, gi, go: events.append((type(m).__name__, "global-hook")))]
    x = lib.tensor([1.0, -2.0, 3.0], requires_grad=True)
    y = lib.tensor([0.5, 0.25, -1.0], requires_grad=True)
    try:
        out = chain(x, y)
        out.backward()
    finally:
        for h in handles:
            h.remove()
    params = [p for _, p in chain.named_parameters()]
    return events, grads_of([x, y] + params), as_numpy(out)


@pytest.mark.torch
def test_backward_hooks_match_torch_multiple_inputs_outputs(torch):
    import torch.nn.modules.module as tmm
    t_events, t_grads, t_out = _run_backward_scenario(torch, tmm.register_module_full_backward_pre_hook,
                                                      tmm.register_module_full_backward_hook)
    c_events, c_grads, c_out = _run_backward_scenario(corenn, module_hooks.register_module_full_backward_pre_hook,
                                                      module_hooks.register_module_full_backward_hook)
    np.testing.assert_allclose(c_out, t_out, rtol=1e-6)
    assert_close_lists(c_grads, t_grads)
    assert [e[:2] for e in c_events] == [e[:2] for e in t_events]
    assert len(c_events) == 10
    for c, t in zip(c_events, t_events):
        for c_part, t_part in zip(c[2:], t[2:]):
            assert_close_lists(list(c_part), list(t_part))
    # y's gradient was replaced by the hook on `second` (7.0 per element), x's was not
    assert c_grads[1].tolist() == [7.0, 7.0, 7.0]


@pytest.mark.torch
def test_backward_hook_when_no_input_requires_grad_matches_torch(torch):
    results = {}
    for lib in (torch, corenn):
        m = module_classes(lib)[0](2)
        seen = []
        m.register_full_backward_hook(lambda mod, gi, go: seen.append((gi, as_numpy(go[0]))))
        with pytest.warns(UserWarning, match="no inputs require gradients"):
            m(lib.ones(2)).sum().backward()
        results[lib.__name__] = seen
    (t_gi, t_go), = results["torch"]
    (c_gi, c_go), = results["corenn"]
    assert c_gi == t_gi == (None,)
    np.testing.assert_allclose(c_go, t_go)


def test_backward_hook_not_set_up_without_grad():
    m = module_classes(corenn)[0](2)
    calls = []
    m.register_full_backward_hook(lambda *a: calls.append(1))
    with corenn.no_grad():
        out = m(corenn.ones(2, requires_grad=True))
    assert out.grad_fn is None and calls == []


def test_backward_hook_removal():
    m = module_classes(corenn)[0](2)
    calls = []
    handle = m.register_full_backward_hook(lambda *a: calls.append(1))
    x = corenn.ones(2, requires_grad=True)
    m(x).sum().backward()
    handle.remove()
    m(x).sum().backward()
    assert calls == [1]


def test_non_tensor_output_warns_and_skips_backward_hooks():
    class ReturnsDict(nn.Module):
        def forward(self, x):
            return {"y": x * 2}

    m = ReturnsDict()
    m.register_full_backward_hook(lambda *a: None)
    with pytest.warns(UserWarning, match="module output should be a Tensor or a tuple of Tensors"):
        m(corenn.ones(1, requires_grad=True))


def test_registration_hooks():
    seen = []
    with module_hooks.register_module_parameter_registration_hook(lambda m, n, p: seen.append(("param", n))), \
            module_hooks.register_module_buffer_registration_hook(lambda m, n, b: seen.append(("buffer", n))), \
            module_hooks.register_module_module_registration_hook(lambda m, n, s: seen.append(("module", n))):
        m = nn.Module()
        m.w = nn.Parameter(corenn.zeros(1))
        m.register_buffer("b", corenn.zeros(1))
        m.sub = nn.Module()
    m.other = nn.Module()
    assert seen == [("param", "w"), ("buffer", "b"), ("module", "sub")]


def test_hooks_survive_deepcopy_and_warnings_free_call():
    import copy
    m = module_classes(corenn)[0](1)
    m.register_forward_hook(lambda mod, args, out: out * 0)
    c = copy.deepcopy(m)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert c(corenn.ones(1)).item() == 0.0
