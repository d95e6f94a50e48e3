"""Module calls whose only hooks are global forward (pre-)hooks (``Module._call_with_global_forward_hooks``).

That path skips the module's own hook tables and the backward-hook set-up; every effect of
the hooks -- replaced args and outputs, kwargs, ``always_call`` when forward raises, order
against the module's own hooks -- must be PyTorch's.
"""
from __future__ import annotations

import warnings

import pytest

import corenn
from corenn.nn.modules import module as module_api


def run_program(lib, register_pre, register_post, kwargs_post_hook):
    class Scale(lib.nn.Module):
        def forward(self, x, *, factor=2.0):
            return x * factor

    seen = []
    net = lib.nn.Sequential(Scale(), Scale())
    handles = [
        register_pre(lambda m, args: (args[0] + 1) if type(m).__name__ == "Scale" else None),  # one value: wrapped
        register_post(lambda m, args, out: seen.append(("post", type(m).__name__)) or out - 1),
        register_post(kwargs_post_hook(seen), with_kwargs=True),
    ]
    try:
        first = net(lib.ones(2))
        second = Scale()(lib.ones(2), factor=3.0)
    finally:
        for handle in handles:
            handle.remove()
    return first.tolist(), second.tolist(), seen


def kwargs_post_hook(seen):
    def hook(module, args, kwargs, out):
        seen.append(("kwargs", type(module).__name__, sorted(kwargs)))
    return hook


@pytest.mark.torch
def test_replaced_args_outputs_and_kwargs_match_torch(torch):
    import torch.nn.modules.module as torch_module
    ours = run_program(corenn, module_api.register_module_forward_pre_hook, module_api.register_module_forward_hook,
                       kwargs_post_hook)
    theirs = run_program(torch, torch_module.register_module_forward_pre_hook,
                         torch_module.register_module_forward_hook, kwargs_post_hook)
    assert ours == theirs


class Failing(corenn.nn.Module):
    def forward(self, x):
        raise ValueError("boom")


def test_always_call_hooks_run_once_when_forward_raises_and_the_error_wins():
    calls = []
    handles = [module_api.register_module_forward_hook(lambda m, a, out: calls.append(("always", out)),
                                                       always_call=True),
               module_api.register_module_forward_hook(lambda m, a, out: calls.append(("normal", out)))]
    try:
        with pytest.raises(ValueError, match="boom"):
            Failing()(corenn.ones(1))
    finally:
        for handle in handles:
            handle.remove()
    assert calls == [("always", None)]


def test_an_always_call_hook_that_raises_in_forward_error_is_a_warning():
    def bad(module, args, out):
        raise KeyError("hook failed")

    with module_api.register_module_forward_hook(bad, always_call=True):
        with pytest.warns(UserWarning, match="hook failed"):
            with pytest.raises(ValueError, match="boom"):
                Failing()(corenn.ones(1))


def test_a_raising_forward_hook_runs_the_always_call_hooks_after_it_once():
    calls = []

    def raising(module, args, out):
        calls.append("raising")
        raise RuntimeError("hook error")

    handles = [module_api.register_module_forward_hook(lambda m, a, out: calls.append("always first"),
                                                       always_call=True),
               module_api.register_module_forward_hook(raising),
               module_api.register_module_forward_hook(lambda m, a, out: calls.append("always last"),
                                                       always_call=True)]
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            with pytest.raises(RuntimeError, match="hook error"):
                corenn.nn.Identity()(corenn.ones(1))
    finally:
        for handle in handles:
            handle.remove()
    assert calls == ["always first", "raising", "always last"]


def test_own_hooks_still_take_the_full_path_in_order():
    events = []
    layer = corenn.nn.Identity()
    layer.register_forward_pre_hook(lambda m, a: events.append("own pre"))
    layer.register_forward_hook(lambda m, a, o: events.append("own post"))
    with module_api.register_module_forward_pre_hook(lambda m, a: events.append("global pre")):
        with module_api.register_module_forward_hook(lambda m, a, o: events.append("global post")):
            layer(corenn.ones(1))
    assert events == ["global pre", "own pre", "global post", "own post"]
