"""``python -m corenn plugins / info / hooks`` on their real output, with real installed plugins.

The plugins are laid out as installed distributions on PYTHONPATH (see
test_plugins_entry_points.py for the helper); the commands run as a user runs them.
"""
from __future__ import annotations

import json
import os
import platform
import subprocess
import sys

import numpy as np
import pytest

import corenn
from corenn import hookspecs
from test_plugins_entry_points import (IMPORT_ERROR_PLUGIN, RAISING_HOOK_PLUGIN, TOY_PLUGIN, UNAVAILABLE_PLUGIN,
                                       write_distribution)


def corenn_cli(*args, site=None, **env) -> subprocess.CompletedProcess:
    environment = {k: v for k, v in os.environ.items() if not k.startswith("CORENN_")}
    if site is not None:
        environment["PYTHONPATH"] = str(site)
    environment.update(env)
    return subprocess.run([sys.executable, "-m", "corenn", *args], capture_output=True, text=True, env=environment,
                          cwd=site or os.getcwd(), timeout=120)


@pytest.fixture
def site(tmp_path):
    write_distribution(tmp_path, "corenn-toy", "1.2.3", {"toy": "corenn_toy"}, {"corenn_toy/__init__.py": TOY_PLUGIN})
    write_distribution(tmp_path, "corenn-broken", "0.1", {"broken_import": "corenn_broken.import_error",
                                                           "broken_hook": "corenn_broken.raising_hook"},
                       {"corenn_broken/__init__.py": "", "corenn_broken/import_error.py": IMPORT_ERROR_PLUGIN,
                        "corenn_broken/raising_hook.py": RAISING_HOOK_PLUGIN})
    write_distribution(tmp_path, "corenn-accel", "2.0", {"accel": "corenn_accel"},
                       {"corenn_accel.py": UNAVAILABLE_PLUGIN})
    return tmp_path


def test_plugins_text_lists_every_plugin_with_status_and_contributions(site):
    result = corenn_cli("plugins", site=site)
    assert result.returncode == 0
    out = result.stdout
    # 6 = the 2 built-ins and the 4 laid out here; plugins installed in this environment (e.g. corenn-numba) add to it
    header = out.splitlines()[0]
    assert header.startswith(f"corenn {corenn.__version__}: ") and header.endswith(" plugins (2 built-in)")
    assert int(header.split(": ")[1].split()[0]) >= 6
    assert "corenn.backends.cpu  corenn 0.1.0  active (built-in)\n  hooks: corenn_info_lines, " \
           "corenn_register_backends\n  devices: cpu\n" in out
    assert "corenn.ops  corenn 0.1.0  active (built-in)\n  hooks: corenn_register_kernels\n  kernels: " in out
    assert ("toy  corenn-toy 1.2.3  active\n  entry point: corenn_toy\n"
            "  hooks: corenn_info_lines, corenn_register_backends, corenn_register_kernels\n"
            "  devices: toy\n  kernels:\n    relu on toy (priority 10, overrides corenn.ops)\n") in out
    assert ("broken_import  corenn-broken 0.1  failed: import failed: ModuleNotFoundError: No module named "
            "'corenn_missing_dependency'\n") in out
    assert "broken_hook  corenn-broken 0.1  failed: RuntimeError: driver handshake failed\n" in out
    assert "accel  corenn-accel 2.0  unavailable: no accelerator on this machine\n" in out
    # the failures were also warned about, once each, on stderr
    assert result.stderr.count("PluginWarning") == 2


