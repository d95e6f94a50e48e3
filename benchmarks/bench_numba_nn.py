"""corenn-numba's softmax / cross-entropy / norm / scatter kernels against the core's numpy kernels and PyTorch.

One run, side by side: ``corenn`` is corenn with the plugin's kernels, ``numpy`` the same
call on the core's kernels (``corenn_numba.disable()``), ``pytorch`` the same expression in
PyTorch (2 threads, like the machine). Rounds interleave the three so that load from other
processes hits all of them alike; each figure is the median over rounds of per-round medians.
The last rows time the first call of every kernel in a fresh process: once compiling into an
empty numba cache, once loading from it.

    python benchmarks/bench_numba_nn.py        # this file's table
    python benchmarks/run.py numba_nn          # through the shared runner
"""
from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np

ROUNDS = 5
REPEATS = 7


def _median_ms(fn, repeats=REPEATS):
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1e3


def _cases(lib, rng):
    """name -> zero-argument step for ``lib`` (corenn or torch) on the same data."""
    f = lib.nn.functional
    t = lambda a, grad=False: lib.tensor(a, requires_grad=grad)  # noqa: E731 - same spelling in both libraries
    data = _data(rng)
    cases = {}

    def fwd_bwd(name, make, leaves):
        def step():
            for leaf in leaves:
                leaf.grad = None
            make().backward()
        cases[name] = step

    logits = t(data["logits"], True)
    target = t(data["target"])
    fwd_bwd("cross_entropy 512x1000 fwd+bwd", lambda: f.cross_entropy(logits, target), [logits])
    fwd_bwd("cross_entropy 512x1000 smoothing+ignore", lambda: f.cross_entropy(
        logits, target, label_smoothing=0.1, ignore_index=int(data["target"][0])), [logits])
    seg = t(data["seg_logits"], True)
    seg_target = t(data["seg_target"])
    fwd_bwd("cross_entropy 8x21x32x32 (segmentation)", lambda: f.cross_entropy(seg, seg_target), [seg])
    upstream = t(data["upstream"])
    fwd_bwd("softmax 512x1000 fwd+bwd", lambda: (f.softmax(logits, -1) * upstream).sum(), [logits])
    fwd_bwd("log_softmax 512x1000 fwd+bwd", lambda: (f.log_softmax(logits, -1) * upstream).sum(), [logits])

    image = t(data["image"], True)
    weight, bias = t(data["channel_w"], True), t(data["channel_b"], True)
    running_mean, running_var = t(np.zeros(64, np.float32)), t(np.ones(64, np.float32))
    image_grad = t(data["image_grad"])
    fwd_bwd("batch_norm train 32x64x16x16 fwd+bwd", lambda: (f.batch_norm(
        image, running_mean, running_var, weight, bias, training=True) * image_grad).sum(), [image, weight, bias])

    def bn_eval():
        with lib.no_grad():
            f.batch_norm(image, running_mean, running_var, weight, bias, training=False)
    cases["batch_norm eval 32x64x16x16 fwd"] = bn_eval
    fwd_bwd("group_norm G=8 32x64x16x16 fwd+bwd", lambda: (f.group_norm(image, 8, weight, bias) * image_grad).sum(),
            [image, weight, bias])
    tokens = t(data["tokens"], True)
    ln_w, ln_b = t(data["ln_w"], True), t(data["ln_b"], True)
    fwd_bwd("layer_norm 64x128x512 fwd+bwd", lambda: f.layer_norm(tokens, (512,), ln_w, ln_b).sum(),
            [tokens, ln_w, ln_b])

    table = t(data["table"], True)
    ids = t(data["ids"])
    fwd_bwd("embedding 10000x128, 32x128 ids fwd+bwd", lambda: f.embedding(ids, table).sum(), [table])
    rows = t(data["rows"], True)
    row_ids = t(data["row_ids"])
    fwd_bwd("x[idx] 1000x64, 4096 ids fwd+bwd", lambda: rows[row_ids].sum(), [rows])
    fwd_bwd("index_select dim0 1000x64, 4096 ids fwd+bwd", lambda: rows.index_select(0, row_ids).sum(), [rows])
    wide = t(data["wide"], True)
    wide_ids = t(data["wide_ids"])
    fwd_bwd("gather dim1 64x1000, 64x200 fwd+bwd", lambda: wide.gather(1, wide_ids).sum(), [wide])
    plain_rows, ones = t(data["rows"]), t(np.ones((4096, 64), np.float32))
    cases["index_add 1000x64 += 4096 rows"] = lambda: plain_rows.index_add(0, row_ids, ones)
    cases["index_put accumulate 1000x64, 4096 rows"] = lambda: plain_rows.index_put((row_ids,), ones, accumulate=True)
    plain_wide, src = t(data["wide"]), t(np.ones((64, 200), np.float32))
    cases["scatter_add dim1 64x1000, 64x200"] = lambda: plain_wide.scatter_add(1, wide_ids, src)
    fwd_bwd("pad reflect 32x64x16x16 fwd+bwd", lambda: f.pad(image, (2, 2, 2, 2), mode="reflect").sum(), [image])
    return cases


