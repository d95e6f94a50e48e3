"""corenn-prune: ``torch.nn.utils.prune`` for corenn, and pruning that makes models smaller and faster.

Installing it makes PyTorch's import path work (``corenn_register_import_paths``)::

    import corenn.nn.utils.prune as prune        # corenn_prune.prune

and the same names are here at the top level (``corenn_prune.l1_unstructured``), with what
goes beyond PyTorch: ``shrink`` (remove structurally pruned channels: smaller dense
layers), ``compact`` (sparse storage and kernels for unstructured pruning) and
``summary`` (per-layer sparsity, parameters and bytes). See docs/prune.md.

Example::

    >>> import corenn_prune
    >>> from corenn import nn
    >>> layer = corenn_prune.l1_unstructured(nn.Linear(8, 8), "weight", amount=0.5)
    >>> corenn_prune.is_pruned(layer)
    True
"""
from __future__ import annotations

import importlib

import corenn

__version__ = "0.1.0"

_PRUNE_NAMES = ("BasePruningMethod", "PruningContainer", "Identity", "RandomUnstructured", "L1Unstructured",
                "RandomStructured", "LnStructured", "CustomFromMask", "identity", "random_unstructured",
                "l1_unstructured", "random_structured", "ln_structured", "global_unstructured", "custom_from_mask",
                "remove", "is_pruned", "pruning_method", "PrunedTensor")
# name -> the submodule defining it; imported at first use, so `import corenn` stays light.
_EXPORTS = {
    **{name: "corenn_prune.prune" for name in _PRUNE_NAMES},
    **{name: "corenn_prune.structured" for name in ("shrink", "complete_channel_pruning", "ShrinkError")},
    **{name: "corenn_prune.sparse" for name in ("compact", "SparseLinear", "SparseConv2d", "sparse_backend")},
    **{name: "corenn_prune.report" for name in ("summary", "LayerSummary", "Summary")},
}
__all__ = sorted(_EXPORTS)


def __getattr__(name):
    if name in _EXPORTS:
        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'corenn_prune' has no attribute '{name}'")


def __dir__():
    return sorted(set(globals()) | set(_EXPORTS))


@corenn.hookimpl
def corenn_register_import_paths():
    return {"corenn.nn.utils.prune": "corenn_prune.prune"}
