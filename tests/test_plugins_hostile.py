"""A broken plugin never breaks the core: plugin code that exits, raises or misbehaves at import, in a hook,
as an op observer, a module-state handler, an FX leaf rule or a kernel is named, contained and reported.

Loading is tested in fresh interpreters with installed entry points (the helpers of
test_plugins_entry_points.py): entry points load at ``import corenn``. What plugins do at
run time is tested in-process with plugins registered for one test.
"""
from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import warnings

import numpy as np
import pytest

import corenn
import corenn.nn.functional as F
from corenn import dispatch, plugins
from corenn.__main__ import cmd_plugins
from corenn.autograd.node import Op
from corenn.dispatch import KernelRegistration
from corenn.kernels import KernelOverride, core_kernel
from corenn.testing import register_plugin

from test_plugins_entry_points import TOY_PLUGIN, run_python, write_distribution


@pytest.fixture(autouse=True)
def _core_relu_underneath():
    """These tests put their own relu kernels over the core's and expect the core's back when one is detached; a
    plugin that overrides relu too (corenn-numba) is switched off around each test."""
    records = [r for r in plugins.records.values() if r.status == "active" and r.name != "corenn.ops"
               and any(registration.op == "relu" for registration in r.kernels)]
    if not records:
        yield
        return
    with plugins.disabled(records[0].name):
        yield


# -- plugins that exit or raise BaseException while loading --------------------------------------------------------

EXITS_AT_IMPORT = '''
import sys
sys.exit(3)
'''

EXITS_WITHOUT_CODE_AT_IMPORT = '''
import sys
sys.exit()
'''

ABORT_CLASS = '''
class Abort(BaseException):
    """Not an Exception: a bare ``except Exception`` lets it through."""
'''

RAISES_BASE_EXCEPTION_AT_IMPORT = ABORT_CLASS + '''
raise Abort("license server unreachable")
'''

EXITS_IN_A_HOOK = '''
import sys

import corenn


@corenn.hookimpl
def corenn_register_kernels():
    sys.exit("no kernels today")
'''

RAISES_BASE_EXCEPTION_IN_A_HOOK = ABORT_CLASS + '''
import corenn


@corenn.hookimpl
def corenn_add_hookspecs(plugin_manager):
    raise Abort("refusing to add hookspecs")
'''

RAISES_GENERATOR_EXIT_IN_A_HOOK = '''
import corenn


@corenn.hookimpl
def corenn_info_lines():
    return ["fine"]


@corenn.hookimpl
def corenn_register_backends():
    raise GeneratorExit("stray GeneratorExit")
'''

HOSTILE = {
    "exits": EXITS_AT_IMPORT,
    "exits_quietly": EXITS_WITHOUT_CODE_AT_IMPORT,
    "aborts": RAISES_BASE_EXCEPTION_AT_IMPORT,
    "exits_in_hook": EXITS_IN_A_HOOK,
    "aborts_in_hook": RAISES_BASE_EXCEPTION_IN_A_HOOK,
    "generator_exit": RAISES_GENERATOR_EXIT_IN_A_HOOK,
}

REASONS = {
    "exits": "import failed: SystemExit: 3 (the plugin called sys.exit())",
    "exits_quietly": "import failed: SystemExit (the plugin called sys.exit())",
    "aborts": "import failed: corenn_hostile.aborts.Abort: license server unreachable",
    "exits_in_hook": "SystemExit: no kernels today (the plugin called sys.exit())",
    "aborts_in_hook": "corenn_hostile.aborts_in_hook.Abort: refusing to add hookspecs",
    "generator_exit": "GeneratorExit: stray GeneratorExit",
}


@pytest.fixture
def hostile_site(tmp_path):
    """A working toy-device plugin and a distribution whose plugins exit or raise BaseException."""
    write_distribution(tmp_path, "corenn-toy", "1.2.3", {"toy": "corenn_toy"}, {"corenn_toy/__init__.py": TOY_PLUGIN})
    modules = {"corenn_hostile/__init__.py": ""}
    modules.update({f"corenn_hostile/{name}.py": source for name, source in HOSTILE.items()})
    write_distribution(tmp_path, "corenn-hostile", "0.1", {name: f"corenn_hostile.{name}" for name in HOSTILE},
                       modules)
    return tmp_path


