"""Training-step time, corenn vs PyTorch (and hand-written numpy for the MLP), side by side in one run.

Workloads (float32, the same initial weights and batches in every framework):

* MLP: 784 -> 512 -> 512 -> 10 with ReLU, batch 128, cross-entropy, SGD(lr=0.01, momentum=0.9);
* CNN: Conv(1->16, 3x3, p1) - ReLU - MaxPool2 - Conv(16->32, 3x3, p1) - ReLU - MaxPool2 - Flatten -
  Linear(1568 -> 10), batch 64 of 1x28x28, cross-entropy, SGD(lr=0.01, momentum=0.9).

One step is zero_grad + forward + loss + backward + optimizer.step. Frameworks take turns
in ``--rounds`` rounds of ``--steps`` timed steps (after warm-up), so drift on a shared
machine hits all alike; the table shows the median step time and corenn / PyTorch (below 1:
corenn faster). PyTorch runs with ``--threads`` threads (default 2, as the anchors were taken).

    python benchmarks/bench_training.py [--steps 30] [--rounds 5] [--threads 2] [--only mlp|cnn]
"""
from __future__ import annotations

import argparse
import statistics
import time

import numpy as np

MLP_SIZES = [784, 512, 512, 10]
MLP_BATCH = 128
CNN_BATCH = 64
LR, MOMENTUM = 0.01, 0.9


# -- models, written once for any framework with PyTorch's API (``lib`` is corenn or torch) ----------------
def make_mlp(lib, weights):
    nn = lib.nn
    model = nn.Sequential(nn.Linear(784, 512), nn.ReLU(), nn.Linear(512, 512), nn.ReLU(), nn.Linear(512, 10))
    _load(lib, model, weights)
    return model


