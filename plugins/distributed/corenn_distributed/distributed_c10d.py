"""``torch.distributed``'s functions: process groups, tensor and object collectives, point-to-point.

Each function checks its arguments (PyTorch's exception types, messages naming the
function and argument), turns tensors into contiguous buffers and calls the group's
backend (:class:`corenn_distributed.backend.ProcessGroup`). With ``async_op=True`` it
returns the :class:`Work`; otherwise it waits, and a failure anywhere in the job ends
the wait with :class:`DistributedError` instead of a hang.

Every collective gets a sequence number per group (``all_reduce #12``) that errors
name. With ``CORENN_DISTRIBUTED_DEBUG=DETAIL`` (PyTorch's ``TORCH_DISTRIBUTED_DEBUG``)
the ranks also compare, before each collective, which collective they are calling,
with which shapes and dtypes, and raise on every rank where they differ -- one extra
small all-gather per collective, so it is opt-in.
"""
from __future__ import annotations

import os
import pickle
from datetime import timedelta

import numpy as np

import corenn
from corenn_distributed.backend import (DEFAULT_TIMEOUT, CompletedWork, DistributedError, ProcessGroup, ReduceOp,
                                        Work)

__all__ = ["init_process_group", "destroy_process_group", "is_initialized", "is_available", "is_mpi_available",
           "is_nccl_available", "is_backend_available", "get_rank", "get_world_size", "get_backend", "new_group",
           "barrier", "all_reduce", "broadcast", "reduce", "all_gather", "all_gather_into_tensor", "reduce_scatter",
           "reduce_scatter_tensor", "gather", "scatter", "send", "recv", "isend", "irecv", "all_to_all",
           "all_to_all_single", "broadcast_object_list", "all_gather_object", "gather_object", "GroupMember",
           "group", "get_process_group_ranks", "monitored_barrier", "ENV_DEBUG"]

ENV_DEBUG = "CORENN_DISTRIBUTED_DEBUG"


class _NonGroupMember:
    def __repr__(self) -> str:
        return "GroupMember.NON_GROUP_MEMBER"


class GroupMember:
    """``GroupMember.WORLD`` (the default group, once initialised) and ``GroupMember.NON_GROUP_MEMBER``.

    ``new_group`` returns ``NON_GROUP_MEMBER`` on ranks outside the new group, as PyTorch does.
    """

    WORLD: ProcessGroup | None = None
    NON_GROUP_MEMBER = _NonGroupMember()


group = GroupMember  # torch.distributed.group.WORLD


class _State:
    backend_name: str | None = None
    world: ProcessGroup | None = None
    groups: dict = {}          # ProcessGroup -> its ranks in the world (list)
    sequence: dict = {}        # ProcessGroup -> collectives issued so far


def is_available() -> bool:
    """True: corenn.distributed is installed (``is_mpi_available()`` / ``is_nccl_available()`` say which backends run)."""
    return True


def _backends() -> dict:
    return corenn.plugins.process_group_backends()


def is_backend_available(backend: str) -> bool:
    """Whether a process-group backend of that name is registered (by this plugin or a third party's)."""
    return backend.lower() in _backends()


def is_mpi_available() -> bool:
    """Whether the ``mpi`` backend is registered (mpi4py is installed)."""
    return is_backend_available("mpi")


def is_nccl_available() -> bool:
    """Whether the ``nccl`` backend is registered (cupy with NCCL, corenn-cuda active, a GPU)."""
    return is_backend_available("nccl")


def is_initialized() -> bool:
    """Whether ``init_process_group`` has run (and ``destroy_process_group`` not since)."""
    return _State.world is not None


def _require_init(function: str) -> None:
    if _State.world is None:
        raise ValueError(f"{function}(): Default process group has not been initialized, please make sure to call "
                         "init_process_group.")