LOAD_AND_USE = """
import json, warnings
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    import corenn
x = corenn.tensor([-1.0, 2.0], device="toy", requires_grad=True)
x.relu().sum().backward()
print(json.dumps({
    "records": {r.name: [r.status, r.reason] for r in corenn.plugins.list_plugins()},
    "warnings": [str(w.message) for w in caught if issubclass(w.category, corenn.plugins.PluginWarning)],
    "core_works": (corenn.ones(2) * 3).tolist(),
    "toy_works": x.grad.cpu().tolist(),
}))
"""


def test_a_plugin_that_exits_or_raises_base_exception_while_loading_is_named_and_skipped(hostile_site):
    result = run_python(LOAD_AND_USE, hostile_site)
    assert result.returncode == 0, result.stderr  # before: exit status 3, nothing printed, no plugin named
    found = json.loads(result.stdout)
    assert found["core_works"] == [3.0, 3.0]
    assert found["toy_works"] == [0.0, 1.0]
    assert found["records"]["toy"] == ["active", None]
    for name, reason in REASONS.items():
        assert found["records"][name] == ["failed", reason], name
    assert sorted(found["warnings"]) == sorted(
        f"corenn plugin {name!r} (distribution corenn-hostile) failed and was skipped: {reason}"
        for name, reason in REASONS.items())


def _environment(site, **env) -> dict:
    environment = {k: v for k, v in os.environ.items() if not k.startswith("CORENN_")}
    environment["PYTHONPATH"] = str(site)
    environment.update(env)
    return environment


def _corenn_command(site, *args, **env) -> subprocess.CompletedProcess:
    # cwd is the temporary site: a corenn checkout's own *.egg-info must not shadow the installed metadata.
    return subprocess.run([sys.executable, "-m", "corenn", *args], capture_output=True, text=True,
                          env=_environment(site, **env), cwd=site, timeout=120)


def test_python_m_corenn_plugins_and_info_list_a_plugin_that_exits(hostile_site):
    listing = _corenn_command(hostile_site, "plugins", CORENN_PLUGINS="exits,aborts_in_hook,toy")
    assert listing.returncode == 0, listing.stderr  # before: exit status 3 and no output at all
    assert f"exits  corenn-hostile 0.1  failed: {REASONS['exits']}" in listing.stdout
    assert f"aborts_in_hook  corenn-hostile 0.1  failed: {REASONS['aborts_in_hook']}" in listing.stdout
    assert "toy  corenn-toy 1.2.3  active" in listing.stdout
    assert "corenn plugin 'exits' (distribution corenn-hostile) failed and was skipped" in listing.stderr
    info = _corenn_command(hostile_site, "info", CORENN_PLUGINS="exits,aborts_in_hook,toy")
    assert info.returncode == 0, info.stderr
    assert f"exits (corenn-hostile 0.1): failed: {REASONS['exits']}" in info.stdout


@pytest.mark.parametrize("name", ["exits", "aborts", "exits_in_hook", "aborts_in_hook"])
def test_strict_mode_raises_plugin_error_naming_the_plugin_that_exits(hostile_site, name):
    result = run_python("import corenn", hostile_site, CORENN_PLUGINS=name, CORENN_STRICT_PLUGINS="1")
    assert result.returncode == 1
    last = result.stderr.strip().splitlines()[-1]
    assert last == (f"corenn.plugins.PluginError: corenn plugin {name!r} (distribution corenn-hostile) failed: "
                    f"{REASONS[name]} [CORENN_STRICT_PLUGINS is set]")


def test_keyboard_interrupt_while_a_plugin_loads_still_stops_the_import(tmp_path):
    write_distribution(tmp_path, "corenn-ctrl-c", "0.1", {"ctrl_c": "corenn_ctrl_c"},
                       {"corenn_ctrl_c/__init__.py": "raise KeyboardInterrupt\n"})
    result = run_python("import corenn\nprint('imported')", tmp_path)
    assert result.returncode != 0 and "imported" not in result.stdout
    assert result.stderr.strip().splitlines()[-1] == "KeyboardInterrupt"


