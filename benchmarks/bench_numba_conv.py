"""Convolution and pooling: core (numpy), corenn-numba and PyTorch side by side in one run.

Workloads (float32):

* conv fwd:     Conv2d 64->64 3x3 pad 1 on 32x64x32x32, forward under no_grad;
* conv f+b:     the same conv forward and backward (input and weight gradients, bias);
* CNN step:     the demo CNN training step of bench_training (Conv 1->16, ReLU, MaxPool 2, Conv 16->32, ReLU,
                MaxPool 2, Linear 1568->10; batch 64 of 1x28x28; cross-entropy; SGD momentum);
* maxpool f+b:  MaxPool2d(2) forward and backward on 64x16x28x28 (the CNN's first pooling);
* avgpool f+b:  AvgPool2d(3, stride 2, pad 1) forward and backward on 32x64x32x32;
* adaptive f+b: AdaptiveAvgPool2d(7) forward and backward on 32x64x32x32.

The three columns take turns in ``--rounds`` rounds, so drift on a shared machine hits all
alike; each cell is the median over all rounds. Each column runs in its own process
(``CORENN_NUMBA_DISABLE=1`` for the core's): in a process that has run PyTorch ops, PyTorch's
OpenMP threads keep spinning on the second core and slowed numpy's BLAS calls (core and
numba alike) from 16 to 25 ms on the conv forward. Ratios are
to PyTorch in the same run (below 1: faster than PyTorch). ``--warmup-check`` also times
the first conv call in fresh processes: with the numba cache cold (compiles) and warm.

    python benchmarks/bench_numba_conv.py [--rounds 5] [--reps 10] [--threads 2] [--warmup-check]
"""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np


def _timed(fn, reps):
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return times


def conv_workloads(lib, rng):
    x = rng.standard_normal((32, 64, 32, 32)).astype(np.float32)
    conv = lib.nn.Conv2d(64, 64, 3, padding=1)
    with lib.no_grad():
        conv.weight.copy_(lib.from_numpy((rng.standard_normal((64, 64, 3, 3)) * 0.05).astype(np.float32)))
    x_plain = lib.from_numpy(x)
    x_grad = lib.from_numpy(x.copy()).requires_grad_(True)
    upstream = lib.from_numpy(rng.standard_normal((32, 64, 32, 32)).astype(np.float32))

    def forward():
        with lib.no_grad():
            conv(x_plain)

    def forward_backward():
        conv.zero_grad()
        x_grad.grad = None
        conv(x_grad).backward(upstream)

    return {"conv fwd": forward, "conv f+b": forward_backward}


def pool_workloads(lib, rng):
    out = {}
    for name, layer, shape in [("maxpool f+b", lib.nn.MaxPool2d(2), (64, 16, 28, 28)),
                               ("avgpool f+b", lib.nn.AvgPool2d(3, stride=2, padding=1), (32, 64, 32, 32)),
                               ("adaptive f+b", lib.nn.AdaptiveAvgPool2d(7), (32, 64, 32, 32))]:
        x = lib.from_numpy(rng.standard_normal(shape).astype(np.float32)).requires_grad_(True)

        def step(layer=layer, x=x):
            x.grad = None
            layer(x).sum().backward()

        out[name] = step
    return out


def cnn_workload(lib, weights, batches):
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from bench_training import framework_stepper, make_cnn
    step = framework_stepper(lib, make_cnn, weights, batches)[0]
    return {"CNN step": step}


def warmup_check():
    """First conv forward+backward in a fresh process: numba cache cold (compiles) and warm (loads)."""
    code = ("import time, corenn, corenn.nn.functional as F\n"
            "x = corenn.randn(2, 3, 8, 8, requires_grad=True); w = corenn.randn(4, 3, 3, 3, requires_grad=True)\n"
            "t = time.perf_counter(); F.conv2d(x, w, padding=1).sum().backward()\n"
            "F.max_pool2d(x, 2).sum().backward()\n"
            "print(time.perf_counter() - t)\n")
    results = {}
    with tempfile.TemporaryDirectory() as cache:
        env = dict(os.environ, NUMBA_CACHE_DIR=cache)
        for label in ("cold cache (compiles)", "warm cache (loads)"):
            out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
            results[label] = float(out.stdout.strip().splitlines()[-1])
    return results


