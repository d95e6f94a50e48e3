"""DistributedDataParallel on 2 real MPI ranks against single-process training on the same global batch.

One job runs every check (starting MPI jobs costs about a second each): parameters
broadcast at construction, 20 SGD steps equal to single-process training (and to
PyTorch's on rank 0, where it is installed), buckets that start during backward,
no_sync accumulation, the two default comm hooks, unused parameters (the error that
names them, and find_unused_parameters=True), buffers broadcast, a tied weight.
"""
from __future__ import annotations

from distributed_jobs import needs_mpi

pytestmark = needs_mpi

DDP_JOB = r'''
import copy, sys
import numpy as np
import corenn
import corenn.nn as nn
import corenn.nn.functional as F
import corenn.distributed as dist
from corenn.nn.parallel import DistributedDataParallel as DDP
from corenn.distributed.algorithms.ddp_comm_hooks import default_hooks
from datetime import timedelta

dist.init_process_group("mpi", timeout=timedelta(seconds=30))
rank, world = dist.get_rank(), dist.get_world_size()
def ok(name):
    sys.stdout.write(f"OK {name}\n"); sys.stdout.flush()

def build():
    return nn.Sequential(nn.Linear(6, 16), nn.Tanh(), nn.Linear(16, 16), nn.Tanh(), nn.Linear(16, 3))

def batch(step, n=8):
    rng = np.random.default_rng(step)
    return (corenn.from_numpy(rng.normal(size=(n, 6)).astype(np.float32)),
            corenn.from_numpy(rng.integers(0, 3, size=n).astype(np.int64)))

def shard(t):
    per = t.shape[0] // world
    return t[rank * per:(rank + 1) * per]

# -- parameters broadcast from rank 0 at construction --------------------------------------------------
corenn.manual_seed(100 + rank)          # different initial weights on each rank
local = build()
model = DDP(local, bucket_cap_mb=0.001)  # tiny buckets: several of them
initial = [None] * world
dist.all_gather_object(initial, [p.detach().numpy().copy() for p in model.parameters()])
for a, b in zip(*initial):
    np.testing.assert_array_equal(a, b)
ok("broadcast at construction")
assert len(model.bucket_sizes()) > 1, model.bucket_sizes()

# -- 20 steps equal single-process training on the global batch -----------------------------------------
reference = copy.deepcopy(local)
start_state = {k: v.detach().numpy().copy() for k, v in local.state_dict().items()}
optimizer = corenn.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
ref_optimizer = corenn.optim.SGD(reference.parameters(), lr=0.1, momentum=0.9)
overlapped = 0
for step in range(20):
    x, y = batch(step)
    optimizer.zero_grad()
    F.cross_entropy(model(shard(x)), shard(y)).backward()
    timeline = model.timeline
    overlapped += timeline["bucket_started"][0] < timeline["all_ready"]
    assert len(timeline["bucket_started"]) == len(model.bucket_sizes())
    optimizer.step()
    ref_optimizer.zero_grad()
    F.cross_entropy(reference(x), y).backward()
    ref_optimizer.step()
for (name, p), q in zip(local.named_parameters(), reference.parameters()):
    np.testing.assert_allclose(p.detach().numpy(), q.detach().numpy(), rtol=2e-5, atol=2e-6, err_msg=name)
ok("20 steps equal single-process training")
# The first bucket's all-reduce started before the last gradient was ready: communication overlapped backward.
assert overlapped == 20, overlapped
ok("buckets start during backward")

if rank == 0:
    try:
        import torch
    except ImportError:
        torch = None
    if torch is not None:
        tmodel = torch.nn.Sequential(torch.nn.Linear(6, 16), torch.nn.Tanh(), torch.nn.Linear(16, 16),
                                     torch.nn.Tanh(), torch.nn.Linear(16, 3))
        tmodel.load_state_dict({k: torch.from_numpy(v) for k, v in start_state.items()})
        topt = torch.optim.SGD(tmodel.parameters(), lr=0.1, momentum=0.9)
        for step in range(20):
            x, y = batch(step)
            topt.zero_grad()
            torch.nn.functional.cross_entropy(tmodel(torch.from_numpy(x.numpy())), torch.from_numpy(y.numpy())).backward()
            topt.step()
        for (name, p), q in zip(local.named_parameters(), tmodel.parameters()):
            np.testing.assert_allclose(p.detach().numpy(), q.detach().numpy(), rtol=1e-4, atol=1e-5, err_msg=name)
        ok("equal to pytorch")

# -- no_sync: two micro-batches, gradients synchronised once -----------------------------------------
model.zero_grad(); reference.zero_grad()
x1, y1 = batch(100); x2, y2 = batch(101)
with model.no_sync():
    F.cross_entropy(model(shard(x1)), shard(y1)).backward()
    local_only = [p.grad.numpy().copy() for p in model.parameters()]
F.cross_entropy(model(shard(x2)), shard(y2)).backward()
F.cross_entropy(reference(x1), y1).backward()
F.cross_entropy(reference(x2), y2).backward()
for p, q in zip(model.parameters(), reference.parameters()):
    np.testing.assert_allclose(p.grad.numpy(), q.grad.numpy(), rtol=2e-5, atol=2e-6)
everyone = [None] * world
dist.all_gather_object(everyone, local_only[0])
assert not np.allclose(everyone[0], everyone[1])   # inside no_sync the ranks' gradients differed
ok("no_sync accumulation")

# -- comm hooks ------------------------------------------------------------------------------------------------
for hook, tolerance in [(default_hooks.allreduce_hook, 2e-6), (default_hooks.fp16_compress_hook, 2e-3)]:
    corenn.manual_seed(0)
    hooked_local = build()
    hooked = DDP(hooked_local)
    hooked.register_comm_hook(None, hook)
    plain = copy.deepcopy(hooked_local)
    x, y = batch(7)
    F.cross_entropy(hooked(shard(x)), shard(y)).backward()
    F.cross_entropy(plain(x), y).backward()
    for p, q in zip(hooked_local.parameters(), plain.parameters()):
        np.testing.assert_allclose(p.grad.numpy(), q.grad.numpy(), atol=tolerance, rtol=tolerance)
    ok(f"comm hook {hook.__name__}")

# -- unused parameters ----------------------------------------------------------------------------------------
class TwoHeads(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = nn.Linear(4, 4)
        self.head = nn.Linear(4, 1)
        self.spare = nn.Linear(4, 1)      # never used
        self.rank0_only = nn.Linear(4, 1)
    def forward(self, x):
        out = self.head(self.body(x))
        if rank == 0:
            out = out + self.rank0_only(x)
        return out

corenn.manual_seed(0)
strict = DDP(TwoHeads())
strict(corenn.ones(2, 4)).sum().backward()
try:
    strict(corenn.ones(2, 4))
except RuntimeError as error:
    message = str(error)
    assert "Expected to have finished reduction in the prior iteration" in message, message
    assert "spare.weight" in message and "spare.bias" in message and "find_unused_parameters=True" in message
    ok("unused parameters named")
else:
    raise AssertionError("no error for unused parameters")

corenn.manual_seed(0)
tolerant_local = TwoHeads()
tolerant = DDP(tolerant_local, find_unused_parameters=True)
for _ in range(2):
    tolerant_local.zero_grad()
    tolerant(corenn.ones(2, 4)).sum().backward()
assert tolerant_local.spare.weight.grad is None            # no rank used it: left alone
grad = tolerant_local.rank0_only.weight.grad               # used on rank 0 only: averaged with rank 1's zeros
assert grad is not None
np.testing.assert_allclose(grad.numpy(), np.full((1, 4), 2.0 / world), rtol=1e-6)
ok("find_unused_parameters")

# -- buffers from rank 0, and a tied weight (one parameter used twice) --------------------------------------------
class Tied(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Linear(4, 4, bias=False)
        self.norm = nn.BatchNorm1d(4)
    def forward(self, x):
        return F.linear(self.norm(self.embed(x)), self.embed.weight)   # embed.weight used twice

corenn.manual_seed(0)
tied_local = Tied()
tied = DDP(tied_local)
plain = copy.deepcopy(tied_local)
x, _ = batch(9)
x = x[:, :4].contiguous()
tied(shard(x)).pow(2).mean().backward()
running = [None] * world
dist.all_gather_object(running, tied_local.norm.running_mean.numpy().copy())
assert not np.allclose(running[0], running[1])   # each rank's statistics came from its own shard
tied.eval()
with corenn.no_grad():
    tied(shard(x))             # the next forward broadcasts rank 0's running statistics first
np.testing.assert_allclose(tied_local.norm.running_mean.numpy(), running[0])
ok("buffers broadcast and tied weight")
dist.destroy_process_group()
'''


def test_ddp_matches_single_process_training_and_its_features_work(launch):
    job = launch(DDP_JOB, nproc=2, timeout=120)
    assert job.returncode == 0, job
    for name in ["broadcast at construction", "20 steps equal single-process training", "buckets start during backward",
                 "no_sync accumulation", "comm hook allreduce_hook", "comm hook fp16_compress_hook",
                 "unused parameters named", "find_unused_parameters", "buffers broadcast and tied weight"]:
        assert job.stdout.count(f"OK {name}\n") == 2, (name, job)
    try:
        import torch  # noqa: F401
    except ImportError:
        return
    assert job.stdout.count("OK equal to pytorch\n") == 1, job