def init_process_group(backend: str | None = None, init_method: str | None = None, timeout: timedelta | None = None,
                       world_size: int = -1, rank: int = -1, store=None, group_name: str = "", pg_options=None,
                       device_id=None) -> None:
    """Join this process to the job's default process group, as ``torch.distributed.init_process_group``.

    ``backend``: ``"mpi"`` (cpu tensors; rank and world size come from ``mpiexec``),
    ``"nccl"`` (cuda tensors), or any name a plugin registered through
    ``corenn_register_process_group_backends``; None picks ``"mpi"``.
    ``timeout`` (a ``timedelta``, 30 minutes by default) bounds every wait: past it a
    collective raises :class:`DistributedError` saying what each rank is doing.

    Example (run with ``python -m corenn.distributed.run --nproc-per-node 2 script.py``)::

        import corenn.distributed as dist
        dist.init_process_group("mpi")
        print(dist.get_rank(), "of", dist.get_world_size())
        dist.destroy_process_group()
    """
    if _State.world is not None:
        raise ValueError("init_process_group(): trying to initialize the default process group twice!")
    if store is not None:
        raise ValueError("init_process_group(): store= is not supported; the mpi backend needs none, and nccl "
                         "bootstraps through MPI or init_method='file://...'")
    name = "mpi" if backend is None else str(backend).lower()
    if timeout is None:
        timeout = DEFAULT_TIMEOUT
    if not isinstance(timeout, timedelta):
        raise TypeError(f"init_process_group(): timeout must be a datetime.timedelta, got {type(timeout).__name__}")
    if timeout.total_seconds() <= 0:
        raise ValueError(f"init_process_group(): timeout must be positive, got {timeout}")
    factories = _backends()
    if name not in factories:
        from corenn_distributed import unavailable_backends
        why = unavailable_backends().get(name)
        known = ", ".join(sorted(factories)) or "none"
        raise RuntimeError(f"init_process_group(): backend {name!r} is not available"
                           + (f": {why}" if why else "") + f" (available here: {known})")
    world = factories[name](init_method=init_method, rank=int(rank), world_size=int(world_size), timeout=timeout)
    if not isinstance(world, ProcessGroup):
        raise TypeError(f"init_process_group(): backend {name!r}'s factory returned a {type(world).__name__}, "
                        "expected a corenn_distributed.backend.ProcessGroup")
    _State.backend_name = name
    _State.world = world
    _State.groups = {world: list(range(world.size))}
    _State.sequence = {world: 0}
    GroupMember.WORLD = world


def destroy_process_group(group: ProcessGroup | None = None) -> None:
    """Release ``group`` (default: every group, after which ``init_process_group`` may run again)."""
    if group is None or group is _State.world:
        world = _State.world
        if world is not None and world.name == "mpi" and world.size > 1:
            # Every rank reached the end: now MPI_Finalize at exit cannot wait for a rank that is gone.
            _start(world, "barrier", "in destroy_process_group", None)
            world.barrier().wait()
            from corenn_distributed import mpi
            mpi.mark_clean_end()
        for each in list(_State.groups):
            each.shutdown()
        _State.world, _State.backend_name, _State.groups, _State.sequence = None, None, {}, {}
        GroupMember.WORLD = None
        return
    if group in _State.groups:
        group.shutdown()
        del _State.groups[group]
        _State.sequence.pop(group, None)


def _group(group, function: str) -> ProcessGroup | None:
    """The group to use (None: this rank is not a member)."""
    _require_init(function)
    if group is None:
        return _State.world
    if group is GroupMember.NON_GROUP_MEMBER:
        return None
    if group not in _State.groups:
        raise ValueError(f"{function}(): group {group!r} is not a process group of this job (destroyed?)")
    return group


def get_rank(group: ProcessGroup | None = None) -> int:
    """This process's rank in ``group`` (default: the world); -1 if it is not a member."""
    pg = _group(group, "get_rank")
    return -1 if pg is None else pg.rank


def get_world_size(group: ProcessGroup | None = None) -> int:
    """The number of processes in ``group`` (default: the world); -1 if this rank is not a member."""
    pg = _group(group, "get_world_size")
    return -1 if pg is None else pg.size


def get_backend(group: ProcessGroup | None = None) -> str:
    """The backend's name (``"mpi"``...)."""
    pg = _group(group, "get_backend")
    if pg is None:
        raise ValueError("get_backend(): this rank is not a member of the group")
    return pg.name


def get_process_group_ranks(group: ProcessGroup) -> list[int]:
    """The world ranks of ``group``'s members, in group-rank order."""
    pg = _group(group, "get_process_group_ranks")
    if pg is None:
        raise ValueError("get_process_group_ranks(): this rank is not a member of the group")
    return list(_State.groups[pg])


