"""The ``mpi`` process-group backend: collectives on MPI through mpi4py, for ``cpu`` tensors.

Every operation is started non-blocking (``Iallreduce``, ``Ibcast``...) and waited for by
polling, so a wait can do what a blocking MPI call cannot:

- end at the group's ``timeout`` with a :class:`DistributedError` that says what each
  rank is doing (the ranks still waiting answer a status query on a private
  communicator; one that does not answer is named as such);
- end at once when another rank failed: a rank whose program raises sends a failure
  notice with its traceback to every other rank before it exits (:func:`install_excepthook`),
  and a rank on this host whose process is gone (killed, crashed) is seen by its pid;
- leave MPI's own finalize out of a failed job (``os._exit`` after the report), so
  exiting can't hang on a peer that is gone.

``mpi4py`` is imported when the first group is made, not with corenn.
"""
from __future__ import annotations

import json
import os
import socket
import sys
import threading
import time
import traceback
from datetime import timedelta

import numpy as np

from corenn_distributed.backend import DistributedError, ProcessGroup, ReduceOp, Work

__all__ = ["MPIProcessGroup", "create", "install_excepthook", "supervisor"]

_TAG_FAILURE, _TAG_QUERY, _TAG_REPLY, _TAG_FINISHED = 1, 2, 3, 4
_CHECK_EVERY_S = 0.01     # how often a wait looks at the control channel
_LIVENESS_EVERY_S = 0.25  # how often it looks whether peers on this host still run
ENV_ERROR_DIR = "CORENN_DISTRIBUTED_ERROR_DIR"  # set by the launcher: where ranks write their failure reports

_MPI = None


def _mpi():
    global _MPI
    if _MPI is None:
        import mpi4py
        # MPICH's MPI_Finalize waits for every rank: run at exit it would hang a rank whose peers are gone.
        # It runs only after destroy_process_group() of the world has seen every rank there (finalize_at_exit).
        mpi4py.rc.finalize = False
        from mpi4py import MPI  # about 0.1 s and initialises MPI: only when a group is made
        _MPI = MPI
    return _MPI


_clean_end = False   # set by destroy_process_group once every rank reached it


def mark_clean_end() -> None:
    """Every rank reached ``destroy_process_group``: MPI_Finalize at exit cannot wait for a rank that is gone."""
    global _clean_end
    _clean_end = True


def _at_exit(world_collectives) -> None:
    """At a normal exit: finalize MPI if it is safe, else tell the others this rank's program has ended.

    Without ``destroy_process_group``, another rank may still wait in a collective this one
    never calls: it gets a notice (with how many world collectives this rank issued) and
    raises at once. Then the ranks meet at an exit barrier (bounded by the timeout) and
    finalize only if all of them got there.
    """
    MPI = _MPI
    if MPI is None or not MPI.Is_initialized() or MPI.Is_finalized():
        return
    sup = _supervisor
    if not _clean_end and sup is not None and sup.size > 1:
        count = world_collectives()
        for rank in range(sup.size):
            if rank != sup.rank:
                sup._send(count, rank, _TAG_FINISHED)
        try:
            sup.waiting_in = "the end of its program (waiting at exit for the other ranks)"
            _poll([sup.control.Ibarrier()], "the exit barrier", sup.timeout, list(range(sup.size)))
        except DistributedError as error:
            sys.stderr.write(f"[rank {sup.rank}]: not finalizing MPI at exit: {str(error).splitlines()[0]}\n")
            return
    MPI.Finalize()


