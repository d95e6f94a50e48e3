"""Utilities: data loading (``corenn.utils.data``) and removable hook handles (``corenn.utils.hooks``)."""


def __getattr__(name):
    # ``import torch`` makes ``torch.utils.data`` and ``torch.utils.hooks`` reachable as attributes, and
    # programs rely on it (``torch.utils.data.DataLoader`` with only ``import torch``); they load on first use.
    if name in ("data", "hooks"):
        import importlib
        return importlib.import_module(f"{__name__}.{name}")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
