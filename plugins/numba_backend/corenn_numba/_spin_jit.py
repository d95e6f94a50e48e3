"""Waiting on a counter without the GIL and without sleeping: what ``corenn_numba._threads``'s helpers do between tasks.

Imported when the first helper threads start (``_threads``), by which time numba is loaded.

Each turn reads the counter with an atomic load (a plain load could be hoisted out of the
loop), runs ``pause`` (a spin-wait hint to the core) and calls ``sched_yield``, which hands
the CPU to any other thread waiting for it, so a spinning helper never keeps another thread
(OpenBLAS's worker after a numpy matmul, another process) from its core. The loop gives up
after ``spins`` turns; the caller then sleeps on a condition.

A helper that has run its share of a task reports it here too (``finish_and_wait``): it takes
itself off the count of running helpers after it has given up the GIL, so that the calling
thread, which watches that count, finds the GIL free when it sees the count reach zero
(reported from Python, the count reached zero while the helper still held the GIL, and the
caller slept on the GIL's lock: tens of microseconds on a virtual machine before it woke).
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


def _read_modify_write(operation: str, doc: str):
    """An intrinsic ``f(counters, index, operand)``: ``atomicrmw operation`` on ``counters[index]`` (int64 array),
    sequentially consistent (a locked instruction on x86: a full barrier); returns the old value."""
    @intrinsic
    def rmw(typingctx, counters, index, operand):
        if not (isinstance(counters, types.Array) and counters.dtype == types.int64 and counters.ndim == 1):
            raise TypingError(f"atomic {operation} takes a 1-d int64 array")

        def codegen(context, builder, signature, args):
            data = context.make_array(signature.args[0])(context, builder, args[0]).data
            operand = context.cast(builder, args[2], signature.args[2], types.int64)
            return builder.atomic_rmw(operation, builder.gep(data, [args[1]]), operand, ordering="seq_cst")

        return types.int64(counters, index, operand), codegen

    rmw.__doc__ = doc
    return rmw


_fetch_add = _read_modify_write("add", "``counters[index] += operand``; the old value.")
_exchange = _read_modify_write("xchg", "``counters[index] = operand``; the old value.")


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


@numba.njit(cache=True, nogil=True)
def _wait_while_equal(counters, index, value, spins):
    for _ in range(spins):
        current = _load_acquire(counters, index)
        if current != value:
            return current
        _pause_and_yield()
    return value


#: ``counters[index]`` once it differs from ``value``, or ``value`` after ``spins`` turns that found it equal.
wait_while_equal = entry(_check_wait)(_wait_while_equal)


def _check_finish(counters, running, asleep, index, value, spins):
    f = "finish_and_wait"
    array(f, "counters", counters, INT64, ndim=1)
    for name, position in (("running", running), ("asleep", asleep), ("index", index)):
        integer(f, name, position, 0, counters.shape[0] - 1)
    integer(f, "value", value)
    integer(f, "spins", spins, 0)


@entry(_check_finish)
@numba.njit(cache=True, nogil=True)
def finish_and_wait(counters, running, asleep, index, value, spins):
    """Takes one off ``counters[running]``; then -1 if ``counters[asleep]`` says that the thread waiting for that
    count sleeps (the caller must wake it), else ``wait_while_equal(counters, index, value, spins)``.

    The decrement is a full barrier, and the sleeper sets ``asleep`` with one (``announce_sleep``) before
    it reads the count: one of the two sees the other's write, so no wake-up is lost.
    """
    _fetch_add(counters, running, -1)
    if _load_acquire(counters, asleep):
        return -1
    return _wait_while_equal(counters, index, value, spins)


def _check_announce(counters, asleep, running):
    array("announce_sleep", "counters", counters, INT64, ndim=1)
    integer("announce_sleep", "asleep", asleep, 0, counters.shape[0] - 1)
    integer("announce_sleep", "running", running, 0, counters.shape[0] - 1)


@entry(_check_announce)
@numba.njit(cache=True, nogil=True)
def announce_sleep(counters, asleep, running):
    """Sets ``counters[asleep]`` to 1 (a full barrier: see ``finish_and_wait``), then reads ``counters[running]``: the
    caller sleeps only if that is not zero, and ``finish_and_wait`` then wakes it."""
    _exchange(counters, asleep, 1)
    return _load_acquire(counters, running)
