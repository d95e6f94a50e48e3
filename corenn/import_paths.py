"""PyTorch's import paths for plugin APIs: ``import corenn.nn.utils.prune`` reaches corenn-prune's module.

A PyTorch program ports by renaming ``torch`` to ``corenn``, so paths such as
``corenn.nn.utils.prune``, ``corenn.ao.quantization``, ``corenn.profiler`` or
``corenn.distributed`` must import -- but the code behind them lives in plugins.
A plugin declares the paths it provides with the hook
``corenn_register_import_paths`` (``{"corenn.nn.utils.prune": "corenn_prune.prune"}``),
and an import hook on ``sys.meta_path`` resolves them lazily:

- importing the path imports the plugin's module (only then) and returns that very
  module object, so ``import corenn.nn.utils.prune as prune`` and
  ``from corenn.nn.utils import prune`` both give ``corenn_prune.prune``; a
  module below a registered path (``corenn.distributed.rpc``) is the plugin's
  module below it (``corenn_distributed.rpc``), never a second copy;
- parent packages that the core lacks (``corenn.ao`` for ``corenn.ao.quantization``)
  are created as empty packages while a path below them is registered;
- without the plugin, a path of a first-party plugin (:data:`known_import_path_providers`)
  raises ``ModuleNotFoundError`` naming the distribution to install, or why the
  installed one is not active; ``try: ... except ImportError`` works as usual.

Example::

    >>> import corenn
    >>> try:
    ...     import corenn.nn.utils.prune
    ... except ImportError as error:
    ...     print(str(error).split(":")[0])
    No module named 'corenn.nn.utils.prune'
"""
from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import keyword
import sys
from pathlib import Path
from typing import Any, Mapping

__all__ = ["known_import_path_providers", "registered", "install_hint", "module_getattr", "ImportPathFinder"]

# Import paths of first-party plugins: path -> (distribution, folder in corenn's source tree). A path
# below one of these (``corenn.ao.quantization.quantize_fx``) belongs to the same plugin.
known_import_path_providers: dict[str, tuple[str, str]] = {
    "corenn.nn.utils.prune": ("corenn-prune", "plugins/prune"),
    "corenn.nn.utils.parametrize": ("corenn-parametrize", "plugins/parametrize"),
    "corenn.nn.utils.parametrizations": ("corenn-parametrize", "plugins/parametrize"),
    "corenn.ao": ("corenn-quantize", "plugins/quantize"),
    "corenn.ao.quantization": ("corenn-quantize", "plugins/quantize"),
    "corenn.profiler": ("corenn-profiler", "plugins/profiler"),
    "corenn.autograd.profiler": ("corenn-profiler", "plugins/profiler"),
    "corenn.distributed": ("corenn-distributed", "plugins/distributed"),
    "corenn.nn.parallel": ("corenn-distributed", "plugins/distributed"),
}

_SOURCE_TREE = Path(__file__).resolve().parents[1]

# path -> (the plugin's module, the plugin's name)
_paths: dict[str, tuple[str, str]] = {}
# parent packages created for registered paths -> how many registered paths lie below them
_created_parents: dict[str, int] = {}


def install_hint(folder: str) -> str:
    """How to get a first-party plugin from its folder in corenn's source tree, true for this checkout.

    ``"pip install ./plugins/prune"`` where that folder holds a plugin; a plugin
    whose folder is not there has not been released, and the hint says so rather
    than naming a command that would fail.

    Example::

        >>> install_hint("plugins/numba_backend")   # doctest: +SKIP
        'pip install ./plugins/numba_backend'
        >>> install_hint("plugins/no_such_plugin")
        'not yet released'
    """
    if (_SOURCE_TREE / folder / "pyproject.toml").is_file():
        return f"pip install ./{folder}"
    return "not yet released"


def registered() -> dict[str, str]:
    """``{import path: plugin module}`` for every path active plugins registered.

    Example::

        >>> registered()   # doctest: +SKIP
        {'corenn.nn.utils.prune': 'corenn_prune.prune'}
    """
    return {path: target for path, (target, _) in _paths.items()}


def _is_dotted_name(name: Any) -> bool:
    return isinstance(name, str) and all(part.isidentifier() and not keyword.iskeyword(part)
                                         for part in name.split("."))