def _data(rng):
    return {
        "logits": rng.standard_normal((512, 1000)).astype(np.float32),
        "target": rng.integers(0, 1000, 512),
        "seg_logits": rng.standard_normal((8, 21, 32, 32)).astype(np.float32),
        "seg_target": rng.integers(0, 21, (8, 32, 32)),
        "upstream": rng.standard_normal((512, 1000)).astype(np.float32),
        "image": rng.standard_normal((32, 64, 16, 16)).astype(np.float32),
        "image_grad": rng.standard_normal((32, 64, 16, 16)).astype(np.float32),
        "channel_w": rng.uniform(0.5, 2, 64).astype(np.float32),
        "channel_b": rng.standard_normal(64).astype(np.float32),
        "tokens": rng.standard_normal((64, 128, 512)).astype(np.float32),
        "ln_w": rng.uniform(0.5, 2, 512).astype(np.float32),
        "ln_b": rng.standard_normal(512).astype(np.float32),
        "table": rng.standard_normal((10000, 128)).astype(np.float32),
        "ids": rng.integers(0, 10000, (32, 128)),
        "rows": rng.standard_normal((1000, 64)).astype(np.float32),
        "row_ids": rng.integers(0, 1000, 4096),
        "wide": rng.standard_normal((64, 1000)).astype(np.float32),
        "wide_ids": rng.integers(0, 1000, (64, 200)),
    }


_WARMUP_SCRIPT = r"""
import time, numpy as np
start = time.perf_counter()
import corenn, corenn.nn.functional as F, corenn_numba.nn, corenn_numba.norms, corenn_numba.scatter
imported = time.perf_counter()
x = corenn.randn(8, 10, requires_grad=True)
F.cross_entropy(x, corenn.tensor(np.arange(8))).backward()
(corenn.softmax(x, -1).sum() + corenn.log_softmax(x, -1).sum()).backward()
img = corenn.randn(2, 4, 3, 3, requires_grad=True)
w, b = corenn.ones(4, requires_grad=True), corenn.zeros(4, requires_grad=True)
(F.batch_norm(img, None, None, w, b, training=True).sum() + F.group_norm(img, 2, w, b).sum()
 + F.layer_norm(img, (3, 3)).sum()).backward()
with corenn.no_grad():
    F.batch_norm(img, corenn.zeros(4), corenn.ones(4), w, b, training=False)
table = corenn.randn(5, 3, requires_grad=True)
ids = corenn.tensor([0, 0, 4])
(F.embedding(ids, table).sum() + table[ids].sum() + table.index_select(0, ids).sum()
 + table.gather(0, corenn.tensor([[0, 1, 2]])).sum() + F.pad(img, (1, 1), mode="reflect").sum()).backward()
table.detach().index_add(0, ids, corenn.ones(3, 3))
table.detach().scatter_add(0, corenn.tensor([[0, 1, 2]]), corenn.ones(1, 3))
table.detach().index_put((ids,), corenn.ones(3, 3), accumulate=True)
print(f"{(time.perf_counter() - imported) * 1e3:.1f}")
"""


def _first_calls_ms(cache_dir):
    env = dict(os.environ, NUMBA_CACHE_DIR=cache_dir)
    out = subprocess.run([sys.executable, "-c", _WARMUP_SCRIPT], env=env, capture_output=True, text=True, check=True)
    return float(out.stdout.strip().splitlines()[-1])


def _warmup_rows():
    with tempfile.TemporaryDirectory() as cache_dir:
        cold = _first_calls_ms(cache_dir)
        warm = _first_calls_ms(cache_dir)
    return [{"name": "first call of all 14 kernels: compiling (empty cache)", "unit": "ms", "corenn": cold},
            {"name": "first call of all 14 kernels: loaded from cache", "unit": "ms", "corenn": warm}]


def run():
    import corenn
    import corenn_numba
    try:
        import torch
        torch.set_num_threads(2)
    except ImportError:
        torch = None
    ours = _cases(corenn, np.random.default_rng(0))
    theirs = _cases(torch, np.random.default_rng(0)) if torch is not None else {}
    for step in ours.values():  # compile / load every kernel before timing
        step()
    samples = {name: {"corenn": [], "numpy": [], "pytorch": []} for name in ours}
    for _ in range(ROUNDS):
        for name, step in ours.items():
            samples[name]["corenn"].append(_median_ms(step))
            corenn_numba.disable()
            try:
                step()  # one call on the core kernels before timing them
                samples[name]["numpy"].append(_median_ms(step))
            finally:
                corenn_numba.enable()
            if name in theirs:
                samples[name]["pytorch"].append(_median_ms(theirs[name]))
    rows = []
    for name, by_framework in samples.items():
        row = {"name": name, "unit": "ms"}
        for framework, values in by_framework.items():
            if values:
                row[framework] = statistics.median(values)
        rows.append(row)
    return rows + _warmup_rows()


def main():
    from run import print_table
    rows = run()
    print_table(rows)
    print()
    print("speedup of corenn-numba over the core's numpy kernels:")
    for row in rows:
        if row.get("numpy"):
            print(f"  {row['name']:<48} {row['numpy'] / row['corenn']:.1f}x")


if __name__ == "__main__":
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    main()
