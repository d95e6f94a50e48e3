"""corenn-distributed against torch.distributed (gloo) in one run, as ratios: all_reduce, and DDP training steps.

Every measurement runs in real multi-process jobs started by corenn's launcher
(``python -m corenn.distributed.run``): corenn on its ``mpi`` backend, torch==2.13 CPU on
``gloo`` over TCP on this host (torch's DDP, same model, same batch). Both use one BLAS
thread per rank (``OMP_NUM_THREADS=1``), so N ranks on N cores compare fairly.

- ``all_reduce`` of float32 tensors, 2 ranks: time per call and bus bandwidth
  (``2 (n-1)/n * bytes / time``, NCCL's convention);
- DDP training steps (forward, backward with the gradient all-reduce, SGD) on the digits
  MLP (64-256-256-10, batch 64 per rank) and the digits CNN (batch 32 per rank), at 1, 2
  and (``--max-procs 4``) 4 ranks: ms per step, samples/s, scaling efficiency, and DDP's
  cost over the same step without DDP in the same process -- at 1 rank that is DDP's
  overhead (the issue's target: under 5%), at 2+ ranks it is the communication time,
  separated from compute. Also the gradient bytes each step all-reduces.

A 2-core machine cannot show scaling (ranks share the cores): there the ratios to torch
and the 1-rank overhead are the figures to read; docs/distributed.md models a cluster.

    python benchmarks/bench_distributed.py [--max-procs 2] [--steps 60]
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import textwrap

WORKER = r'''
import json, os, statistics, sys, time
import numpy as np
framework, what, steps, out_path = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])

if framework == "corenn":
    import corenn as lib
    import corenn.distributed as dist
    from corenn.nn.parallel import DistributedDataParallel as DDP
    dist.init_process_group("mpi")
    def barrier(): dist.barrier()
else:
    import torch as lib
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP
    lib.set_num_threads(1)
    dist.init_process_group("gloo", init_method="tcp://127.0.0.1:" + os.environ["BENCH_PORT"], rank=rank,
                            world_size=world)
    def barrier(): dist.barrier()
nn, F = lib.nn, lib.nn.functional

def median_time(fn, repeats):
    times = []
    for _ in range(repeats):
        barrier()
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)

result = {}
if what == "allreduce":
    for n in (256, 65536, 1048576, 4194304):
        t = lib.ones(n)
        for _ in range(3):
            dist.all_reduce(t)
        repeats = max(5, min(200, int(2e7 // n)))
        result[str(n)] = median_time(lambda: dist.all_reduce(t), repeats)
else:
    model_name = what
    def build():
        lib.manual_seed(0)
        if model_name == "mlp":
            return nn.Sequential(nn.Linear(64, 256), nn.ReLU(), nn.Linear(256, 256), nn.ReLU(), nn.Linear(256, 10))
        return nn.Sequential(nn.Conv2d(1, 16, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                             nn.Conv2d(16, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                             nn.Flatten(), nn.Linear(128, 10))
    batch = 64 if model_name == "mlp" else 32
    rng = np.random.default_rng(rank)
    shape = (batch, 64) if model_name == "mlp" else (batch, 1, 8, 8)
    x = lib.from_numpy(rng.normal(size=shape).astype(np.float32))
    y = lib.from_numpy(rng.integers(0, 10, size=batch).astype(np.int64))
    def stepper(model):
        optimizer = lib.optim.SGD(model.parameters(), lr=0.01)
        def step():
            optimizer.zero_grad()
            F.cross_entropy(model(x), y).backward()
            optimizer.step()
        return step
    steps_local, steps_ddp = stepper(build()), stepper(DDP(build()))
    for _ in range(10):                      # warm both (corenn-numba chooses its kernels while they run)
        steps_local(); steps_ddp()
    local_times, ddp_times = [], []
    for _ in range(max(3, steps // 10)):     # interleaved, ten steps a sample, so drift hits both alike
        local_times.append(median_time(lambda: [steps_local() for _ in range(10)], 1) / 10)
        ddp_times.append(median_time(lambda: [steps_ddp() for _ in range(10)], 1) / 10)
    local, ddp = statistics.median(local_times), statistics.median(ddp_times)
    params = sum(p.numel() for p in build().parameters())
    result = {"local_s": local, "ddp_s": ddp, "gradient_bytes": int(params) * 4}
if rank == 0:
    with open(out_path, "w") as file:
        json.dump(result, file)
dist.destroy_process_group()
'''


def run_job(framework: str, what: str, nproc: int, steps: int, port: int) -> dict:
    with tempfile.TemporaryDirectory() as folder:
        worker = os.path.join(folder, "worker.py")
        with open(worker, "w") as file:
            file.write(textwrap.dedent(WORKER))
        out = os.path.join(folder, "out.json")
        env = dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1", MKL_NUM_THREADS="1",
                   BENCH_PORT=str(port), CORENN_NUMBA_DISABLE=os.environ.get("CORENN_NUMBA_DISABLE", "0"))
        subprocess.run([sys.executable, "-m", "corenn.distributed.run", "--nproc-per-node", str(nproc), worker,
                        framework, what, str(steps), out], check=True, env=env, timeout=600)
        with open(out) as file:
            return json.load(file)


def main() -> None:
    parser = argparse.ArgumentParser(description="corenn-distributed vs torch.distributed (gloo)")
    parser.add_argument("--max-procs", type=int, default=2, choices=(1, 2, 4))
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--no-torch", action="store_true")
    args = parser.parse_args()
    try:
        import torch
        torch_version = torch.__version__
    except ImportError:
        torch_version = None
    use_torch = torch_version is not None and not args.no_torch
    import corenn
    print(f"corenn-distributed vs torch {torch_version or '(not installed)'} gloo; {platform.processor() or platform.machine()}, "
          f"{os.cpu_count()} CPUs, Python {platform.python_version()}, corenn {corenn.__version__}; one BLAS thread "
          "per rank")
    port = 29500 + os.getpid() % 1000

    print("\nall_reduce, float32, 2 ranks (median per call; bus bandwidth 2(n-1)/n*bytes/time)")
    print(f"{'elements':>10} {'corenn ms':>10} {'torch ms':>10} {'corenn/torch':>13} {'corenn GB/s':>12}")
    ours = run_job("corenn", "allreduce", 2, args.steps, port)
    theirs = run_job("torch", "allreduce", 2, args.steps, port + 1) if use_torch else {}
    for n, seconds in ours.items():
        gbps = 2 * (2 - 1) / 2 * int(n) * 4 / seconds / 1e9
        t = theirs.get(n)
        print(f"{int(n):>10} {seconds * 1e3:>10.3f} {t * 1e3 if t else float('nan'):>10.3f} "
              f"{seconds / t if t else float('nan'):>13.2f} {gbps:>12.2f}")

    print("\nDDP training step (forward + backward with all-reduce + SGD), median ms per step")
    print(f"{'model':>5} {'ranks':>5} {'corenn ms':>10} {'torch ms':>9} {'corenn/torch':>13} {'samples/s':>10} "
          f"{'scaling':>8} {'DDP cost':>9} {'torch DDP cost':>15} {'grad MB':>8}")
    for model in ("mlp", "cnn"):
        batch = 64 if model == "mlp" else 32
        base = None
        for nproc in [n for n in (1, 2, 4) if n <= args.max_procs]:
            ours = run_job("corenn", model, nproc, args.steps, port + 2 + nproc)
            theirs = run_job("torch", model, nproc, args.steps, port + 10 + nproc) if use_torch else None
            samples = batch * nproc / ours["ddp_s"]
            base = base or samples
            cost = ours["ddp_s"] / ours["local_s"] - 1
            torch_cost = theirs["ddp_s"] / theirs["local_s"] - 1 if theirs else float("nan")
            print(f"{model:>5} {nproc:>5} {ours['ddp_s'] * 1e3:>10.3f} "
                  f"{theirs['ddp_s'] * 1e3 if theirs else float('nan'):>9.3f} "
                  f"{ours['ddp_s'] / theirs['ddp_s'] if theirs else float('nan'):>13.2f} {samples:>10.0f} "
                  f"{samples / (base * nproc):>8.2f} {100 * cost:>8.1f}% {100 * torch_cost:>14.1f}% "
                  f"{ours['gradient_bytes'] / 1e6:>8.3f}")
    print("\nDDP cost = DDP step / the same step without DDP - 1 (at 1 rank: DDP's overhead, target < 5%; at 2+ "
          "ranks: the all-reduce and its bookkeeping). scaling = samples/s / (1-rank samples/s x ranks).")


if __name__ == "__main__":
    main()