def _process_state(pid: int) -> str | None:
    """``None`` while process ``pid`` runs; otherwise how it is gone ("exited", "zombie")."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat:
            state = stat.read().rsplit(b")", 1)[1].split()[0]
        return "zombie" if state in (b"Z", b"X") else None
    except FileNotFoundError:
        return "exited"
    except OSError:  # no /proc (macOS): ask the kernel
        try:
            os.kill(pid, 0)
            return None
        except ProcessLookupError:
            return "exited"
        except PermissionError:
            return None


class Supervisor:
    """One per process: the world's control channel, the peers' pids, and what this rank waits in."""

    def __init__(self, world_comm):
        MPI = _mpi()
        self.control = world_comm.Dup()
        self.rank, self.size = world_comm.Get_rank(), world_comm.Get_size()
        self.host = socket.gethostname()
        self.waiting_in: str | None = None   # what this rank waits in now, for status queries
        self.failed: DistributedError | None = None
        self._next_check = 0.0
        self._next_liveness = 0.0
        self._pending_sends: list = []
        self.replies: dict[int, str] = {}
        self.finished: dict[int, int] = {}   # rank -> world collectives it issued before its program ended
        self.waiting_sequence: int | None = None  # the world collective this rank waits in, if any
        self.timeout = timedelta(minutes=30)
        # Blocking, once, at init: MPI_Init already made every rank wait for the others.
        self.peers = world_comm.allgather((self.host, os.getpid()))
        self._status = MPI.Status()

    # -- what other ranks tell this one -----------------------------------------------------------------------
    def check(self, force: bool = False) -> None:
        """Raise DistributedError if another rank failed or died; answer status queries. Rate-limited."""
        now = time.monotonic()
        if not force and now < self._next_check:
            return
        self._next_check = now + _CHECK_EVERY_S
        if self.failed is not None:
            raise self.failed
        MPI = _mpi()
        status = self._status
        while self.control.Iprobe(source=MPI.ANY_SOURCE, tag=MPI.ANY_TAG, status=status):
            source, tag = status.Get_source(), status.Get_tag()
            payload = self.control.recv(source=source, tag=tag)
            if tag == _TAG_FAILURE:
                where = f" while this rank waited in {self.waiting_in}" if self.waiting_in else ""
                self.failed = DistributedError(
                    f"rank {source} failed{where}:\n{payload.rstrip()}", rank=source)
                raise self.failed
            if tag == _TAG_QUERY:
                self._send(self.waiting_in or "not in a collective", source, _TAG_REPLY)
            if tag == _TAG_REPLY:
                self.replies[source] = payload   # for timeout_error, which may be asking right now
            if tag == _TAG_FINISHED:
                self.finished[source] = payload
        waiting = self.waiting_sequence
        if waiting is not None:
            for rank, issued in self.finished.items():
                if issued < waiting:   # it never called this collective: waiting longer can't help
                    self.failed = DistributedError(
                        f"rank {rank}'s program ended (a normal exit, after {issued} collectives on the world "
                        f"group) while this rank waits in {self.waiting_in}, the world's collective #{waiting}",
                        rank=rank)
                    raise self.failed
        if force or now >= self._next_liveness:
            self._next_liveness = now + _LIVENESS_EVERY_S
            dead = self.dead_peers()
            if dead:
                rank, how = dead[0]
                host, pid = self.peers[rank]
                where = f" while this rank waited in {self.waiting_in}" if self.waiting_in else ""
                self.failed = DistributedError(
                    f"rank {rank} (pid {pid} on {host}) died{where}: its process has {how} without a report "
                    "(killed by a signal, crashed, or os._exit)", rank=rank)
                raise self.failed

    def dead_peers(self) -> list[tuple[int, str]]:
        """``[(rank, how)]`` for peers on this host whose process is gone (other hosts can't be seen)."""
        dead = []
        for rank, (host, pid) in enumerate(self.peers):
            if rank != self.rank and host == self.host:
                how = _process_state(pid)
                if how is not None:
                    dead.append((rank, how))
        return dead

    def _send(self, payload, dest: int, tag: int) -> None:
        self._pending_sends.append(self.control.isend(payload, dest=dest, tag=tag))
        self._pending_sends = [r for r in self._pending_sends if not r.Test()]

    # -- what this rank tells the others --------------------------------------------------------------------
    def notify_failure(self, report: str, grace_s: float = 1.0) -> None:
        """Send ``report`` to every other rank; wait up to ``grace_s`` for the sends to leave."""
        requests = [self.control.isend(report, dest=rank, tag=_TAG_FAILURE)
                    for rank in range(self.size) if rank != self.rank]
        deadline = time.monotonic() + grace_s
        while requests and time.monotonic() < deadline:
            requests = [r for r in requests if not r.Test()]
            time.sleep(0.001)

    def timeout_error(self, what: str, timeout: timedelta, group_ranks: list[int]) -> DistributedError:
        """The error for ``what`` timing out: asks the group's other ranks what they are doing, briefly."""
        others = [r for r in group_ranks if r != self.rank]
        for rank in others:
            self._send(("query", what), rank, _TAG_QUERY)
        self.replies = answers = {}
        deadline = time.monotonic() + min(2.0, max(0.2, timeout.total_seconds()))
        while any(r not in answers for r in others) and time.monotonic() < deadline:
            try:
                self.check(force=True)   # collects replies; a failure notice or a dead peer explains it better
            except DistributedError as error:
                return error
            time.sleep(0.002)
        lines = [f"  rank {self.rank} (this rank): {what}"]
        silent = []
        for rank in others:
            if rank in answers:
                lines.append(f"  rank {rank}: {answers[rank]}")
            else:
                silent.append(rank)
                lines.append(f"  rank {rank}: no answer (busy outside corenn.distributed, hung, or dead)")
        return DistributedError(
            f"{what} timed out after {timeout.total_seconds():g} s. What each rank of the group is doing:\n"
            + "\n".join(lines), rank=silent[0] if silent else None)


_supervisor: Supervisor | None = None


def supervisor() -> Supervisor | None:
    """The process's :class:`Supervisor` once an ``mpi`` group exists, else None."""
    return _supervisor


# -- waiting --------------------------------------------------------------------------------------------------

def _poll(requests, what: str, timeout: timedelta, group_ranks: list[int], status=None,
          world_sequence: int | None = None) -> None:
    """Wait for ``requests`` by polling; DistributedError on a peer's failure, a dead peer, or the timeout."""
    MPI = _mpi()
    if MPI.Request.Testall(requests) if status is None else requests[0].Test(status):
        return
    sup = _supervisor
    sup.waiting_in = what
    sup.waiting_sequence = world_sequence
    try:
        start = time.monotonic()
        deadline = start + timeout.total_seconds()
        spins = 0
        while True:
            if MPI.Request.Testall(requests) if status is None else requests[0].Test(status):
                return
            spins += 1
            if spins > 200:   # past the first spins, give the core back (2-core machines run several ranks)
                now = time.monotonic()
                time.sleep(0 if now - start < 0.002 else 0.0002 if now - start < 0.05 else 0.001)
                sup.check()
                if now > deadline:
                    raise sup.timeout_error(what, timeout, group_ranks)
    finally:
        sup.waiting_in = None
        sup.waiting_sequence = None


class MPIWork(Work):
    """Requests in flight plus what to do once they complete (copy back, divide for AVG)."""

    def __init__(self, group: "MPIProcessGroup", requests: list, finish=None, status=None):
        self._group, self._requests, self._finish = group, requests, finish
        self._what = group.current_operation
        self._world_sequence = group.current_sequence if group.is_world else None
        self._status = status
        self._done = False
        self._error: BaseException | None = None

    def _complete(self) -> None:
        self._done = True
        if self._finish is not None:
            self._finish()

    def wait(self, timeout: timedelta | None = None) -> bool:
        if self._error is not None:
            raise self._error
        if not self._done:
            try:
                _poll(self._requests, self._what, timeout or self._group.timeout, self._group.world_ranks,
                      self._status, self._world_sequence)
            except DistributedError as error:
                self._error = error
                raise
            self._complete()
        return True

    def is_completed(self) -> bool:
        if self._done:
            return True
        MPI = _mpi()
        done = MPI.Request.Testall(self._requests) if self._status is None else self._requests[0].Test(self._status)
        if done:
            self._complete()
        else:
            _supervisor.check()
        return self._done

    def exception(self):
        return self._error

    def source_rank(self) -> int:
        """The sender's group rank, for a completed receive."""
        self.wait()
        return self._status.Get_source()


_OPS_BY_KIND = {
    # bool arrays: MPI defines no arithmetic on them, and PyTorch reduces bools logically
    True: {ReduceOp.SUM: "LOR", ReduceOp.MAX: "LOR", ReduceOp.PRODUCT: "LAND", ReduceOp.MIN: "LAND",
           ReduceOp.BAND: "LAND", ReduceOp.BOR: "LOR", ReduceOp.BXOR: "LXOR"},
    False: {ReduceOp.SUM: "SUM", ReduceOp.MAX: "MAX", ReduceOp.PRODUCT: "PROD", ReduceOp.MIN: "MIN",
            ReduceOp.BAND: "BAND", ReduceOp.BOR: "BOR", ReduceOp.BXOR: "BXOR"},
}


class MPIProcessGroup(ProcessGroup):
    """A group on an MPI communicator (``COMM_WORLD`` for the world, a split of it for ``new_group``)."""

    name = "mpi"
    current_sequence = 0
    is_world = False

    def __init__(self, comm, timeout: timedelta, world_ranks: list[int]):
        super().__init__(comm.Get_rank(), comm.Get_size(), timeout)
        self.comm = comm
        self.p2p = comm.Dup()   # point-to-point traffic never matches a collective's messages
        self.world_ranks = world_ranks  # group rank -> world rank, for messages and status queries

    def _op(self, array, op: ReduceOp):
        return getattr(_mpi(), _OPS_BY_KIND[array.dtype == np.bool_][op])

    def allreduce(self, array, op):
        return MPIWork(self, [self.comm.Iallreduce(_mpi().IN_PLACE, array, self._op(array, op))])

    def broadcast(self, array, src):
        return MPIWork(self, [self.comm.Ibcast(array, root=src)])

    def reduce(self, array, dst, op):
        MPI = _mpi()
        if self.rank == dst:
            return MPIWork(self, [self.comm.Ireduce(MPI.IN_PLACE, array, self._op(array, op), root=dst)])
        return MPIWork(self, [self.comm.Ireduce(array, None, self._op(array, op), root=dst)])

    def allgather(self, out, array):
        return MPIWork(self, [self.comm.Iallgather(array, out)])

    def reduce_scatter(self, out, array, op):
        return MPIWork(self, [self.comm.Ireduce_scatter_block(array, out, self._op(array, op))])

    def gather(self, out, array, dst):
        return MPIWork(self, [self.comm.Igather(array, out, root=dst)])

    def scatter(self, out, array, src):
        return MPIWork(self, [self.comm.Iscatter(array, out, root=src)])

    def alltoall(self, out, out_counts, array, in_counts):
        return MPIWork(self, [self.comm.Ialltoallv([array, list(in_counts)], [out, list(out_counts)])])

    def send(self, array, dst, tag):
        return MPIWork(self, [self.p2p.Isend(array, dest=dst, tag=tag)])

    def recv(self, array, src, tag):
        MPI = _mpi()
        source = MPI.ANY_SOURCE if src is None else src
        return MPIWork(self, [self.p2p.Irecv(array, source=source, tag=tag)], status=MPI.Status())

    def barrier(self):
        return MPIWork(self, [self.comm.Ibarrier()])

    def new_group(self, ranks, timeout):
        MPI = _mpi()
        member = self.rank in ranks
        comm = self.comm.Split(0 if member else MPI.UNDEFINED, key=self.rank)
        if not member:
            return None
        return MPIProcessGroup(comm, timeout, [self.world_ranks[r] for r in ranks])

    def shutdown(self):
        MPI = _mpi()
        for comm in (self.p2p, self.comm):
            if comm not in (MPI.COMM_WORLD, MPI.COMM_NULL):
                comm.Free()


def create(*, init_method=None, rank: int = -1, world_size: int = -1, timeout: timedelta, **_) -> MPIProcessGroup:
    """The factory registered as ``"mpi"``: the world group of the MPI job this process belongs to.

    MPI knows the rank and world size (``mpiexec -n N`` set them); ``rank`` and
    ``world_size``, where given, must agree. ``init_method`` is not needed by MPI and ignored,
    as PyTorch's MPI backend does.
    """
    global _supervisor
    try:
        MPI = _mpi()
    except ImportError as error:
        raise RuntimeError(f"init_process_group(backend='mpi'): mpi4py cannot be imported ({error}); "
                           "pip install 'corenn-distributed[mpi]' gives mpich and mpi4py") from error
    world = MPI.COMM_WORLD
    if world_size not in (-1, world.Get_size()):
        raise ValueError(f"init_process_group(backend='mpi'): world_size={world_size}, but this MPI job has "
                         f"{world.Get_size()} processes (start it with mpiexec -n {world_size} or "
                         f"python -m corenn.distributed.run --nproc-per-node {world_size})")
    if rank not in (-1, world.Get_rank()):
        raise ValueError(f"init_process_group(backend='mpi'): rank={rank}, but MPI gave this process rank "
                         f"{world.Get_rank()}; leave rank out with MPI")
    group = MPIProcessGroup(world.Dup(), timeout, list(range(world.Get_size())))
    group.is_world = True
    if _supervisor is None:
        _supervisor = Supervisor(world)
        import atexit
        atexit.register(_at_exit, lambda: group.current_sequence)
    _supervisor.timeout = timeout
    install_excepthook()
    return group


# -- reporting a failure ------------------------------------------------------------------------------------------

def _world_rank() -> int:
    if _supervisor is not None:
        return _supervisor.rank
    for name in ("PMI_RANK", "OMPI_COMM_WORLD_RANK", "PMIX_RANK", "RANK"):
        if name in os.environ:
            return int(os.environ[name])
    return -1


def report_failure(exc_type, exc, tb) -> None:
    """Tell the other ranks and the launcher that this rank fails with ``exc``; print it with the rank."""
    rank = _world_rank()
    text = "".join(traceback.format_exception(exc_type, exc, tb))
    secondary = isinstance(exc, DistributedError) and exc.rank not in (None, rank)
    if _supervisor is not None and not secondary:
        try:
            _supervisor.notify_failure(text)
        except Exception:  # the report below must still go out
            pass
    prefix = f"[rank {rank}]: "
    sys.stderr.write("".join(prefix + line + "\n" for line in text.rstrip().splitlines()))
    sys.stderr.flush()
    error_dir = os.environ.get(ENV_ERROR_DIR)
    if error_dir and rank >= 0:
        report = {"rank": rank, "pid": os.getpid(), "host": socket.gethostname(), "time": time.time(),
                  "type": exc_type.__name__, "message": str(exc), "traceback": text,
                  "caused_by": exc.rank if secondary else None}
        try:
            with open(os.path.join(error_dir, f"rank{rank}.json"), "w") as file:
                json.dump(report, file)
        except OSError:
            pass


_installed = False


def install_excepthook() -> None:
    """Report an uncaught exception to the other ranks (so they raise at once, not at their timeout) and exit.

    The process then ends with ``os._exit(1)``: MPI's finalize, run at a normal exit, could
    wait for peers that are gone. Installed by ``init_process_group(backend="mpi")`` and by
    the launcher (so a failure before ``init_process_group`` is printed with its rank too).
    """
    global _installed
    if _installed:
        return
    _installed = True
    previous = sys.excepthook

    def excepthook(exc_type, exc, tb):
        if issubclass(exc_type, KeyboardInterrupt):
            previous(exc_type, exc, tb)
            return
        report_failure(exc_type, exc, tb)   # prints the traceback, prefixed with the rank
        if _supervisor is not None:
            sys.stdout.flush()
            os._exit(1)

    sys.excepthook = excepthook

    def thread_excepthook(args):  # a failing thread does not end the rank: printed with the rank, as usual
        sys.stderr.write(f"[rank {_world_rank()}]: exception in thread {args.thread.name if args.thread else '?'}\n")
        threading.__excepthook__(args)

    threading.excepthook = thread_excepthook