def new_group(ranks=None, timeout: timedelta | None = None, backend: str | None = None, pg_options=None,
              use_local_synchronization: bool = False):
    """A process group of the world ranks ``ranks`` (default: all); every rank of the world must call it.

    Returns the group on its members and ``GroupMember.NON_GROUP_MEMBER`` elsewhere.

    Example::

        evens = dist.new_group([0, 2])
        if dist.get_rank() in (0, 2):
            dist.all_reduce(t, group=evens)
    """
    _require_init("new_group")
    world = _State.world
    if backend is not None and str(backend).lower() != world.name:
        raise ValueError(f"new_group(): backend {backend!r} differs from the default group's {world.name!r}; "
                         "groups of another backend are not supported")
    members = list(range(world.size)) if ranks is None else sorted(int(r) for r in ranks)
    if len(set(members)) != len(members):
        raise ValueError(f"new_group(): ranks has duplicates: {ranks}")
    for r in members:
        if not 0 <= r < world.size:
            raise ValueError(f"new_group(): rank {r} is outside the world (size {world.size})")
    made = world.new_group(members, timeout or world.timeout)
    if made is None:
        return GroupMember.NON_GROUP_MEMBER
    _State.groups[made] = members
    _State.sequence[made] = 0
    return made


# -- tensors <-> buffers -----------------------------------------------------------------------------------------

class _Buffer:
    """A tensor as the backend sees it: its array (or the tensor, off cpu), and how to copy results back."""

    __slots__ = ("tensor", "array", "copy_back")

    def __init__(self, tensor, function: str, argument: str, writable: bool):
        if not isinstance(tensor, corenn.Tensor):
            raise TypeError(f"{function}(): argument '{argument}' must be a Tensor, got {type(tensor).__name__}")
        self.tensor = tensor
        self.copy_back = False
        detached = tensor.detach()
        if detached.device.type != "cpu":
            self.array = detached if detached.is_contiguous() else detached.contiguous()
            self.copy_back = writable and self.array is not detached
            return
        array = detached.numpy()
        if not array.flags.c_contiguous or (writable and not array.flags.writeable):
            array = np.ascontiguousarray(array).copy()
            self.copy_back = writable
        self.array = array

    def finish(self) -> None:
        if self.copy_back:
            source = self.array if isinstance(self.array, corenn.Tensor) else corenn.from_numpy(self.array)
            with corenn.no_grad():
                self.tensor.copy_(source.reshape(self.tensor.shape))


def _flat(array):
    return array.reshape(-1) if isinstance(array, np.ndarray) else array.view(-1)


def _describe(tensor) -> str:
    return f"{str(tensor.dtype).replace('corenn.', '')}{list(tensor.shape)}"


def _start(pg: ProcessGroup, name: str, detail: str, fingerprint) -> None:
    """Number the collective, name it for errors, and (debug mode) check that every rank calls the same one."""
    _State.sequence[pg] = number = _State.sequence.get(pg, 0) + 1
    label = f"{name} #{number}" + (f" ({detail})" if detail else "")
    if pg is not _State.world:
        label += f" on group {_State.groups[pg]}"
    if os.environ.get(ENV_DEBUG, "").upper() == "DETAIL":
        pg.current_operation = f"the order check before {label}"
        mine = (name, number, fingerprint)
        everyone = _exchange(pg, mine)
        if any(other != mine for other in everyone):
            ranks = _State.groups[pg]
            lines = [f"  rank {ranks[r]}: {o[0]} #{o[1]} {o[2]}" for r, o in enumerate(everyone)]
            culprit = next(ranks[r] for r, o in enumerate(everyone) if o != everyone[0]) if everyone else None
            raise DistributedError(f"ranks called different collectives ({ENV_DEBUG}=DETAIL check):\n"
                                   + "\n".join(lines), rank=culprit)
    pg.current_operation = label
    pg.current_sequence = number


