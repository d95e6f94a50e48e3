"""The ``nccl`` process-group backend: collectives on ``cuda`` tensors through cupy's NCCL binding.

Runs where corenn-cuda is active, cupy has NCCL (``cupy.cuda.nccl.available``) and a GPU
is present; :func:`unavailable_reason` says which of these is missing, and
``init_process_group("nccl")`` raises with that reason instead of pretending.

NCCL needs every rank to share one unique id before it makes its communicator; it is
passed over MPI (the job was started by ``mpiexec`` or the launcher), so a job needs
mpi4py for this bootstrap only -- the tensors themselves go over NCCL. Each rank uses
the cuda device ``LOCAL_RANK`` (set by the launcher) unless ``device_id`` says otherwise.

Buffers reach this backend as contiguous corenn cuda tensors; NCCL gets their
``data_ptr()``, element count and dtype. NCCL calls are asynchronous on the current
stream; a Work is complete when an event recorded after the call has passed.
"""
from __future__ import annotations

import importlib.util
import os
import time
from datetime import timedelta

from corenn_distributed.backend import DistributedError, ProcessGroup, ReduceOp, Work

__all__ = ["unavailable_reason", "create", "NCCLProcessGroup"]


def unavailable_reason() -> str | None:
    """None where NCCL can run here; otherwise why not (cupy missing, no NCCL in cupy, no corenn-cuda, no GPU)."""
    if importlib.util.find_spec("cupy") is None:
        return "cupy is not installed (NCCL for cuda tensors comes with cupy and corenn-cuda)"
    try:
        from cupy.cuda import nccl
    except Exception as error:  # cupy present but its CUDA libraries are not
        return f"cupy.cuda.nccl cannot be imported: {error}"
    if not getattr(nccl, "available", True):
        return "this cupy build has no NCCL (cupy.cuda.nccl.available is False)"
    import corenn
    if not corenn.cuda.is_available():
        return ("no cuda device: corenn-cuda is not active or sees no GPU (python -m corenn plugins says which)")
    return None


def _nccl_dtype(dtype):
    from cupy.cuda import nccl
    table = {"float32": nccl.NCCL_FLOAT32, "float64": nccl.NCCL_FLOAT64, "float16": nccl.NCCL_FLOAT16,
             "int32": nccl.NCCL_INT32, "int64": nccl.NCCL_INT64, "uint8": nccl.NCCL_UINT8, "int8": nccl.NCCL_INT8}
    name = str(dtype).replace("corenn.", "")
    if name not in table:
        raise TypeError(f"nccl backend: dtype {name} is not supported by NCCL")
    return table[name]


def _nccl_op(op: ReduceOp):
    from cupy.cuda import nccl
    table = {ReduceOp.SUM: nccl.NCCL_SUM, ReduceOp.PRODUCT: nccl.NCCL_PROD, ReduceOp.MIN: nccl.NCCL_MIN,
             ReduceOp.MAX: nccl.NCCL_MAX}
    if op not in table:
        raise ValueError(f"nccl backend: {op} is not supported by NCCL")
    return table[op]


class NCCLWork(Work):
    """Done when the event recorded after the NCCL call has passed; waits poll it against the timeout."""

    def __init__(self, group: "NCCLProcessGroup", finish=None):
        import cupy
        self._event = cupy.cuda.Event(disable_timing=True)
        self._event.record()
        self._group, self._finish, self._done = group, finish, False
        self._what = group.current_operation

    def is_completed(self) -> bool:
        if not self._done and self._event.done:
            self._done = True
            if self._finish is not None:
                self._finish()
        return self._done

    def wait(self, timeout: timedelta | None = None) -> bool:
        deadline = time.monotonic() + (timeout or self._group.timeout).total_seconds()
        while not self.is_completed():
            if time.monotonic() > deadline:
                self._group.abort()
                raise DistributedError(f"{self._what} timed out on nccl after "
                                       f"{(timeout or self._group.timeout).total_seconds():g} s (communicator aborted)")
            time.sleep(0.0001)
        return True


