"""The ``cpu`` device: numpy arrays. A built-in plugin, registered like any other backend."""
from __future__ import annotations

import numpy as np

from corenn.dispatch import Backend
from corenn.hookspecs import hookimpl


def _to_device(array, index=None):
    # Arrays from other devices know how to come to the host (cupy: .get()).
    if isinstance(array, np.ndarray):
        return array
    get = getattr(array, "get", None)
    return get() if get is not None else np.asarray(array)


def _memory_stats(index=None) -> dict:
    return {}


def _info() -> str:
    config = np.show_config(mode="dicts") if hasattr(np, "show_config") else {}
    blas = config.get("Build Dependencies", {}).get("blas", {}) if isinstance(config, dict) else {}
    name = blas.get("name", "unknown")
    version = blas.get("version", "")
    return f"numpy {np.__version__} (BLAS: {name} {version})".strip()


CPU = Backend(
    type="cpu",
    xp=np,
    to_device=_to_device,
    to_host=_to_device,
    memory_stats=_memory_stats,
    random_generator=lambda seed: np.random.Generator(np.random.PCG64(seed)),
    description=_info(),
)


@hookimpl
def corenn_register_backends():
    return [CPU]


@hookimpl
def corenn_info_lines():
    return [f"cpu: {CPU.description}"]
