"""corenn-numba as a plugin: turning it off and on, what ``python -m corenn`` shows, and the fallbacks.

The fallback tests run every overridden op on inputs the compiled code does not take
(float16, integers) with the plugin on and off: the override must hand them to the
core kernel, so the results are the core's exactly, forward and backward.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest

import corenn
import corenn.nn.functional as F
import corenn_numba
from corenn.dispatch import kernels
from corenn.kernels import core_kernels


def _overridden_ops() -> list[str]:
    return sorted({r.op for r in corenn_numba._registrations()})


def _run(code: str, **env) -> subprocess.CompletedProcess:
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                            env=dict(os.environ, **env))
    assert result.returncode == 0, result.stderr
    return result


def _cli(*args: str, **env) -> str:
    result = subprocess.run([sys.executable, "-m", "corenn", *args], capture_output=True, text=True, timeout=300,
                            env=dict(os.environ, **env))
    assert result.returncode == 0, result.stderr
    return result.stdout


# ---------------------------------------------------------------------------------------------------------
# off and on
# ---------------------------------------------------------------------------------------------------------

def test_every_override_replaces_a_core_kernel_of_the_same_op():
    ops = _overridden_ops()
    assert {"sgd_update", "adam_update"} <= set(ops)
    for registration in corenn_numba._registrations():
        core = core_kernels()[registration.op]
        assert issubclass(registration.kernel, core), f"{registration.op}: the override must subclass {core}"
        assert registration.device_type == "cpu" and registration.priority > 0


def test_disable_and_enable_switch_every_override_at_run_time():
    ops = _overridden_ops()
    assert corenn_numba.is_enabled()
    assert all(kernels.source_of(op, "cpu") == "numba" for op in ops)
    try:
        corenn_numba.disable()
        assert not corenn_numba.is_enabled()
        assert {op: kernels.source_of(op, "cpu") for op in ops} == {op: "corenn.ops" for op in ops}
        corenn_numba.disable()  # twice is harmless
    finally:
        corenn_numba.enable()
    corenn_numba.enable()  # enabling an enabled plugin registers nothing twice
    assert all(kernels.source_of(op, "cpu") == "numba" for op in ops)
    for op in ops:
        assert [r.source for r in kernels.registrations(op)].count("numba") == 1, op


def test_disable_goes_through_the_loader_so_the_plugins_listing_tells_the_truth():
    from io import StringIO
    from corenn.__main__ import main

    record = corenn.plugins.records["numba"]
    try:
        corenn_numba.disable()
        assert record.status == "disabled" and "corenn.plugins.disable('numba')" in record.reason
        out = StringIO()
        main(["plugins"], out=out)
        line = next(line for line in out.getvalue().splitlines() if line.startswith("numba "))
        assert "disabled: disabled at run time by corenn.plugins.disable('numba')" in line
        assert all(k["overrides"] == [] for k in record.to_dict()["kernels"])
        corenn.plugins.enable("numba")  # the loader's switch and the plugin's are one switch
        assert corenn_numba.is_enabled() and record.status == "active" and record.reason is None
        with corenn.plugins.disabled("numba"):
            assert not corenn_numba.is_enabled()
    finally:
        corenn_numba.enable()
    assert kernels.source_of("conv", "cpu") == "numba"


def test_after_unregister_enable_brings_nothing_back():
    code = ("import corenn, corenn_numba\n"
            "from corenn.dispatch import kernels\n"
            "corenn.plugins.unregister('numba')\n"
            "for switch in (corenn_numba.enable, corenn_numba.disable):\n"
            "    try:\n"
            "        switch()\n"
            "    except RuntimeError as error:\n"
            "        print(switch.__name__, 'refused:', error)\n"
            "print('conv from', kernels.source_of('conv', 'cpu'), 'numba kernels:',\n"
            "      sum(r.source == 'numba' for r in kernels.registrations()))\n")
    out = _run(code).stdout
    assert "enable refused: corenn-numba is not registered with corenn.plugins" in out
    assert "disable refused:" in out
    assert "conv from corenn.ops numba kernels: 0" in out


def test_disabled_block_restores_the_state_it_found():
    ops = _overridden_ops()
    with pytest.raises(KeyError):
        with corenn_numba.disabled():
            assert {op: kernels.source_of(op, "cpu") for op in ops} == {op: "corenn.ops" for op in ops}
            raise KeyError("an error inside the block")
    assert corenn_numba.is_enabled()
    assert all(kernels.source_of(op, "cpu") == "numba" for op in ops)
    try:
        corenn_numba.disable()
        with corenn_numba.disabled():
            pass
        assert not corenn_numba.is_enabled()  # it was off before the block: it stays off
    finally:
        corenn_numba.enable()


def test_the_environment_variable_turns_the_plugin_off_from_import():
    code = ("import json, corenn, corenn_numba\n"
            "from corenn.dispatch import kernels\n"
            "ops = sorted({r.op for r in corenn_numba._registrations()})\n"
            "before = {op: kernels.source_of(op, 'cpu') for op in ops}\n"
            "enabled = corenn_numba.is_enabled()\n"
            "corenn_numba.enable()\n"
            "after = {op: kernels.source_of(op, 'cpu') for op in ops}\n"
            "print(json.dumps([enabled, before, after]))\n")
    enabled, before, after = json.loads(_run(code, CORENN_NUMBA_DISABLE="1").stdout.splitlines()[-1])
    assert enabled is False
    assert set(before.values()) == {"corenn.ops"}
    assert set(after.values()) == {"numba"}
    enabled, before, _ = json.loads(_run(code, CORENN_NUMBA_DISABLE="0").stdout.splitlines()[-1])
    assert enabled is True and set(before.values()) == {"numba"}


def test_loading_the_plugin_does_not_import_numba_until_an_override_runs():
    # corenn loads every installed plugin at import; numba's own import costs ~0.5 s
    code = ("import sys, corenn, corenn_numba\n"
            "assert corenn_numba.is_enabled()\n"
            "loaded = 'numba' in sys.modules\n"
            "w = corenn.zeros(3, requires_grad=True)\n"
            "w.grad = corenn.ones(3)\n"
            "corenn.optim.SGD([w], lr=0.5).step()\n"
            "print(loaded, 'numba' in sys.modules, w.tolist())\n")
    assert _run(code).stdout.split() == ["False", "True", "[-0.5,", "-0.5,", "-0.5]"]


# ---------------------------------------------------------------------------------------------------------
# what python -m corenn shows
# ---------------------------------------------------------------------------------------------------------

def test_plugins_command_names_every_override():
    text = _cli("plugins")
    section = text[text.index("numba  corenn-numba"):]
    assert "active" in section.splitlines()[0]
    listed = " ".join(section.split())
    for op in _overridden_ops():
        assert f" {op}," in listed + "," or f" {op} " in listed, f"{op} not listed:\n{section}"

    summary = json.loads(_cli("plugins", "--json"))
    numba_plugin = next(p for p in summary["plugins"] if p["distribution"] == "corenn-numba")
    assert numba_plugin["status"] == "active"
    assert sorted(k["op"] for k in numba_plugin["kernels"]) == _overridden_ops()
    assert all(k["overrides"] == ["corenn.ops"] and k["device_type"] == "cpu" for k in numba_plugin["kernels"])


def test_plugins_command_with_the_plugin_disabled_says_so_and_lists_no_overrides():
    summary = json.loads(_cli("plugins", "--json", CORENN_NUMBA_DISABLE="1"))
    numba_plugin = next(p for p in summary["plugins"] if p["distribution"] == "corenn-numba")
    assert numba_plugin["status"] == "disabled" and numba_plugin["reason"] == "CORENN_NUMBA_DISABLE=1 is set"
    assert numba_plugin["kernels"] and all(k["overrides"] == [] for k in numba_plugin["kernels"])
    text = _cli("plugins", CORENN_NUMBA_DISABLE="1")
    assert "numba  corenn-numba 0.1.0  disabled: CORENN_NUMBA_DISABLE=1 is set" in text


def test_info_lines_say_numba_version_threads_cache_and_the_plugin_state():
    import numba
    text = _cli("info")
    line = next(line for line in text.splitlines() if line.strip().startswith(f"numba {numba.__version__}"))
    assert line.strip().startswith(f"numba {numba.__version__}, {numba.config.NUMBA_NUM_THREADS} threads")
    assert "cache:" in line and "malloc left as it is" in line  # nothing compiled ran in that process
    assert "numba (corenn-numba 0.1.0): active" in text
    disabled = _cli("info", CORENN_NUMBA_DISABLE="1")
    assert "numba (corenn-numba 0.1.0): disabled: CORENN_NUMBA_DISABLE=1 is set" in disabled


# ---------------------------------------------------------------------------------------------------------
# fallback: inputs the compiled code does not take give the core's results exactly
# ---------------------------------------------------------------------------------------------------------

def _floats(rng, shape, dtype=np.float16, grad=True):
    return corenn.tensor(rng.uniform(-1, 1, shape).astype(dtype), requires_grad=grad)


def _ints(rng, shape, high=10):
    return corenn.tensor(rng.integers(0, high, shape).astype(np.int64))


def _optimizer_case(factory):
    def case(rng):
        w = _floats(rng, (3, 4))
        opt = factory([w])
        for _ in range(2):
            w.grad = corenn.tensor(rng.uniform(-1, 1, (3, 4)).astype(np.float16))
            opt.step()
        return [w.detach()], []
    return case


# op name -> case(rng) returning (outputs, inputs that require grad), for inputs the compiled code does not take
FALLBACK_CASES = {
    "softmax": lambda rng: ([F.softmax(x := _floats(rng, (3, 5)), -1)], [x]),
    "relu": lambda rng: ([F.relu(x := _floats(rng, (3, 5))), F.relu(_ints(rng, (4,)) - 2)], [x]),
    "log_softmax": lambda rng: ([F.log_softmax(x := _floats(rng, (3, 5)), -1)], [x]),
    "cross_entropy": lambda rng: ([F.cross_entropy(x := _floats(rng, (4, 5)), _ints(rng, 4, 5),
                                                   label_smoothing=0.1)], [x]),
    "layer_norm": lambda rng: ([F.layer_norm(x := _floats(rng, (2, 3, 4)), (4,), w := _floats(rng, 4),
                                             b := _floats(rng, 4))], [x, w, b]),
    "batch_norm": lambda rng: ([F.batch_norm(x := _floats(rng, (4, 3, 2, 2)), corenn.zeros(3, dtype=corenn.float16),
                                             corenn.ones(3, dtype=corenn.float16), w := _floats(rng, 3),
                                             b := _floats(rng, 3), training=True)], [x, w, b]),
    "group_norm": lambda rng: ([F.group_norm(x := _floats(rng, (2, 4, 3)), 2, w := _floats(rng, 4),
                                             b := _floats(rng, 4))], [x, w, b]),
    "embedding": lambda rng: ([F.embedding(_ints(rng, (5,), 4), w := _floats(rng, (4, 3)))], [w]),
    "getitem": lambda rng: ([(x := _floats(rng, (4, 3)))[_ints(rng, (6,), 4)], _ints(rng, (4, 3))[_ints(rng, 5, 4)]],
                            [x]),
    "index_put": lambda rng: ([corenn.index_put(_ints(rng, (5,)), (_ints(rng, (6,), 5),), _ints(rng, (6,)),
                                                accumulate=True),
                               corenn.index_put(x := _floats(rng, (5,)), (_ints(rng, (6,), 5),),
                                                v := _floats(rng, 6), accumulate=True)], [x, v]),
    "gather": lambda rng: ([corenn.gather(x := _floats(rng, (3, 4)), 1, _ints(rng, (3, 5), 4)),
                            corenn.gather(_ints(rng, (3, 4)), 1, _ints(rng, (3, 5), 4))], [x]),
    "scatter": lambda rng: ([corenn.scatter_add(x := _floats(rng, (3, 4)), 1, _ints(rng, (3, 5), 4),
                                                s := _floats(rng, (3, 5))),
                             corenn.scatter_add(_ints(rng, (3, 4)), 1, _ints(rng, (3, 5), 4), _ints(rng, (3, 5)))],
                            [x, s]),
    "index_select": lambda rng: ([corenn.index_select(x := _floats(rng, (4, 3)), 0, _ints(rng, 6, 4)),
                                  corenn.index_select(_ints(rng, (4, 3)), 0, _ints(rng, 6, 4))], [x]),
    "index_add": lambda rng: ([corenn.index_add(x := _floats(rng, (4, 3)), 0, _ints(rng, 6, 4),
                                                s := _floats(rng, (6, 3))),
                               corenn.index_add(_ints(rng, (4, 3)), 0, _ints(rng, 6, 4), _ints(rng, (6, 3)))],
                              [x, s]),
    "pad_axis": lambda rng: ([F.pad(x := _floats(rng, (2, 3)), (1, 2)), F.pad(_ints(rng, (2, 3)), (2, 1))], [x]),
    "conv": lambda rng: ([F.conv2d(x := _floats(rng, (2, 2, 5, 5)), w := _floats(rng, (3, 2, 3, 3)),
                                   b := _floats(rng, 3), padding=1)], [x, w, b]),
    "conv_transpose": lambda rng: ([F.conv_transpose2d(x := _floats(rng, (2, 2, 4, 4)), w := _floats(rng, (2, 3, 3, 3)),
                                                       stride=2)], [x, w]),
    "max_pool": lambda rng: ([F.max_pool2d(x := _floats(rng, (2, 2, 4, 4)), 2)], [x]),
    "max_pool_with_indices": lambda rng: (list(F.max_pool2d(x := _floats(rng, (2, 2, 4, 4)), 2, return_indices=True)),
                                          [x]),
    "avg_pool": lambda rng: ([F.avg_pool2d(x := _floats(rng, (2, 2, 4, 4)), 2)], [x]),
    "adaptive_avg_pool": lambda rng: ([F.adaptive_avg_pool2d(x := _floats(rng, (2, 2, 5, 5)), 3)], [x]),
    "linear": lambda rng: ([F.linear(x := _floats(rng, (2, 3)), w := _floats(rng, (4, 3)), b := _floats(rng, 4))],
                           [x, w, b]),
    "sgd_update": _optimizer_case(lambda ps: corenn.optim.SGD(ps, lr=0.1, momentum=0.9, weight_decay=0.01)),
    "adam_update": _optimizer_case(lambda ps: corenn.optim.AdamW(ps, lr=0.1, amsgrad=True)),
}


def _run_case(op: str) -> list[np.ndarray]:
    """The case's outputs and the gradients of its inputs, as numpy arrays."""
    rng = np.random.default_rng(7)
    outputs, inputs = FALLBACK_CASES[op](rng)
    differentiable = [o for o in outputs if o.requires_grad]
    if differentiable:
        total = None
        for o in differentiable:  # a random weighting, so that softmax's gradient is not just zero
            term = (o * corenn.tensor(rng.uniform(0.5, 1.5, tuple(o.shape)).astype(o.detach().numpy().dtype))).sum()
            total = term if total is None else total + term
        total.backward()
    return [o.detach().numpy().copy() for o in outputs] + [x.grad.numpy().copy() for x in inputs]


def test_every_override_has_a_fallback_case():
    missing = sorted(set(_overridden_ops()) - set(FALLBACK_CASES))
    assert not missing, f"overrides without a float16/integer fallback case in FALLBACK_CASES: {missing}"


@pytest.mark.parametrize("op", sorted(FALLBACK_CASES))
def test_inputs_the_compiled_code_does_not_take_give_the_core_results(op):
    if op not in _overridden_ops():
        pytest.skip(f"corenn-numba does not override {op!r} (yet)")
    with_plugin = _run_case(op)
    try:
        corenn_numba.disable()
        core = _run_case(op)
    finally:
        corenn_numba.enable()
    assert len(with_plugin) == len(core)
    for got, expected in zip(with_plugin, core):
        assert got.dtype == expected.dtype and got.dtype in (np.float16, np.int64), got.dtype
        np.testing.assert_array_equal(got, expected)