def worker(column, reps, threads):
    """Time every workload in this process for one column; print ``{workload: [seconds, ...]}`` as JSON."""
    import json
    if column == "PyTorch":
        import torch
        torch.set_num_threads(threads)
        lib = torch
    else:
        import corenn
        lib = corenn
    import corenn  # the CNN's initial weights come from corenn's initialisation (the same in every column)

    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from bench_training import CNN_BATCH, _batches, _initial_weights, make_cnn

    weights = _initial_weights(corenn, make_cnn)
    batches = _batches(np.random.default_rng(0), (1, 28, 28), CNN_BATCH)
    rng = np.random.default_rng(0)
    workloads = {**conv_workloads(lib, rng), **cnn_workload(lib, weights, batches), **pool_workloads(lib, rng)}
    if column == "numba":
        assert corenn.dispatch.kernels.source_of("conv", "cpu") != "corenn.ops", "corenn-numba is not active"
    results = {}
    for name, fn in workloads.items():
        _timed(fn, 3)  # warm-up (and the JIT's first call, loaded from its cache)
        results[name] = _timed(fn, reps)
    print(json.dumps(results))


def _run_worker(column, reps, threads):
    import json
    env = dict(os.environ)
    env["CORENN_NUMBA_DISABLE"] = "1" if column == "core" else "0"
    out = subprocess.run([sys.executable, os.path.abspath(__file__), "--worker", column, "--reps", str(reps),
                          "--threads", str(threads)], env=env, capture_output=True, text=True)
    if out.returncode != 0:
        raise SystemExit(f"{column} worker failed:\n{out.stderr}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--reps", type=int, default=10, help="timed calls per workload per column per round")
    ap.add_argument("--threads", type=int, default=2, help="PyTorch intra-op threads")
    ap.add_argument("--warmup-check", action="store_true")
    ap.add_argument("--worker", choices=["core", "numba", "PyTorch"], help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        return worker(args.worker, args.reps, args.threads)

    try:
        import torch
        columns = ["core", "numba", "PyTorch"]
        torch_version = torch.__version__
    except ImportError:
        columns, torch_version = ["core", "numba"], "(absent)"
    samples = {}
    for _ in range(args.rounds):
        for column in columns:
            for name, times in _run_worker(column, args.reps, args.threads).items():
                samples.setdefault((column, name), []).extend(times)
    names = list(dict.fromkeys(name for _, name in samples))

    print(f"conv/pooling, float32, median ms over {args.rounds} rounds x {args.reps} calls; "
          f"PyTorch {torch_version} on {args.threads} threads; each column in its own process")
    print(f"{'workload':<14} | {'core ms':>8} | {'numba ms':>8} | {'PyTorch ms':>10} | {'core/PT':>7} | "
          f"{'numba/PT':>8} | {'core/numba':>10}")
    print("-" * 84)
    for name in names:
        core = statistics.median(samples["core", name]) * 1e3
        fast = statistics.median(samples["numba", name]) * 1e3
        if "PyTorch" in columns:
            pt = statistics.median(samples["PyTorch", name]) * 1e3
            print(f"{name:<14} | {core:8.2f} | {fast:8.2f} | {pt:10.2f} | {core / pt:7.2f} | {fast / pt:8.2f} | "
                  f"{core / fast:10.2f}")
        else:
            print(f"{name:<14} | {core:8.2f} | {fast:8.2f} | {'-':>10} | {'-':>7} | {'-':>8} | {core / fast:10.2f}")
    if args.warmup_check:
        for label, seconds in warmup_check().items():
            print(f"first conv+pool call in a fresh process, {label}: {seconds * 1e3:.0f} ms")


if __name__ == "__main__":
    main()
