"""The loader as the single source of truth: disable / enable / disabled at run time, and registrations that
name no op or no device fail the plugin."""
from __future__ import annotations

import numpy as np
import pytest

import corenn
from corenn import dispatch, plugins
from corenn.dispatch import Backend, KernelRegistration
from corenn.testing import register_plugin
from test_plugins import CountingNeg


class Everything:
    """A kernel, an op observer, an FX leaf rule, a module-state handler and a process-group backend."""

    def __init__(self):
        self.ops = []
        self.rule = lambda module, name: name == "special" or None
        self.handler = type("Handler", (), {"state_dict_post": staticmethod(lambda module, sd, prefix: None)})()

    def op_start(self, op_name, device, arrays):
        self.ops.append(op_name)

    def op_end(self, op_name, device, out):
        pass

    @corenn.hookimpl
    def corenn_register_kernels(self):
        return [KernelRegistration("neg", "cpu", CountingNeg, priority=10)]

    @corenn.hookimpl
    def corenn_op_observers(self):
        return [self]

    @corenn.hookimpl
    def corenn_fx_leaf_modules(self):
        return [self.rule]

    @corenn.hookimpl
    def corenn_module_state_handlers(self):
        return [self.handler]

    @corenn.hookimpl
    def corenn_register_process_group_backends(self):
        return {"toypg": print}


@pytest.fixture(autouse=True)
def _no_leftovers():
    before = (set(plugins.records), len(dispatch.kernels.registrations()), list(dispatch.observers),
              len(plugins.fx_leaf_module_rules()), len(plugins.module_state_handlers()),
              sorted(plugins.process_group_backends()))
    yield
    after = (set(plugins.records), len(dispatch.kernels.registrations()), list(dispatch.observers),
             len(plugins.fx_leaf_module_rules()), len(plugins.module_state_handlers()),
             sorted(plugins.process_group_backends()))
    assert after == before


def _contributes(plugin) -> dict:
    return {"kernel": dispatch.kernels.source_of("neg", "cpu") == "everything",
            "observer": any(o is plugin for o in dispatch.observers),
            "fx rule": plugin.rule in plugins.fx_leaf_module_rules(),
            "state handler": plugin.handler in plugins.module_state_handlers(),
            "process group": "toypg" in plugins.process_group_backends()}


def test_disable_turns_every_contribution_off_and_enable_back_on():
    plugin = Everything()
    with register_plugin(plugin, name="everything") as record:
        assert all(_contributes(plugin).values())
        assert plugins.disable("everything") is record
        assert record.status == "disabled"
        assert record.reason == "disabled at run time by corenn.plugins.disable('everything')"
        assert not any(_contributes(plugin).values())
        CountingNeg.calls = 0
        corenn.neg(corenn.ones(2))
        assert CountingNeg.calls == 0 and plugin.ops == []  # the core ran, unobserved
        assert {r.name: r.status for r in plugins.list_plugins()}["everything"] == "disabled"
        assert all(k["overrides"] == [] for k in record.to_dict()["kernels"])
        assert [line for r, line in plugins.info_lines() if r is record] == []

        plugins.disable(plugin)  # by object, and a second time: nothing changes
        assert plugins.enable("everything") is record and record.status == "active" and record.reason is None
        assert all(_contributes(plugin).values())
        corenn.neg(corenn.ones(2))
        assert CountingNeg.calls == 1 and plugin.ops == ["neg"]
        plugins.enable(plugin)  # enabling an active plugin registers nothing twice
        assert [r.source for r in dispatch.kernels.registrations("neg")].count("everything") == 1


def test_disabled_block_turns_on_again_only_what_was_on():
    plugin = Everything()
    with register_plugin(plugin, name="everything") as record:
        with pytest.raises(KeyError, match="inside"):
            with plugins.disabled("everything"):
                assert record.status == "disabled" and not any(_contributes(plugin).values())
                raise KeyError("inside")
        assert record.status == "active" and all(_contributes(plugin).values())
        plugins.disable("everything")
        with plugins.disabled("everything"):
            pass
        assert record.status == "disabled"
        plugins.enable("everything")


def test_unregistering_a_disabled_plugin_leaves_nothing_to_enable():
    plugin = Everything()
    record = plugins.register(plugin, name="everything")
    plugins.disable("everything")
    plugins.unregister("everything")
    assert not any(_contributes(plugin).values())
    with pytest.raises(KeyError, match="no plugin named 'everything'"):
        plugins.enable("everything")
    with pytest.raises(KeyError, match="is not registered"):
        plugins.enable(plugin)
    assert record.plugin is None


def test_a_disabled_plugin_name_is_still_taken():
    with register_plugin(Everything(), name="everything"):
        plugins.disable("everything")
        with pytest.raises(ValueError, match="already registered"):
            plugins.register(Everything(), name="everything")
        plugins.enable("everything")


