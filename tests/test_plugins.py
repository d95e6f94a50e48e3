"""The plugin host in-process: every hook through ``corenn.plugins.register``, failures, observers, the fixture.

Loading from installed entry points (and the environment switches) is tested in
subprocesses in test_plugins_entry_points.py; a real pip install in a virtualenv in
test_plugins_venv.py.
"""
from __future__ import annotations

import re
import types
import warnings

import numpy as np
import pytest

import corenn
from corenn import dispatch, plugins
from corenn.autograd import gradcheck
from corenn.autograd.node import Op
from corenn.dispatch import Backend, KernelRegistration
from corenn.testing import register_plugin


# -- a toy device: arrays are numpy, but every transfer is counted --------------------------------------------------

class TransferCounter:
    def __init__(self):
        self.to_device = 0
        self.to_host = 0

    def backend(self, device_type="toy"):
        def to_device(array, index=None):
            self.to_device += 1
            return np.array(array, copy=True)

        def to_host(array):
            self.to_host += 1
            return np.array(array, copy=True)
        return Backend(type=device_type, xp=np, to_device=to_device, to_host=to_host, description="toy device")


class ToyDevicePlugin:
    def __init__(self, device_type="toy"):
        self.counter = TransferCounter()
        self.device_type = device_type

    @corenn.hookimpl
    def corenn_register_backends(self):
        return [self.counter.backend(self.device_type)]

    @corenn.hookimpl
    def corenn_info_lines(self):
        return [f"{self.device_type}: {self.counter.to_device} transfers in, {self.counter.to_host} out"]


class CountingNeg(Op):
    """neg that counts its calls: proves which kernel ran (neg: an op none of our plugins overrides)."""

    grad_fn_name = "NegBackward0"
    calls = 0

    @staticmethod
    def forward(ctx, a):
        CountingNeg.calls += 1
        return -a

    @staticmethod
    def backward(ctx, grad):
        return -grad


class KernelPlugin:
    def __init__(self, device_type="cpu", priority=10):
        self.device_type = device_type
        self.priority = priority

    @corenn.hookimpl
    def corenn_register_kernels(self):
        return [KernelRegistration("neg", self.device_type, CountingNeg, priority=self.priority)]


@pytest.fixture(autouse=True)
def _no_leftovers():
    """Every test leaves the registries as it found them (a plugin test that leaks breaks others)."""
    # A plugin imported before corenn finished loading registers at the first op: not a leak of the test's.
    plugins.finish_pending()
    before = (set(plugins.records), [b.type for b in dispatch.backends], len(dispatch.kernels.registrations()),
              list(dispatch.observers))
    yield
    after = (set(plugins.records), [b.type for b in dispatch.backends], len(dispatch.kernels.registrations()),
             list(dispatch.observers))
    assert after == before


# -- corenn_register_backends -----------------------------------------------------------------------------------------

def test_corenn_register_backends_toy_device_works_and_counts_transfers(corenn_plugin):
    plugin = ToyDevicePlugin()
    record = corenn_plugin(plugin)
    assert record.status == "active" and record.devices == ["toy"]
    assert "toy" in dispatch.available_devices()

    x = corenn.tensor([1.0, -2.0, 3.0], device="toy", requires_grad=True)
    assert x.device == corenn.device("toy") and plugin.counter.to_device == 1
    y = (x * x).sum()
    assert y.device.type == "toy"
    y.backward()
    assert x.grad.device.type == "toy"
    np.testing.assert_allclose(x.grad.cpu().numpy(), [2.0, -4.0, 6.0])
    assert plugin.counter.to_host == 1  # only the .cpu() above left the device

    # A cpu -> toy copy is differentiable: the gradient comes back through one transfer.
    w = corenn.ones(3, requires_grad=True)
    (w.to("toy") * 3).sum().backward()
    np.testing.assert_allclose(w.grad.numpy(), [3.0, 3.0, 3.0])
    with pytest.raises(RuntimeError, match="same device.*toy and cpu|same device.*cpu and toy"):
        corenn.ones(2, device="toy") + corenn.ones(2)


