"""Module-tree operations at scale, corenn vs PyTorch, side by side in one run.

A tree of N submodules (blocks of 10 small Linear-like leaves with a weight, a
bias and a buffer, nested two levels deep) is built for N in ``--sizes``; for each
size the table shows the median time of ``named_parameters`` (full iteration),
``state_dict``, ``load_state_dict``, ``to(float64)`` + back, and a hooked and a
plain ``__call__`` chain, the time per module (flat across sizes = linear scaling)
and the ratio corenn / PyTorch time (below 1: corenn faster).

Also measures ``nn.utils.skip_init`` against a normal construction of a large
Linear layer (the initialisation work it skips).

    python benchmarks/bench_modules.py [--sizes 250 500 1000 2000] [--repeats 5]
"""
from __future__ import annotations

import argparse

from timing import median_seconds


def build_tree(lib, n_modules: int):
    nn = lib.nn

    class Leaf(nn.Module):
        def __init__(self):
            super().__init__()
            self.weight = nn.Parameter(lib.zeros(4, 4))
            self.bias = nn.Parameter(lib.zeros(4))
            self.register_buffer("running", lib.zeros(4))

        def forward(self, x):
            return x

    blocks = []
    for _ in range(max(1, n_modules // 11)):  # 1 Sequential + 10 leaves per block
        blocks.append(nn.Sequential(*[Leaf() for _ in range(10)]))
    return nn.Sequential(*blocks)


def median_time(fn, repeats: int) -> float:
    return median_seconds(fn, repeats, warmup=1)


def operations(lib, tree):
    sd = tree.state_dict()
    x = lib.zeros(4)
    hook_handles = []

    def call_chain():
        for block in tree:
            for leaf in block:
                leaf(x)

    def hooked_call_chain():
        for block in tree:
            for leaf in block:
                hook_handles.append(leaf.register_forward_hook(lambda m, a, o: None))
        call_chain()
        for h in hook_handles:
            h.remove()
        hook_handles.clear()

    return {
        "named_parameters": lambda: sum(1 for _ in tree.named_parameters()),
        "state_dict": lambda: tree.state_dict(),
        "load_state_dict": lambda: tree.load_state_dict(sd),
        "to(float64)+back": lambda: tree.to(dtype=lib.float64).to(dtype=lib.float32),
        "__call__ (no hooks)": call_chain,
        "__call__ (1 hook each)": hooked_call_chain,
    }


def skip_init_timing(lib, repeats: int):
    nn = lib.nn
    normal = median_time(lambda: nn.Linear(2048, 2048), repeats)
    skipped = median_time(lambda: nn.utils.skip_init(nn.Linear, 2048, 2048), repeats)
    return normal, skipped


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[250, 500, 1000, 2000])
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()

    import corenn
    libs = [("corenn", corenn)]
    try:
        import torch
        torch.set_num_threads(1)
        libs.append(("torch", torch))
    except ImportError:
        print("(PyTorch not installed: corenn only)")

    results = {}
    for name, lib in libs:
        for size in args.sizes:
            tree = build_tree(lib, size)
            n_modules = sum(1 for _ in tree.modules())
            for op, fn in operations(lib, tree).items():
                results[(name, size, op)] = (median_time(fn, args.repeats), n_modules)

    ops = list(operations(corenn, build_tree(corenn, 11)))
    print(f"{'operation':24} {'modules':>8} {'corenn ms':>10} {'us/module':>10} {'torch ms':>10} {'ratio':>7}")
    for op in ops:
        for size in args.sizes:
            seconds, n_modules = results[("corenn", size, op)]
            line = f"{op:24} {n_modules:8d} {seconds * 1e3:10.2f} {seconds / n_modules * 1e6:10.2f}"
            if ("torch", size, op) in results:
                t_seconds = results[("torch", size, op)][0]
                line += f" {t_seconds * 1e3:10.2f} {seconds / t_seconds:7.2f}"
            print(line)
        print()

    for name, lib in libs:
        normal, skipped = skip_init_timing(lib, args.repeats)
        print(f"{name}: Linear(2048, 2048) construct {normal * 1e3:.2f} ms, skip_init {skipped * 1e3:.2f} ms "
              f"({normal / skipped:.1f}x less time)")


if __name__ == "__main__":
    main()
