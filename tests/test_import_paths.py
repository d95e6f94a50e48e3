"""PyTorch's import paths reach plugin APIs: ``corenn_register_import_paths`` and ``corenn.import_paths``."""
from __future__ import annotations

import importlib
import io
import json
import os
import subprocess
import sys
import textwrap

import pytest

import corenn
from corenn import import_paths, plugins
from corenn.__main__ import main as corenn_main
from corenn.import_paths import install_hint, known_import_path_providers
from test_plugins_entry_points import write_distribution


@pytest.fixture
def fake_plugin_modules(tmp_path, monkeypatch):
    """A plugin's own modules on sys.path: ``fakeprune.prune`` (with ``fakeprune.prune.extra``) and ``fakeq``.

    Each records its import in ``fake_imports`` so tests can see that registration imports nothing.
    """
    files = {
        "fakeprune/__init__.py": "",
        "fakeprune/prune/__init__.py": "import builtins\nbuiltins.fake_imports.append(__name__)\n"
                                       "def l1_unstructured(module, name, amount):\n    return 'pruned'\n",
        "fakeprune/prune/extra.py": "import builtins\nbuiltins.fake_imports.append(__name__)\n",
        "fakeq/__init__.py": "import builtins\nbuiltins.fake_imports.append(__name__)\nQCONFIG = 'int8'\n",
        "fakeprof.py": "import builtins\nbuiltins.fake_imports.append(__name__)\ndef profile():\n    return 'prof'\n",
    }
    for relative, source in files.items():
        path = tmp_path / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(source)
    monkeypatch.syspath_prepend(str(tmp_path))
    import builtins
    monkeypatch.setattr(builtins, "fake_imports", [], raising=False)
    yield builtins.fake_imports
    for name in [m for m in sys.modules if m.split(".")[0] in ("fakeprune", "fakeq", "fakeprof")]:
        del sys.modules[name]


@pytest.fixture(autouse=True)
def without_installed_first_party_path_plugins():
    """Take out installed plugins that register first-party paths (corenn-profiler, ...) for each test, then put them back.

    These tests are about what those paths do when their plugin is absent, and they register fake
    plugins under the same paths; an installed plugin would already own them.
    """
    taken = []
    for name, record in list(plugins.records.items()):
        if record.status == "active" and set(record.import_paths) & set(known_import_path_providers):
            taken.append((record.plugin, record))
            plugins.unregister(name)
    yield
    for plugin, record in taken:
        restored = plugins.register(plugin, name=record.name)
        restored.distribution, restored.version, restored.entry_point = (record.distribution, record.version,
                                                                         record.entry_point)


def is_installed(distribution: str) -> bool:
    import importlib.metadata
    try:
        importlib.metadata.distribution(distribution)
    except importlib.metadata.PackageNotFoundError:
        return False
    return True


def paths_plugin(mapping):
    class ImportPaths:
        @corenn.hookimpl
        def corenn_register_import_paths(self):
            return mapping
    return ImportPaths()


def test_corenn_register_import_paths_resolves_lazily_to_the_plugins_own_module(corenn_plugin, fake_plugin_modules):
    record = corenn_plugin(paths_plugin({"corenn.nn.utils.prune": "fakeprune.prune"}), name="fake-prune")
    assert record.status == "active"
    assert record.import_paths == {"corenn.nn.utils.prune": "fakeprune.prune"}
    assert import_paths.registered()["corenn.nn.utils.prune"] == "fakeprune.prune"
    assert fake_plugin_modules == []  # registering imports nothing

    import corenn.nn.utils.prune as prune
    assert fake_plugin_modules == ["fakeprune.prune"]
    real = importlib.import_module("fakeprune.prune")
    assert prune is real and prune.__name__ == "fakeprune.prune"  # the module itself, not a copy
    assert prune.__spec__.name == "fakeprune.prune"
    from corenn.nn.utils import prune as again
    assert again is real and corenn.nn.utils.prune is real
    assert prune.l1_unstructured(None, "weight", amount=0.3) == "pruned"
    # A module below the path is the plugin's module below it, imported once.
    import corenn.nn.utils.prune.extra as extra
    assert extra is importlib.import_module("fakeprune.prune.extra") and prune.extra is extra
    assert fake_plugin_modules == ["fakeprune.prune", "fakeprune.prune.extra"]


def test_attribute_access_reaches_registered_paths_without_an_import(corenn_plugin, fake_plugin_modules):
    corenn_plugin(paths_plugin({"corenn.profiler": "fakeprof", "corenn.autograd.profiler": "fakeprof",
                                "corenn.nn.parallel": "fakeq"}), name="fake-attrs")
    assert fake_plugin_modules == []
    assert corenn.profiler.profile() == "prof"  # as torch.profiler works after import torch
    assert corenn.autograd.profiler is corenn.profiler
    assert corenn.nn.parallel.QCONFIG == "int8"
    assert fake_plugin_modules == ["fakeprof", "fakeq"]


