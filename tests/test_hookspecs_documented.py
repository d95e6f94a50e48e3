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
from test_docs_names import resolve

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
                          "corenn_register_compile_backends",
                          "corenn_register_import_paths", "corenn_register_kernels", "corenn_register_names",
                          "corenn_register_process_group_backends"]
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


def _hook_section(name: str) -> str:
    text = HOOKS_DOC.read_text()
    return text.split(f"### `{name}`", 1)[1].split("\n### ", 1)[0].split("\n## ", 1)[0]


@pytest.mark.parametrize("name", HOOK_NAMES)
def test_hook_section_says_exactly_the_docstring_and_names_existing_tests(name):
    """hooks.md repeats the spec: signature, the docstring and nothing else, then "Tested by:" real tests."""
    section = _hook_section(name)
    body = section.split("\n```\n", 1)[1] if "\n```\n" in section else ""
    prose, _, tested_by = body.partition("Tested by:")
    prose = prose.strip().removesuffix("*Historic hook.*").strip()
    assert prose == inspect.getdoc(getattr(hookspecs, name)), (
        f"docs/hooks.md's text for {name} is not exactly its hookspecs.py docstring")
    assert tested_by.strip(), f"docs/hooks.md names no test for {name}"
    for entry in tested_by.strip().strip("`.").split(";"):
        path, _, function = entry.strip().strip("`").partition("::")
        assert (ROOT / path).is_file(), f"{name}: 'Tested by' names {path}, which does not exist"
        if function:
            tree = ast.parse((ROOT / path).read_text())
            functions = {node.name for node in ast.walk(tree) if isinstance(node, ast.FunctionDef)}
            assert function in functions, f"{name}: 'Tested by' names {path}::{function}, which does not exist"
            assert name in _function_source(ROOT / path, function), (
                f"{name}: the test {path}::{function} does not mention the hook")


def _function_source(path: Path, function: str) -> str:
    source = path.read_text()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.FunctionDef) and node.name == function:
            return ast.get_source_segment(source, node) or ""
    return ""


def _answers_table() -> dict[str, tuple[str, str]]:
    text = HOOKS_DOC.read_text().split("## Where the answers go", 1)[1]
    rows = {}
    for line in text.splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if len(cells) == 3 and cells[0].startswith("`corenn_"):
            rows[cells[0].strip("`")] = (cells[1], cells[2])
    return rows


def test_where_the_answers_go_has_a_row_per_hook_naming_a_real_reader():
    """Each hook's answers are read by something, and the table says by what (no "meant for ... not yet")."""
    import re
    rows = _answers_table()
    assert sorted(rows) == HOOK_NAMES
    for hook, (read_through, used_by) in rows.items():
        assert "yet" not in used_by and "not called" not in used_by, (
            f"hooks.md says the answers of {hook} are not used ({used_by!r}): a hook nothing calls must not be "
            "documented as part of the contract; wire it up or remove it")
        accessor = re.search(r"`(corenn(?:\.\w+)+)", read_through).group(1)
        last = accessor.rsplit(".", 1)[1]
        # A reader that is a corenn object must really use the accessor in its module's source.
        for name in re.findall(r"`(corenn(?:\.\w+)+)", used_by):
            obj = resolve(name)
            if obj is None:
                continue  # not an object of corenn (an import path a plugin provides)
            module = inspect.getmodule(obj)
            assert last in inspect.getsource(module), (
                f"hooks.md says {name} reads the answers of {hook} through {accessor}, but {module.__name__} "
                f"never uses {last}")
