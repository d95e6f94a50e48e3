"""glibc's malloc, set up for a training loop's large temporaries.

Every training step allocates and frees tens of megabytes of arrays, a few megabytes each
(activations, gradients, pooling indices). With its defaults glibc serves a block above its
mmap threshold (128 KB, raised on the fly to the largest block freed so far) with freshly
mapped pages, and hands heap memory above its trim threshold back to the system; either way
the next step's arrays land on pages the kernel has to fault in and zero again. In a virtual
machine a page fault is expensive, and a CNN's training step pays it on every step (the
figures are in docs/numba.md).

Fixed thresholds turn glibc's adjustment off: blocks up to ``MMAP_THRESHOLD`` come from the
heap, and up to ``TRIM_THRESHOLD`` of free heap is kept for the next step instead of being
returned -- the same trade as a framework's caching allocator. It applies to the whole
process and stays until it exits, so it is done when a compiled kernel first runs
(``_base.LazyModule`` calls :func:`tune`), not when corenn loads the plugin: a process that
imports corenn without running these kernels keeps its allocator as it was.
``CORENN_NUMBA_MALLOC=0`` leaves malloc alone. Other C libraries (macOS, musl) are left
alone too.
"""
from __future__ import annotations

import ctypes
import os
import platform
import sys

#: glibc's largest mmap threshold on 64-bit systems (blocks above it are always mapped afresh).
MMAP_THRESHOLD = 32 << 20
TRIM_THRESHOLD = 128 << 20
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3  # mallopt parameters, from glibc's malloc.h

tuned = False


def wanted() -> bool:
    """True where :func:`tune` would act: glibc on Linux, and ``CORENN_NUMBA_MALLOC`` not ``0``."""
    return (os.environ.get("CORENN_NUMBA_MALLOC", "1") != "0" and sys.platform.startswith("linux")
            and platform.libc_ver()[0] == "glibc")


def tune() -> bool:
    """Set the thresholds (once); True when glibc took them."""
    global tuned
    if tuned or not wanted():
        return tuned
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    tuned = mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD) == 1 and mallopt(_M_TRIM_THRESHOLD, TRIM_THRESHOLD) == 1
    return tuned