def test_plugins_json_is_complete_and_parses(site):
    result = corenn_cli("plugins", "--json", site=site)
    assert result.returncode == 0
    listed = json.loads(result.stdout)
    assert listed["corenn"] == corenn.__version__
    by_name = {p["name"]: p for p in listed["plugins"]}
    assert list(by_name)[:2] == ["corenn.backends.cpu", "corenn.ops"]  # built-ins first, then installed ones
    assert {"corenn.backends.cpu", "corenn.ops", "accel", "broken_hook", "broken_import", "toy"} <= set(by_name)
    toy = by_name["toy"]
    assert toy == {"name": "toy", "distribution": "corenn-toy", "version": "1.2.3", "status": "active",
                   "reason": None, "builtin": False, "entry_point": "corenn_toy",
                   "hooks": ["corenn_info_lines", "corenn_register_backends", "corenn_register_kernels"],
                   "devices": ["toy"],
                   "kernels": [{"op": "relu", "device_type": "toy", "priority": 10, "overrides": ["corenn.ops"],
                                "shadowed_by": None}],
                   "process_group_backends": [], "fx_leaf_rules": 0, "module_state_handlers": 0, "op_observers": 0,
                   "import_paths": {}, "names": [], "detached": []}
    assert by_name["accel"]["status"] == "unavailable"
    assert by_name["accel"]["reason"] == "no accelerator on this machine"
    assert by_name["broken_hook"]["status"] == "failed" and by_name["broken_hook"]["devices"] == []
    core_ops = {k["op"] for k in by_name["corenn.ops"]["kernels"]}
    assert {"add", "matmul", "relu"} <= core_ops


def test_plugins_with_autoload_disabled_shows_installed_as_disabled(site):
    result = corenn_cli("plugins", "--json", site=site, CORENN_DISABLE_PLUGIN_AUTOLOAD="1")
    assert result.returncode == 0 and "PluginWarning" not in result.stderr
    statuses = {p["name"]: (p["status"], p["reason"]) for p in json.loads(result.stdout)["plugins"]}
    assert statuses["toy"] == ("disabled", "CORENN_DISABLE_PLUGIN_AUTOLOAD is set")
    assert statuses["corenn.ops"] == ("active", None)


def test_info_has_versions_devices_and_plugin_lines(site):
    result = corenn_cli("info", site=site, CORENN_PLUGINS="toy,accel")
    assert result.returncode == 0, result.stderr
    out = result.stdout.splitlines()
    assert out[0] == f"corenn: {corenn.__version__}"
    assert out[1].startswith(f"python: {platform.python_implementation()} {platform.python_version()} (")
    assert out[2] == f"numpy: {np.__version__}"
    blas = np.show_config(mode="dicts")["Build Dependencies"]["blas"]
    assert out[3] == f"BLAS: {blas['name']} {blas['version']}".strip()
    assert out[4] == "devices available: cpu, toy"
    assert "  toy: 1 from toy; numpy arrays, counted transfers" in out
    assert "environment: CORENN_PLUGINS=toy,accel" in out
    assert "  toy (corenn-toy 1.2.3): active" in out
    assert out[out.index("  toy (corenn-toy 1.2.3): active") + 1] == "    toy transfers: 0 in, 0 out"
    assert "  accel (corenn-accel 2.0): unavailable: no accelerator on this machine" in out
    assert "  broken_hook (corenn-broken 0.1): disabled: not named in CORENN_PLUGINS=toy,accel" in out
    assert f"    cpu: numpy {np.__version__} (BLAS: {blas['name']} {blas['version']})" in out


def test_info_json(site):
    result = corenn_cli("info", "--json", site=site, CORENN_PLUGINS="toy")
    assert result.returncode == 0, result.stderr
    info = json.loads(result.stdout)
    assert info["corenn"] == corenn.__version__ and info["numpy"] == np.__version__
    assert info["available_devices"] == ["cpu", "toy"]
    assert info["plugin_lines"]["toy"] == ["toy transfers: 0 in, 0 out"]
    assert {d["type"]: d["provider"] for d in info["devices"]} == {"cpu": "corenn.backends.cpu", "toy": "toy"}


def test_hooks_lists_every_hookspec_with_its_signature():
    result = corenn_cli("hooks")
    assert result.returncode == 0
    names = sorted(n for n in dir(hookspecs) if n.startswith("corenn_"))
    listed = [line.split("(")[0][len("def "):] for line in result.stdout.splitlines() if line.startswith("def ")]
    assert listed == names
    assert "def corenn_register_kernels() -> Iterable[KernelRegistration]\n" in result.stdout


def test_version_help_and_bad_command():
    assert corenn_cli("--version").stdout == f"corenn {corenn.__version__}\n"
    helped = corenn_cli()
    assert helped.returncode == 0 and "{plugins,info,hooks,kernels}" in helped.stdout
    bad = corenn_cli("plugin")
    assert bad.returncode == 2 and "invalid choice: 'plugin'" in bad.stderr
