"""Pooling: core (numpy), corenn-numba and PyTorch side by side in one run, in microseconds.

Workloads (float32), each forward under no_grad ("fwd") and forward plus backward ("f+b"):

* pool1:      MaxPool2d(2) on 64x16x28x28, the demo CNN's first pooling (bench_training);
* pool2:      MaxPool2d(2) on 64x32x14x14, its second;
* pool odd:   MaxPool2d(2) on 64x16x27x27: odd sizes, so corenn-numba's fast path runs plane by plane;
* pool 3x3:   MaxPool2d(3, stride 2, padding 1) on 8x64x56x56, a ResNet stem's pooling: fast inside,
              the general loop on the padded border;
* avg 2x2:    AvgPool2d(2) on 64x16x28x28, the common stride-2 average pool;
* avg 3x3:    AvgPool2d(3, stride 2, padding 1) on 32x64x32x32 (bench_numba_conv's "avgpool");
* adapt 7:    AdaptiveAvgPool2d(7) on 32x64x32x32 (bench_numba_conv's "adaptive"): windows of 5 or 6;
* global:     AdaptiveAvgPool2d(1) on 32x512x7x7, a ResNet-18's global average pooling.

``--only avg adapt`` times just the workloads whose names start with those words.

A sample is the mean of ``--calls`` calls; a cell is the median of ``--reps`` samples in each of
``--rounds`` rounds. The columns take turns round by round, each in its own process
(``CORENN_NUMBA_DISABLE=1`` for the core's; PyTorch's OpenMP threads spin on the second core after
its ops and slow whatever else runs in that process).

    python benchmarks/bench_numba_pool.py [--rounds 3] [--reps 7] [--calls 50] [--threads 2]
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

import numpy as np

WORKLOADS = [("pool1", (64, 16, 28, 28), "max_pool2d", dict(kernel_size=2)),
             ("pool2", (64, 32, 14, 14), "max_pool2d", dict(kernel_size=2)),
             ("pool odd", (64, 16, 27, 27), "max_pool2d", dict(kernel_size=2)),
             ("pool 3x3", (8, 64, 56, 56), "max_pool2d", dict(kernel_size=3, stride=2, padding=1)),
             ("avg 2x2", (64, 16, 28, 28), "avg_pool2d", dict(kernel_size=2)),
             ("avg 3x3", (32, 64, 32, 32), "avg_pool2d", dict(kernel_size=3, stride=2, padding=1)),
             ("adapt 7", (32, 64, 32, 32), "adaptive_avg_pool2d", dict(output_size=7)),
             ("global", (32, 512, 7, 7), "adaptive_avg_pool2d", dict(output_size=1))]


def _samples(fn, reps, calls):
    fn()  # warm-up (and the JIT's first call, loaded from its cache)
    samples = []
    for _ in range(reps):
        start = time.perf_counter()
        for _ in range(calls):
            fn()
        samples.append((time.perf_counter() - start) / calls)
    return samples


def worker(column, reps, calls, threads, only):
    """Time every workload in this process for one column; print ``{workload: [seconds, ...]}`` as JSON."""
    if column == "PyTorch":
        import torch
        torch.set_num_threads(threads)
        lib = torch
    else:
        import corenn
        lib = corenn
        if column == "numba":
            assert corenn.dispatch.kernels.source_of("max_pool", "cpu") != "corenn.ops", "corenn-numba is not active"
    rng = np.random.default_rng(0)
    results = {}
    for name, shape, op, kwargs in WORKLOADS:
        if only and not any(name.startswith(word) for word in only):
            continue
        pool = getattr(lib.nn.functional, op)
        x = rng.standard_normal(shape).astype(np.float32)
        plain = lib.from_numpy(x)
        leaf = lib.from_numpy(x.copy()).requires_grad_(True)
        with lib.no_grad():
            upstream = pool(plain, **kwargs) * 0 + 1

        def forward():
            with lib.no_grad():
                pool(plain, **kwargs)

        def forward_backward():
            leaf.grad = None
            pool(leaf, **kwargs).backward(upstream)

        results[f"{name} fwd"] = _samples(forward, reps, calls)
        results[f"{name} f+b"] = _samples(forward_backward, reps, calls)
    print(json.dumps(results))


def _run_worker(column, reps, calls, threads, only):
    env = dict(os.environ, CORENN_NUMBA_DISABLE="1" if column == "core" else "0")
    out = subprocess.run([sys.executable, os.path.abspath(__file__), "--worker", column, "--reps", str(reps),
                          "--calls", str(calls), "--threads", str(threads), "--only", *only],
                         env=env, capture_output=True, text=True)
    if out.returncode != 0:
        raise SystemExit(f"{column} worker failed:\n{out.stderr}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--reps", type=int, default=7, help="samples per workload per column per round")
    ap.add_argument("--calls", type=int, default=50, help="calls averaged in one sample")
    ap.add_argument("--threads", type=int, default=2, help="PyTorch intra-op threads")
    ap.add_argument("--only", nargs="*", default=[], help="workload names' first words (default: all)")
    ap.add_argument("--worker", choices=["core", "numba", "PyTorch"], help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        return worker(args.worker, args.reps, args.calls, args.threads, args.only)

    try:
        import torch
        columns, torch_version = ["core", "numba", "PyTorch"], torch.__version__
    except ImportError:
        columns, torch_version = ["core", "numba"], "(absent)"
    samples = {}
    for _ in range(args.rounds):
        for column in columns:
            for name, times in _run_worker(column, args.reps, args.calls, args.threads, args.only).items():
                samples.setdefault((column, name), []).extend(times)
    names = list(dict.fromkeys(name for _, name in samples))

    print(f"pooling, float32, median us of {args.rounds} rounds x {args.reps} samples of {args.calls} calls; "
          f"PyTorch {torch_version} on {args.threads} threads; each column in its own process")
    print(f"{'workload':<13} | {'core us':>8} | {'numba us':>8} | {'PyTorch us':>10} | {'numba/PT':>8} | "
          f"{'core/numba':>10}")
    print("-" * 72)
    for name in names:
        core, fast = (statistics.median(samples[column, name]) * 1e6 for column in ("core", "numba"))
        if "PyTorch" in columns:
            pt = statistics.median(samples["PyTorch", name]) * 1e6
            print(f"{name:<13} | {core:8.0f} | {fast:8.0f} | {pt:10.0f} | {fast / pt:8.2f} | {core / fast:10.2f}")
        else:
            print(f"{name:<13} | {core:8.0f} | {fast:8.0f} | {'-':>10} | {'-':>8} | {core / fast:10.2f}")


if __name__ == "__main__":
    main()
