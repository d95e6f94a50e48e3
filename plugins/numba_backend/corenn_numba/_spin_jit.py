"""Waiting on a counter without the GIL and without sleeping: what ``corenn_numba._threads``'s helpers do between tasks.

Imported when the first helper threads start (``_threads``), by which time numba is loaded.

Each turn reads the counter with an atomic load (a plain load could be hoisted out of the
loop), runs ``pause`` (a spin-wait hint to the core) and calls ``sched_yield``, which hands
the CPU to any other thread waiting for it, so a spinning helper never keeps another thread
(OpenBLAS's worker after a numpy matmul, another process) from its core. The loop gives up
after ``spins`` turns; the caller then sleeps on a condition.
"""
from __future__ import annotations

import platform

import numba
from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.core.errors import TypingError
from numba.extending import intrinsic

from corenn_numba._checks import INT64, array, entry, integer

_X86 = platform.machine().lower() in ("x86_64", "amd64", "i386", "i686")
_POSIX = platform.system() in ("Linux", "Darwin", "FreeBSD")


@intrinsic
def _load_acquire(typingctx, counters, index):
    """``counters[index]`` read with an atomic acquire load (int64 array)."""
    if not (isinstance(counters, types.Array) and counters.dtype == types.int64 and counters.ndim == 1):
        raise TypingError("_load_acquire takes a 1-d int64 array")

    def codegen(context, builder, signature, args):
        data = context.make_array(signature.args[0])(context, builder, args[0]).data
        return builder.load_atomic(builder.gep(data, [args[1]]), ordering="acquire", align=8)

    return types.int64(counters, index), codegen


@intrinsic
def _pause_and_yield(typingctx):
    """The x86 ``pause`` instruction, then libc's ``sched_yield`` (POSIX)."""
    def codegen(context, builder, signature, args):
        if _X86:
            pause = cgutils.get_or_insert_function(builder.module, ir.FunctionType(ir.VoidType(), []),
                                                   "llvm.x86.sse2.pause")
            builder.call(pause, [])
        if _POSIX:
            sched_yield = cgutils.get_or_insert_function(builder.module, ir.FunctionType(ir.IntType(32), []),
                                                         "sched_yield")
            builder.call(sched_yield, [])
        return context.get_dummy_value()

    return types.void(), codegen


def _check_wait(counters, index, value, spins):
    array("wait_while_equal", "counters", counters, INT64, ndim=1)
    integer("wait_while_equal", "index", index, 0, counters.shape[0] - 1)
    integer("wait_while_equal", "value", value)
    integer("wait_while_equal", "spins", spins, 0)


@entry(_check_wait)
@numba.njit(cache=True, nogil=True)
def wait_while_equal(counters, index, value, spins):
    """``counters[index]`` once it differs from ``value``, or ``value`` after ``spins`` turns that found it equal."""
    for _ in range(spins):
        current = _load_acquire(counters, index)
        if current != value:
            return current
        _pause_and_yield()
    return value