def _exchange(pg: ProcessGroup, obj) -> list:
    """Every rank's (small) picklable ``obj``, built on allgather; used by the order check and object collectives."""
    payload = np.frombuffer(pickle.dumps(obj), dtype=np.uint8)
    sizes = np.zeros(pg.size, dtype=np.int64)
    pg.allgather(sizes, np.array([payload.size], dtype=np.int64)).wait()
    longest = int(sizes.max())
    padded = np.zeros(longest, dtype=np.uint8)
    padded[:payload.size] = payload
    everything = np.empty(longest * pg.size, dtype=np.uint8)
    pg.allgather(everything, padded).wait()
    return [pickle.loads(everything[i * longest:i * longest + int(sizes[i])].tobytes()) for i in range(pg.size)]


def _finish(work: Work, buffers, then=None, async_op: bool = False):
    """Run ``then`` and copy results back once ``work`` completes; wait unless ``async_op``."""
    def done(_):
        for buffer in buffers:
            buffer.finish()
        if then is not None:
            then()
    chained = work.then(done)
    if async_op:
        return chained
    chained.wait()
    return None


def _check_op(op, function: str, tensor) -> ReduceOp:
    if not isinstance(op, ReduceOp):
        raise TypeError(f"{function}(): op must be a corenn.distributed.ReduceOp, got {op!r}")
    if op is ReduceOp.AVG and not tensor.dtype.is_floating_point:
        raise TypeError(f"{function}(): ReduceOp.AVG needs a floating-point tensor, got {tensor.dtype}")
    if op in (ReduceOp.BAND, ReduceOp.BOR, ReduceOp.BXOR) and tensor.dtype.is_floating_point:
        raise TypeError(f"{function}(): {op} needs an integer or bool tensor, got {tensor.dtype}")
    return op


def _group_rank(pg: ProcessGroup, rank: int, function: str, argument: str) -> int:
    ranks = _State.groups[pg]
    if not isinstance(rank, int) or isinstance(rank, bool):
        raise TypeError(f"{function}(): {argument} must be an int (a global rank), got {type(rank).__name__}")
    if rank not in ranks:
        raise ValueError(f"{function}(): {argument}={rank} is not a rank of the group (its global ranks: {ranks})")
    return ranks.index(rank)


def _same(tensors, function: str, argument: str, like, count: int | None = None):
    if not isinstance(tensors, (list, tuple)):
        raise TypeError(f"{function}(): {argument} must be a list of tensors, got {type(tensors).__name__}")
    if count is not None and len(tensors) != count:
        raise ValueError(f"{function}(): {argument} must hold one tensor per rank ({count}), got {len(tensors)}")
    for i, t in enumerate(tensors):
        if not isinstance(t, corenn.Tensor):
            raise TypeError(f"{function}(): {argument}[{i}] must be a Tensor, got {type(t).__name__}")
        if like is not None and (t.dtype != like.dtype or t.numel() != like.numel()):
            raise ValueError(f"{function}(): {argument}[{i}] is {_describe(t)}, expected the size and dtype of "
                             f"{_describe(like)}")


# -- tensor collectives -----------------------------------------------------------------------------------------------

def all_reduce(tensor, op: ReduceOp = ReduceOp.SUM, group=None, async_op: bool = False):
    """Reduce ``tensor`` over the group, in place on every rank (``op``: a :class:`ReduceOp`).

    Example::

        t = corenn.tensor([float(dist.get_rank())])
        dist.all_reduce(t)                          # every rank: sum of the ranks
    """
    pg = _group(group, "all_reduce")
    buffer = _Buffer(tensor, "all_reduce", "tensor", writable=True)
    _check_op(op, "all_reduce", tensor)
    if pg is None:
        return None
    _start(pg, "all_reduce", _describe(tensor), (_describe(tensor), op.name))
    work = pg.allreduce(buffer.array, ReduceOp.SUM if op is ReduceOp.AVG else op)
    then = None
    if op is ReduceOp.AVG:
        def then():
            with corenn.no_grad():
                tensor.div_(pg.size)
    return _finish(work, [buffer], then, async_op)


def broadcast(tensor, src: int, group=None, async_op: bool = False):
    """Copy ``tensor`` of rank ``src`` (a global rank) into ``tensor`` on every rank of the group."""
    pg = _group(group, "broadcast")
    buffer = _Buffer(tensor, "broadcast", "tensor", writable=True)
    if pg is None:
        return None
    root = _group_rank(pg, src, "broadcast", "src")
    _start(pg, "broadcast", f"{_describe(tensor)} from rank {src}", (_describe(tensor), src))
    return _finish(pg.broadcast(buffer.array, root), [buffer], None, async_op)


