"""Every collective on a real MPI job (3 ranks: not a power of two), checked against numpy on the gathered inputs.

Each rank's input is a function of its rank, so every rank computes what each collective
must give from all ranks' inputs with numpy and compares.
"""
from __future__ import annotations

from distributed_jobs import needs_mpi

pytestmark = needs_mpi

COLLECTIVES = r'''
import sys
import numpy as np
import corenn
import corenn.distributed as dist
from datetime import timedelta

dist.init_process_group("mpi", timeout=timedelta(seconds=20))
rank, world = dist.get_rank(), dist.get_world_size()
assert dist.is_initialized() and dist.get_backend() == "mpi"

def data(r, shape=(2, 3), dtype=np.float32):
    return (np.arange(np.prod(shape)).reshape(shape) * (r + 1) + r).astype(dtype)

everyone = [data(r) for r in range(world)]
def check(name, got, expected):
    np.testing.assert_allclose(np.asarray(got), expected, rtol=1e-6, err_msg=name)
    sys.stdout.write(f"OK {name}\n"); sys.stdout.flush()   # one write: lines of ranks don't interleave

for op, reduce in [(dist.ReduceOp.SUM, np.sum), (dist.ReduceOp.PRODUCT, np.prod), (dist.ReduceOp.MAX, np.max),
                   (dist.ReduceOp.MIN, np.min), (dist.ReduceOp.AVG, np.mean)]:
    t = corenn.from_numpy(data(rank))
    dist.all_reduce(t, op=op)
    check(f"all_reduce {op.name}", t.numpy(), reduce(np.stack(everyone), axis=0))

ints = corenn.tensor([rank + 1, 6], dtype=corenn.int64)
dist.all_reduce(ints, op=dist.ReduceOp.BAND)
check("all_reduce BAND int64", ints.numpy(), np.bitwise_and.reduce([np.array([r + 1, 6]) for r in range(world)]))
flags = corenn.tensor([rank == 0, True])
dist.all_reduce(flags)          # bool: SUM is a logical or
check("all_reduce bool", flags.numpy(), [True, True])

t = corenn.from_numpy(data(rank)); work = dist.all_reduce(t, async_op=True)
assert work.wait() is True and work.is_completed()
check("all_reduce async", t.numpy(), np.sum(everyone, axis=0))

strided = corenn.from_numpy(data(rank, (3, 4))).t()        # not contiguous: reduced through a copy
dist.all_reduce(strided)
check("all_reduce non-contiguous", strided.numpy(), np.sum([data(r, (3, 4)) for r in range(world)], axis=0).T)

t = corenn.from_numpy(data(rank)); dist.broadcast(t, src=1)
check("broadcast", t.numpy(), everyone[1])

t = corenn.from_numpy(data(rank)); dist.reduce(t, dst=2, op=dist.ReduceOp.MAX)
check("reduce", t.numpy(), np.max(everyone, axis=0) if rank == 2 else everyone[rank])

parts = [corenn.empty(2, 3) for _ in range(world)]
dist.all_gather(parts, corenn.from_numpy(data(rank)))
check("all_gather", np.stack([p.numpy() for p in parts]), np.stack(everyone))

out = corenn.empty(world * 2, 3)
dist.all_gather_into_tensor(out, corenn.from_numpy(data(rank)))
check("all_gather_into_tensor", out.numpy(), np.concatenate(everyone))

big = [data(r, (world * 2,)) for r in range(world)]
out = corenn.empty(2)
dist.reduce_scatter_tensor(out, corenn.from_numpy(big[rank]))
check("reduce_scatter_tensor", out.numpy(), np.sum(big, axis=0)[rank * 2:(rank + 1) * 2])

out = corenn.empty(2)
dist.reduce_scatter(out, [corenn.from_numpy(big[rank][j * 2:(j + 1) * 2].copy()) for j in range(world)],
                    op=dist.ReduceOp.AVG)
check("reduce_scatter AVG", out.numpy(), np.mean(big, axis=0)[rank * 2:(rank + 1) * 2])

gathered = [corenn.empty(2, 3) for _ in range(world)] if rank == 0 else None
dist.gather(corenn.from_numpy(data(rank)), gathered, dst=0)
if rank == 0:
    check("gather", np.stack([g.numpy() for g in gathered]), np.stack(everyone))

got = corenn.empty(2, 3)
dist.scatter(got, [corenn.from_numpy(data(10 + r)) for r in range(world)] if rank == 1 else None, src=1)
check("scatter", got.numpy(), data(10 + rank))

# all_to_all with sizes that differ per pair: rank r sends j+1 copies of (10*r + j) to rank j
inputs = [corenn.full((j + 1,), float(10 * rank + j)) for j in range(world)]
outputs = [corenn.empty(rank + 1) for _ in range(world)]
dist.all_to_all(outputs, inputs)
check("all_to_all", np.concatenate([o.numpy() for o in outputs]),
      np.concatenate([np.full(rank + 1, 10.0 * j + rank) for j in range(world)]))

single_out = corenn.empty(world)
dist.all_to_all_single(single_out, corenn.arange(world, dtype=corenn.float32) + 100 * rank)
check("all_to_all_single", single_out.numpy(), [100.0 * j + rank for j in range(world)])

# point to point: a ring
right, left = (rank + 1) % world, (rank - 1) % world
received = corenn.empty(2, 3)
send_work = dist.isend(corenn.from_numpy(data(rank)), dst=right)
recv_work = dist.irecv(received, src=left)
send_work.wait(); recv_work.wait()
check("isend/irecv ring", received.numpy(), everyone[left])
if rank == 0:
    dist.send(corenn.tensor([7.0]), dst=2, tag=5)
if rank == 2:
    box = corenn.zeros(1)
    sender = dist.recv(box, src=None, tag=5)
    assert sender == 0, sender
    check("send/recv any source", box.numpy(), [7.0])

# objects
objects = [None] * world
dist.all_gather_object(objects, {"rank": rank, "name": f"r{rank}"})
assert objects == [{"rank": r, "name": f"r{r}"} for r in range(world)], objects
config = [{"lr": 0.5}, "text"] if rank == 0 else [None, None]
dist.broadcast_object_list(config, src=0)
assert config == [{"lr": 0.5}, "text"], config
collected = [None] * world if rank == 1 else None
dist.gather_object(rank * 10, collected, dst=1)
assert rank != 1 or collected == [0, 10, 20]
sys.stdout.write("OK objects\n"); sys.stdout.flush()

# a group of ranks 0 and 2
pair = dist.new_group([0, 2])
if rank in (0, 2):
    assert dist.get_world_size(pair) == 2 and dist.get_rank(pair) == (0 if rank == 0 else 1)
    t = corenn.tensor([float(rank)])
    dist.all_reduce(t, group=pair)
    check("new_group all_reduce", t.numpy(), [2.0])
    t = corenn.tensor([float(rank)])
    dist.broadcast(t, src=2, group=pair)
    check("new_group broadcast", t.numpy(), [2.0])
    assert dist.get_process_group_ranks(pair) == [0, 2]
else:
    assert pair is dist.GroupMember.NON_GROUP_MEMBER and dist.get_rank(pair) == -1

dist.barrier()
sys.stdout.write("OK barrier\n"); sys.stdout.flush()
dist.destroy_process_group()
assert not dist.is_initialized()
'''

