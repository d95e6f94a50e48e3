"""Built-in device backends (registered as plugins, like third-party backends), and PyTorch's
``torch.backends`` flag modules: ``corenn.backends.cudnn``, ``.cuda``, ``.mps``, ``.mkldnn``,
``.openmp``, ``.cpu`` (loaded on first use, so ``corenn.backends.cudnn.benchmark = True`` needs no import)."""
import importlib as _importlib

_FLAG_MODULES = ("cudnn", "cuda", "mps", "mkldnn", "openmp", "cpu")


def __getattr__(name):
    if name in _FLAG_MODULES:
        return _importlib.import_module(f"{__name__}.{name}")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
