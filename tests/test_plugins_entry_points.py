"""Loading installed plugins through entry points, and the environment switches, in fresh interpreters.

Each test lays out distributions the way pip leaves them (a package plus a
``<name>-<version>.dist-info`` with ``entry_points.txt``) in a temporary directory
on ``PYTHONPATH`` and imports corenn in a subprocess: entry points load at import,
so only a fresh interpreter shows what a user sees. (A real ``pip install`` into a
virtualenv is in test_plugins_venv.py.)
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

TOY_PLUGIN = '''
"""A toy device: arrays are numpy, every transfer is counted; plus a relu override on it."""
import numpy as np

import corenn
from corenn.autograd.node import Op
from corenn.dispatch import Backend, KernelRegistration

TRANSFERS = {"to_device": 0, "to_host": 0}


def _to_device(array, index=None):
    TRANSFERS["to_device"] += 1
    return np.array(array, copy=True)


def _to_host(array):
    TRANSFERS["to_host"] += 1
    return np.array(array, copy=True)


class ToyRelu(Op):
    grad_fn_name = "ReluBackward0"
    calls = 0

    @staticmethod
    def forward(ctx, a):
        ToyRelu.calls += 1
        out = ctx.xp.maximum(a, 0)
        ctx.save_for_backward(out)
        return out

    @staticmethod
    def backward(ctx, grad):
        (out,) = ctx.saved_arrays
        return grad * (out > 0)


@corenn.hookimpl
def corenn_register_backends():
    return [Backend(type="toy", xp=np, to_device=_to_device, to_host=_to_host,
                    description="numpy arrays, counted transfers")]


@corenn.hookimpl
def corenn_register_kernels():
    return [KernelRegistration("relu", "toy", ToyRelu, priority=10)]


@corenn.hookimpl
def corenn_info_lines():
    return [f"toy transfers: {TRANSFERS['to_device']} in, {TRANSFERS['to_host']} out"]
'''

IMPORT_ERROR_PLUGIN = '''
import corenn_missing_dependency  # not installed: the plugin fails at import
'''

RAISING_HOOK_PLUGIN = '''
import corenn


@corenn.hookimpl
def corenn_register_backends():
    raise RuntimeError("driver handshake failed")
'''

UNAVAILABLE_PLUGIN = '''
import corenn
from corenn.plugins import PluginUnavailable


@corenn.hookimpl
def corenn_register_backends():
    raise PluginUnavailable("no accelerator on this machine")
'''

USES_CORENN_API_AT_IMPORT = '''
import corenn
import corenn.nn  # noqa: F401 - a plugin may use any of corenn's API while it imports

SCALE = corenn.zeros(2) + 1


@corenn.hookimpl
def corenn_info_lines():
    return [f"scale: {SCALE.tolist()}"]
'''


def write_distribution(root: Path, dist: str, version: str, entry_points: dict[str, str],
                       modules: dict[str, str]) -> None:
    """Lay out an installed distribution: its modules plus a dist-info with METADATA and entry_points.txt."""
    for relative, source in modules.items():
        path = root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(source))
    info = root / f"{dist.replace('-', '_')}-{version}.dist-info"
    info.mkdir()
    info.joinpath("METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: {version}\n")
    lines = "".join(f"{name} = {value}\n" for name, value in entry_points.items())
    info.joinpath("entry_points.txt").write_text(f"[corenn]\n{lines}")


def run_python(code: str, site: Path, **env) -> subprocess.CompletedProcess:
    environment = {k: v for k, v in os.environ.items() if not k.startswith("CORENN_")}
    environment["PYTHONPATH"] = str(site)
    environment.update(env)
    # cwd is the temporary site: a corenn checkout's own *.egg-info must not shadow the installed metadata.
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True,
                          env=environment, cwd=site, timeout=120)


@pytest.fixture
def site(tmp_path):
    """A directory holding a working toy-device plugin and a distribution with two broken ones."""
    write_distribution(tmp_path, "corenn-toy", "1.2.3", {"toy": "corenn_toy"}, {"corenn_toy/__init__.py": TOY_PLUGIN})
    write_distribution(tmp_path, "corenn-broken", "0.1", {"broken_import": "corenn_broken.import_error",
                                                           "broken_hook": "corenn_broken.raising_hook"},
                       {"corenn_broken/__init__.py": "", "corenn_broken/import_error.py": IMPORT_ERROR_PLUGIN,
                        "corenn_broken/raising_hook.py": RAISING_HOOK_PLUGIN})
    return tmp_path


STATUS = """
import json, warnings
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    import corenn
print(json.dumps({
    "records": {r.name: [r.status, r.distribution, r.version, r.reason] for r in corenn.plugins.list_plugins()},
    "warnings": [str(w.message) for w in caught if issubclass(w.category, corenn.plugins.PluginWarning)],
    "devices": corenn.dispatch.available_devices(),
    "core_works": (corenn.ones(2) * 3).tolist(),
}))
"""


def status(site, **env) -> dict:
    result = run_python(STATUS, site, **env)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def test_discovers_loads_and_uses_an_installed_plugin(site):
    result = run_python("""
        import corenn, corenn_toy
        record = corenn.plugins.records["toy"]
        print(record.status, record.distribution, record.version, record.entry_point, record.devices)
        x = corenn.tensor([-1.0, 2.0], device="toy", requires_grad=True)
        y = x.relu()
        y.sum().backward()
        print(y.device, corenn_toy.ToyRelu.calls, x.grad.cpu().tolist(), corenn_toy.TRANSFERS)
        print(corenn.relu(corenn.tensor([-1.0, 2.0])).tolist(), corenn_toy.ToyRelu.calls)
    """, site, CORENN_PLUGINS="toy")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0] == "active corenn-toy 1.2.3 corenn_toy ['toy']"
    # the override ran on the toy device, gradients flowed, and exactly one transfer each way happened
    assert lines[1] == "toy 1 [0.0, 1.0] {'to_device': 1, 'to_host': 1}"
    assert lines[2] == "[0.0, 2.0] 1"  # on cpu the core kernel still runs
    assert result.stderr == ""


def test_broken_plugins_warn_once_are_listed_failed_and_core_keeps_working(site):
    found = status(site)
    records = found["records"]
    assert records["toy"][0] == "active"
    status_, dist, _, reason = records["broken_import"]
    assert (status_, dist) == ("failed", "corenn-broken")
    assert reason == "import failed: ModuleNotFoundError: No module named 'corenn_missing_dependency'"
    assert records["broken_hook"][:2] == ["failed", "corenn-broken"]
    assert records["broken_hook"][3] == "RuntimeError: driver handshake failed"
    assert sorted(found["warnings"]) == [
        "corenn plugin 'broken_hook' (distribution corenn-broken) failed and was skipped: RuntimeError: driver "
        "handshake failed",
        "corenn plugin 'broken_import' (distribution corenn-broken) failed and was skipped: import failed: "
        "ModuleNotFoundError: No module named 'corenn_missing_dependency'",
    ]
    assert found["devices"] == ["cpu", "toy"]
    assert found["core_works"] == [3.0, 3.0]


def test_failure_warning_is_printed_once_to_stderr(site):
    result = run_python("import corenn; import corenn.plugins; corenn.plugins.ensure_loaded(); print('ok')", site)
    assert result.returncode == 0 and result.stdout == "ok\n"
    assert result.stderr.count("PluginWarning: corenn plugin 'broken_hook'") == 1
    assert result.stderr.count("PluginWarning: corenn plugin 'broken_import'") == 1


def test_disable_autoload_loads_no_entry_points_but_lists_them(site):
    found = status(site, CORENN_DISABLE_PLUGIN_AUTOLOAD="1")
    assert found["warnings"] == []
    assert found["devices"] == ["cpu"]
    assert found["records"]["toy"] == ["disabled", "corenn-toy", "1.2.3", "CORENN_DISABLE_PLUGIN_AUTOLOAD is set"]
    assert found["records"]["broken_hook"][0] == "disabled"
    assert found["records"]["corenn.ops"][0] == "active"  # built-ins always load


def test_corenn_plugins_selects_by_entry_point_or_distribution_name(site):
    found = status(site, CORENN_PLUGINS="toy")
    assert found["warnings"] == [] and found["devices"] == ["cpu", "toy"]
    assert found["records"]["broken_import"] == ["disabled", "corenn-broken", "0.1", "not named in CORENN_PLUGINS=toy"]
    found = status(site, CORENN_PLUGINS="corenn-broken")
    assert found["devices"] == ["cpu"]
    assert {name for name, r in found["records"].items() if r[0] == "failed"} == {"broken_import", "broken_hook"}
    assert found["records"]["toy"][0] == "disabled"


def test_corenn_plugins_naming_a_missing_plugin_warns(site):
    found = status(site, CORENN_PLUGINS="toy, nonexistent")
    assert found["devices"] == ["cpu", "toy"]
    (warning,) = found["warnings"]
    assert warning.startswith("CORENN_PLUGINS names 'nonexistent', which is not installed (installed corenn plugins: ")
    # the plugins laid out here are named (plugins installed in this environment may be listed beside them)
    assert {"broken_hook", "broken_import", "toy"} <= set(warning.split("plugins: ")[1].rstrip(")").split(", "))


def test_strict_mode_makes_import_fail_with_the_cause(site):
    result = run_python("import corenn", site, CORENN_STRICT_PLUGINS="1")
    assert result.returncode == 1
    assert "corenn.plugins.PluginError: corenn plugin 'broken_" in result.stderr
    assert "(distribution corenn-broken) failed" in result.stderr
    assert "CORENN_STRICT_PLUGINS is set" in result.stderr
    ok = run_python("import corenn; print(corenn.plugins.records['toy'].status)", site, CORENN_STRICT_PLUGINS="1",
                    CORENN_PLUGINS="toy")
    assert ok.returncode == 0 and ok.stdout == "active\n"


def test_trace_prints_loading_and_hook_calls_to_stderr(site):
    result = run_python("import corenn", site, CORENN_TRACE_PLUGINS="1", CORENN_PLUGINS="toy")
    assert result.returncode == 0
    err = result.stderr
    assert "loading entry point toy = corenn_toy (corenn-toy) [corenn]" in err
    assert "corenn_register_backends [hook]" in err
    assert "finish corenn_register_kernels --> [[KernelRegistration(op='relu', device_type='toy'" in err
    assert "plugin toy active: devices=['toy'] kernels=1 [corenn]" in err
    quiet = run_python("import corenn", site, CORENN_PLUGINS="toy")
    assert quiet.stderr == ""


def test_unavailable_plugin_is_listed_with_reason_and_no_warning(tmp_path):
    write_distribution(tmp_path, "corenn-accel", "2.0", {"accel": "corenn_accel"},
                       {"corenn_accel.py": UNAVAILABLE_PLUGIN})
    found = status(tmp_path)
    assert found["records"]["accel"] == ["unavailable", "corenn-accel", "2.0", "no accelerator on this machine"]
    assert found["warnings"] == []


def test_plugin_may_use_the_whole_api_while_importing(tmp_path):
    write_distribution(tmp_path, "corenn-eager", "0.1", {"eager": "corenn_eager"},
                       {"corenn_eager.py": USES_CORENN_API_AT_IMPORT})
    result = run_python("import corenn; print(dict((r.name, l) for r, l in corenn.plugins.info_lines())['eager'])",
                        tmp_path)
    assert result.returncode == 0, result.stderr
    assert result.stdout == "['scale: [1.0, 1.0]']\n"


def test_unknown_device_names_the_failed_provider(tmp_path):
    write_distribution(tmp_path, "corenn-cuda", "0.1", {"corenn_cuda": "corenn_cuda"},
                       {"corenn_cuda.py": UNAVAILABLE_PLUGIN.replace("no accelerator on this machine",
                                                                     "no CUDA device found")})
    result = run_python("""
        import corenn
        try:
            corenn.zeros(1, device="cuda")
        except RuntimeError as error:
            print(error)
    """, tmp_path)
    assert result.returncode == 0, result.stderr
    assert "unknown device type 'cuda'; available devices: cpu." in result.stdout
    assert "it is installed but unavailable: no CUDA device found" in result.stdout


KERNELS_FOR_A_DEVICE = '''
import corenn
from corenn.dispatch import KernelRegistration
from corenn.kernels import core_kernel


@corenn.hookimpl
def corenn_register_kernels():
    return [KernelRegistration("relu", "DEVICE", core_kernel("relu"), priority=5)]
'''

DEVICE_ONLY = '''
import numpy as np
import corenn
from corenn.dispatch import Backend


@corenn.hookimpl
def corenn_register_backends():
    return [Backend(type="laterdev", xp=np, to_device=lambda a, i=None: np.array(a), to_host=lambda a: np.array(a))]
'''


def test_kernels_may_name_a_device_another_plugin_of_the_batch_provides(tmp_path):
    # Whichever order the entry points load in, kernels for "laterdev" are accepted because a plugin of the
    # same batch provides it; kernels for a device nobody provides fail their plugin, naming it.
    write_distribution(tmp_path, "corenn-akernels", "0.1", {"akernels": "corenn_akernels"},
                       {"corenn_akernels.py": KERNELS_FOR_A_DEVICE.replace("DEVICE", "laterdev")})
    write_distribution(tmp_path, "corenn-laterdev", "0.1", {"laterdev": "corenn_laterdev"},
                       {"corenn_laterdev.py": DEVICE_ONLY})
    write_distribution(tmp_path, "corenn-typo", "0.1", {"typo": "corenn_typo"},
                       {"corenn_typo.py": KERNELS_FOR_A_DEVICE.replace("DEVICE", "nosuchdevice")})
    found = status(tmp_path)
    assert found["records"]["akernels"][0] == "active"
    assert found["records"]["laterdev"][0] == "active"
    assert found["records"]["typo"][0] == "failed"
    assert "device type 'nosuchdevice', which no backend provides" in found["records"]["typo"][3]
    assert any("corenn plugin 'typo' (distribution corenn-typo) failed" in w for w in found["warnings"])


def test_a_plugin_imported_before_corenn_registers_once_its_import_is_done(site):
    """``import corenn_toy`` first: it imports corenn, which loads it half-made; it must still register in full."""
    result = run_python("""
        import corenn_toy            # its first line imports corenn, which loads the entry point 'toy'
        import corenn
        record = corenn.plugins.records["toy"]
        x = corenn.tensor([-1.0, 2.0], device="toy")
        assert record.status == "active", (record.status, record.reason)
        assert x.relu().tolist() == [0.0, 2.0] and corenn_toy.ToyRelu.calls == 1
        assert record.hooks == ["corenn_info_lines", "corenn_register_backends", "corenn_register_kernels"]
        print("ok")
    """, site, CORENN_PLUGINS="toy")
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "ok"


def test_a_pending_plugin_is_listed_as_pending_while_its_import_runs(tmp_path):
    write_distribution(tmp_path, "corenn-slow", "1.0", {"slow": "corenn_slow"}, {"corenn_slow/__init__.py": '''
        import corenn
        SEEN = corenn.plugins.records["slow"].status, corenn.plugins.records["slow"].reason

        @corenn.hookimpl
        def corenn_info_lines():
            return ["slow: here"]
    '''})
    result = run_python("""
        import corenn_slow, corenn
        print(corenn_slow.SEEN[0], "|", corenn.plugins.records["slow"].status if corenn.plugins.list_plugins() else "")
    """, tmp_path)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "pending | active"