def test_unregistering_a_device_keeps_cpu_device_identity(corenn_plugin):
    cpu_before = corenn.device("cpu")
    with register_plugin(ToyDevicePlugin()):
        corenn.zeros(1, device="toy")
    with pytest.raises(RuntimeError, match="unknown device type 'toy'; available devices: cpu"):
        corenn.device("toy")
    assert corenn.device("cpu") is cpu_before
    assert (corenn.ones(2) + corenn.tensor([1.0, 2.0], device="cpu")).tolist() == [2.0, 3.0]


def test_second_provider_of_a_device_type_fails_and_first_keeps_working(corenn_plugin):
    corenn_plugin(ToyDevicePlugin(), name="toy-one")
    with pytest.warns(plugins.PluginWarning, match=r"'toy-two' \(registered at run time\) failed.*already provided "
                                                   r"by toy-one"):
        record = corenn_plugin(ToyDevicePlugin(), name="toy-two", allow_failure=True)
    assert record.status == "failed" and record.devices == []
    assert corenn.ones(2, device="toy").device.type == "toy"


def test_backend_with_invalid_device_type_fails():
    class Bad:
        @corenn.hookimpl
        def corenn_register_backends(self):
            return [TransferCounter().backend("no such")]
    with pytest.warns(plugins.PluginWarning, match="device type 'no such'"):
        with register_plugin(Bad(), allow_failure=True) as record:
            assert record.status == "failed"


# -- corenn_register_kernels ------------------------------------------------------------------------------------------

def test_corenn_register_kernels_priority_override_and_removal(corenn_plugin):
    x = corenn.tensor([-1.0, 2.0], dtype=corenn.float64, requires_grad=True)
    CountingNeg.calls = 0
    with register_plugin(KernelPlugin(priority=10)) as record:
        assert dispatch.kernels.source_of("neg", "cpu") == record.name
        out = corenn.neg(x)
        assert CountingNeg.calls == 1
        assert out.tolist() == [1.0, -2.0]
        assert gradcheck(corenn.neg, (corenn.tensor([-1.5, 0.7, 2.0], dtype=corenn.float64, requires_grad=True),))
        assert record.to_dict()["kernels"] == [{"op": "neg", "device_type": "cpu", "priority": 10,
                                                "overrides": ["corenn.ops"], "shadowed_by": None}]
    calls = CountingNeg.calls
    corenn.neg(x)
    assert CountingNeg.calls == calls  # the core kernel is back
    assert dispatch.kernels.source_of("neg", "cpu") == "corenn.ops"


def test_kernel_with_priority_zero_does_not_override_the_core(corenn_plugin):
    CountingNeg.calls = 0
    record = corenn_plugin(KernelPlugin(priority=0))
    corenn.neg(corenn.ones(2))
    assert CountingNeg.calls == 0  # equal priority: the first registered (the core) wins
    assert record.to_dict()["kernels"][0]["overrides"] == []


def test_kernel_for_one_device_type_leaves_others_alone(corenn_plugin):
    corenn_plugin(ToyDevicePlugin())
    corenn_plugin(KernelPlugin(device_type="toy", priority=5))
    CountingNeg.calls = 0
    corenn.neg(corenn.ones(2))
    assert CountingNeg.calls == 0
    corenn.neg(corenn.ones(2, device="toy"))
    assert CountingNeg.calls == 1


@pytest.mark.parametrize("answer, message", [
    (["not a registration"], "returned a str, expected corenn.dispatch.KernelRegistration"),
    ([KernelRegistration("neg", "cpu", lambda x: x, priority=1)], "expected a subclass of corenn.autograd.node.Op"),
    ([KernelRegistration("neg", "cpu", CountingNeg, priority=1.5)], "has priority 1.5, expected an int"),
    (42, "must return an iterable of corenn.dispatch.KernelRegistration, got int"),
])
def test_malformed_kernel_registrations_fail_the_plugin(answer, message):
    class Malformed:
        @corenn.hookimpl
        def corenn_register_kernels(self):
            return answer
    with pytest.warns(plugins.PluginWarning, match=message):
        with register_plugin(Malformed(), allow_failure=True) as record:
            assert record.status == "failed" and message in record.reason and record.kernels == []
    assert dispatch.kernels.source_of("neg", "cpu") == "corenn.ops"


