"""Pruning that saves memory and time (corenn-prune) next to PyTorch's masks, side by side in one run.

Part 1, unstructured: a ``Linear(4096, 4096)`` at batch 32, inference. Rows: the dense
layer; the layer pruned with ``l1_unstructured`` (PyTorch's masks: no faster, more
memory); and, at 50%, 90% and 95% sparsity, the layer compacted by
``corenn_prune.compact`` (CSR, with the kernel ``sparse_backend()`` picks). Columns:
median time per forward, weight bytes held, and the ratios against the dense layer of the
same framework ("speed-up" = dense time / row time, "memory" = dense bytes / row bytes).

Part 2, structured: a CNN (3x32x32 inputs, three convolutions with batch norm) whose
convolutions lose 50% of their output channels (``ln_structured`` + ``complete_channel_pruning``),
then ``corenn_prune.shrink``: inference time and parameters before and after, with
PyTorch running the same dense and masked networks (its pruning keeps every channel).

Targets from issue 17: compacted at 90%, >= 3x less weight memory and faster than dense;
shrunk CNN >= 1.6x faster with half the parameters. Threads: BLAS and PyTorch use what
they find (set OPENBLAS_NUM_THREADS / OMP_NUM_THREADS to pin them).

    python benchmarks/bench_prune.py [--repeats 15] [--quick]
"""
from __future__ import annotations

import argparse

import numpy as np

from timing import median_seconds


def held_bytes(module) -> int:
    """Bytes of the parameters and buffers a module holds (PyTorch's pruned layers also hold `weight`)."""
    total = sum(t.numel() * t.element_size() for t in module.parameters())
    total += sum(t.numel() * t.element_size() for t in module.buffers() if t is not None)
    weight = vars(module).get("weight")   # PyTorch's prune stores the masked weight as a plain attribute
    if weight is not None and hasattr(weight, "element_size"):
        total += weight.numel() * weight.element_size()
    return total


def torch_or_none():
    try:
        import torch
        return torch
    except ImportError:
        return None


def unstructured_rows(features: int, batch: int, repeats: int) -> list[dict]:
    import corenn
    import corenn_prune
    from corenn import nn
    torch = torch_or_none()
    rng = np.random.default_rng(0)
    weight = (rng.standard_normal((features, features)) / np.sqrt(features)).astype(np.float32)
    x = rng.standard_normal((batch, features)).astype(np.float32)
    rows = []

    def corenn_linear():
        layer = nn.Linear(features, features)
        with corenn.no_grad():
            layer.weight.copy_(corenn.from_numpy(weight))
        return layer

    def torch_linear():
        layer = torch.nn.Linear(features, features)
        with torch.no_grad():
            layer.weight.copy_(torch.from_numpy(weight))
        return layer

    cx = corenn.from_numpy(x)
    tx = torch.from_numpy(x) if torch else None

    def run_corenn(layer):
        with corenn.no_grad():
            return median_seconds(lambda: layer(cx), repeats, warmup=5)

    def run_torch(layer):
        with torch.no_grad():
            return median_seconds(lambda: layer(tx), repeats, warmup=5)

    dense = corenn_linear()
    rows.append(dict(case="dense", corenn=run_corenn(dense), corenn_bytes=held_bytes(dense)))
    masked = corenn_prune.l1_unstructured(corenn_linear(), "weight", amount=0.9)
    rows.append(dict(case="masked 90% (PyTorch's prune)", corenn=run_corenn(masked), corenn_bytes=held_bytes(masked)))
    if torch:
        import torch.nn.utils.prune as torch_prune
        tdense = torch_linear()
        rows[0].update(torch=run_torch(tdense), torch_bytes=held_bytes(tdense))
        tmasked = torch_prune.l1_unstructured(torch_linear(), "weight", amount=0.9)
        tmasked(tx)
        rows[1].update(torch=run_torch(tmasked), torch_bytes=held_bytes(tmasked))
    for sparsity in (0.5, 0.9, 0.95):
        layer = corenn_prune.compact(corenn_prune.l1_unstructured(corenn_linear(), "weight", amount=sparsity),
                                     inplace=True, min_sparsity=0.0)
        rows.append(dict(case=f"compact {int(sparsity * 100)}% (csr, {corenn_prune.sparse_backend()})",
                         corenn=run_corenn(layer), corenn_bytes=held_bytes(layer)))
    return rows


