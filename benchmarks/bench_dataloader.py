"""DataLoader throughput, corenn vs PyTorch, side by side in one run.

A map-style dataset yields (3x32x32 float32 array, int label); batches of 64;
num_workers 0 and 2. Each configuration runs ``--repeats`` full epochs
(after one warm-up epoch, which also starts the workers); the table shows
the median samples/s and the ratio corenn / PyTorch (above 1: corenn faster).

    python benchmarks/bench_dataloader.py [--samples 8192] [--repeats 5]
"""
from __future__ import annotations

import argparse
import statistics
import time

import numpy as np


class ArrayDataset:
    """Same class for both frameworks: it only makes numpy arrays."""

    def __init__(self, n: int):
        self.n = n
        self.base = np.random.default_rng(0).standard_normal((3, 32, 32)).astype(np.float32)

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        x = self.base + np.float32(i % 7)  # a fresh array per sample, as a decoder would produce
        return x, i % 10


def _epoch_rate(loader, n: int) -> float:
    t0 = time.perf_counter()
    count = 0
    for x, y in loader:
        count += y.shape[0]
    dt = time.perf_counter() - t0
    assert count == n, (count, n)
    return n / dt


def measure(make_loader, n: int, repeats: int) -> float:
    # persistent workers: we time steady-state loading, not process start-up
    loader = make_loader()
    _epoch_rate(loader, n)  # warm-up
    rates = [_epoch_rate(loader, n) for _ in range(repeats)]
    del loader
    return statistics.median(rates)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--samples", type=int, default=8192)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--batch-size", type=int, default=64)
    args = ap.parse_args()

    import corenn.utils.data as cdata
    try:
        import torch.utils.data as tdata
    except ImportError:
        tdata = None

    def loader_for(lib, workers):
        cls = lib.DataLoader
        base = type("DS", (ArrayDataset, lib.Dataset), {})
        kw = dict(batch_size=args.batch_size, num_workers=workers)
        if workers:
            kw["persistent_workers"] = True
        return lambda: cls(base(args.samples), **kw)

    print(f"map-style dataset, {args.samples} samples of 3x32x32 float32, batch {args.batch_size}, "
          f"median of {args.repeats} epochs")
    print(f"{'num_workers':>11} | {'corenn samples/s':>16} | {'PyTorch samples/s':>17} | {'corenn/PyTorch':>14}")
    print("-" * 68)
    for workers in (0, 2):
        c = measure(loader_for(cdata, workers), args.samples, args.repeats)
        if tdata is not None:
            t = measure(loader_for(tdata, workers), args.samples, args.repeats)
            print(f"{workers:>11} | {c:>16,.0f} | {t:>17,.0f} | {c / t:>14.2f}")
        else:
            print(f"{workers:>11} | {c:>16,.0f} | {'(torch absent)':>17} | {'-':>14}")


if __name__ == "__main__":
    main()
