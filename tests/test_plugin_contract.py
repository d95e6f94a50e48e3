"""First-party plugins reach corenn only through documented names: a scan of every file under plugins/.

Any ``.py`` file under ``plugins/`` (packages, tests, benchmarks, plugins yet to be
written) is held to it: no corenn name starting with ``_`` (``from corenn.ops.loss import
_x``, ``corenn.ops.loss._x``, ``import corenn._dtype``, ``getattr(corenn_module, "_x")``),
and no writes to corenn's registries behind the loader's back (``corenn.dispatch.kernels
.register``, ``.unregister_source``, ``corenn.dispatch.observers.append``, ...): kernels
arrive through ``corenn_register_kernels`` and are switched with ``corenn.plugins.disable``
/ ``enable``. A plugin's own private modules (``corenn_numba._base``) are its business.
When a plugin needs a private helper, the fix is to make it public in corenn.
"""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PLUGINS = ROOT / "plugins"

# corenn's registries and the methods that change them
_REGISTRY_WRITES = {
    "corenn.dispatch.kernels": {"register", "unregister_source", "_registrations", "_resolved"},
    "corenn.dispatch.backends": {"register", "unregister", "_backends"},
    "corenn.dispatch.observers": {"append", "extend", "insert", "remove", "pop", "clear"},
}


def _is_corenn(module: str) -> bool:
    return module == "corenn" or module.startswith("corenn.")


def _private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def _chain(node) -> tuple[ast.AST, list[str]]:
    """``a.b.c`` -> (Name a, ["b", "c"])."""
    names = []
    while isinstance(node, ast.Attribute):
        names.append(node.attr)
        node = node.value
    return node, names[::-1]


def contract_violations(source: str, filename: str = "<plugin>") -> list[str]:
    """``file:line: what`` for every private corenn name and registry write in ``source``."""
    tree = ast.parse(source, filename)
    aliases: dict[str, str] = {}  # local name -> the corenn path it stands for
    found = []

    def report(node, what):
        found.append(f"{filename}:{node.lineno}: {what}")

    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if not _is_corenn(alias.name):
                    continue
                if any(_private(part) for part in alias.name.split(".")):
                    report(node, f"imports private module {alias.name}")
                if alias.asname:
                    aliases[alias.asname] = alias.name
                else:
                    aliases["corenn"] = "corenn"
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0 and _is_corenn(node.module):
            if any(_private(part) for part in node.module.split(".")):
                report(node, f"imports from private module {node.module}")
            for alias in node.names:
                if _private(alias.name):
                    report(node, f"imports private name {node.module}.{alias.name}")
                aliases[alias.asname or alias.name] = f"{node.module}.{alias.name}"

    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute):  # a.b.c and its inner a.b find the same first offence: kept once
            root, names = _chain(node)
            if not isinstance(root, ast.Name) or root.id not in aliases:
                continue
            path = aliases[root.id]
            for name in names:
                if _private(name):
                    report(node, f"uses private name {path}.{name}")
                    break
                target = _REGISTRY_WRITES.get(path)
                if target is not None and name in target:
                    report(node, f"writes to {path} ({name}); register through hooks, switch with "
                                 "corenn.plugins.disable/enable")
                    break
                path = f"{path}.{name}"
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("getattr", "setattr")
              and len(node.args) >= 2 and isinstance(node.args[0], ast.Name) and node.args[0].id in aliases
              and isinstance(node.args[1], ast.Constant) and isinstance(node.args[1].value, str)
              and _private(node.args[1].value)):
            report(node, f"uses private name {aliases[node.args[0].id]}.{node.args[1].value} via {node.func.id}")
    return sorted(set(found), key=lambda line: int(line.split(":")[1]))


def plugin_files() -> list[Path]:
    return sorted(path for path in PLUGINS.rglob("*.py")
                  if not any(part.startswith(".") or part in ("build", "__pycache__") or part.endswith(".egg-info")
                             for part in path.relative_to(PLUGINS).parts))


def test_no_plugin_uses_a_private_corenn_name_or_writes_its_registries():
    files = plugin_files()
    assert any(path.parts[-2:] == ("corenn_numba", "__init__.py") for path in files)  # the scan sees the plugins
    violations = []
    for path in files:
        violations += contract_violations(path.read_text(), str(path.relative_to(ROOT)))
    assert not violations, ("plugins must reach corenn through documented names only (make the helper public in "
                            "corenn instead):\n" + "\n".join(violations))


@pytest.mark.parametrize("source, expected", [
    ("from corenn.ops.loss import _check_targets", "imports private name corenn.ops.loss._check_targets"),
    ("from corenn.ops._kernel import CORE_KERNELS", "imports from private module corenn.ops._kernel"),
    ("import corenn._dtype", "imports private module corenn._dtype"),
    ("import corenn._dtype as d", "imports private module corenn._dtype"),
    ("from corenn.ops import loss as core_loss\ncore_loss._check_targets(1)",
     "uses private name corenn.ops.loss._check_targets"),
    ("import corenn\ncorenn.ops.pooling._pool_output_size(1)", "uses private name corenn.ops.pooling._pool_output_size"),
    ("import corenn.ops.movement as m\nx = m._PAD_MODES['reflect']", "uses private name corenn.ops.movement._PAD_MODES"),
    ("from corenn.ops import movement\ngetattr(movement, '_full_index')", "corenn.ops.movement._full_index via getattr"),
    ("from corenn.dispatch import kernels\nkernels.register(r)", "writes to corenn.dispatch.kernels (register)"),
    ("import corenn\ncorenn.dispatch.kernels.unregister_source('numba')",
     "writes to corenn.dispatch.kernels (unregister_source)"),
    ("from corenn import dispatch\ndispatch.observers.append(o)", "writes to corenn.dispatch.observers (append)"),
])
def test_the_scan_catches_each_form(source, expected):
    found = contract_violations(source, "plugin.py")
    assert len(found) == 1 and expected in found[0], found
    assert found[0].startswith(f"plugin.py:{source.count(chr(10)) + 1}:")


@pytest.mark.parametrize("source", [
    "import corenn\nprint(corenn.__version__)",
    "from corenn.kernels import KernelOverride, check_targets",
    "from corenn.dispatch import kernels\nkernels.lookup('conv', 'cpu')",
    "from corenn_numba import _base\n_base.handles(x)",
    "import corenn_numba._malloc",
    "x = tensor._data  # not a corenn name: a value's attribute",
])
def test_the_scan_lets_public_names_and_the_plugins_own_privates_through(source):
    assert contract_violations(source) == []
