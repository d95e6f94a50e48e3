"""numpy's OpenBLAS and the plugin's helper threads: the spare cores go to one of them at a time.

After each multithreaded call OpenBLAS keeps its worker threads spinning, waiting for the
next call, for about a tenth of a second. In a training step that mixes the core's BLAS
products (a small classifier layer, chosen by calibration) with the plugin's threaded
convolutions, that spinning worker holds the core the plugin's helper thread needs, on every
step (docs/numba.md, "Threads", has the measurements).

So once a convolution kernel has handed out work to the helpers (``_threads.split(...,
hold_blas=True)``), numpy's OpenBLAS runs on one thread until the helpers go to sleep,
``SPIN_SECONDS`` after their last task; then it gets its thread count back. Products small
enough to share a step with a convolution lose little on one thread; the dense layer's own
kernel does not hold OpenBLAS, because the products it leaves to OpenBLAS are the large ones,
which do. A program whose large matmuls run between convolutions can keep OpenBLAS as it is
with ``CORENN_NUMBA_BLAS=keep``.

The libraries are found as threadpoolctl finds them: OpenBLAS builds already loaded in the
process (``/proc/self/maps``), through their ``openblas_set_num_threads`` (numpy's is
``scipy_openblas_set_num_threads64_``). Linux only; elsewhere nothing is changed.
"""
from __future__ import annotations

import ctypes
import os
import sys
import threading

ENV = "CORENN_NUMBA_BLAS"

_lock = threading.Lock()
_libraries: list | None = None  # [(get_num_threads, set_num_threads)] of each OpenBLAS loaded
_saved: list[int] | None = None  # their thread counts while the helpers hold the cores, else None


def wanted() -> bool:
    """True where the helpers take OpenBLAS's threads while they work: Linux, ``CORENN_NUMBA_BLAS`` not ``keep``."""
    return os.environ.get(ENV, "") != "keep" and sys.platform.startswith("linux")


def _find() -> list:
    """``(get, set)`` for every OpenBLAS build loaded in this process."""
    try:
        with open("/proc/self/maps", encoding="utf-8") as maps:
            paths = sorted({line.split()[-1] for line in maps if "openblas" in line.lower() and ".so" in line})
    except OSError:
        return []
    found = []
    for path in paths:
        try:
            library = ctypes.CDLL(path, mode=os.RTLD_NOLOAD | os.RTLD_LAZY)  # the copy already loaded
        except OSError:
            continue
        for prefix in ("", "scipy_"):
            for suffix in ("", "64_"):
                get = getattr(library, f"{prefix}openblas_get_num_threads{suffix}", None)
                set_ = getattr(library, f"{prefix}openblas_set_num_threads{suffix}", None)
                if get is not None and set_ is not None:
                    get.restype, get.argtypes = ctypes.c_int, []
                    set_.restype, set_.argtypes = None, [ctypes.c_int]
                    found.append((get, set_))
                    break
            else:
                continue
            break
    return found


def take() -> None:
    """OpenBLAS on one thread from now on (its previous counts kept for :func:`give_back`)."""
    global _libraries, _saved
    if _saved is not None or not wanted():
        return
    with _lock:
        if _saved is not None:
            return
        if _libraries is None:
            _libraries = _find()
        _saved = [get() for get, _ in _libraries]
        for (_, set_), count in zip(_libraries, _saved):
            if count > 1:
                set_(1)


def give_back() -> None:
    """OpenBLAS's thread counts as they were before :func:`take`."""
    global _saved
    with _lock:
        if _saved is None:
            return
        for (_, set_), count in zip(_libraries, _saved):
            if count > 1:
                set_(count)
        _saved = None


def held() -> bool:
    """Whether OpenBLAS is held to one thread now."""
    return _saved is not None


def status() -> str:
    """One line for ``python -m corenn info``."""
    if not wanted():
        return "numpy's OpenBLAS threads left as they are"
    return ("numpy's OpenBLAS on 1 thread while the convolutions' helper threads work "
            f"({ENV}=keep to leave it)")
