"""A third-party plugin as a user gets one: its own pyproject with an entry point, pip-installed into a virtualenv.

The virtualenv sees this environment's packages (numpy, pluggy, corenn itself; see _child_venv.py), so pip
installs only the throwaway plugins, offline (``--no-index --no-deps
--no-build-isolation``). Slow (~10-60 s: pip builds two wheels), but it is the
contract end to end, so it runs in CI.
"""
from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from _child_venv import make_child_venv, pip_install_offline
from test_plugins_entry_points import IMPORT_ERROR_PLUGIN, RAISING_HOOK_PLUGIN, TOY_PLUGIN

pytestmark = [
    pytest.mark.slow,
    # pip builds the plugin offline with --no-build-isolation: the build backend must already be installed.
    pytest.mark.skipif(importlib.util.find_spec("setuptools") is None,
                       reason="setuptools is not installed, and pip cannot fetch it offline to build the plugin"),
]

PYPROJECT = """
[build-system]
requires = ["setuptools>=64"]
build-backend = "setuptools.build_meta"

[project]
name = "{dist}"
version = "{version}"
dependencies = ["corenn"]

[project.entry-points.corenn]
{entry_points}

[tool.setuptools]
packages = ["{package}"]
"""


def write_project(root: Path, dist: str, version: str, package: str, entry_points: dict[str, str],
                  modules: dict[str, str]) -> Path:
    root.mkdir()
    lines = "\n".join(f'{name} = "{value}"' for name, value in entry_points.items())
    root.joinpath("pyproject.toml").write_text(textwrap.dedent(PYPROJECT).format(
        dist=dist, version=version, package=package, entry_points=lines))
    for relative, source in modules.items():
        path = root / package / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(source))
    return root


@pytest.fixture(scope="module")
def venv(tmp_path_factory):
    """A virtualenv with corenn-toy (working) and corenn-broken (import error, raising hook) pip-installed."""
    root = tmp_path_factory.mktemp("plugin-venv")
    toy = write_project(root / "toy", "corenn-toy", "1.2.3", "corenn_toy", {"toy": "corenn_toy"},
                        {"__init__.py": TOY_PLUGIN})
    broken = write_project(root / "broken", "corenn-broken", "0.1", "corenn_broken",
                           {"broken_import": "corenn_broken.import_error",
                            "broken_hook": "corenn_broken.raising_hook"},
                           {"__init__.py": "", "import_error.py": IMPORT_ERROR_PLUGIN,
                            "raising_hook.py": RAISING_HOOK_PLUGIN})
    env_dir = root / "venv"
    python = make_child_venv(env_dir)
    install = pip_install_offline(python, str(toy), str(broken), cwd=root)
    assert install.returncode == 0, install.stdout + install.stderr
    return python


def in_venv(python: Path, *args, **env) -> subprocess.CompletedProcess:
    environment = {k: v for k, v in os.environ.items() if not k.startswith("CORENN_") and k != "PYTHONPATH"}
    environment.update(env)
    return subprocess.run([str(python), *args], capture_output=True, text=True, env=environment,
                          cwd=python.parent, timeout=120)


def test_pip_installed_plugin_is_discovered_listed_and_its_device_works(venv):
    listed = in_venv(venv, "-m", "corenn", "plugins", "--json")
    assert listed.returncode == 0, listed.stderr
    plugins = {p["name"]: p for p in json.loads(listed.stdout)["plugins"]}
    toy = plugins["toy"]
    assert (toy["status"], toy["distribution"], toy["version"]) == ("active", "corenn-toy", "1.2.3")
    assert toy["devices"] == ["toy"]
    assert toy["kernels"] == [{"op": "relu", "device_type": "toy", "priority": 10, "overrides": ["corenn.ops"],
                               "shadowed_by": None}]

    used = in_venv(venv, "-c", textwrap.dedent("""
        import corenn, corenn_toy
        x = corenn.tensor([-1.0, 3.0], device="toy", requires_grad=True)
        x.relu().sum().backward()
        print(x.device, corenn_toy.ToyRelu.calls, x.grad.cpu().tolist(), corenn_toy.TRANSFERS)
        print(dict((r.name, lines) for r, lines in corenn.plugins.info_lines())["toy"])
    """))
    assert used.returncode == 0, used.stderr
    assert used.stdout.splitlines() == ["toy 1 [0.0, 1.0] {'to_device': 1, 'to_host': 1}",
                                        "['toy transfers: 1 in, 1 out']"]


def test_pip_installed_broken_plugins_warn_fail_and_leave_core_working(venv):
    listed = in_venv(venv, "-m", "corenn", "plugins")
    assert listed.returncode == 0
    assert ("broken_import  corenn-broken 0.1  failed: import failed: ModuleNotFoundError: No module named "
            "'corenn_missing_dependency'") in listed.stdout
    assert "broken_hook  corenn-broken 0.1  failed: RuntimeError: driver handshake failed" in listed.stdout
    assert "PluginWarning: corenn plugin 'broken_hook' (distribution corenn-broken) failed and was skipped: " \
           "RuntimeError: driver handshake failed" in listed.stderr
    assert listed.stderr.count("PluginWarning") == 2
    works = in_venv(venv, "-c", "import corenn; print((corenn.ones(2) @ corenn.ones(2)).item())")
    assert works.returncode == 0 and works.stdout == "2.0\n"


def test_environment_switches_in_the_venv(venv):
    disabled = in_venv(venv, "-c", "import corenn; print(corenn.dispatch.available_devices())",
                       CORENN_DISABLE_PLUGIN_AUTOLOAD="1")
    assert (disabled.stdout, disabled.stderr) == ("['cpu']\n", "")
    only_toy = in_venv(venv, "-c", "import corenn; print(corenn.dispatch.available_devices())", CORENN_PLUGINS="toy")
    assert (only_toy.stdout, only_toy.stderr) == ("['cpu', 'toy']\n", "")
    strict = in_venv(venv, "-c", "import corenn", CORENN_STRICT_PLUGINS="1")
    assert strict.returncode == 1 and "PluginError: corenn plugin 'broken_" in strict.stderr
    traced = in_venv(venv, "-c", "import corenn", CORENN_TRACE_PLUGINS="1", CORENN_PLUGINS="toy")
    assert "loading entry point toy = corenn_toy (corenn-toy) [corenn]" in traced.stderr
    assert "corenn_register_kernels [hook]" in traced.stderr


def test_the_plugins_stay_in_their_environment(venv):
    outside = subprocess.run([sys.executable, "-c", "import corenn; print(sorted(corenn.plugins.records))"],
                             capture_output=True, text=True, cwd=venv.parent, timeout=120,
                             env={k: v for k, v in os.environ.items() if not k.startswith("CORENN_")})
    assert "toy" not in outside.stdout and "broken_hook" not in outside.stdout