def reduce(tensor, dst: int, op: ReduceOp = ReduceOp.SUM, group=None, async_op: bool = False):
    """Reduce ``tensor`` over the group into rank ``dst``'s ``tensor``; the others keep theirs."""
    pg = _group(group, "reduce")
    buffer = _Buffer(tensor, "reduce", "tensor", writable=True)
    _check_op(op, "reduce", tensor)
    if pg is None:
        return None
    root = _group_rank(pg, dst, "reduce", "dst")
    _start(pg, "reduce", f"{_describe(tensor)} to rank {dst}", (_describe(tensor), dst, op.name))
    then = None
    if op is ReduceOp.AVG and pg.rank == root:
        def then():
            with corenn.no_grad():
                tensor.div_(pg.size)
    return _finish(pg.reduce(buffer.array, root, ReduceOp.SUM if op is ReduceOp.AVG else op), [buffer], then,
                   async_op)


def all_gather_into_tensor(output_tensor, input_tensor, group=None, async_op: bool = False):
    """``output_tensor`` (``world_size`` times ``input_tensor``'s elements) gets every rank's input, in rank order."""
    pg = _group(group, "all_gather_into_tensor")
    out = _Buffer(output_tensor, "all_gather_into_tensor", "output_tensor", writable=True)
    inp = _Buffer(input_tensor, "all_gather_into_tensor", "input_tensor", writable=False)
    if pg is None:
        return None
    if output_tensor.dtype != input_tensor.dtype or output_tensor.numel() != input_tensor.numel() * pg.size:
        raise ValueError(f"all_gather_into_tensor(): output_tensor is {_describe(output_tensor)}; expected "
                         f"{pg.size} x {_describe(input_tensor)} elements of the input's dtype")
    _start(pg, "all_gather_into_tensor", _describe(input_tensor), _describe(input_tensor))
    return _finish(pg.allgather(_flat(out.array), _flat(inp.array)), [out], None, async_op)


def all_gather(tensor_list, tensor, group=None, async_op: bool = False):
    """``tensor_list[r]`` gets rank r's ``tensor``, on every rank.

    Example::

        parts = [corenn.empty(2) for _ in range(dist.get_world_size())]
        dist.all_gather(parts, corenn.full((2,), float(dist.get_rank())))
    """
    pg = _group(group, "all_gather")
    inp = _Buffer(tensor, "all_gather", "tensor", writable=False)
    if pg is None:
        return None
    _same(tensor_list, "all_gather", "tensor_list", tensor, pg.size)
    _start(pg, "all_gather", _describe(tensor), _describe(tensor))
    gathered = corenn.empty(pg.size * tensor.numel(), dtype=tensor.dtype, device=tensor.device)
    out = _Buffer(gathered, "all_gather", "tensor_list", writable=True)
    n = tensor.numel()

    def then():
        with corenn.no_grad():
            for r, target in enumerate(tensor_list):
                target.copy_(gathered[r * n:(r + 1) * n].reshape(target.shape))
    return _finish(pg.allgather(out.array, _flat(inp.array)), [out], then, async_op)


def reduce_scatter_tensor(output, input, op: ReduceOp = ReduceOp.SUM, group=None, async_op: bool = False):
    """Reduce ``input`` (``world_size`` equal chunks along its elements) over the group; rank r's ``output`` gets chunk r."""
    pg = _group(group, "reduce_scatter_tensor")
    out = _Buffer(output, "reduce_scatter_tensor", "output", writable=True)
    inp = _Buffer(input, "reduce_scatter_tensor", "input", writable=False)
    _check_op(op, "reduce_scatter_tensor", output)
    if pg is None:
        return None
    if output.dtype != input.dtype or input.numel() != output.numel() * pg.size:
        raise ValueError(f"reduce_scatter_tensor(): input is {_describe(input)}; expected {pg.size} x "
                         f"{_describe(output)} elements of the output's dtype")
    _start(pg, "reduce_scatter_tensor", _describe(input), (_describe(input), op.name))
    then = None
    if op is ReduceOp.AVG:
        def then():
            with corenn.no_grad():
                output.div_(pg.size)
    work = pg.reduce_scatter(_flat(out.array), _flat(inp.array), ReduceOp.SUM if op is ReduceOp.AVG else op)
    return _finish(work, [out], then, async_op)