def make_cnn(lib, weights):
    nn = lib.nn
    model = nn.Sequential(nn.Conv2d(1, 16, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                          nn.Conv2d(16, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                          nn.Flatten(), nn.Linear(32 * 7 * 7, 10))
    _load(lib, model, weights)
    return model


def _load(lib, model, weights):
    if weights is None:
        return
    with lib.no_grad():
        for p, w in zip(model.parameters(), weights):
            p.copy_(lib.from_numpy(w.copy()))


def _initial_weights(lib, make):
    lib.manual_seed(0)
    return [p.detach().numpy().copy() for p in make(lib, None).parameters()]


def framework_stepper(lib, make, weights, batches):
    model = make(lib, weights)
    opt = lib.optim.SGD(model.parameters(), lr=LR, momentum=MOMENTUM)
    cross_entropy = lib.nn.functional.cross_entropy
    data = [(lib.from_numpy(x), lib.from_numpy(y)) for x, y in batches]
    state = {"i": 0}

    def step():
        x, y = data[state["i"] % len(data)]
        state["i"] += 1
        opt.zero_grad()
        loss = cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        return loss

    return step, model


# -- hand-written numpy MLP: the floor for a numpy framework (forward and backward by hand) --------------
def numpy_mlp_stepper(weights, batches):
    # corenn/PyTorch Linear weights are (out, in); keep that layout
    params = [w.copy() for w in weights]
    buffers = [None] * len(params)
    state = {"i": 0}

    def step():
        x, y = batches[state["i"] % len(batches)]
        state["i"] += 1
        w1, b1, w2, b2, w3, b3 = params
        h1 = x @ w1.T + b1
        a1 = np.maximum(h1, 0)
        h2 = a1 @ w2.T + b2
        a2 = np.maximum(h2, 0)
        logits = a2 @ w3.T + b3
        shifted = logits - logits.max(1, keepdims=True)
        exp = np.exp(shifted)
        probs = exp / exp.sum(1, keepdims=True)
        n = x.shape[0]
        loss = -np.log(probs[np.arange(n), y]).mean()
        g = probs
        g[np.arange(n), y] -= 1
        g /= n
        grads = [None] * 6
        grads[4], grads[5] = g.T @ a2, g.sum(0)
        g = (g @ w3) * (h2 > 0)
        grads[2], grads[3] = g.T @ a1, g.sum(0)
        g = (g @ w2) * (h1 > 0)
        grads[0], grads[1] = g.T @ x, g.sum(0)
        for i, (p, grad) in enumerate(zip(params, grads)):
            if buffers[i] is None:
                buffers[i] = grad.copy()
            else:
                buffers[i] *= MOMENTUM
                buffers[i] += grad
            p -= LR * buffers[i]
        return loss

    return step, params


def _batches(rng, shape, batch, count=4):
    return [(rng.standard_normal((batch, *shape)).astype(np.float32),
             rng.integers(0, 10, batch).astype(np.int64)) for _ in range(count)]


def _time_steps(step, steps) -> list[float]:
    times = []
    for _ in range(steps):
        t0 = time.perf_counter()
        step()
        times.append(time.perf_counter() - t0)
    return times


def compare(name, steppers, steps, rounds, warmup=5):
    for step in steppers.values():
        for _ in range(warmup):
            step()
    samples = {k: [] for k in steppers}
    for _ in range(rounds):
        for k, step in steppers.items():
            samples[k].extend(_time_steps(step, steps))
    return {k: statistics.median(v) for k, v in samples.items()}


def _check_same_losses(steppers, steps=3):
    """Fresh steppers must agree on the first losses: they train the same model on the same data."""
    def value(loss):
        return float(loss.detach()) if hasattr(loss, "detach") else float(loss)

    losses = {k: [value(s()) for _ in range(steps)] for k, s in steppers.items()}
    reference = next(iter(losses.values()))
    for k, values in losses.items():
        if not np.allclose(values, reference, rtol=1e-3, atol=1e-4):
            raise SystemExit(f"{k} computes different losses {values} than {reference}: not the same workload")
    return reference


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=30, help="timed steps per framework per round")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--threads", type=int, default=2, help="PyTorch intra-op threads")
    ap.add_argument("--only", choices=["mlp", "cnn"], default=None)
    args = ap.parse_args()

    import corenn
    try:
        import torch
        torch.set_num_threads(args.threads)
    except ImportError:
        torch = None
    rng = np.random.default_rng(0)

    rows = []
    if args.only in (None, "mlp"):
        weights = _initial_weights(corenn, make_mlp)
        batches = _batches(rng, (784,), MLP_BATCH)

        def steppers():
            out = {"corenn": framework_stepper(corenn, make_mlp, weights, batches)[0]}
            if torch is not None:
                out["PyTorch"] = framework_stepper(torch, make_mlp, weights, batches)[0]
            out["numpy (by hand)"] = numpy_mlp_stepper(weights, batches)[0]
            return out

        _check_same_losses(steppers())
        rows.append(("MLP 784-512-512-10, batch 128", compare("mlp", steppers(), args.steps, args.rounds)))
    if args.only in (None, "cnn"):
        try:
            weights = _initial_weights(corenn, make_cnn)
        except AttributeError as error:
            print(f"CNN skipped: {error}")
        else:
            batches = _batches(rng, (1, 28, 28), CNN_BATCH)

            def steppers():
                out = {"corenn": framework_stepper(corenn, make_cnn, weights, batches)[0]}
                if torch is not None:
                    out["PyTorch"] = framework_stepper(torch, make_cnn, weights, batches)[0]
                return out

            _check_same_losses(steppers())
            rows.append(("CNN 2xconv+pool, batch 64, 1x28x28",
                         compare("cnn", steppers(), max(args.steps // 3, 5), args.rounds)))

    print(f"training step (zero_grad + forward + cross-entropy + backward + SGD momentum), median of "
          f"{args.rounds} rounds; PyTorch {torch.__version__ if torch else '(absent)'} on "
          f"{args.threads} threads")
    print(f"{'workload':<36} | {'corenn ms':>9} | {'PyTorch ms':>10} | {'numpy ms':>8} | {'corenn/PyTorch':>14} "
          f"| {'numpy/PyTorch':>13}")
    print("-" * 108)
    for name, medians in rows:
        c = medians["corenn"] * 1e3
        t = medians.get("PyTorch")
        n = medians.get("numpy (by hand)")
        t_ms = f"{t * 1e3:>10.2f}" if t else f"{'-':>10}"
        n_ms = f"{n * 1e3:>8.2f}" if n else f"{'-':>8}"
        ratio = f"{c / (t * 1e3):>14.2f}" if t else f"{'-':>14}"
        n_ratio = f"{n / t:>13.2f}" if (t and n) else f"{'-':>13}"
        print(f"{name:<36} | {c:>9.2f} | {t_ms} | {n_ms} | {ratio} | {n_ratio}")


if __name__ == "__main__":
    main()