def test_parent_packages_the_core_lacks_are_created_and_removed(corenn_plugin, fake_plugin_modules):
    corenn_plugin(paths_plugin({"corenn.ao.quantization": "fakeq"}), name="fake-quantize")
    from corenn.ao import quantization
    assert quantization is sys.modules["fakeq"]
    assert isinstance(corenn.ao.__path__, list) and corenn.ao.quantization is quantization
    import corenn.ao.quantization as q
    assert q is quantization

    plugins.unregister("fake-quantize")
    assert not [m for m in sys.modules if m.startswith("corenn.ao")]
    assert "ao" not in vars(corenn)
    with pytest.raises(ModuleNotFoundError, match="corenn-quantize"):
        import corenn.ao.quantization as _  # noqa: F401,F811
    assert "fakeq" in sys.modules  # the plugin's own module is the plugin's business


def test_unregistering_removes_the_paths_from_sys_modules_and_the_parent(fake_plugin_modules):
    with corenn.testing.register_plugin(paths_plugin({"corenn.nn.utils.prune": "fakeprune.prune"}), name="fp"):
        import corenn.nn.utils.prune.extra as _  # noqa: F401
        assert "corenn.nn.utils.prune" in sys.modules
    assert not [m for m in sys.modules if m.startswith("corenn.nn.utils.prune")]
    assert "prune" not in vars(corenn.nn.utils)
    assert "corenn.nn.utils.prune" not in import_paths.registered()
    with pytest.raises(ImportError, match="corenn-prune"):
        import corenn.nn.utils.prune as _  # noqa: F401


@pytest.mark.parametrize("mapping, message", [
    (["corenn.nn.utils.prune"], "must return a mapping"),
    ({"torch.nn.utils.prune": "fakeprune.prune"}, "must be a dotted module name under corenn"),
    ({"corenn.nn.utils.prune": 3}, "expected the dotted name of the plugin's own module"),
    ({"corenn.nn.utils.prune": "corenn.nn.utils"}, "expected the dotted name of the plugin's own module"),
    ({"corenn.nn.utils.pr une": "fakeprune.prune"}, "must be a dotted module name"),
    ({"corenn.nn.functional": "fakeprune.prune"}, "is a module of corenn itself"),
    ({"corenn.optim": "fakeprune.prune"}, "is a module of corenn itself"),
    ({"corenn.dispatch.extra": "fakeprune.prune"}, "lies below 'corenn.dispatch', a module of corenn that is not"),
    ({"corenn.randn": "fakeprune.prune"}, "'corenn.randn' is already a name in corenn"),
])
def test_malformed_or_colliding_import_paths_fail_the_plugin(corenn_plugin, fake_plugin_modules, mapping, message):
    with pytest.warns(plugins.PluginWarning, match=message):
        record = corenn_plugin(paths_plugin(mapping), name="bad-paths", allow_failure=True)
    assert record.status == "failed" and message in record.reason
    assert record.import_paths == {}
    assert corenn.randn(2).shape == (2,)  # nothing of corenn was shadowed


def test_a_path_registered_by_two_plugins_fails_the_second(corenn_plugin, fake_plugin_modules):
    first = corenn_plugin(paths_plugin({"corenn.ao.quantization": "fakeq"}), name="first")
    with pytest.warns(plugins.PluginWarning, match="already provided by plugin 'first'"):
        second = corenn_plugin(paths_plugin({"corenn.profiler": "fakeprof", "corenn.ao.quantization": "fakeprof"}),
                               name="second", allow_failure=True)
    assert first.status == "active" and second.status == "failed"
    assert import_paths.registered() == {"corenn.ao.quantization": "fakeq"}  # none of the second's paths stayed
    import corenn.ao.quantization as q
    assert q is sys.modules["fakeq"]


@pytest.mark.parametrize("path", sorted(known_import_path_providers))
def test_without_the_plugin_a_known_path_names_the_distribution_to_install(path):
    distribution, folder = known_import_path_providers[path]
    with pytest.raises(ModuleNotFoundError) as caught:
        importlib.import_module(path)
    message = str(caught.value)
    assert isinstance(caught.value, ImportError)
    if is_installed(distribution):  # taken out by the fixture: the message says so instead of how to install it
        assert f"provided by the plugin {distribution}, which is installed but disabled" in message
    else:
        assert distribution in message and install_hint(folder) in message and "not installed" in message
    assert not hasattr(corenn, "ao") and not hasattr(corenn, "profiler")  # hasattr still answers False


@pytest.mark.parametrize("statement, distribution", [
    ("from corenn.nn.utils import prune", "corenn-prune"),
    ("from corenn import profiler", "corenn-profiler"),
    ("from corenn.nn.utils import parametrizations", "corenn-parametrize"),
    ("from corenn.ao.quantization import quantize_dynamic", "corenn-quantize"),
])
def test_the_from_import_spelling_names_the_plugin_too(statement, distribution):
    """``from package import name`` must not swallow the hint into "cannot import name" (PyTorch code's usual form)."""
    state = "installed but disabled" if is_installed(distribution) else "not installed"
    with pytest.raises(ModuleNotFoundError, match=f"provided by the plugin {distribution}, which is {state}"):
        exec(statement, {})