def cnn(lib, width: int):
    nn = lib.nn
    return nn.Sequential(
        nn.Conv2d(3, width, 3, padding=1), nn.BatchNorm2d(width), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(width, 2 * width, 3, padding=1), nn.BatchNorm2d(2 * width), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(2 * width, 2 * width, 3, padding=1), nn.BatchNorm2d(2 * width), nn.ReLU(),
        nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(2 * width, 10)).eval()


def structured_rows(width: int, batch: int, repeats: int) -> list[dict]:
    import corenn
    import corenn_prune
    torch = torch_or_none()
    corenn.manual_seed(0)
    model = cnn(corenn, width)
    x = corenn.randn(batch, 3, 32, 32)
    for index in (0, 4, 8):
        corenn_prune.ln_structured(model[index], "weight", amount=0.5, n=2, dim=0)
    corenn_prune.complete_channel_pruning(model, x)
    small = corenn_prune.shrink(model, x)
    params = lambda m: sum(p.numel() for p in m.parameters())   # noqa: E731
    dense = cnn(corenn, width)
    with corenn.no_grad():
        rows = [dict(case="dense CNN", corenn=median_seconds(lambda: dense(x), repeats, warmup=5), params=params(dense)),
                dict(case="masked 50% channels", corenn=median_seconds(lambda: model(x), repeats, warmup=5),
                     params=params(cnn(corenn, width))),
                dict(case="shrunk (corenn_prune.shrink)", corenn=median_seconds(lambda: small(x), repeats, warmup=5),
                     params=params(small))]
    if torch:
        import torch.nn.utils.prune as torch_prune
        tdense = cnn(torch, width)
        tmasked = cnn(torch, width)
        for index in (0, 4, 8):
            torch_prune.ln_structured(tmasked[index], "weight", amount=0.5, n=2, dim=0)
        tx = torch.from_numpy(x.numpy())
        with torch.no_grad():
            rows[0]["torch"] = median_seconds(lambda: tdense(tx), repeats, warmup=5)
            rows[1]["torch"] = median_seconds(lambda: tmasked(tx), repeats, warmup=5)
    return rows


def show(title, rows, reference_key="corenn"):
    print(f"\n{title}")
    base = rows[0]
    header = f"{'case':<34} {'corenn ms':>10} {'speed-up':>9} {'PyTorch ms':>11} {'speed-up':>9}"
    has_bytes = "corenn_bytes" in base
    if has_bytes:
        header += f" {'corenn MiB':>11} {'memory':>7} {'PyTorch MiB':>12}"
    else:
        header += f" {'params':>10} {'fewer':>6}"
    print(header)
    for row in rows:
        line = f"{row['case']:<34} {row['corenn'] * 1e3:>10.2f} {base['corenn'] / row['corenn']:>8.2f}x"
        if "torch" in row:
            line += f" {row['torch'] * 1e3:>11.2f} {base['torch'] / row['torch']:>8.2f}x"
        else:
            line += f" {'-':>11} {'-':>9}"
        if has_bytes:
            line += f" {row['corenn_bytes'] / 2**20:>11.2f} {base['corenn_bytes'] / row['corenn_bytes']:>6.2f}x"
            line += f" {row['torch_bytes'] / 2**20:>12.2f}" if "torch_bytes" in row else f" {'-':>12}"
        else:
            line += f" {row['params']:>10,} {base['params'] / row['params']:>5.2f}x"
        print(line)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument("--quick", action="store_true", help="smaller sizes, a smoke test")
    args = parser.parse_args(argv)
    import platform
    print(f"{platform.processor() or platform.machine()}, numpy {np.__version__}")
    features, batch, width = (512, 32, 16) if args.quick else (4096, 32, 64)
    unstructured = unstructured_rows(features, batch, args.repeats)
    show(f"Linear({features}, {features}), batch {batch}, inference", unstructured)
    structured = structured_rows(width, 32, args.repeats)
    show(f"CNN (width {width}), batch 32 of 3x32x32, inference", structured)
    compact90 = next(r for r in unstructured if r["case"].startswith("compact 90%"))
    shrunk = structured[2]
    print(f"\ntargets: compact 90% memory {unstructured[0]['corenn_bytes'] / compact90['corenn_bytes']:.2f}x less "
          f"(>= 3x), {unstructured[0]['corenn'] / compact90['corenn']:.2f}x faster than dense (> 1x); "
          f"shrunk CNN {structured[0]['corenn'] / shrunk['corenn']:.2f}x faster (>= 1.6x) with "
          f"{shrunk['params'] / structured[0]['params']:.2f} of the parameters (<= 0.5)")
    return unstructured, structured


if __name__ == "__main__":
    main()
