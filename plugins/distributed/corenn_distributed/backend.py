"""The contract between ``corenn.distributed``'s functions and a process-group backend.

A backend (``"mpi"``, ``"nccl"``, or a third party's) is a factory registered through the
hook ``corenn_register_process_group_backends``; ``init_process_group(backend=name)``
calls it as ``factory(init_method=..., rank=..., world_size=..., timeout=...)`` (``rank``
and ``world_size`` are -1 where the caller gave none) and gets the world's
:class:`ProcessGroup`. The functions of ``corenn.distributed`` turn tensors into
contiguous arrays (numpy on ``cpu``, the device's arrays elsewhere) and call the
group's primitives below, each of which starts the operation and returns a :class:`Work`.
So a backend implements a dozen array primitives; argument checking, tensor
handling, object collectives and the collective-order check are written once, here
and in ``distributed_c10d``.

Example: a backend that only runs one process (see tests/test_backend_hook.py)::

    class SoloGroup(ProcessGroup):
        name = "solo"
        def allreduce(self, array, op): return CompletedWork()
        ...

    @corenn.hookimpl
    def corenn_register_process_group_backends():
        return {"solo": lambda **options: SoloGroup(rank=0, size=1)}
"""
from __future__ import annotations

import enum
from datetime import timedelta

__all__ = ["ReduceOp", "DistributedError", "DistBackendError", "Work", "CompletedWork", "ProcessGroup",
           "DEFAULT_TIMEOUT"]

#: PyTorch's default for process groups other than NCCL: 30 minutes.
DEFAULT_TIMEOUT = timedelta(minutes=30)


class ReduceOp(enum.Enum):
    """How ``all_reduce`` / ``reduce`` / ``reduce_scatter`` combine the ranks' values (``ReduceOp.SUM``...).

    ``AVG`` is the sum divided by the group's size, for floating-point tensors.
    For bool tensors ``SUM`` and ``MAX`` are a logical or, ``PRODUCT`` and ``MIN`` a logical and.

    Example::

        dist.all_reduce(t, op=dist.ReduceOp.MAX)
    """

    SUM = "sum"
    AVG = "avg"
    PRODUCT = "product"
    MIN = "min"
    MAX = "max"
    BAND = "band"
    BOR = "bor"
    BXOR = "bxor"

    def __repr__(self) -> str:
        return f"<ReduceOp.{self.name}>"


class DistributedError(RuntimeError):
    """A collective could not complete: a rank failed or died, the timeout passed, or ranks disagreed.

    ``rank`` is the rank the error is about (the one that failed, died or diverged; None
    when unknown), so ``except DistributedError as error: error.rank`` tells which one
    to look at. A RuntimeError, as PyTorch's ``DistBackendError`` is.

    Example::

        try:
            dist.all_reduce(t)
        except dist.DistributedError as error:
            print("rank", error.rank, "is the culprit")
    """

    def __init__(self, message: str, rank: int | None = None):
        super().__init__(message)
        self.rank = rank


#: PyTorch's name for the error a backend raises.
DistBackendError = DistributedError


class Work:
    """An operation in flight, as ``async_op=True`` returns it (PyTorch's ``Work``).

    ``wait()`` blocks until the operation is done (or raises :class:`DistributedError`
    on a failure or timeout) and returns True; ``is_completed()`` says whether it is
    done without blocking. After either has seen it complete, the output tensors
    hold the results.

    Example::

        work = dist.all_reduce(t, async_op=True)
        ...                  # compute meanwhile
        work.wait()
    """

    def wait(self, timeout: timedelta | None = None) -> bool:
        raise NotImplementedError

    def is_completed(self) -> bool:
        raise NotImplementedError

    def is_success(self) -> bool:
        """True once the operation completed without an error."""
        return self.is_completed()

    def exception(self):
        """The error the operation ended with, or None."""
        return None

    def then(self, callback):
        """``callback(self)`` after this work completes; a Work for the callback's result (for DDP comm hooks)."""
        return ChainedWork(self, callback)

    def value(self):
        """What the operation produced, for works made by :meth:`then` (a comm hook's tensor)."""
        return None


class CompletedWork(Work):
    """A Work that is already done (what a backend returns for an operation it finished at once)."""

    def __init__(self, result=None):
        self._result = result

    def wait(self, timeout=None) -> bool:
        return True

    def is_completed(self) -> bool:
        return True

    def value(self):
        return self._result