def _first_missing(path: str) -> str | None:
    """The first prefix of ``path`` that is not a module of corenn's own (None: ``path`` is one).

    Looks at files only, importing nothing (plugins register while ``corenn.nn`` may
    not be imported yet). ``ValueError`` if a prefix is a plain module: nothing can
    be imported below it.
    """
    import corenn
    parts = path.split(".")
    search = list(corenn.__path__)
    for i in range(2, len(parts) + 1):
        name = ".".join(parts[:i])
        if search is None:
            raise ValueError(f"import path {path!r} lies below {name.rpartition('.')[0]!r}, a module of corenn "
                             "that is not a package")
        spec = importlib.machinery.PathFinder.find_spec(name, search)
        if spec is None:
            return name
        search = spec.submodule_search_locations
    return None


def _check(answer: Any, plugin_name: str) -> dict[str, str]:
    """Validate a ``corenn_register_import_paths`` answer; return it as a dict or raise naming what is wrong."""
    if isinstance(answer, (str, bytes)) or not hasattr(answer, "items"):
        raise TypeError(f"corenn_register_import_paths must return a mapping of 'corenn.x.y' -> 'your_module', "
                        f"got {type(answer).__name__}")
    result = {}
    for path, target in answer.items():
        if not _is_dotted_name(path) or not path.startswith("corenn."):
            raise ValueError(f"import path {path!r} must be a dotted module name under corenn, "
                             "such as 'corenn.nn.utils.prune'")
        if not _is_dotted_name(target) or target == "corenn" or target.startswith("corenn."):
            raise ValueError(f"import path {path!r} maps to {target!r}; expected the dotted name of the plugin's "
                             "own module, such as 'corenn_prune.prune'")
        if path in _paths:
            raise ValueError(f"import path {path!r} is already provided by plugin {_paths[path][1]!r}")
        missing = _first_missing(path)
        if missing is None:
            raise ValueError(f"import path {path!r} is a module of corenn itself; a plugin cannot replace it")
        parent_name, _, child = missing.rpartition(".")
        parent = sys.modules.get(parent_name)
        if parent is not None and missing not in _created_parents and hasattr(parent, child):
            raise ValueError(f"import path {path!r}: {missing!r} is already a name in {parent_name} "
                             f"(a {type(getattr(parent, child)).__name__})")
        result[path] = target
    return result


def _add(paths: Mapping[str, str], plugin_name: str) -> None:
    """Make ``paths`` (checked by :func:`_check`) importable, for plugin ``plugin_name``."""
    for path, target in paths.items():
        _paths[path] = (target, plugin_name)
        # Parents the core lacks, from the first missing one down to the path's own parent.
        parts = path.split(".")
        for i in range(_first_missing(path).count(".") + 1, len(parts)):
            parent = ".".join(parts[:i])
            _created_parents[parent] = _created_parents.get(parent, 0) + 1


def _remove(paths, plugin_name: str) -> None:
    """Take back the paths of plugin ``plugin_name``: no longer importable, gone from ``sys.modules``."""
    for path in paths:
        if _paths.get(path, (None, None))[1] != plugin_name:
            continue
        del _paths[path]
        _forget(path)
        for parent in list(_created_parents):
            if path.startswith(parent + "."):
                _created_parents[parent] -= 1
                if not _created_parents[parent]:
                    del _created_parents[parent]
                    _forget(parent)


def _forget(name: str) -> None:
    """Drop ``name`` and what was imported below it from ``sys.modules`` and from its parent's attributes."""
    for loaded in [m for m in sys.modules if m == name or m.startswith(name + ".")]:
        module = sys.modules.pop(loaded)
        parent_name, _, child = loaded.rpartition(".")
        parent = sys.modules.get(parent_name)
        if parent is not None and getattr(parent, child, None) is module:
            delattr(parent, child)


def _registered_above(name: str) -> tuple[str, str] | None:
    """The registered path that is ``name`` or the nearest parent of it, with the module ``name`` maps to."""
    path = name
    while path.count(".") >= 1:
        entry = _paths.get(path)
        if entry is not None:
            return path, entry[0] + name[len(path):]
        path = path.rpartition(".")[0]
    return None


def _known_provider(name: str) -> tuple[str, str] | None:
    path = name
    while path:
        if path in known_import_path_providers:
            return known_import_path_providers[path]
        path = path.rpartition(".")[0]
    return None


def _normal(name: str | None) -> str | None:
    return name.lower().replace("_", "-") if name else name


