"""Meta-test: every hookspec is documented in docs/ with its exact signature and docstring, and has a test.

"Has a test" means: some test function in tests/ (or in a plugin's tests) other than
this file names the hook in its body, and that function is not skipped by name here.
"""
from __future__ import annotations

import ast
import inspect
from pathlib import Path

import pytest

from corenn import hookspecs, plugins

ROOT = Path(__file__).resolve().parents[1]
HOOKS_DOC = ROOT / "docs" / "hooks.md"
HOOK_NAMES = sorted(name for name, value in vars(hookspecs).items()
                    if name.startswith("corenn_") and callable(value))


def signature_line(function) -> str:
    # hookspecs.py uses `from __future__ import annotations`: annotations are strings, shown unquoted.
    return f"def {function.__name__}{inspect.signature(function)}".replace("'", "")


def test_the_hookspec_module_declares_the_expected_contract():
    assert HOOK_NAMES == ["corenn_add_hookspecs", "corenn_fx_leaf_modules", "corenn_info_lines",
                          "corenn_module_state_handlers", "corenn_op_observers", "corenn_register_backends",
                          "corenn_register_kernels", "corenn_register_process_group_backends"]
    for name in HOOK_NAMES:
        function = getattr(hookspecs, name)
        assert hasattr(function, "corenn_spec"), f"{name} is not marked with @hookspec"
        assert getattr(plugins.manager.hook, name).has_spec()
        doc = inspect.getdoc(function) or ""
        for part in ("When:", "Receives:", "Returns:", "First answer wins:"):
            assert part in doc, f"the docstring of {name} does not say {part!r}"


@pytest.mark.parametrize("name", HOOK_NAMES)
def test_hook_is_documented_with_exact_signature_and_docstring(name):
    text = HOOKS_DOC.read_text()
    function = getattr(hookspecs, name)
    assert f"### `{name}`" in text, f"docs/hooks.md has no section for {name}"
    section = text.split(f"### `{name}`", 1)[1].split("\n### ", 1)[0].split("\n## ", 1)[0]
    assert f"```python\n{signature_line(function)}\n```" in section, (
        f"docs/hooks.md shows a different signature for {name}; expected {signature_line(function)}")
    assert inspect.getdoc(function) in section, f"docs/hooks.md's docstring of {name} differs from hookspecs.py"


def _test_functions_naming(hook: str) -> list[str]:
    found = []
    files = [p for p in (ROOT / "tests").rglob("test_*.py") if p.name != Path(__file__).name]
    files += list((ROOT / "plugins").glob("*/tests/test_*.py"))
    for path in files:
        source = path.read_text()
        if hook not in source:
            continue
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, ast.FunctionDef) and node.name.startswith("test_"):
                if hook in (ast.get_source_segment(source, node) or ""):
                    found.append(f"{path.relative_to(ROOT)}::{node.name}")
    return found


@pytest.mark.parametrize("name", HOOK_NAMES)
def test_hook_has_a_test(name):
    assert _test_functions_naming(name), f"no test function names {name}"


def test_every_hook_is_documented_in_the_plugin_walkthrough_or_reference():
    walkthrough = (ROOT / "docs" / "writing-plugins.md").read_text()
    for name in ("corenn_register_backends", "corenn_register_kernels"):
        assert name in walkthrough
    assert "hooks.md" in walkthrough