# -- failures and unavailability --------------------------------------------------------------------------------------

def test_raising_registration_hook_undoes_everything_and_core_keeps_working():
    class HalfWay(ToyDevicePlugin):
        @corenn.hookimpl
        def corenn_register_kernels(self):
            raise RuntimeError("kernel table corrupted")
    with pytest.warns(plugins.PluginWarning, match=r"'HalfWay' .*failed and was skipped: RuntimeError: kernel table "
                                                   "corrupted"):
        with register_plugin(HalfWay(), allow_failure=True) as record:
            assert record.status == "failed"
            assert "toy" not in dispatch.backends  # its backend, registered first, was taken back
            assert not plugins.manager.is_registered(record.plugin)
    assert (corenn.ones(2) * 2).tolist() == [2.0, 2.0]


def test_unavailable_plugin_is_listed_with_reason_without_warning():
    class NoGPU:
        @corenn.hookimpl
        def corenn_register_backends(self):
            raise plugins.PluginUnavailable("no CUDA device found")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with register_plugin(NoGPU(), allow_failure=True) as record:
            assert (record.status, record.reason) == ("unavailable", "no CUDA device found")
            assert record in plugins.list_plugins()


def test_hookimpl_matching_no_spec_fails_with_suggestion():
    class Typo:
        @corenn.hookimpl
        def corenn_register_kernel(self):
            return []
    with pytest.warns(plugins.PluginWarning, match="corenn_register_kernel .did you mean corenn_register_kernels.. "
                                                   "matches no corenn hookspec"):
        with register_plugin(Typo(), allow_failure=True) as record:
            assert record.status == "failed"


def test_hookimpl_asking_for_unknown_argument_fails():
    class WrongArgs:
        @corenn.hookimpl
        def corenn_register_kernels(self, device):
            return []
    with pytest.warns(plugins.PluginWarning, match="device"):
        with register_plugin(WrongArgs(), allow_failure=True) as record:
            assert record.status == "failed"


def test_hook_function_without_hookimpl_marker_fails():
    module = types.ModuleType("forgot_marker")
    module.corenn_info_lines = lambda: ["never called"]
    with pytest.warns(plugins.PluginWarning, match="corenn_info_lines not decorated with @corenn.hookimpl"):
        with register_plugin(module, allow_failure=True) as record:
            assert record.status == "failed"


def test_strict_mode_raises_for_a_failing_plugin(monkeypatch):
    monkeypatch.setenv("CORENN_STRICT_PLUGINS", "1")

    class Broken:
        @corenn.hookimpl
        def corenn_register_backends(self):
            raise ValueError("bad driver")
    with pytest.raises(plugins.PluginError, match="'Broken' .*failed: ValueError: bad driver"):
        plugins.register(Broken())
    assert plugins.records.pop("Broken").status == "failed"
    assert "toy" not in dispatch.backends


def test_register_rejects_duplicates_and_unregister_unknown_names(corenn_plugin):
    plugin = ToyDevicePlugin()
    corenn_plugin(plugin, name="dup")
    with pytest.raises(ValueError, match="already registered as 'dup'"):
        plugins.register(plugin, name="other")
    with pytest.raises(ValueError, match="a plugin named 'dup' is already registered"):
        plugins.register(ToyDevicePlugin("toy2"), name="dup")
    with pytest.raises(KeyError, match="no plugin named 'nope'"):
        plugins.unregister("nope")
    with pytest.raises(ValueError, match="built into corenn"):
        plugins.unregister("corenn.ops")


def test_register_plugin_raises_on_failure_unless_allowed():
    class Broken:
        @corenn.hookimpl
        def corenn_info_lines(self, nonsense):
            return []
    with pytest.warns(plugins.PluginWarning):
        with pytest.raises(plugins.PluginError, match="'Broken' failed to register"):
            with register_plugin(Broken()):
                pass  # pragma: no cover - never reached
    assert "Broken" not in plugins.records


