"""Run every ``benchmarks/bench_*.py`` and print one table, corenn side by side with PyTorch.

A bench module either defines ``run()`` returning rows -- dicts with ``name``, ``unit``, ``corenn``,
``pytorch`` (absent without torch), optionally ``numpy`` and ``target`` (the corenn/PyTorch ratio to
stay under) -- which go into the shared table, or defines ``main()`` / runs as a script, in which case
it runs in a subprocess and its own output is shown after the table.

    python benchmarks/run.py                 # every bench file
    python benchmarks/run.py core training   # only bench_core.py and bench_training.py
"""
from __future__ import annotations

import importlib.util
import pathlib
import subprocess
import sys

HERE = pathlib.Path(__file__).resolve().parent


def _format(value):
    if value is None:
        return "-"
    return f"{value:.3g}" if value < 100 else f"{value:.0f}"


def print_table(rows: list[dict]) -> None:
    """One line per row: medians per framework, the corenn/PyTorch ratio and whether it meets its target."""
    header = ["benchmark", "unit", "corenn", "pytorch", "numpy", "corenn/pytorch", "target", "met"]
    lines = []
    for row in rows:
        corenn, torch = row.get("corenn"), row.get("pytorch")
        ratio = corenn / torch if corenn and torch else None
        target = row.get("target")
        met = "-" if ratio is None or target is None else ("yes" if ratio <= target else "NO")
        numpy_ratio = f" ({row['numpy'] / torch:.2f}x)" if row.get("numpy") and torch else ""
        lines.append([row["name"], row.get("unit", ""), _format(corenn), _format(torch),
                      _format(row.get("numpy")) + numpy_ratio, "-" if ratio is None else f"{ratio:.2f}x",
                      "-" if target is None else f"<= {target}x", met])
    widths = [max(len(str(r[i])) for r in [header] + lines) for i in range(len(header))]
    for r in [header, ["-" * w for w in widths]] + lines:
        print("  ".join(str(c).ljust(w) for c, w in zip(r, widths)))


def _load(path: pathlib.Path):
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    sys.path.insert(0, str(HERE))
    try:
        spec.loader.exec_module(module)
    finally:
        sys.path.remove(str(HERE))
    return module


def main(argv: list[str]) -> int:
    files = sorted(HERE.glob("bench_*.py"))
    if argv:
        files = [f for f in files if f.stem[len("bench_"):] in argv]
    rows, scripts = [], []
    for path in files:
        module = _load(path)
        if hasattr(module, "run"):
            print(f"running {path.name} ...", file=sys.stderr)
            for row in module.run():
                rows.append(dict(row, name=f"{path.stem[6:]}: {row['name']}"))
        else:
            scripts.append(path)
    if rows:
        print_table(rows)
    for path in scripts:
        print(f"\n== {path.name}")
        sys.stdout.flush()
        subprocess.run([sys.executable, str(path)], check=False)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
