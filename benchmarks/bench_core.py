"""Core benchmarks, corenn vs PyTorch vs hand-written numpy in one run (medians; ratios to PyTorch).

- per-op overhead: a 200-op elementwise chain (y + a, y * b, tanh, repeated) on a (64,) tensor that
  requires grad, then ``sum().backward()``; reported in microseconds per op (forward + backward).
- MLP training step: 784 -> 512 -> 512 -> 10 with ReLU, batch 128, cross-entropy written with core ops
  (log_softmax as ``x - logsumexp``, then gather), manual SGD-with-momentum update.

The numpy column is forward and backward written by hand: the floor for a numpy-based eager framework.

    python benchmarks/bench_core.py            # or through benchmarks/run.py
"""
from __future__ import annotations

import os
import statistics
import time

import numpy as np

CHAIN_OPS = 200
BATCH, SIZES = 128, (784, 512, 512, 10)
TARGETS = {"per-op overhead": 0.75, "MLP train step": 1.25}


def _median_times(fns: dict, repeats: int, warmup: int = 3) -> dict:
    """Median seconds per call of each function, sampled round-robin.

    Interleaving the frameworks call by call spreads the load of a shared machine over all of
    them alike, so their ratios stay meaningful even when absolute times drift.
    """
    for fn in fns.values():
        for _ in range(warmup):
            fn()
    samples = {name: [] for name in fns}
    for _ in range(repeats):
        for name, fn in fns.items():
            start = time.perf_counter()
            fn()
            samples[name].append(time.perf_counter() - start)
    return {name: statistics.median(values) for name, values in samples.items()}


# -- per-op overhead ----------------------------------------------------------------------------------------

def chain_step(lib, x, a, b):
    y = x
    for i in range(CHAIN_OPS):
        kind = i % 3
        if kind == 0:
            y = y + a
        elif kind == 1:
            y = y * b
        else:
            y = lib.tanh(y)
    y.sum().backward()
    x.grad = None


def numpy_chain_step(x, a, b):
    ys, kinds = [], []
    y = x
    for i in range(CHAIN_OPS):  # forward, keeping what backward needs
        kind = i % 3
        if kind == 0:
            y = y + a
        elif kind == 1:
            ys.append(y)
            y = y * b
        else:
            y = np.tanh(y)
            ys.append(y)
        kinds.append(kind)
    grad = np.ones_like(y)
    for kind in reversed(kinds):
        if kind == 1:
            ys.pop()
            grad = grad * b
        elif kind == 2:
            t = ys.pop()
            grad = grad * (1 - t * t)
    return grad


def _chain_inputs(lib):
    rng = np.random.default_rng(0)
    arrays = [rng.uniform(-0.5, 0.5, 64).astype(np.float32) for _ in range(3)]
    if lib is None:
        return arrays
    x = lib.tensor(arrays[0], requires_grad=True)
    return x, lib.tensor(arrays[1]), lib.tensor(arrays[2])


# -- MLP training step --------------------------------------------------------------------------------------

def _mlp_arrays():
    rng = np.random.default_rng(0)
    params = []
    for fan_in, fan_out in zip(SIZES[:-1], SIZES[1:]):
        bound = 1 / np.sqrt(fan_in)
        params.append(rng.uniform(-bound, bound, (fan_in, fan_out)).astype(np.float32))
        params.append(rng.uniform(-bound, bound, fan_out).astype(np.float32))
    x = rng.standard_normal((BATCH, SIZES[0])).astype(np.float32)
    labels = rng.integers(0, SIZES[-1], BATCH)
    return params, x, labels


def make_mlp_step(lib, lr=0.01, momentum=0.9):
    arrays, x_np, labels_np = _mlp_arrays()
    params = [lib.tensor(p, requires_grad=True) for p in arrays]
    velocity = [lib.zeros_like(p) for p in params]
    x, labels = lib.tensor(x_np), lib.tensor(labels_np).reshape(-1, 1)

    def step():
        w1, b1, w2, b2, w3, b3 = params
        h = lib.relu(x @ w1 + b1)
        h = lib.relu(h @ w2 + b2)
        logits = h @ w3 + b3
        log_probs = logits - lib.logsumexp(logits, 1, keepdim=True)
        loss = -lib.gather(log_probs, 1, labels).mean()
        loss.backward()
        with lib.no_grad():
            for p, v in zip(params, velocity):
                v.mul_(momentum).add_(p.grad)
                p.sub_(lr * v)
                p.grad = None
        return loss

    return step


def make_numpy_mlp_step(lr=0.01, momentum=0.9):
    params, x, labels = _mlp_arrays()
    velocity = [np.zeros_like(p) for p in params]
    rows = np.arange(BATCH)

    def step():
        w1, b1, w2, b2, w3, b3 = params
        z1 = x @ w1 + b1
        h1 = np.maximum(z1, 0)
        z2 = h1 @ w2 + b2
        h2 = np.maximum(z2, 0)
        logits = h2 @ w3 + b3
        shifted = logits - logits.max(1, keepdims=True)
        exp = np.exp(shifted)
        total = exp.sum(1, keepdims=True)
        loss = -(shifted[rows, labels] - np.log(total[:, 0])).mean()
        d_logits = exp / total
        d_logits[rows, labels] -= 1
        d_logits /= BATCH
        grads = [None] * 6
        grads[4], grads[5] = h2.T @ d_logits, d_logits.sum(0)
        d_h2 = (d_logits @ w3.T) * (z2 > 0)
        grads[2], grads[3] = h1.T @ d_h2, d_h2.sum(0)
        d_h1 = (d_h2 @ w2.T) * (z1 > 0)
        grads[0], grads[1] = x.T @ d_h1, d_h1.sum(0)
        for p, v, g in zip(params, velocity, grads):
            v *= momentum
            v += g
            p -= lr * v
        return loss

    return step


# -- the table ------------------------------------------------------------------------------------------------

def run(repeats_chain: int = 30, repeats_mlp: int = 20) -> list[dict]:
    """Rows for ``benchmarks/run.py``: name, unit, corenn, pytorch, numpy, target ratio."""
    import corenn
    try:
        import torch
        # Two threads as in shared/ANCHORS.md; numpy's BLAS follows OPENBLAS_NUM_THREADS / OMP_NUM_THREADS.
        torch.set_num_threads(int(os.environ.get("BENCH_THREADS", "2")))
    except ImportError:
        torch = None

    rows = []
    x, a, b = _chain_inputs(corenn)
    nx, na, nb = _chain_inputs(None)
    chains = {"corenn": lambda: chain_step(corenn, x, a, b), "numpy": lambda: numpy_chain_step(nx, na, nb)}
    if torch is not None:
        tx, ta, tb = _chain_inputs(torch)
        chains["pytorch"] = lambda: chain_step(torch, tx, ta, tb)
    per_op = {name: t / CHAIN_OPS * 1e6 for name, t in _median_times(chains, repeats_chain).items()}
    rows.append(dict(name="per-op overhead", unit="us/op", target=TARGETS["per-op overhead"], **per_op))

    steps = {"corenn": make_mlp_step(corenn), "numpy": make_numpy_mlp_step()}
    if torch is not None:
        steps["pytorch"] = make_mlp_step(torch)
    mlp = {name: t * 1e3 for name, t in _median_times(steps, repeats_mlp).items()}
    rows.append(dict(name="MLP train step", unit="ms", target=TARGETS["MLP train step"], **mlp))
    return rows


if __name__ == "__main__":
    import pathlib
    import sys
    sys.path.insert(0, str(pathlib.Path(__file__).parent))
    from run import print_table
    print_table(run())