def test_a_run_time_plugin_whose_hook_exits_is_contained():
    class ExitsInHook:
        @corenn.hookimpl
        def corenn_register_kernels(self):
            raise SystemExit(2)
    with pytest.warns(plugins.PluginWarning, match=r"corenn plugin 'exits' \(registered at run time\) failed and "
                                                   r"was skipped: SystemExit: 2 \(the plugin called sys.exit\(\)\)"):
        with register_plugin(ExitsInHook(), name="exits", allow_failure=True) as record:
            assert record.status == "failed"
    assert (corenn.ones(2) + 1).tolist() == [2.0, 2.0]


def test_registering_a_lazy_plugin_module_imports_none_of_its_lazy_parts():
    # A plugin module that loads its heavy parts in a module __getattr__ (corenn-profiler, corenn-quantize)
    # must stay light when corenn registers it, whatever pluggy's version (before 1.7, pluggy's own
    # lookup called getattr on every name dir() lists).
    import types
    asked = []
    lazy = types.ModuleType("lazy_plugin")
    lazy.corenn_info_lines = corenn.hookimpl(lambda: ["lazy plugin"])

    def module_getattr(name):
        asked.append(name)
        raise AttributeError(name)
    lazy.__getattr__ = module_getattr
    lazy.__dir__ = lambda: ["corenn_info_lines", "HeavyClass", "heavy_function"]
    with register_plugin(lazy, name="lazy") as record:
        assert record.status == "active", record.reason
        assert ["lazy plugin"] in [lines for r, lines in plugins.info_lines() if r.name == "lazy"]
    assert not [name for name in asked if not name.startswith("corenn_")], asked


def test_info_lines_that_exit_give_a_line_naming_the_error():
    class ExitsInInfo:
        @corenn.hookimpl
        def corenn_info_lines(self):
            raise SystemExit("bye")
    with register_plugin(ExitsInInfo(), name="exits_in_info") as record:
        lines = {r.name: lines for r, lines in plugins.info_lines()}
    assert lines["exits_in_info"] == ["(corenn_info_lines failed: SystemExit: bye (the plugin called sys.exit()))"]
    assert record.status == "active"


# -- plugin code that fails at run time: op observers, module-state handlers, FX leaf rules ---------------------------

class Broken(Exception):
    pass


class Observer:
    """Logs calls; raises ``error`` from ``fails_in`` ("op_start" or "op_end")."""

    def __init__(self, log, tag, fails_in=None, error=None):
        self.log, self.tag, self.fails_in, self.error = log, tag, fails_in, error

    def op_start(self, op_name, device, arrays):
        self.log.append(f"{self.tag}-start")
        if self.fails_in == "op_start":
            raise self.error

    def op_end(self, op_name, device, out):
        self.log.append(f"{self.tag}-end")
        if self.fails_in == "op_end":
            raise self.error


class ObserverPlugin:
    def __init__(self, *observers):
        self.observers = list(observers)

    @corenn.hookimpl
    def corenn_op_observers(self):
        return self.observers