def reduce_scatter(output, input_list, op: ReduceOp = ReduceOp.SUM, group=None, async_op: bool = False):
    """Reduce ``input_list[r]`` over the group into rank r's ``output``."""
    pg = _group(group, "reduce_scatter")
    _Buffer(output, "reduce_scatter", "output", writable=True)
    if pg is None:
        return None
    _same(input_list, "reduce_scatter", "input_list", output, pg.size)
    stacked = corenn.cat([t.detach().reshape(-1) for t in input_list])
    return reduce_scatter_tensor(output, stacked, op, pg, async_op)


def gather(tensor, gather_list=None, dst: int = 0, group=None, async_op: bool = False):
    """Rank ``dst``'s ``gather_list[r]`` gets rank r's ``tensor``; the other ranks pass no list."""
    pg = _group(group, "gather")
    inp = _Buffer(tensor, "gather", "tensor", writable=False)
    if pg is None:
        return None
    root = _group_rank(pg, dst, "gather", "dst")
    if pg.rank == root:
        if gather_list is None:
            raise ValueError("gather(): gather_list is required on the destination rank")
        _same(gather_list, "gather", "gather_list", tensor, pg.size)
    elif gather_list:
        raise ValueError(f"gather(): gather_list must be empty on ranks other than dst={dst}")
    _start(pg, "gather", f"{_describe(tensor)} to rank {dst}", (_describe(tensor), dst))
    if pg.rank != root:
        return _finish(pg.gather(None, _flat(inp.array), root), [], None, async_op)
    n = tensor.numel()
    gathered = corenn.empty(pg.size * n, dtype=tensor.dtype, device=tensor.device)
    out = _Buffer(gathered, "gather", "gather_list", writable=True)

    def then():
        with corenn.no_grad():
            for r, target in enumerate(gather_list):
                target.copy_(gathered[r * n:(r + 1) * n].reshape(target.shape))
    return _finish(pg.gather(out.array, _flat(inp.array), root), [out], then, async_op)


def scatter(tensor, scatter_list=None, src: int = 0, group=None, async_op: bool = False):
    """Rank r's ``tensor`` gets rank ``src``'s ``scatter_list[r]``; the other ranks pass no list."""
    pg = _group(group, "scatter")
    out = _Buffer(tensor, "scatter", "tensor", writable=True)
    if pg is None:
        return None
    root = _group_rank(pg, src, "scatter", "src")
    source = None
    if pg.rank == root:
        if scatter_list is None:
            raise ValueError("scatter(): scatter_list is required on the source rank")
        _same(scatter_list, "scatter", "scatter_list", tensor, pg.size)
        source = np.ascontiguousarray(np.concatenate([t.detach().cpu().numpy().reshape(-1) for t in scatter_list])) \
            if tensor.device.type == "cpu" else corenn.cat([t.detach().reshape(-1) for t in scatter_list])
    elif scatter_list:
        raise ValueError(f"scatter(): scatter_list must be empty on ranks other than src={src}")
    _start(pg, "scatter", f"{_describe(tensor)} from rank {src}", (_describe(tensor), src))
    return _finish(pg.scatter(_flat(out.array), source, root), [out], None, async_op)