class ChainedWork(Work):
    """``work.then(callback)``: done when ``work`` is, the callback run once, at the first wait or completed check."""

    def __init__(self, work: Work, callback):
        self._work, self._callback = work, callback
        self._done, self._result = False, None

    def _finish(self):
        if not self._done:
            self._result = self._callback(self._work)
            self._done = True

    def wait(self, timeout=None) -> bool:
        self._work.wait(timeout)
        self._finish()
        return True

    def is_completed(self) -> bool:
        if self._done:
            return True
        if self._work.is_completed():
            self._finish()
            return True
        return False

    def value(self):
        self.wait()
        return self._result


class ProcessGroup:
    """A group of ranks and the array primitives a backend provides for it.

    Arrays handed to the primitives are contiguous and of the tensors' device; the
    ``corenn.distributed`` functions have checked shapes, dtypes and ranks (group
    ranks here, not global ones) already. Every primitive returns a :class:`Work`
    and must not block longer than it takes to start the operation; results are in
    the output arrays once the work completes. ``ReduceOp.AVG`` reaches a backend
    as ``SUM`` (the caller divides), so backends implement SUM, PRODUCT, MIN, MAX
    and the bitwise ops.

    Attributes: ``name`` (the backend's name), ``rank`` and ``size`` (this process's
    rank in the group and the group's size), ``timeout`` (a ``timedelta``).
    """

    name = "undefined"
    #: What the caller is about to do (``"all_reduce #12 (float32[1000])"``), set by ``corenn.distributed``
    #: before each primitive, so a backend's errors can say which collective failed.
    current_operation = "?"
    #: The collective's number in this group (1, 2, ...), set with ``current_operation``.
    current_sequence = 0

    def __init__(self, rank: int, size: int, timeout: timedelta = DEFAULT_TIMEOUT):
        self.rank, self.size, self.timeout = rank, size, timeout

    def __repr__(self) -> str:
        return f"<{type(self).__name__} backend={self.name!r} rank={self.rank} size={self.size}>"

    # -- the primitives (``out``/``array`` are arrays) --------------------------------------------------
    def allreduce(self, array, op: ReduceOp) -> Work:
        """Reduce ``array`` over the group, in place on every rank."""
        raise NotImplementedError

    def broadcast(self, array, src: int) -> Work:
        """Copy ``src``'s ``array`` into every rank's ``array``."""
        raise NotImplementedError

    def reduce(self, array, dst: int, op: ReduceOp) -> Work:
        """Reduce ``array`` over the group into ``dst``'s ``array`` (the others' arrays are left as they were)."""
        raise NotImplementedError

    def allgather(self, out, array) -> Work:
        """``out`` (``size`` times ``array``'s elements) gets every rank's ``array``, in rank order."""
        raise NotImplementedError

    def reduce_scatter(self, out, array, op: ReduceOp) -> Work:
        """Reduce ``array`` (``size`` equal chunks) over the group; rank r's ``out`` gets chunk r."""
        raise NotImplementedError

    def gather(self, out, array, dst: int) -> Work:
        """``dst``'s ``out`` gets every rank's ``array`` in rank order (``out`` is None elsewhere)."""
        raise NotImplementedError

    def scatter(self, out, array, src: int) -> Work:
        """Rank r's ``out`` gets chunk r of ``src``'s ``array`` (``array`` is None elsewhere)."""
        raise NotImplementedError

    def alltoall(self, out, out_counts, array, in_counts) -> Work:
        """Rank r sends ``array``'s chunk j (``in_counts[j]`` elements) to rank j, which puts it in its ``out`` chunk r."""
        raise NotImplementedError

    def send(self, array, dst: int, tag: int) -> Work:
        raise NotImplementedError

    def recv(self, array, src: int | None, tag: int) -> Work:
        """Receive into ``array`` from ``src`` (None: any rank); the work's ``source_rank()`` gives the sender's group rank."""
        raise NotImplementedError

    def barrier(self) -> Work:
        raise NotImplementedError

    # -- groups and lifetime ----------------------------------------------------------------------------------
    def new_group(self, ranks: list[int], timeout: timedelta):
        """A group of ``ranks`` (this group's ranks, sorted); None on ranks outside it. Called on every rank."""
        raise NotImplementedError

    def shutdown(self) -> None:
        """Release what the group holds (``destroy_process_group``)."""