def test_builtin_plugins_are_registered_through_the_hooks():
    cpu, ops = plugins.records["corenn.backends.cpu"], plugins.records["corenn.ops"]
    assert cpu.builtin and cpu.devices == ["cpu"] and "corenn_register_backends" in cpu.hooks
    assert ops.builtin and "corenn_register_kernels" in ops.hooks
    assert {r.op for r in ops.kernels} >= {"add", "matmul", "neg", "sum"}
    assert all(r.priority == 0 and r.device_type == "*" for r in ops.kernels)
    assert plugins.ensure_loaded() is False  # already loaded at import


# -- corenn_register_process_group_backends ---------------------------------------------------------------------------

def test_corenn_register_process_group_backends(corenn_plugin):
    def make_loopback(**options):
        return ("loopback group", options)

    class Comm:
        @corenn.hookimpl
        def corenn_register_process_group_backends(self):
            return {"loopback": make_loopback}
    record = corenn_plugin(Comm())
    assert record.process_group_backends == ["loopback"]
    factory = plugins.process_group_backends()["loopback"]
    assert factory(rank=0, world_size=1) == ("loopback group", {"rank": 0, "world_size": 1})

    class Clash(Comm):
        pass
    with pytest.warns(plugins.PluginWarning, match="'loopback' is already provided by Comm"):
        assert corenn_plugin(Clash(), allow_failure=True).status == "failed"

    class NotCallable:
        @corenn.hookimpl
        def corenn_register_process_group_backends(self):
            return {"nonesuch": "not a factory"}   # a name no installed plugin provides (corenn-distributed has mpi)
    with pytest.warns(plugins.PluginWarning, match="callable factory"):
        assert corenn_plugin(NotCallable(), allow_failure=True).status == "failed"
    assert "nonesuch" not in plugins.process_group_backends()


def test_process_group_backends_are_removed_with_their_plugin():
    class Comm:
        @corenn.hookimpl
        def corenn_register_process_group_backends(self):
            return {"loopback": lambda **kw: None}
    with register_plugin(Comm()):
        assert "loopback" in plugins.process_group_backends()
    assert "loopback" not in plugins.process_group_backends()


# -- corenn_fx_leaf_modules -------------------------------------------------------------------------------------------

def test_corenn_fx_leaf_modules(corenn_plugin):
    class Fused:
        pass

    class LeafRules:
        @corenn.hookimpl
        def corenn_fx_leaf_modules(self):
            return [lambda module, qualified_name: True if isinstance(module, Fused) else None]
    installed = plugins.fx_leaf_module_rules()  # installed plugins' rules (corenn-parametrize has one)
    corenn_plugin(LeafRules())
    rules = plugins.fx_leaf_module_rules()
    assert len(rules) == len(installed) + 1
    assert rules[-1](Fused(), "block.fused") is True
    assert rules[-1](object(), "block.linear") is None

    class NotARule:
        @corenn.hookimpl
        def corenn_fx_leaf_modules(self):
            return ["torch.nn.Linear"]
    with pytest.warns(plugins.PluginWarning, match="returned a str, expected a callable rule"):
        corenn_plugin(NotARule(), allow_failure=True)
    assert len(plugins.fx_leaf_module_rules()) == len(installed) + 1


def test_fx_tracing_asks_the_plugin_leaf_rules(corenn_plugin):
    from corenn import fx
    nn = corenn.nn

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(2, 2)

        def forward(self, x):
            return self.lin(x).neg()

    class Model(nn.Module):
        def __init__(self):
            super().__init__()
            self.block = Block()

        def forward(self, x):
            return self.block(x) + 1

    def call_modules():
        return [n.target for n in fx.symbolic_trace(Model()).graph.nodes if n.op == "call_module"]
    assert call_modules() == ["block.lin"]  # a user module is traced through by default
    asked = []

    class KeepBlocks:
        @corenn.hookimpl
        def corenn_fx_leaf_modules(self):
            def rule(module, qualified_name):
                asked.append(qualified_name)
                return True if isinstance(module, Block) else None
            return [rule]
    with register_plugin(KeepBlocks()):
        assert call_modules() == ["block"]
    assert "block" in asked
    assert call_modules() == ["block.lin"]

    class OpenLinears:  # False traces through a standard layer (a Linear becomes its functional call)
        @corenn.hookimpl
        def corenn_fx_leaf_modules(self):
            return [lambda module, qualified_name: False if isinstance(module, nn.Linear) else None]
    with register_plugin(OpenLinears()):
        assert call_modules() == []
        with register_plugin(KeepBlocks()):  # True wins over another plugin's False
            assert call_modules() == ["block"]