def all_to_all(output_tensor_list, input_tensor_list, group=None, async_op: bool = False):
    """Rank r's ``output_tensor_list[j]`` gets rank j's ``input_tensor_list[r]`` (sizes may differ per pair)."""
    pg = _group(group, "all_to_all")
    if pg is None:
        return None
    _same(output_tensor_list, "all_to_all", "output_tensor_list", None, pg.size)
    _same(input_tensor_list, "all_to_all", "input_tensor_list", None, pg.size)
    dtype = input_tensor_list[0].dtype
    if any(t.dtype != dtype for t in [*output_tensor_list, *input_tensor_list]):
        raise ValueError("all_to_all(): every input and output tensor must have the same dtype")
    device = input_tensor_list[0].device
    send = corenn.cat([t.detach().reshape(-1) for t in input_tensor_list])
    received = corenn.empty(sum(t.numel() for t in output_tensor_list), dtype=dtype, device=device)
    inp = _Buffer(send, "all_to_all", "input_tensor_list", writable=False)
    out = _Buffer(received, "all_to_all", "output_tensor_list", writable=True)
    out_counts = [t.numel() for t in output_tensor_list]
    in_counts = [t.numel() for t in input_tensor_list]
    _start(pg, "all_to_all", f"{str(dtype).replace('corenn.', '')} x{len(in_counts)}", str(dtype))

    def then():
        offset = 0
        with corenn.no_grad():
            for target, count in zip(output_tensor_list, out_counts):
                target.copy_(received[offset:offset + count].reshape(target.shape))
                offset += count
    return _finish(pg.alltoall(out.array, out_counts, inp.array, in_counts), [out], then, async_op)