class NCCLProcessGroup(ProcessGroup):
    name = "nccl"

    def __init__(self, comm, rank: int, size: int, timeout: timedelta, bootstrap):
        super().__init__(rank, size, timeout)
        self.comm, self._bootstrap = comm, bootstrap

    def _stream(self):
        import cupy
        return cupy.cuda.get_current_stream().ptr

    def allreduce(self, array, op):
        self.comm.allReduce(array.data_ptr(), array.data_ptr(), array.numel(), _nccl_dtype(array.dtype),
                            _nccl_op(op), self._stream())
        return NCCLWork(self)

    def broadcast(self, array, src):
        self.comm.bcast(array.data_ptr(), array.numel(), _nccl_dtype(array.dtype), src, self._stream())
        return NCCLWork(self)

    def reduce(self, array, dst, op):
        self.comm.reduce(array.data_ptr(), array.data_ptr(), array.numel(), _nccl_dtype(array.dtype),
                         _nccl_op(op), dst, self._stream())
        return NCCLWork(self)

    def allgather(self, out, array):
        self.comm.allGather(array.data_ptr(), out.data_ptr(), array.numel(), _nccl_dtype(array.dtype), self._stream())
        return NCCLWork(self)

    def reduce_scatter(self, out, array, op):
        self.comm.reduceScatter(array.data_ptr(), out.data_ptr(), out.numel(), _nccl_dtype(array.dtype),
                                _nccl_op(op), self._stream())
        return NCCLWork(self)

    def _grouped_p2p(self, calls):
        from cupy.cuda import nccl
        nccl.groupStart()
        try:
            for call in calls:
                call()
        finally:
            nccl.groupEnd()
        return NCCLWork(self)

    def gather(self, out, array, dst):
        n, dtype, stream = array.numel(), _nccl_dtype(array.dtype), self._stream()
        calls = [lambda: self.comm.send(array.data_ptr(), n, dtype, dst, stream)]
        if self.rank == dst:
            size = array.element_size() * n
            calls += [lambda r=r: self.comm.recv(out.data_ptr() + r * size, n, dtype, r, stream)
                      for r in range(self.size)]
        return self._grouped_p2p(calls)

    def scatter(self, out, array, src):
        n, dtype, stream = out.numel(), _nccl_dtype(out.dtype), self._stream()
        calls = [lambda: self.comm.recv(out.data_ptr(), n, dtype, src, stream)]
        if self.rank == src:
            size = out.element_size() * n
            calls += [lambda r=r: self.comm.send(array.data_ptr() + r * size, n, dtype, r, stream)
                      for r in range(self.size)]
        return self._grouped_p2p(calls)

    def alltoall(self, out, out_counts, array, in_counts):
        dtype, stream, size = _nccl_dtype(array.dtype), self._stream(), array.element_size()
        calls, sent, received = [], 0, 0
        for r in range(self.size):
            calls.append(lambda r=r, o=sent: self.comm.send(array.data_ptr() + o * size, in_counts[r], dtype, r, stream))
            calls.append(lambda r=r, o=received: self.comm.recv(out.data_ptr() + o * size, out_counts[r], dtype, r,
                                                                 stream))
            sent += in_counts[r]
            received += out_counts[r]
        return self._grouped_p2p(calls)

    def send(self, array, dst, tag):
        self.comm.send(array.data_ptr(), array.numel(), _nccl_dtype(array.dtype), dst, self._stream())
        return NCCLWork(self)

    def recv(self, array, src, tag):
        if src is None:
            raise ValueError("nccl backend: recv needs src (NCCL cannot receive from any rank)")
        self.comm.recv(array.data_ptr(), array.numel(), _nccl_dtype(array.dtype), src, self._stream())
        work = NCCLWork(self)
        work.source_rank = lambda: src
        return work

    def barrier(self):
        import corenn
        token = corenn.zeros(1, device="cuda")
        return self.allreduce(token, ReduceOp.SUM)

    def new_group(self, ranks, timeout):
        from cupy.cuda import nccl
        member = self.rank in ranks
        unique_id = nccl.get_unique_id() if self.rank == ranks[0] else None
        unique_id = self._bootstrap.bcast(unique_id, root=ranks[0])
        if not member:
            return None
        comm = nccl.NcclCommunicator(len(ranks), unique_id, ranks.index(self.rank))
        return NCCLProcessGroup(comm, ranks.index(self.rank), len(ranks), timeout, self._bootstrap)

    def abort(self):
        self.comm.abort()

    def shutdown(self):
        self.comm.destroy()


def create(*, init_method=None, rank: int = -1, world_size: int = -1, timeout: timedelta, device_id=None, **_):
    """The factory registered as ``"nccl"``; raises RuntimeError with :func:`unavailable_reason` where NCCL can't run."""
    reason = unavailable_reason()
    if reason is not None:
        raise RuntimeError(f"init_process_group(backend='nccl'): NCCL cannot run here: {reason}")
    try:
        from mpi4py import MPI
    except ImportError as error:
        raise RuntimeError("init_process_group(backend='nccl'): the NCCL unique id is shared over MPI; "
                           "pip install 'corenn-distributed[mpi]' and start the job with mpiexec or "
                           "python -m corenn.distributed.run") from error
    import cupy
    from cupy.cuda import nccl
    world = MPI.COMM_WORLD
    if world_size not in (-1, world.Get_size()) or rank not in (-1, world.Get_rank()):
        raise ValueError(f"init_process_group(backend='nccl'): rank={rank}/world_size={world_size} disagree with "
                         f"the MPI job (rank {world.Get_rank()} of {world.Get_size()})")
    local_rank = int(os.environ.get("LOCAL_RANK", world.Get_rank()))
    cupy.cuda.Device(local_rank % cupy.cuda.runtime.getDeviceCount()).use()
    unique_id = world.bcast(nccl.get_unique_id() if world.Get_rank() == 0 else None, root=0)
    comm = nccl.NcclCommunicator(world.Get_size(), unique_id, world.Get_rank())
    return NCCLProcessGroup(comm, world.Get_rank(), world.Get_size(), timeout, world)