@pytest.mark.parametrize("fails_in", ["op_start", "op_end"])
@pytest.mark.parametrize("error", [Broken("profiler buffer full"), SystemExit(4)], ids=["Exception", "SystemExit"])
def test_a_failing_plugin_observer_is_detached_with_one_warning_and_ops_go_on(fails_in, error):
    """An observer from corenn_op_observers that raises (even SystemExit) no longer fails every op."""
    log = []
    bad = Observer(log, "bad", fails_in, error)
    good = Observer(log, "good")
    with register_plugin(ObserverPlugin(good, bad), name="fake-profiler") as record:
        with pytest.warns(plugins.PluginWarning) as caught:
            y = corenn.ones(2) + 1  # before: every op raised the observer's error
        assert y.tolist() == [2.0, 2.0]
        (message,) = [str(w.message) for w in caught]
        assert message.startswith(f"corenn plugin 'fake-profiler' (registered at run time): its op observer Observer "
                                  f"raised in {fails_in} (op 'add'): ")
        assert message.endswith("; the observer was detached, the op went on")
        assert all(o is not bad for o in dispatch.observers) and record.op_observers == [good]
        assert record.detached == [message.split(": ", 1)[1]]
        assert record.status == "active"
        # The good observer saw a complete op either way: op_start and op_end stay paired.
        assert log.count("good-start") == log.count("good-end") == 1
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            corenn.ones(2).exp()  # no second warning: the observer is gone
        assert log.count("good-start") == 2 and log.count("bad-start") == 1
        assert record.to_dict()["detached"] == record.detached
        listing = io.StringIO()
        cmd_plugins(False, listing)
        assert f"fake-profiler  (registered at run time)  active\n  hooks: corenn_op_observers\n  op observers: 1\n" \
               f"  detached: {record.detached[0]}\n" in listing.getvalue()
        plugins.disable("fake-profiler")
        plugins.enable("fake-profiler")  # a detached observer does not come back with enable()
        assert all(o is not bad for o in dispatch.observers)


def test_a_failing_plugin_observer_in_strict_mode_raises_plugin_error_once(monkeypatch):
    monkeypatch.setenv("CORENN_STRICT_PLUGINS", "1")
    bad = Observer([], "bad", "op_start", Broken("profiler buffer full"))
    with register_plugin(ObserverPlugin(bad), name="fake-profiler"):
        with pytest.raises(plugins.PluginError, match=r"corenn plugin 'fake-profiler' \(registered at run time\): its op "
                                                      r"observer Observer raised in op_start \(op 'add'\): .*Broken: "
                                                      r"profiler buffer full") as raised:
            corenn.ones(2) + 1
        assert isinstance(raised.value.__cause__, Broken)
        assert (corenn.ones(2) + 1).tolist() == [2.0, 2.0]  # detached all the same


def test_user_observers_errors_still_propagate_and_keyboard_interrupt_from_a_plugin_too():
    with pytest.raises(Broken):
        with plugins.observe_ops(Observer([], "user", "op_start", Broken("mine"))):
            corenn.ones(2) + 1
    interrupting = Observer([], "bad", "op_start", KeyboardInterrupt())
    with register_plugin(ObserverPlugin(interrupting), name="fake-profiler") as record:
        with pytest.raises(KeyboardInterrupt):
            corenn.ones(2) + 1
        assert record.op_observers == [interrupting] and record.detached == []


class StateHandler:
    def __init__(self, fails_in):
        self.fails_in = fails_in
        self.calls = 0

    def state_dict_post(self, module, state_dict, prefix):
        self.calls += 1
        if self.fails_in == "state_dict_post":
            raise Broken("cannot serialise the mask")

    def load_state_dict_pre(self, module, state_dict, prefix):
        self.calls += 1
        if self.fails_in == "load_state_dict_pre":
            raise SystemExit("mask format unknown")


class StatePlugin:
    def __init__(self, handler):
        self.handler = handler

    @corenn.hookimpl
    def corenn_module_state_handlers(self):
        return [self.handler]


@pytest.mark.parametrize("fails_in", ["state_dict_post", "load_state_dict_pre"])
def test_a_failing_module_state_handler_is_detached_and_state_dict_works(fails_in):
    """A handler from corenn_module_state_handlers that raises no longer breaks every model's state dicts."""
    model = corenn.nn.Sequential(corenn.nn.Linear(3, 2), corenn.nn.ReLU())
    handler = StateHandler(fails_in)
    with register_plugin(StatePlugin(handler), name="masks") as record:
        with pytest.warns(plugins.PluginWarning, match=f"corenn plugin 'masks' .*its module-state handler StateHandler "
                                                       f"raised in {fails_in}"):
            state = model.state_dict()  # before: state_dict() raised the handler's error, for every model
            model.load_state_dict(state)
        assert list(state) == ["0.weight", "0.bias"]
        assert record.state_handlers == [] and plugins.module_state_handlers() == []
        calls = handler.calls
        model.load_state_dict(model.state_dict())
        assert handler.calls == calls  # detached: not called again
        assert len(record.detached) == 1