def _why_missing(distribution: str, folder: str) -> str:
    """Why ``distribution``'s paths don't import: not installed (and how to get it), or its status and reason."""
    from corenn import plugins
    for record in plugins.list_plugins():
        if _normal(distribution) in (_normal(record.distribution), _normal(record.name)):
            if record.status == "active":
                return f"the plugin {distribution}, which is active but does not register this path"
            return f"the plugin {distribution}, which is installed but {record.status}: {record.reason}"
    return f"the plugin {distribution}, which is not installed ({install_hint(folder)})"


def _not_installed(name: str, distribution: str, folder: str) -> ModuleNotFoundError:
    # ``name`` is the plugin's package, which is what is missing. (Were it ``name``, the
    # ``from corenn.nn.utils import prune`` spelling would swallow this error, as the import
    # system does for a submodule that does not exist, and say only "cannot import name".)
    return ModuleNotFoundError(f"No module named {name!r}: it is provided by {_why_missing(distribution, folder)}",
                               name=distribution.replace("-", "_"))


class _AliasLoader(importlib.abc.Loader):
    """Loads a registered path as the plugin's own module object (no copy)."""

    def __init__(self, target: str | None):
        self.target = target  # None: an empty parent package the core lacks

    def create_module(self, spec):
        return None  # a placeholder; exec_module puts the real module in its place

    def exec_module(self, module):
        name = module.__name__
        if self.target is None:
            module.__path__ = []
            module.__doc__ = (f"Created by corenn for the import paths that plugins register below {name} "
                              "(corenn.import_paths).")
            return
        real = importlib.import_module(self.target)
        parent_name, _, child = name.rpartition(".")
        existing = getattr(sys.modules.get(parent_name), child, None)
        if existing is not None and existing is not real and existing is not module:
            raise ImportError(f"{name} maps to {self.target}, but {parent_name} already has a {child!r} "
                              f"({type(existing).__name__})", name=name)
        # The import system returns what is in sys.modules after exec_module: the plugin's module.
        sys.modules[name] = real

    def get_code(self, fullname):
        """The plugin module's code, so ``python -m corenn.distributed.run`` runs the plugin's module as __main__."""
        if self.target is None:
            return None
        spec = importlib.util.find_spec(self.target)
        if spec is None or spec.loader is None or not hasattr(spec.loader, "get_code"):
            raise ImportError(f"{fullname} maps to {self.target}, which has no code to run", name=fullname)
        if spec.submodule_search_locations is not None:
            raise ImportError(f"{fullname} maps to the package {self.target}; run one of its modules with -m",
                              name=fullname)
        return spec.loader.get_code(self.target)


class ImportPathFinder(importlib.abc.MetaPathFinder):
    """The ``sys.meta_path`` entry that resolves registered import paths (installed once, first in the list).

    It answers only for names under ``corenn.`` that are registered, below a registered
    path, parents created for one, or paths of a known first-party plugin that is missing;
    everything else (all of corenn's own modules) goes on to the usual finders.

    Example::

        >>> any(isinstance(f, ImportPathFinder) for f in sys.meta_path)
        True
    """

    def find_spec(self, fullname, path=None, target=None):
        if not fullname.startswith("corenn."):
            return None
        if fullname in _created_parents and fullname not in _paths:
            return importlib.machinery.ModuleSpec(fullname, _AliasLoader(None), is_package=True)
        found = _registered_above(fullname)
        if found is not None:
            return importlib.machinery.ModuleSpec(fullname, _AliasLoader(found[1]))
        provider = _known_provider(fullname)
        if provider is not None:
            raise _not_installed(fullname, *provider)
        return None


def _install() -> None:
    """Put the finder first on ``sys.meta_path`` (once); ``corenn.plugins`` does this when it is imported."""
    if not any(isinstance(finder, ImportPathFinder) for finder in sys.meta_path):
        sys.meta_path.insert(0, ImportPathFinder())


def module_getattr(package: str, name: str):
    """For a package's ``__getattr__``: ``corenn.profiler`` without ``import corenn.profiler``, as in PyTorch.

    Returns the module a registered path ``package.name`` resolves to (importing it now);
    raises ``AttributeError`` otherwise, so ``hasattr`` keeps working.

    Example::

        def __getattr__(name):
            return corenn.import_paths.module_getattr(__name__, name)
    """
    full = f"{package}.{name}"
    if full in _paths or full in _created_parents:
        return importlib.import_module(full)
    hint = ""
    provider = _known_provider(full)
    if provider is not None:
        hint = f" ({full} is provided by {_why_missing(*provider)})"
    raise AttributeError(f"module {package!r} has no attribute {name!r}{hint}")