# -- corenn_module_state_handlers -------------------------------------------------------------------------------------

def test_corenn_module_state_handlers(corenn_plugin):
    class MaskHandler:
        def state_dict_post(self, module, state_dict, prefix):
            state_dict[prefix + "mask"] = module.mask

    class StateHooks:
        @corenn.hookimpl
        def corenn_module_state_handlers(self):
            return [MaskHandler()]
    record = corenn_plugin(StateHooks())
    (handler,) = plugins.module_state_handlers()
    assert record.state_handlers == [handler]
    state = {}
    handler.state_dict_post(types.SimpleNamespace(mask=[1, 0]), state, "layer.")
    assert state == {"layer.mask": [1, 0]}
    assert getattr(handler, "load_state_dict_pre", None) is None  # optional: callers check

    class Useless:
        @corenn.hookimpl
        def corenn_module_state_handlers(self):
            return [object()]
    with pytest.warns(plugins.PluginWarning, match="neither state_dict_post"):
        corenn_plugin(Useless(), allow_failure=True)
    assert plugins.module_state_handlers() == [handler]


def test_module_state_dict_runs_the_plugin_handlers(corenn_plugin):
    """A plugin that hangs a mask on modules saves and restores it through Module's state dicts."""
    nn = corenn.nn

    class MaskState:
        def state_dict_post(self, module, state_dict, prefix):
            if hasattr(module, "mask"):
                state_dict[prefix + "mask"] = module.mask

        def load_state_dict_pre(self, module, state_dict, prefix):
            if prefix + "mask" in state_dict:
                module.mask = state_dict.pop(prefix + "mask")  # consumed: not an unexpected key

    class MaskPlugin:
        @corenn.hookimpl
        def corenn_module_state_handlers(self):
            return [MaskState()]

    model = nn.Sequential(nn.Linear(3, 2), nn.ReLU())
    model[0].mask = corenn.tensor([[1., 0., 1.], [0., 1., 1.]])
    assert "0.mask" not in model.state_dict()  # no handler, no entry
    corenn_plugin(MaskPlugin())
    state = model.state_dict()
    assert list(state) == ["0.weight", "0.bias", "0.mask"]
    rebuilt = nn.Sequential(nn.Linear(3, 2), nn.ReLU())
    assert repr(rebuilt.load_state_dict(state)) == "<All keys matched successfully>"
    assert corenn.equal(rebuilt[0].mask, model[0].mask)
    assert corenn.equal(rebuilt[0].weight, model[0].weight)


# -- op observation: observe_ops and corenn_op_observers --------------------------------------------------------------

class Recorder:
    def __init__(self, log=None, tag=""):
        self.log = [] if log is None else log
        self.tag = tag

    def op_start(self, op_name, device, arrays):
        self.log.append((self.tag + "start", op_name, str(device), tuple(np.shape(a) for a in arrays)))

    def op_end(self, op_name, device, out):
        self.log.append((self.tag + "end", op_name, str(device), np.shape(out)))


def test_observe_ops_sees_ops_and_stops_when_removed():
    recorder = Recorder()
    a, b = corenn.ones(2, 3), corenn.ones(3)
    with plugins.observe_ops(recorder) as handle:
        a + b
    assert recorder.log == [("start", "add", "cpu", ((2, 3), (3,))), ("end", "add", "cpu", (2, 3))]
    assert not handle.active and dispatch.observers == []
    a * b
    assert len(recorder.log) == 2
    handle.remove()  # idempotent


def test_observers_nest_in_order():
    log = []
    outer, inner = Recorder(log, "outer-"), Recorder(log, "inner-")
    with plugins.observe_ops(outer), plugins.observe_ops(inner):
        corenn.ones(2).exp()
    assert [entry[0] for entry in log] == ["outer-start", "inner-start", "inner-end", "outer-end"]


def test_observer_exception_propagates_and_handle_still_removes():
    class Exploding(Recorder):
        def op_start(self, op_name, device, arrays):
            raise RuntimeError("observer broke")
    with pytest.raises(RuntimeError, match="observer broke"):
        with plugins.observe_ops(Exploding()):
            corenn.ones(2) + 1
    assert dispatch.observers == []