def test_a_failing_module_state_handler_in_strict_mode_raises(monkeypatch):
    monkeypatch.setenv("CORENN_STRICT_PLUGINS", "1")
    model = corenn.nn.Linear(3, 2)
    with register_plugin(StatePlugin(StateHandler("state_dict_post")), name="masks"):
        with pytest.raises(plugins.PluginError, match="corenn plugin 'masks'.*cannot serialise the mask"):
            model.state_dict()
        assert list(model.state_dict()) == ["weight", "bias"]


def test_a_failing_fx_leaf_rule_is_detached_and_tracing_works():
    fx = corenn.fx
    model = corenn.nn.Sequential(corenn.nn.Linear(2, 2), corenn.nn.ReLU())

    def rule(module, qualified_name):
        raise Broken("rule broke")

    class Rules:
        @corenn.hookimpl
        def corenn_fx_leaf_modules(self):
            return [rule]
    installed = plugins.fx_leaf_module_rules()  # installed plugins' rules (corenn-parametrize has one)
    with register_plugin(Rules(), name="rules") as record:
        with pytest.warns(plugins.PluginWarning, match=r"corenn plugin 'rules' .*its FX leaf rule rule raised for "
                                                       r"module '0' \(Linear\)"):
            graph = fx.symbolic_trace(model).graph
        assert [n.target for n in graph.nodes if n.op == "call_module"] == ["0", "1"]
        assert plugins.fx_leaf_module_rules() == installed and record.fx_leaf_rules == []


# -- plugin kernels whose output has the wrong shape or dtype ---------------------------------------------------------

CoreRelu = core_kernel("relu")


def _relu(ctx, a):
    """The core relu's forward, spelled out: the count_core_relu fixture counts only the core's own calls."""
    out = ctx.xp.maximum(a, 0)
    ctx.save_for_backward(out)
    return out


class FlatRelu(CoreRelu):
    """Flattens its result: the wrong shape for any input of two or more dimensions."""

    calls = 0

    @staticmethod
    def forward(ctx, a):
        FlatRelu.calls += 1
        return _relu(ctx, a).reshape(-1)


class DoubleRelu(CoreRelu):
    """Returns float64 whatever came in."""

    @staticmethod
    def forward(ctx, a):
        return _relu(ctx, a).astype(np.float64)


class GoodRelu(CoreRelu):
    calls = 0

    @staticmethod
    def forward(ctx, a):
        GoodRelu.calls += 1
        return _relu(ctx, a)


class FlatWhenLarge(CoreRelu):
    """Right for inputs of up to 4 elements, flattened above: a first call can't catch that."""

    @staticmethod
    def forward(ctx, a):
        out = _relu(ctx, a)
        return out.reshape(-1) if a.size > 4 else out


def kernel_plugin(*registrations):
    class Kernels:
        @corenn.hookimpl
        def corenn_register_kernels(self):
            return list(registrations)
    return Kernels()


@pytest.fixture
def count_core_relu(monkeypatch):
    """How many times the core's relu forward ran."""
    calls = []
    forward = CoreRelu.forward

    def counted(ctx, a):
        calls.append(a.shape)
        return forward(ctx, a)
    monkeypatch.setattr(CoreRelu, "forward", staticmethod(counted))
    return calls