def test_what_cannot_be_disabled_or_enabled_says_why():
    with pytest.raises(ValueError, match="built into corenn"):
        plugins.disable("corenn.ops")
    with pytest.raises(KeyError, match="no plugin named 'nosuch'"):
        plugins.disable("nosuch")

    class Device:
        @corenn.hookimpl
        def corenn_register_backends(self):
            return [Backend(type="switchdev", xp=np, to_device=lambda a, i=None: np.array(a),
                            to_host=lambda a: np.array(a))]

    with register_plugin(Device(), name="switchdev"):
        with pytest.raises(ValueError, match="provides the device type\\(s\\) switchdev"):
            plugins.disable("switchdev")

    class Broken:
        @corenn.hookimpl
        def corenn_register_kernels(self):
            raise RuntimeError("boom")

    with pytest.warns(plugins.PluginWarning):
        with register_plugin(Broken(), name="broken", allow_failure=True):
            with pytest.raises(ValueError, match="'broken' is failed .*boom.*only an active plugin"):
                plugins.disable("broken")
            with pytest.raises(ValueError, match="'broken' is failed"):
                plugins.enable("broken")


# -- registrations are validated ----------------------------------------------------------------------------------------

def _kernels_plugin(*registrations):
    class Kernels:
        @corenn.hookimpl
        def corenn_register_kernels(self):
            return list(registrations)
    return Kernels()


@pytest.mark.parametrize("registration, message", [
    (KernelRegistration("negg", "cpu", CountingNeg, priority=5),
     "op 'negg' is not a corenn op (did you mean 'neg'?)"),
    (KernelRegistration("frobnicate", "*", CountingNeg, priority=5), "op 'frobnicate' is not a corenn op;"),
    (KernelRegistration("neg", "nosuchdevice", CountingNeg, priority=5),
     "kernel for op 'neg' names device type 'nosuchdevice', which no backend provides"),
    (KernelRegistration("neg", "cpuu", CountingNeg, priority=5), "device type 'cpuu' (did you mean 'cpu'?)"),
])
def test_a_registration_for_an_unknown_op_or_device_fails_the_plugin(registration, message):
    """A corenn_register_kernels answer naming no core op, or no device, fails the whole plugin."""
    good = KernelRegistration("neg", "cpu", CountingNeg, priority=5)
    with pytest.warns(plugins.PluginWarning, match=r"corenn plugin 'typo' \(registered at run time\) failed"):
        with register_plugin(_kernels_plugin(good, registration), name="typo", allow_failure=True) as record:
            assert record.status == "failed" and message in record.reason, record.reason
            assert record.kernels == []
    assert dispatch.kernels.source_of("neg", "cpu") == "corenn.ops"  # the good one went too


def test_known_device_types_and_a_backend_registered_with_its_kernels_are_accepted():
    cuda = KernelRegistration("neg", "cuda", CountingNeg, priority=5)  # corenn-cuda's type, GPU or not
    with register_plugin(_kernels_plugin(cuda), name="cudakernels") as record:
        assert record.status == "active"

    class DeviceWithKernels:
        @corenn.hookimpl
        def corenn_register_backends(self):
            return [Backend(type="ownkernels", xp=np, to_device=lambda a, i=None: np.array(a),
                            to_host=lambda a: np.array(a))]

        @corenn.hookimpl
        def corenn_register_kernels(self):
            return [KernelRegistration("neg", "ownkernels", CountingNeg, priority=5)]

    with register_plugin(DeviceWithKernels(), name="ownkernels") as record:
        assert record.status == "active" and record.devices == ["ownkernels"]


def _neg_plugin(kernel, priority):
    class Plugin:
        @corenn.hookimpl
        def corenn_register_kernels(self):
            return [KernelRegistration("neg", "cpu", kernel, priority=priority)]
    return Plugin()


def test_disable_and_enable_give_back_the_kernel_that_ran_before(capsys):
    """Two plugins tie on priority: the first registered runs, before and after the other is switched off and on."""
    first = type("FirstNeg", (CountingNeg,), {})
    second = type("SecondNeg", (CountingNeg,), {})
    with register_plugin(_neg_plugin(first, 50), name="first"), \
            register_plugin(_neg_plugin(second, 50), name="second"):
        assert dispatch.kernels.lookup("neg", "cpu") is first
        with plugins.disabled("first"):
            assert dispatch.kernels.lookup("neg", "cpu") is second
        assert dispatch.kernels.lookup("neg", "cpu") is first  # not handed to "second" by re-registering
        assert dispatch.kernels.source_of("neg", "cpu") == "first"

        # The listing says which registered kernel does not run, and which one does instead.
        listed = {r.name: r.to_dict() for r in plugins.list_plugins()}
        assert listed["first"]["kernels"][0]["shadowed_by"] is None
        assert listed["second"]["kernels"][0]["shadowed_by"] == "first"
        from corenn.__main__ import main
        assert main(["plugins"]) == 0
        assert "not running, another kernel wins: neg (first)" in capsys.readouterr().out
