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


def get_cpu_capability() -> str:
    """The widest SIMD instruction set this CPU offers, in PyTorch's words (``torch.backends.cpu.get_cpu_capability``).

    "AVX512", "AVX2", "DEFAULT" on x86; "SVE256"/"DEFAULT" on ARM. It describes the machine (numpy's
    kernels dispatch on it at run time); corenn's own code has no per-capability kernels.
    """
    import platform
    flags = set()
    try:
        with open("/proc/cpuinfo") as cpuinfo:
            for line in cpuinfo:
                if line.startswith(("flags", "Features")):
                    flags.update(line.split(":", 1)[1].split())
                    break
    except OSError:  # not Linux: ask numpy, which probed the CPU for its own dispatch
        try:
            from numpy._core._multiarray_umath import __cpu_features__ as features
        except ImportError:
            try:
                from numpy.core._multiarray_umath import __cpu_features__ as features
            except ImportError:
                features = {}
        flags = {name.lower() for name, present in features.items() if present}
    machine = platform.machine().lower()
    if machine in ("x86_64", "amd64", "i686", "x86"):
        if {"avx512f", "avx512bw", "avx512vl", "avx512dq"} <= flags:
            return "AVX512"
        if {"avx2", "fma"} <= flags:
            return "AVX2"
        return "DEFAULT"
    if "sve" in flags:
        return "SVE256"
    return "DEFAULT"