@pytest.mark.parametrize("kernel, got", [(FlatRelu, "shape (6,) float32"), (DoubleRelu, "shape (2, 3) float64")])
def test_a_kernel_with_the_wrong_shape_or_dtype_is_detached_at_its_first_call(kernel, got):
    """A kernel from corenn_register_kernels is checked against the core kernel on its first call."""
    x = corenn.tensor([[-1.0, 2.0, -3.0], [4.0, -5.0, 6.0]], requires_grad=True)
    with register_plugin(kernel_plugin(KernelRegistration("relu", "cpu", kernel, priority=20)), name="fast") as record:
        assert dispatch.kernels.lookup("relu", "cpu") is kernel and dispatch.kernels.source_of("relu", "cpu") == "fast"
        with pytest.warns(plugins.PluginWarning) as caught:
            y = x.relu()  # before: a (6,) or float64 tensor, unnoticed
        (message,) = [str(w.message) for w in caught]
        assert message == (f"corenn plugin 'fast' (registered at run time): its kernel {kernel.__name__} for op "
                           f"'relu' on cpu returned {got} where the core kernel returns shape (2, 3) float32; the "
                           "kernel was detached, this call returned the core kernel's result and 'relu' on cpu now "
                           "runs corenn.ops's kernel")
        assert y.shape == (2, 3) and y.dtype == corenn.float32
        assert y.tolist() == [[0.0, 2.0, 0.0], [4.0, 0.0, 6.0]]
        y.sum().backward()  # the node runs the core's backward, on the core's saved state
        assert x.grad.tolist() == [[0.0, 1.0, 0.0], [1.0, 0.0, 1.0]]
        assert dispatch.kernels.source_of("relu", "cpu") == "corenn.ops"
        assert record.status == "active" and record.detached == [message.split(": ", 1)[1]]
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            assert x.relu().shape == (2, 3)  # the core's kernel, without a second warning
    assert dispatch.kernels.source_of("relu", "cpu") == "corenn.ops"


def test_a_kernel_with_the_wrong_shape_in_strict_mode_raises_plugin_error(monkeypatch):
    monkeypatch.setenv("CORENN_STRICT_PLUGINS", "1")
    with register_plugin(kernel_plugin(KernelRegistration("relu", "cpu", FlatRelu, priority=20)), name="fast"):
        with pytest.raises(plugins.PluginError, match=r"corenn plugin 'fast' \(registered at run time\): its kernel "
                                                      r"FlatRelu for op 'relu' on cpu returned shape \(6,\) float32 "
                                                      r"where the core kernel returns shape \(2, 3\) float32; the "
                                                      r"kernel was detached \[CORENN_STRICT_PLUGINS is set\]"):
            corenn.ones(2, 3).relu()
        assert corenn.ones(2, 3).relu().shape == (2, 3)


def test_a_good_kernel_is_checked_once_then_runs_alone(count_core_relu):
    GoodRelu.calls = 0
    with register_plugin(kernel_plugin(KernelRegistration("relu", "cpu", GoodRelu, priority=20)), name="fast"):
        assert not isinstance(dispatch.kernels.table("cpu")["relu"], type)  # the check stands in its place
        y = corenn.ones(2, 3).relu()
        assert type(y) is corenn.Tensor and (GoodRelu.calls, len(count_core_relu)) == (1, 1)
        assert dispatch.kernels.table("cpu")["relu"] is GoodRelu  # swapped in: no cost from now on
        x = corenn.ones(4, requires_grad=True)
        z = x.relu()
        assert (GoodRelu.calls, len(count_core_relu)) == (2, 1)
        assert type(z.grad_fn) is GoodRelu
        corenn.plugins.disable("fast")
        corenn.plugins.enable("fast")  # tables rebuilt: a kernel checked once is not checked again
        corenn.ones(3).relu()
        assert (GoodRelu.calls, len(count_core_relu)) == (3, 1)


def test_check_kernels_mode_checks_every_call(monkeypatch, count_core_relu):
    registration = KernelRegistration("relu", "cpu", FlatWhenLarge, priority=20)
    with register_plugin(kernel_plugin(registration), name="fast"):
        corenn.ones(2, 2).relu()
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            assert corenn.ones(3, 3).relu().shape == (9,)  # by default only the first call is checked
    monkeypatch.setenv("CORENN_CHECK_KERNELS", "1")
    dispatch.kernels.invalidate()
    with register_plugin(kernel_plugin(registration), name="fast"):
        calls = len(count_core_relu)
        corenn.ones(2, 2).relu()
        corenn.ones(1, 2).relu()
        assert len(count_core_relu) == calls + 2
        with pytest.warns(plugins.PluginWarning, match=r"returned shape \(9,\) float32 where the core kernel "
                                                       r"returns shape \(3, 3\) float32"):
            assert corenn.ones(3, 3).relu().shape == (3, 3)