def test_attribute_access_without_the_plugin_says_it_is_not_installed():
    state = "installed but disabled" if is_installed("corenn-prune") else "not installed"
    with pytest.raises(AttributeError, match=f"provided by the plugin corenn-prune, which is {state}"):
        corenn.nn.utils.prune  # noqa: B018


def test_a_path_below_a_known_one_names_the_same_plugin():
    with pytest.raises(ModuleNotFoundError, match="corenn-quantize"):
        import corenn.ao.quantization.quantize_fx as _  # noqa: F401
    with pytest.raises(ModuleNotFoundError, match="No module named 'corenn.nosuchthing'$"):
        import corenn.nosuchthing as _  # noqa: F401


def test_a_plugin_installed_but_unavailable_is_named_with_its_reason(corenn_plugin):
    class NoGpu:
        @corenn.hookimpl
        def corenn_register_import_paths(self):
            raise plugins.PluginUnavailable("no NCCL on this machine")
    record = corenn_plugin(NoGpu(), name="corenn-distributed", allow_failure=True)
    assert record.status == "unavailable"
    with pytest.raises(ImportError, match="installed but unavailable: no NCCL on this machine"):
        import corenn.distributed as _  # noqa: F401
    with pytest.raises(AttributeError, match="corenn-distributed"):
        corenn.nn.parallel  # noqa: B018


def test_known_paths_are_not_modules_of_the_core():
    for path in known_import_path_providers:
        assert import_paths._first_missing(path) is not None, f"{path} is a module of corenn itself"


def test_install_hints_are_true_for_this_checkout():
    from corenn import dispatch
    root = os.path.dirname(os.path.dirname(corenn.__file__))
    for distribution, folder in known_import_path_providers.values():
        hint = install_hint(folder)
        exists = os.path.isfile(os.path.join(root, folder, "pyproject.toml"))
        assert hint == (f"pip install ./{folder}" if exists else "not yet released")
    for device_type, provider in dispatch.known_device_providers.items():
        for word in provider.replace(";", " ").replace("(", " ").replace(")", " ").split():
            if word.startswith("./"):
                assert os.path.isfile(os.path.join(root, word, "pyproject.toml")), (device_type, provider)
    assert install_hint("plugins/numba_backend") == "pip install ./plugins/numba_backend"


def test_plugins_cli_lists_import_paths(corenn_plugin, fake_plugin_modules):
    corenn_plugin(paths_plugin({"corenn.nn.utils.prune": "fakeprune.prune"}), name="fake-prune-cli")
    out = io.StringIO()
    assert corenn_main(["plugins"], out=out) == 0
    assert "  import paths:\n    corenn.nn.utils.prune -> fakeprune.prune\n" in out.getvalue()
    out = io.StringIO()
    corenn_main(["plugins", "--json"], out=out)
    (summary,) = [p for p in json.loads(out.getvalue())["plugins"] if p["name"] == "fake-prune-cli"]
    assert summary["import_paths"] == {"corenn.nn.utils.prune": "fakeprune.prune"}


PRUNE_PLUGIN = """
import corenn

@corenn.hookimpl
def corenn_register_import_paths():
    return {"corenn.nn.utils.prune": "corenn_fakeprune.prune"}
"""


def test_an_installed_plugins_paths_load_only_when_imported(tmp_path):
    write_distribution(tmp_path, "corenn-fakeprune", "0.1", {"fakeprune": "corenn_fakeprune"},
                       {"corenn_fakeprune/__init__.py": PRUNE_PLUGIN,
                        "corenn_fakeprune/prune.py": "def l1_unstructured(m, name, amount):\n    return amount\n"})
    probe = textwrap.dedent("""
        import sys
        import corenn
        lazy = "corenn_fakeprune.prune" not in sys.modules
        import corenn.nn.utils.prune as prune
        print(lazy, prune.__name__, prune.l1_unstructured(None, "weight", amount=0.3))
    """)
    env = {k: v for k, v in os.environ.items() if not k.startswith("CORENN_")}
    env["PYTHONPATH"] = str(tmp_path)
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, env=env, timeout=120,
                            cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["True", "corenn_fakeprune.prune", "0.3"]
    listing = subprocess.run([sys.executable, "-m", "corenn", "plugins"], capture_output=True, text=True, env=env,
                             timeout=120, cwd=tmp_path)
    assert "corenn.nn.utils.prune -> corenn_fakeprune.prune" in listing.stdout


def test_a_registered_path_runs_as_main_like_python_dash_m(corenn_plugin, fake_plugin_modules):
    # ``python -m corenn.distributed.run`` goes through runpy, which asks the loader for the code.
    import runpy
    corenn_plugin(paths_plugin({"corenn.profiler": "fakeprof"}), name="fake-prof")
    namespace = runpy.run_module("corenn.profiler", run_name="__main__")
    assert fake_plugin_modules == ["__main__"]
    assert namespace["profile"]() == "prof"

