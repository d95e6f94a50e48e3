"""Parametrized layers (corenn-parametrize) against plain ones, corenn vs PyTorch, side by side in one run.

Forward + backward of a Linear layer, plain and with each parametrization
(orthogonal/matrix_exp, orthogonal/cayley, spectral_norm, weight_norm); then a
recurrence that reads its weight at every one of ``--steps`` time steps, plain,
orthogonal without ``cached()`` (the weight is computed at every step) and with it
(computed once per forward). Every parameter is moved off its initial value first
(an orthogonal original starts where the matrix exponential is trivial). Each row shows the median time per iteration in both
frameworks and the corenn / PyTorch ratio; the overhead columns divide a
parametrized row by its plain row within each framework. Run as a script it uses one
BLAS thread (PyTorch one thread), unless OPENBLAS_NUM_THREADS says otherwise.

    python benchmarks/bench_parametrize.py [--features 128] [--batch 64] [--steps 8] [--repeats 15]
"""
from __future__ import annotations

import argparse
import os

from timing import median_seconds


def frameworks():
    import corenn
    found = {"corenn": (corenn, corenn.nn.utils.parametrize, corenn.nn.utils.parametrizations)}
    try:
        import torch
        import torch.nn.utils.parametrizations
        import torch.nn.utils.parametrize
        torch.set_num_threads(1)   # corenn's core runs on numpy; compare one thread with one thread
        found["pytorch"] = (torch, torch.nn.utils.parametrize, torch.nn.utils.parametrizations)
    except ImportError:
        pass
    return found


class Recurrence:
    """h = tanh(h @ W.T) for ``steps`` steps: the weight is read once per step."""

    def __init__(self, lib, layer, steps):
        self.lib, self.layer, self.steps = lib, layer, steps

    def __call__(self, h):
        for _ in range(self.steps):
            h = self.lib.tanh(self.layer(h))
        return h


def cases(lib, parametrize, parametrizations, features: int, steps: int):
    """name -> (module builder, whether to run inside cached(), whether it is a recurrence)."""
    def linear():
        lib.manual_seed(0)
        return lib.nn.Linear(features, features)

    return {
        "Linear plain": (linear, False, False),
        "Linear orthogonal (matrix_exp)": (lambda: parametrizations.orthogonal(linear()), False, False),
        "Linear orthogonal (cayley)": (lambda: parametrizations.orthogonal(linear(), orthogonal_map="cayley"),
                                       False, False),
        "Linear spectral_norm": (lambda: parametrizations.spectral_norm(linear()), False, False),
        "Linear weight_norm": (lambda: parametrizations.weight_norm(linear()), False, False),
        f"recurrence x{steps} plain": (linear, False, True),
        f"recurrence x{steps} orthogonal": (lambda: parametrizations.orthogonal(linear()), False, True),
        f"recurrence x{steps} orthogonal, cached()": (lambda: parametrizations.orthogonal(linear()), True, True),
    }


def measure(features: int, batch: int, steps: int, repeats: int) -> list[dict]:
    results: dict[str, dict] = {}
    for framework, (lib, parametrize, parametrizations) in frameworks().items():
        lib.manual_seed(0)
        x = lib.randn(batch, features)
        for name, (build, use_cache, recurrent) in cases(lib, parametrize, parametrizations, features,
                                                         steps).items():
            layer = build()
            with lib.no_grad():
                # Away from the initial point: an orthogonal original starts where matrix_exp is trivial.
                for parameter in layer.parameters():
                    parameter.add_(0.2 * lib.randn(*parameter.shape))
            model = Recurrence(lib, layer, steps) if recurrent else layer

            def step(model=model, layer=layer, use_cache=use_cache):
                layer.zero_grad()
                if use_cache:
                    with parametrize.cached():
                        out = model(x)
                else:
                    out = model(x)
                out.square().mean().backward()

            results.setdefault(name, {"name": name, "unit": "ms"})[framework] = median_seconds(step, repeats) * 1e3
    return list(results.values())


def run() -> list[dict]:
    """Rows for benchmarks/run.py's shared table."""
    return measure(128, 64, 8, 9)   # run.py prefixes the names with "parametrize: "


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--features", type=int, default=128)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=15)
    args = parser.parse_args()
    rows = measure(args.features, args.batch, args.steps, args.repeats)
    plain = {False: rows[0], True: next(r for r in rows if r["name"].endswith("plain") and "recurrence" in r["name"])}
    print(f"forward+backward, Linear({args.features}, {args.features}), batch {args.batch}; median of "
          f"{args.repeats}; PyTorch on 1 thread, BLAS threads {os.environ.get('OPENBLAS_NUM_THREADS', 'default')}")
    header = f"{'case':44s} {'corenn ms':>10s} {'pytorch ms':>11s} {'corenn/pytorch':>15s} " \
             f"{'overhead corenn':>16s} {'overhead pytorch':>17s}"
    print(header)
    print("-" * len(header))
    for row in rows:
        base = plain["recurrence" in row["name"]]
        corenn_ms, torch_ms = row.get("corenn"), row.get("pytorch")
        ratio = f"{corenn_ms / torch_ms:.2f}x" if torch_ms else "-"
        overhead_c = f"{corenn_ms / base['corenn']:.2f}x"
        overhead_t = f"{torch_ms / base['pytorch']:.2f}x" if torch_ms else "-"
        torch_text = f"{torch_ms:.3f}" if torch_ms else "-"
        print(f"{row['name']:44s} {corenn_ms:10.3f} {torch_text:>11s} {ratio:>15s} {overhead_c:>16s} "
              f"{overhead_t:>17s}")


if __name__ == "__main__":
    # One BLAS thread, like PyTorch's one: on a shared machine, BLAS threads that spin (see docs/numba.md,
    # "Threads") make corenn's matmul-heavy rows swing several-fold. Set before numpy is first imported.
    for variable in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ.setdefault(variable, "1")
    main()