class ShortIndices(core_kernel("max_dim")):
    """max along a dim, its indices as int32 (the core and PyTorch give int64)."""

    @staticmethod
    def forward(ctx, a, axis, keepdim=False, mode="max"):
        values, indices = core_kernel("max_dim").forward(ctx, a, axis, keepdim, mode)
        return values, indices.astype(np.int32)


def test_a_multi_output_kernel_is_checked_output_by_output():
    with register_plugin(kernel_plugin(KernelRegistration("max_dim", "cpu", ShortIndices, priority=20)),
                         name="fast"):
        with pytest.warns(plugins.PluginWarning, match=r"ShortIndices for op 'max_dim' on cpu returned \(shape "
                                                       r"\(2,\) float32, shape \(2,\) int32\) where the core kernel "
                                                       r"returns \(shape \(2,\) float32, shape \(2,\) int64\)"):
            _, indices = corenn.ones(2, 3).max(dim=1)
        assert indices.dtype == corenn.int64


class BatchNormCopy(core_kernel("batch_norm")):
    """The core's batch_norm under another name: it updates the running statistics in place."""


def test_the_check_does_not_update_batch_norms_running_statistics_twice():
    x = corenn.randn(4, 3)
    expected = corenn.nn.BatchNorm1d(3)
    expected(x)
    with register_plugin(kernel_plugin(KernelRegistration("batch_norm", "cpu", BatchNormCopy, priority=20)),
                         name="fast"):
        checked = corenn.nn.BatchNorm1d(3)
        assert not isinstance(dispatch.kernels.table("cpu")["batch_norm"], type)
        checked(x)  # the first call: the plugin's kernel and, on copies, the core's
        assert dispatch.kernels.table("cpu")["batch_norm"] is BatchNormCopy
    np.testing.assert_allclose(checked.running_mean.numpy(), expected.running_mean.numpy(), rtol=1e-6)
    np.testing.assert_allclose(checked.running_var.numpy(), expected.running_var.numpy(), rtol=1e-6)


class Float16Only(KernelOverride, CoreRelu):
    """Handles float16 only; every other dtype runs the core's kernel."""

    @staticmethod
    def handles(a):
        return a.dtype == np.float16

    @staticmethod
    def forward(ctx, a):
        return np.maximum(a, 0).astype(np.float32)  # wrong dtype, but only where it handles the input


def test_calls_an_override_declines_are_not_the_check():
    with register_plugin(kernel_plugin(KernelRegistration("relu", "cpu", Float16Only, priority=20)), name="fast"):
        corenn.ones(3).relu()  # float32: declined, the core ran; no verdict yet
        assert not isinstance(dispatch.kernels.table("cpu")["relu"], type)
        with pytest.warns(plugins.PluginWarning, match=r"returned shape \(3,\) float32 where the core kernel "
                                                       r"returns shape \(3,\) float16"):
            y = corenn.ones(3, dtype=corenn.float16).relu()
        assert y.dtype == corenn.float16


def test_dropout_kernels_are_checked_without_drawing_twice():
    class Dropout(core_kernel("dropout")):
        pass
    x = corenn.ones(1000)
    corenn.manual_seed(0)
    expected = F.dropout(x, 0.5)
    after = corenn.rand(3)
    with register_plugin(kernel_plugin(KernelRegistration("dropout", "cpu", Dropout, priority=20)), name="fast"):
        corenn.manual_seed(0)
        assert corenn.equal(F.dropout(x, 0.5), expected)
        assert corenn.equal(corenn.rand(3), after)  # the random stream went on where it would have
        assert dispatch.kernels.table("cpu")["dropout"] is Dropout


def test_a_kernel_with_another_number_of_outputs_fails_the_plugin_at_registration():
    class TwoOutputs(Op):
        num_outputs = 2

        @staticmethod
        def forward(ctx, a):
            return a, a
    with pytest.warns(plugins.PluginWarning, match=r"kernel TwoOutputs for op 'relu' has num_outputs=2 and "
                                                   r"differentiable=True; the core's relu kernel has 1 and True"):
        with register_plugin(kernel_plugin(KernelRegistration("relu", "cpu", TwoOutputs, priority=20)),
                             name="two", allow_failure=True) as record:
            assert record.status == "failed"
