"""Installing corenn doesn't change unrelated pytest runs: its pytest plugin imports corenn only for the fixture."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from importlib.metadata import entry_points

UNRELATED = """
import sys

def test_nothing_of_corenn_is_loaded():
    assert "_corenn_pytestplugin" in sys.modules  # pytest did load corenn's plugin...
    loaded = sorted(m for m in sys.modules if m.split(".")[0] in ("corenn", "corenn_numba", "numba"))
    assert loaded == []                           # ...and it pulled in nothing of corenn or its plugins
"""

USES_FIXTURE = """
import sys

def test_fixture_imports_corenn_on_use(corenn_plugin):
    import corenn

    class Info:
        @corenn.hookimpl
        def corenn_info_lines(self):
            return ["hello"]

    record = corenn_plugin(Info(), name="pytest-plugin-probe")
    assert record.status == "active" and "corenn" in sys.modules
"""


def _pytest(tmp_path, source: str, *args: str) -> subprocess.CompletedProcess:
    # A directory of its own: no conftest, pyproject or rootdir of corenn's around.
    (tmp_path / "test_probe.py").write_text(textwrap.dedent(source))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "CORENN_"))}
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *args, "test_probe.py"],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)


def test_the_pytest11_entry_point_is_the_small_module_outside_the_package():
    (entry_point,) = [ep for ep in entry_points(group="pytest11") if ep.name == "corenn"]
    assert entry_point.value == "_corenn_pytestplugin"
    assert not entry_point.value.startswith("corenn")  # corenn/__init__ would load everything


def test_an_unrelated_pytest_run_loads_nothing_of_corenn(tmp_path):
    result = _pytest(tmp_path, UNRELATED)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "1 passed" in result.stdout


def test_the_fixture_still_works_in_any_pytest_run(tmp_path):
    result = _pytest(tmp_path, USES_FIXTURE)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "1 passed" in result.stdout


def test_dash_p_no_corenn_turns_the_plugin_off(tmp_path):
    result = _pytest(tmp_path, USES_FIXTURE, "-p", "no:corenn")
    assert result.returncode != 0
    assert "fixture 'corenn_plugin' not found" in result.stdout
