"""Meta-test: every dotted ``corenn.x.y`` name the docs and docstrings mention exists.

Catches docs that drift from the code: a class that moved (``corenn.autograd.function.Op``
for ``corenn.autograd.node.Op``), a helper that was renamed or never existed. Scanned: the
Markdown docs, the README, and the docstrings of corenn and of the first-party plugins.
"""
from __future__ import annotations

import ast
import importlib
import re
from pathlib import Path

import corenn
from corenn import import_paths, serialization

ROOT = Path(__file__).resolve().parents[1]
DOTTED = re.compile(r"(?<![\w./<-])corenn(?:\.[A-Za-z_]\w*)+")

# Dotted strings that are not Python names: the keys corenn writes into a safetensors file's metadata.
NOT_PYTHON_NAMES = {serialization._FORMAT_KEY, serialization._STRUCTURE_KEY, serialization._CHECKSUM_KEY}


def _texts() -> list[tuple[str, str]]:
    texts = [(str(path.relative_to(ROOT)), path.read_text()) for path in sorted((ROOT / "docs").glob("*.md"))]
    texts += [(str(path.relative_to(ROOT)), path.read_text()) for path in sorted(ROOT.glob("plugins/*/*.md"))]
    texts.append(("README.md", (ROOT / "README.md").read_text()))
    sources = sorted((ROOT / "corenn").rglob("*.py")) + sorted(ROOT.glob("plugins/*/corenn_*/**/*.py"))
    for path in sources:
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
                doc = ast.get_docstring(node)
                if doc:
                    texts.append((f"{path.relative_to(ROOT)}:{getattr(node, 'lineno', 1)}", doc))
    return texts


_MISSING = object()


def resolve(name: str):
    """The object a dotted name of corenn means (a module, or an attribute reached from one); None if nothing."""
    parts = name.split(".")
    for i in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:i]))
        except ImportError:
            continue
        for attr in parts[i:]:
            obj = getattr(obj, attr, _MISSING)
            if obj is _MISSING:
                return None
        return obj
    return None


def resolves(name: str) -> bool:
    """Whether ``name`` is a module of corenn or an attribute reached from one."""
    return resolve(name) is not None


def _plugin_import_path(name: str) -> bool:
    """A path a first-party plugin provides (``corenn.nn.utils.prune``, ``corenn.ao.quantization.x``)."""
    return any(name == path or name.startswith(path + ".") for path in import_paths.known_import_path_providers)


MENTIONS: dict[str, list[str]] = {}
for where, text in _texts():
    for match in DOTTED.finditer(text):
        MENTIONS.setdefault(match.group(0), []).append(where)


def test_the_scan_sees_the_docs():
    assert len(MENTIONS) > 100
    assert "corenn.autograd.node.Op" in MENTIONS


def test_every_dotted_corenn_name_in_docs_and_docstrings_exists():
    missing = [f"{name} (in {', '.join(MENTIONS[name][:3])})" for name in sorted(MENTIONS)
               if name not in NOT_PYTHON_NAMES and not _plugin_import_path(name) and not resolves(name)]
    assert not missing, "names mentioned in docs or docstrings that don't exist:\n" + "\n".join(missing)


def test_the_checker_catches_a_moved_name():
    assert resolves("corenn.autograd.node.Op") and resolves("corenn.nn.Module.state_dict")
    assert not resolves("corenn.autograd.function.Op")
    assert not resolves("corenn.testing.assert_nothing_at_all")
    assert corenn.autograd.node.Op.__module__ == "corenn.autograd.node"