def test_observe_ops_rejects_objects_without_the_protocol():
    class OnlyStart:
        def op_start(self, op_name, device, arrays):
            pass
    with pytest.raises(TypeError, match="without op_end"):
        plugins.observe_ops(OnlyStart())
    assert dispatch.observers == []


def test_corenn_op_observers_observe_while_the_plugin_is_registered():
    recorder = Recorder()

    class AlwaysObserve:
        @corenn.hookimpl
        def corenn_op_observers(self):
            return [recorder]
    with register_plugin(AlwaysObserve()) as record:
        assert record.op_observers == [recorder]
        corenn.ones(2).sum()
    corenn.ones(2).sum()
    assert [entry[:2] for entry in recorder.log] == [("start", "sum"), ("end", "sum")]

    class Malformed:
        @corenn.hookimpl
        def corenn_op_observers(self):
            return [object()]
    with pytest.warns(plugins.PluginWarning, match="corenn_op_observers returned a object without op_start and "
                                                   "op_end"):
        with register_plugin(Malformed(), allow_failure=True) as record:
            assert record.status == "failed"


# -- corenn_register_names --------------------------------------------------------------------------------------------

def test_corenn_register_names_adds_top_level_names_while_registered():
    marker = object()

    class Names:
        @corenn.hookimpl
        def corenn_register_names(self):
            return {"plugin_made_name": marker}
    assert not hasattr(corenn, "plugin_made_name")
    with register_plugin(Names()) as record:
        assert corenn.plugin_made_name is marker
        assert record.names == ["plugin_made_name"]
        assert plugins.registered_names()["plugin_made_name"] is marker
        assert "plugin_made_name" not in vars(corenn)  # looked up, not added to the namespace
    assert not hasattr(corenn, "plugin_made_name")
    assert "plugin_made_name" not in plugins.registered_names()


@pytest.mark.parametrize("answer, message", [
    ({"tensor": 1}, "corenn.tensor is corenn's own"),
    ({"nn": 1}, "corenn.nn is corenn's own"),
    ({"_hidden": 1}, "'_hidden' is not a public identifier"),
    ({"not a name": 1}, "'not a name' is not a public identifier"),
    (["qint8"], "must return a mapping of name -> object, got list"),
])
def test_corenn_register_names_refuses_malformed_or_taken_names(answer, message):
    class Malformed:
        @corenn.hookimpl
        def corenn_register_names(self):
            return answer
    with pytest.warns(plugins.PluginWarning, match=re.escape(message)):
        with register_plugin(Malformed(), allow_failure=True) as record:
            assert record.status == "failed"
            assert record.names == []


def test_corenn_register_names_a_name_two_plugins_provide_fails_the_second():
    class First:
        @corenn.hookimpl
        def corenn_register_names(self):
            return {"shared_plugin_name": 1}

    class Second:
        @corenn.hookimpl
        def corenn_register_names(self):
            return {"shared_plugin_name": 2}
    with register_plugin(First()) as first:
        with pytest.warns(plugins.PluginWarning, match="already provided by plugin " + re.escape(repr(first.name))):
            with register_plugin(Second(), allow_failure=True) as second:
                assert second.status == "failed"
        assert corenn.shared_plugin_name == 1


# -- corenn_info_lines ------------------------------------------------------------------------------------------------

def test_corenn_info_lines_per_plugin_and_a_raising_one_is_contained(corenn_plugin):
    toy = ToyDevicePlugin()
    corenn_plugin(toy)

    class Raises:
        @corenn.hookimpl
        def corenn_info_lines(self):
            raise OSError("driver query failed")
    corenn_plugin(Raises())
    corenn.tensor([1.0], device="toy")  # a host -> device transfer (zeros would be made on the device)
    lines = {record.name: found for record, found in plugins.info_lines()}
    assert lines["ToyDevicePlugin"] == ["toy: 1 transfers in, 0 out"]
    assert lines["Raises"] == ["(corenn_info_lines failed: OSError: driver query failed)"]
    assert lines["corenn.backends.cpu"][0].startswith(f"cpu: numpy {np.__version__}")


