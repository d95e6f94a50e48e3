"""corenn-parametrize: constrained parameters, ``torch.nn.utils.parametrize`` and ``parametrizations`` for corenn.

Installing it makes PyTorch's import paths work (``corenn_register_import_paths``)::

    import corenn.nn.utils.parametrize as P                  # corenn_parametrize.parametrize
    from corenn.nn.utils.parametrizations import orthogonal  # corenn_parametrize.parametrizations

and the same names are here at the top level (``corenn_parametrize.register_parametrization``).
A parametrized tensor is a computed attribute of the core's ``Module``
(``Module.register_computed_attribute``): the module keeps its class, so it deep-copies
and pickles, and errors raised in a parametrization keep their message. See
docs/parametrize.md.

Example::

    >>> import corenn_parametrize
    >>> from corenn import nn
    >>> layer = corenn_parametrize.orthogonal(nn.Linear(4, 4))
    >>> corenn_parametrize.is_parametrized(layer, "weight")
    True
"""
from __future__ import annotations

import importlib

import corenn

__version__ = "0.1.0"

# name -> the submodule defining it; imported at first use, so `import corenn` stays light.
_EXPORTS = {
    **{name: "corenn_parametrize.parametrize" for name in (
        "cached", "ParametrizationList", "register_parametrization", "is_parametrized", "remove_parametrizations",
        "type_before_parametrizations", "transfer_parametrizations_and_params")},
    **{name: "corenn_parametrize.parametrizations" for name in ("orthogonal", "spectral_norm", "weight_norm")},
}
__all__ = sorted(_EXPORTS)


def __getattr__(name):
    if name in _EXPORTS:
        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'corenn_parametrize' has no attribute '{name}'")


def __dir__():
    return sorted(set(globals()) | set(_EXPORTS))


def parametrization_list_is_a_leaf(module, qualified_name):
    """FX leaf rule: a parametrized tensor is one ``call_module`` of its ParametrizationList, recomputed per run.

    Tracing into the parametrizations would bake shape checks (and spectral norm's
    in-place power iteration) into the graph; as a leaf the graph calls the list, which
    reads the current originals.
    """
    from corenn_parametrize.parametrize import ParametrizationList
    return True if isinstance(module, ParametrizationList) else None


@corenn.hookimpl
def corenn_fx_leaf_modules():
    return [parametrization_list_is_a_leaf]


@corenn.hookimpl
def corenn_register_import_paths():
    return {"corenn.nn.utils.parametrize": "corenn_parametrize.parametrize",
            "corenn.nn.utils.parametrizations": "corenn_parametrize.parametrizations"}