def all_to_all_single(output, input, output_split_sizes=None, input_split_sizes=None, group=None,
                      async_op: bool = False):
    """``all_to_all`` on split tensors: ``input``'s chunks (along dim 0) go to the ranks, ``output``'s come from them."""
    pg = _group(group, "all_to_all_single")
    if pg is None:
        return None
    for name, t in (("output", output), ("input", input)):
        if not isinstance(t, corenn.Tensor):
            raise TypeError(f"all_to_all_single(): argument '{name}' must be a Tensor, got {type(t).__name__}")

    def split(t, sizes, name):
        sizes = [t.shape[0] // pg.size] * pg.size if sizes is None else list(sizes)
        if len(sizes) != pg.size or sum(sizes) != t.shape[0]:
            raise ValueError(f"all_to_all_single(): {name}_split_sizes {sizes} must have {pg.size} entries "
                             f"summing to {name}.shape[0] = {t.shape[0]}")
        return list(corenn.split(t, sizes, dim=0)) if t.dim() else [t]
    outs = split(output, output_split_sizes, "output")
    ins = split(input, input_split_sizes, "input")
    return _all_to_all_into(output, outs, ins, pg, async_op)


def _all_to_all_into(output, outs, ins, pg, async_op):
    parts = [corenn.empty_like(o) for o in outs]
    work = all_to_all(parts, ins, pg, async_op=True)

    def then(_):
        with corenn.no_grad():
            output.copy_(corenn.cat([p.reshape(o.shape) for p, o in zip(parts, outs)], dim=0))
    chained = work.then(then)
    if async_op:
        return chained
    chained.wait()
    return None


def barrier(group=None, async_op: bool = False, device_ids=None):
    """Wait until every rank of the group has called ``barrier``."""
    pg = _group(group, "barrier")
    if pg is None:
        return None
    _start(pg, "barrier", "", None)
    work = pg.barrier()
    if async_op:
        return work
    work.wait()
    return None


def monitored_barrier(group=None, timeout: timedelta | None = None, wait_all_ranks: bool = False):
    """A barrier with its own timeout: raises DistributedError naming the ranks that did not arrive."""
    pg = _group(group, "monitored_barrier")
    if pg is None:
        return None
    _start(pg, "monitored_barrier", "", None)
    pg.barrier().wait(timeout)
    return None


# -- point to point ---------------------------------------------------------------------------------------------------

def _check_tag(tag, function: str) -> int:
    if not isinstance(tag, int) or isinstance(tag, bool) or tag < 0:
        raise ValueError(f"{function}(): tag must be a non-negative int, got {tag!r}")
    return tag


def isend(tensor, dst: int, group=None, tag: int = 0) -> Work | None:
    """Start sending ``tensor`` to rank ``dst``; returns a Work to wait on."""
    pg = _group(group, "isend")
    buffer = _Buffer(tensor, "isend", "tensor", writable=False)
    if pg is None:
        return None
    peer = _group_rank(pg, dst, "isend", "dst")
    if peer == pg.rank:
        raise ValueError(f"isend(): dst={dst} is this rank; a rank cannot send to itself")
    pg.current_operation = f"send of {_describe(tensor)} to rank {dst} (tag {tag})"
    return pg.send(buffer.array, peer, _check_tag(tag, "isend"))


def irecv(tensor, src: int | None = None, group=None, tag: int = 0) -> Work | None:
    """Start receiving into ``tensor`` from rank ``src`` (None: any rank); returns a Work to wait on."""
    pg = _group(group, "irecv")
    buffer = _Buffer(tensor, "irecv", "tensor", writable=True)
    if pg is None:
        return None
    peer = None if src is None else _group_rank(pg, src, "irecv", "src")
    if peer is not None and peer == pg.rank:
        raise ValueError(f"irecv(): src={src} is this rank; a rank cannot receive from itself")
    pg.current_operation = f"recv of {_describe(tensor)} from rank {'any' if src is None else src} (tag {tag})"
    work = pg.recv(buffer.array, peer, _check_tag(tag, "irecv"))
    chained = work.then(lambda w: buffer.finish())
    chained.source_rank = lambda: _State.groups[pg][work.source_rank()]
    return chained


def send(tensor, dst: int, group=None, tag: int = 0) -> None:
    """Send ``tensor`` to rank ``dst`` and wait until it has left."""
    work = isend(tensor, dst, group, tag)
    if work is not None:
        work.wait()


def recv(tensor, src: int | None = None, group=None, tag: int = 0) -> int:
    """Receive into ``tensor`` from rank ``src`` (None: any rank); returns the sender's global rank."""
    work = irecv(tensor, src, group, tag)
    if work is None:
        return -1
    work.wait()
    return work.source_rank()


# -- object collectives ------------------------------------------------------------------------------------------------
# They pickle: an object received is unpickled, which can run code. Only the job's own processes
# take part in a group, so this trusts exactly the programs you started -- never use them to
# receive objects from anywhere else.

def broadcast_object_list(object_list: list, src: int = 0, group=None, device=None) -> None:
    """Rank ``src``'s ``object_list`` items replace every rank's, in place (picklable objects; pickled between ranks).

    Example::

        config = [{"lr": 0.1}] if dist.get_rank() == 0 else [None]
        dist.broadcast_object_list(config, src=0)
    """
    pg = _group(group, "broadcast_object_list")
    if not isinstance(object_list, list):
        raise TypeError(f"broadcast_object_list(): object_list must be a list, got {type(object_list).__name__}")
    if pg is None:
        return
    root = _group_rank(pg, src, "broadcast_object_list", "src")
    payload = pickle.dumps(object_list) if pg.rank == root else b""
    size = corenn.tensor([len(payload)], dtype=corenn.int64)
    broadcast(size, src, pg)
    data = corenn.from_numpy(np.frombuffer(payload, dtype=np.uint8).copy()) if pg.rank == root else \
        corenn.empty(int(size.item()), dtype=corenn.uint8)
    broadcast(data, src, pg)
    if pg.rank != root:
        received = pickle.loads(data.numpy().tobytes())
        if len(received) != len(object_list):
            raise ValueError(f"broadcast_object_list(): rank {src} sent {len(received)} objects, but this rank's "
                             f"object_list has {len(object_list)}; make the lists the same length on every rank")
        object_list[:] = received


def all_gather_object(object_list: list, obj, group=None) -> None:
    """``object_list[r]`` becomes rank r's ``obj``, on every rank (pickled between the job's ranks)."""
    pg = _group(group, "all_gather_object")
    if not isinstance(object_list, list) or (pg is not None and len(object_list) != pg.size):
        raise ValueError(f"all_gather_object(): object_list must be a list of world_size "
                         f"({None if pg is None else pg.size}) entries")
    if pg is None:
        return
    _start(pg, "all_gather_object", "", None)
    object_list[:] = _exchange(pg, obj)


def gather_object(obj, object_gather_list=None, dst: int = 0, group=None) -> None:
    """Rank ``dst``'s ``object_gather_list[r]`` becomes rank r's ``obj`` (pickled between the job's ranks)."""
    pg = _group(group, "gather_object")
    if pg is None:
        return
    root = _group_rank(pg, dst, "gather_object", "dst")
    if pg.rank == root and (not isinstance(object_gather_list, list) or len(object_gather_list) != pg.size):
        raise ValueError(f"gather_object(): object_gather_list must be a list of {pg.size} entries on dst")
    _start(pg, "gather_object", "", None)
    everyone = _exchange(pg, obj)
    if pg.rank == root:
        object_gather_list[:] = everyone