# -- corenn_add_hookspecs ---------------------------------------------------------------------------------------------

def test_corenn_add_hookspecs_lets_plugins_extend_the_contract(corenn_plugin):
    class ExporterSpecs:
        @corenn.hookspecs.hookspec
        def corenn_profiler_exporters(self):
            """Return {format name: export function}."""

    class Profiler:
        @corenn.hookimpl
        def corenn_add_hookspecs(self, plugin_manager):
            plugin_manager.add_hookspecs(ExporterSpecs)

    class Exporter:
        @corenn.hookimpl
        def corenn_profiler_exporters(self):
            return {"csv": print}

    # Without the plugin that adds the hook, its implementation matches no spec...
    with pytest.warns(plugins.PluginWarning, match="corenn_profiler_exporters matches no corenn hookspec"):
        assert corenn_plugin(Exporter(), name="early", allow_failure=True).status == "failed"
    # ... with it, it does, and the new hook is called like any other.
    corenn_plugin(Profiler())
    assert corenn_plugin(Exporter()).status == "active"
    assert plugins.manager.hook.corenn_profiler_exporters() == [{"csv": print}]


# -- listing and tracing ----------------------------------------------------------------------------------------------

def test_list_plugins_includes_runtime_plugins_with_their_contributions(corenn_plugin):
    corenn_plugin(ToyDevicePlugin(), name="toyplug")
    corenn_plugin(KernelPlugin(device_type="toy", priority=3), name="toykernels")
    listed = {r.name: r.to_dict() for r in plugins.list_plugins()}
    assert listed["toyplug"]["devices"] == ["toy"]
    assert listed["toyplug"]["hooks"] == ["corenn_info_lines", "corenn_register_backends"]
    assert listed["toykernels"]["kernels"] == [{"op": "neg", "device_type": "toy", "priority": 3,
                                                "overrides": ["corenn.ops"], "shadowed_by": None}]
    assert listed["toyplug"]["distribution"] is None and listed["toyplug"]["status"] == "active"


def test_enable_tracing_writes_hook_calls():
    written = []
    undo = plugins.enable_tracing(written.append)
    try:
        with register_plugin(ToyDevicePlugin()):
            plugins.info_lines()
    finally:
        undo()
    text = "".join(written)
    assert "corenn_register_backends [hook]" in text
    assert "corenn_info_lines [hook]" in text
    assert "plugin ToyDevicePlugin active: devices=['toy']" in text
    written.clear()
    plugins.info_lines()
    assert written == []  # undone


def test_fixture_removes_plugins_after_the_test_part_one(corenn_plugin):
    corenn_plugin(ToyDevicePlugin("fixturetoy"), name="fixture-scope")
    assert "fixture-scope" in plugins.records


def test_fixture_removes_plugins_after_the_test_part_two():
    assert "fixture-scope" not in plugins.records
    assert "fixturetoy" not in dispatch.backends


def test_list_plugins_names_a_plugin_installed_after_import(monkeypatch):
    from importlib.metadata import EntryPoint
    monkeypatch.delenv("CORENN_PLUGINS", raising=False)
    monkeypatch.delenv("CORENN_DISABLE_PLUGIN_AUTOLOAD", raising=False)
    monkeypatch.setattr(plugins, "installed_entry_points", lambda: [EntryPoint("late", "corenn_late", "corenn")])
    (late,) = [r for r in plugins.list_plugins() if r.name == "late"]
    assert late.status == "disabled"
    assert late.reason == "installed after corenn was imported (restart Python to load it)"
    assert "late" not in plugins.records


def test_an_unknown_device_names_the_plugins_that_failed_to_load(corenn_plugin):
    class BrokenDevice:
        @corenn.hookimpl
        def corenn_register_backends(self):
            raise corenn.plugins.PluginUnavailable("no mydev card in this machine")
    corenn_plugin(BrokenDevice(), name="corenn-mydev", allow_failure=True)
    with pytest.raises(RuntimeError, match=r"unknown device type 'mydev'; available devices: cpu\. Plugins installed "
                                           r"but not loaded: corenn-mydev \(unavailable: no mydev card"):
        corenn.ones(1, device="mydev")
