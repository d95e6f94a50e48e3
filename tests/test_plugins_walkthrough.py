"""docs/writing-plugins.md works as written: build its plugin from the page, pip-install it, run its tests.

Every fenced block of the page that starts with ``# file: <path>`` is written to a
temporary project; the project is pip-installed into a virtualenv (seeing this
environment's packages, offline) and its own test file runs there with pytest.
"""
from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
from pathlib import Path

import pytest

from _child_venv import make_child_venv, pip_install_offline

pytestmark = [
    pytest.mark.slow,
    # pip builds the plugin offline with --no-build-isolation: the build backend must already be installed.
    pytest.mark.skipif(importlib.util.find_spec("setuptools") is None,
                       reason="setuptools is not installed, and pip cannot fetch it offline to build the plugin"),
]

PAGE = Path(__file__).resolve().parents[1] / "docs" / "writing-plugins.md"
BLOCK = re.compile(r"```(?:python|toml)\n# file: (?P<path>\S+)\n(?P<body>.*?)```", re.S)


def project_files() -> dict[str, str]:
    files = {m["path"]: f"# file: {m['path']}\n{m['body']}" for m in BLOCK.finditer(PAGE.read_text())}
    return files


def test_the_page_holds_a_complete_plugin():
    assert set(project_files()) == {"pyproject.toml", "corenn_counting/__init__.py", "tests/test_counting.py"}


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    root = tmp_path_factory.mktemp("walkthrough")
    project = root / "corenn-counting"
    for relative, text in project_files().items():
        path = project / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    env_dir = root / "venv"
    python = make_child_venv(env_dir)
    install = pip_install_offline(python, str(project), cwd=root)
    assert install.returncode == 0, install.stdout + install.stderr
    environment = {k: v for k, v in os.environ.items() if not k.startswith("CORENN_") and k != "PYTHONPATH"}
    return python, project, environment


def test_walkthrough_plugin_is_listed_as_the_page_shows(installed):
    python, project, environment = installed
    result = subprocess.run([str(python), "-m", "corenn", "plugins"], capture_output=True, text=True,
                            cwd=project.parent, env=environment, timeout=120)
    assert result.returncode == 0, result.stderr
    shown = ("counting  corenn-counting 0.1.0  active\n  entry point: corenn_counting\n"
             "  hooks: corenn_info_lines, corenn_register_backends, corenn_register_kernels\n"
             "  devices: counting\n  kernels:\n    relu on counting (priority 10, overrides corenn.ops)\n")
    assert shown in result.stdout
    assert shown in PAGE.read_text()  # the page shows the real output
    info = subprocess.run([str(python), "-m", "corenn", "info", "--json"], capture_output=True, text=True,
                          cwd=project.parent, env=environment, timeout=120)
    assert json.loads(info.stdout)["plugin_lines"]["counting"] == ["counting: 0 transfers in, 0 out"]


def test_walkthrough_plugin_tests_pass(installed):
    python, project, environment = installed
    result = subprocess.run([str(python), "-m", "pytest", "tests", "-q", "-p", "no:cacheprovider"],
                            capture_output=True, text=True, cwd=project, env=environment, timeout=300)
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]
    # 6 plain tests + one per conformance case of relu, add and matmul (20 in all today)
    match = re.search(r"(\d+) passed", result.stdout)
    assert match and int(match.group(1)) >= 10, result.stdout[-2000:]
    assert "failed" not in result.stdout and "error" not in result.stdout.lower()
