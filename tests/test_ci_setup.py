"""CI runs the README's test command, and gets the derandomized hypothesis profile without being told."""
from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[1]

PROBE = """
import json, sys
sys.path.insert(0, {tests!r})
import conftest  # registers and loads the profiles, as pytest does
from hypothesis import settings
print(json.dumps([settings.default.derandomize, settings.default.max_examples]))
"""


def _profile_seen(**env_extra) -> list:
    env = {k: v for k, v in os.environ.items() if k not in ("CI", "HYPOTHESIS_PROFILE")}
    env.update(env_extra)
    result = subprocess.run([sys.executable, "-c", PROBE.format(tests=str(ROOT / "tests"))],
                            capture_output=True, text=True, timeout=120, env=env, check=False)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout.strip().splitlines()[-1])


def test_ci_gets_the_derandomized_profile_from_the_ci_variable():
    assert _profile_seen() == [False, 25]  # a developer's run: random examples, as hypothesis intends
    assert _profile_seen(CI="1") == [True, 100]  # CI: the same examples every run, so a failure reproduces
    assert _profile_seen(CI="true") == [True, 100]  # what CI services set
    assert _profile_seen(CI="1", HYPOTHESIS_PROFILE="quick")[1] == 5  # an explicit choice wins


def test_ci_script_runs_exactly_the_readme_command_with_ci_set():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    command = next(line for line in readme.splitlines() if line.endswith("&& python -m pytest"))
    script = (ROOT / ".ci" / "run").read_text(encoding="utf-8").splitlines()
    assert script[-1] == command
    assert "export CI=1" in [line.split("#")[0].strip() for line in script]