NAMES = ["all_reduce SUM", "all_reduce PRODUCT", "all_reduce MAX", "all_reduce MIN", "all_reduce AVG",
         "all_reduce BAND int64", "all_reduce bool", "all_reduce async", "all_reduce non-contiguous", "broadcast",
         "reduce", "all_gather", "all_gather_into_tensor", "reduce_scatter_tensor", "reduce_scatter AVG", "scatter",
         "all_to_all", "all_to_all_single", "isend/irecv ring", "objects", "barrier"]


def test_every_collective_matches_numpy_on_three_ranks(launch):
    job = launch(COLLECTIVES, nproc=3)
    assert job.returncode == 0, job
    for name in NAMES:
        assert job.stdout.count(f"OK {name}\n") == 3, (name, job)
    assert job.stdout.count("OK gather\n") == 1 and job.stdout.count("OK send/recv any source\n") == 1
    assert job.stdout.count("OK new_group all_reduce\n") == 2, job


ERRORS = r'''
import sys
import corenn, pytest
import corenn.distributed as dist
dist.init_process_group("mpi")
rank = dist.get_rank()
checks = [
    (TypeError, "all_reduce\(\): argument 'tensor' must be a Tensor", lambda: dist.all_reduce([1.0])),
    (TypeError, "AVG needs a floating-point tensor", lambda: dist.all_reduce(corenn.tensor([1]), op=dist.ReduceOp.AVG)),
    (ValueError, "src=5 is not a rank of the group", lambda: dist.broadcast(corenn.zeros(1), src=5)),
    (ValueError, "one tensor per rank \(2\), got 1", lambda: dist.all_gather([corenn.zeros(1)], corenn.zeros(1))),
    (ValueError, "output_tensor is float32\[3\]", lambda: dist.all_gather_into_tensor(corenn.zeros(3), corenn.zeros(1))),
    (ValueError, "a rank cannot send to itself", lambda: dist.send(corenn.zeros(1), dst=rank)),
    (ValueError, "initialize the default process group twice", lambda: dist.init_process_group("mpi")),
    (ValueError, "rank 7 is outside the world", lambda: dist.new_group([0, 7])),
]
for error, message, call in checks:
    with pytest.raises(error, match=message):
        call()
# nothing was sent by the failed calls: the ranks still agree
t = corenn.ones(1); dist.all_reduce(t); assert t.item() == 2.0
sys.stdout.write("OK errors\n"); sys.stdout.flush()
dist.destroy_process_group()
'''


def test_bad_arguments_raise_pytorchs_types_naming_function_and_argument_and_send_nothing(launch):
    job = launch(ERRORS, nproc=2)
    assert job.returncode == 0 and job.stdout.count("OK errors") == 2, job
