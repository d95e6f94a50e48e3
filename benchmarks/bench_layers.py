"""Layer kernels side by side with PyTorch: conv forward (GFLOP/s), conv/pool/norm/cross-entropy forward+backward,
and the demo CNN's train step. Medians of repeated runs; the table shows corenn/PyTorch ratios.

    python benchmarks/bench_layers.py          # this file's table
    python benchmarks/run.py layers            # through the shared runner
"""
from __future__ import annotations


import numpy as np

from timing import median_seconds


def _frameworks():
    import corenn
    try:
        import torch
        torch.set_num_threads(2)
    except ImportError:
        torch = None
    return corenn, torch


def _conv_forward(lib, x, w, repeats):
    f = lib.nn.functional
    with lib.no_grad():
        return median_seconds(lambda: f.conv2d(x, w, padding=1), repeats, warmup=1) * 1e3


def _fwd_bwd(lib, make_loss, leaves, repeats):
    def step():
        for leaf in leaves:
            leaf.grad = None
        make_loss().backward()
    return median_seconds(step, repeats, warmup=1) * 1e3


def _cnn(lib):
    nn = lib.nn
    return nn.Sequential(nn.Conv2d(1, 16, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                         nn.Conv2d(16, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                         nn.Flatten(), nn.Linear(1568, 10))


def _cnn_step(lib, x, y, repeats):
    model = _cnn(lib)
    optimizer = lib.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    loss_fn = lib.nn.CrossEntropyLoss()

    def step():
        optimizer.zero_grad()
        loss_fn(model(x), y).backward()
        optimizer.step()
    return median_seconds(step, repeats, warmup=2) * 1e3


def run():
    corenn, torch = _frameworks()
    rng = np.random.default_rng(0)
    rows = []

    def both(name, unit, measure, arrays, repeats, target=None, flop=None):
        row = {"name": name, "unit": unit}
        for key, lib in (("corenn", corenn), ("pytorch", torch)):
            if lib is None:
                continue
            tensors = [lib.tensor(a, requires_grad=a.dtype.kind == "f" and i > 0 or flag)
                       for i, (a, flag) in enumerate(arrays)]
            row[key] = measure(lib, *tensors, repeats=repeats)
        if target is not None:
            row["target"] = target
        rows.append(row)
        if flop is not None:
            row["name"] += " [" + ", ".join(f"{k} {flop / (row[k] * 1e-3) / 1e9:.1f} GFLOP/s"
                                            for k in ("corenn", "pytorch") if k in row) + "]"

    f32 = np.float32
    x = rng.standard_normal((32, 64, 32, 32)).astype(f32)
    w = rng.standard_normal((64, 64, 3, 3)).astype(f32)
    flop = 2 * 32 * 64 * 32 * 32 * 64 * 9
    both("conv2d fwd 64->64 3x3 p1, 32x64x32x32", "ms", lambda lib, x, w, repeats: _conv_forward(lib, x, w, repeats),
         [(x, False), (w, False)], 5, flop=flop)

    x = rng.standard_normal((64, 16, 14, 14)).astype(f32)
    w = rng.standard_normal((32, 16, 3, 3)).astype(f32)
    both("conv2d fwd+bwd 16->32 3x3 p1, 64x16x14x14", "ms",
         lambda lib, x, w, repeats: _fwd_bwd(lib, lambda: lib.nn.functional.conv2d(x, w, padding=1).sum(), [x, w],
                                             repeats), [(x, True), (w, True)], 20)

    x = rng.standard_normal((64, 16, 28, 28)).astype(f32)
    both("max_pool2d 2x2 fwd+bwd, 64x16x28x28", "ms",
         lambda lib, x, repeats: _fwd_bwd(lib, lambda: lib.nn.functional.max_pool2d(x, 2).sum(), [x], repeats),
         [(x, True)], 20)
    both("max_pool2d 3x3 s2 p1 fwd+bwd, 64x16x28x28", "ms",
         lambda lib, x, repeats: _fwd_bwd(lib, lambda: lib.nn.functional.max_pool2d(x, 3, 2, 1).sum(), [x], repeats),
         [(x, True)], 20)

    x = rng.standard_normal((64, 32, 14, 14)).astype(f32)
    wb = np.ones(32, f32)
    both("batch_norm train fwd+bwd, 64x32x14x14", "ms",
         lambda lib, x, w, b, repeats: _fwd_bwd(
             lib, lambda: lib.nn.functional.batch_norm(x, None, None, w, b, training=True).sum(), [x, w, b], repeats),
         [(x, True), (wb, True), (wb.copy(), True)], 20)

    logits = rng.standard_normal((512, 1000)).astype(f32)
    target = rng.integers(0, 1000, 512)
    both("cross_entropy fwd+bwd 512x1000", "ms",
         lambda lib, x, t, repeats: _fwd_bwd(lib, lambda: lib.nn.functional.cross_entropy(x, t), [x], repeats),
         [(logits, True), (target, False)], 20)

    images = rng.standard_normal((64, 1, 28, 28)).astype(f32)
    labels = rng.integers(0, 10, 64)
    row = {"name": "CNN train step (demo net), batch 64", "unit": "ms", "target": 5.0}
    for key, lib in (("corenn", corenn), ("pytorch", torch)):
        if lib is not None:
            row[key] = _cnn_step(lib, lib.tensor(images), lib.tensor(labels), 15)
    rows.append(row)
    return rows


def main():
    import pathlib
    import sys
    sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
    from run import print_table
    print_table(run())


if __name__ == "__main__":
    main()
