"""Import time of corenn (plugins off / on / all first-party plugins installed) and the per-op cost of op observation.

1. ``import corenn``, each in a fresh interpreter, ``--runs`` times, median of the
   cumulative time ``python -X importtime`` reports for ``corenn`` (numpy included):
   - ``CORENN_DISABLE_PLUGIN_AUTOLOAD=1`` (built-ins only: no entry-point scan);
   - autoload on, with what is installed in this environment;
   - autoload on, in a throwaway virtualenv with every ``plugins/*/`` distribution
     of this checkout pip-installed (offline; skipped when there are none);
   - ``import numpy`` and ``import torch`` alongside, for scale.
2. Dispatch cost per op with no observer: the dispatcher (``corenn.autograd.node.run``)
   against a copy of itself with the ``if _observers:`` test removed, on a 1-element
   ``add`` (where dispatch overhead dominates); then with an observer added and
   removed again (back to baseline), and with a no-op observer active.

    python benchmarks/bench_import.py [--runs 9] [--ops 200000] [--no-venv]
"""
from __future__ import annotations

import argparse
import inspect
import os
import re
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _import_once_ms(python: str, module: str, env: dict) -> float | None:
    environment = {k: v for k, v in os.environ.items() if not k.startswith("CORENN_")}
    environment.update(env)
    result = subprocess.run([python, "-X", "importtime", "-c", f"import {module}"], capture_output=True,
                            text=True, env=environment, cwd=tempfile.gettempdir())
    if result.returncode != 0:
        return None
    for line in result.stderr.splitlines():
        match = re.match(rf"import time:\s+\d+ \|\s+(\d+) \| {re.escape(module)}$", line)
        if match:
            return int(match.group(1)) / 1000
    return None


def import_ms(variants: dict[str, tuple[str, str, dict]], runs: int) -> dict[str, float | None]:
    """Median cumulative import time (ms, from ``-X importtime``) per variant ``label: (python, module, env)``.

    Variants are interleaved run by run, so a busy spell on the (shared) machine hits them all alike.
    """
    times: dict[str, list[float]] = {label: [] for label in variants}
    for _ in range(runs):
        for label, (python, module, env) in variants.items():
            value = _import_once_ms(python, module, env)
            if value is not None:
                times[label].append(value)
    return {label: statistics.median(values) if values else None for label, values in times.items()}


def first_party_venv(workdir: Path) -> tuple[str, list[str]] | None:
    distributions = sorted(p for p in (ROOT / "plugins").glob("*") if (p / "pyproject.toml").exists())
    if not distributions:
        return None
    env_dir = workdir / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", "--without-pip", str(env_dir)],
                   check=True)
    python = str(env_dir / "bin" / "python")
    subprocess.run([python, "-m", "pip", "install", "--no-index", "--no-deps", "--no-build-isolation", "-q",
                    "--disable-pip-version-check", *map(str, distributions)], check=True, cwd=workdir)
    return python, [p.name for p in distributions]


def plugin_statuses(python: str) -> str:
    result = subprocess.run([python, "-c", "import corenn; print(', '.join(f'{r.name}={r.status}' for r in "
                                           "corenn.plugins.records.values() if not r.builtin))"],
                            capture_output=True, text=True, cwd=tempfile.gettempdir())
    if result.returncode != 0:
        return f"import failed: {(result.stderr.strip().splitlines() or ['?'])[-1]}"
    return result.stdout.strip()


def bench_import(runs: int, venv: bool) -> dict[str, float | None]:
    """Import times in ms: numpy, corenn with autoload off / on / with first-party plugins, torch."""
    python = sys.executable
    variants = {"numpy": (python, "numpy", {}),
                "corenn, autoload off": (python, "corenn", {"CORENN_DISABLE_PLUGIN_AUTOLOAD": "1"}),
                "corenn, autoload on": (python, "corenn", {})}
    print(f"plugins in this environment: {plugin_statuses(python) or 'none'}", file=sys.stderr)
    with tempfile.TemporaryDirectory() as tmp:
        made = first_party_venv(Path(tmp)) if venv else None
        if made is not None:
            venv_python, names = made
            print(f"first-party plugins installed in a virtualenv: {', '.join(names)} -> "
                  f"{plugin_statuses(venv_python)}", file=sys.stderr)
            variants["corenn, first-party plugins"] = (venv_python, "corenn", {})
        elif venv:
            print("first-party plugins: none under plugins/ yet", file=sys.stderr)
        result = import_ms(variants, runs)
    result["torch"] = import_ms({"torch": (python, "torch", {})}, max(3, runs // 3))["torch"]
    return result


def bench_dispatch(ops: int, rounds: int) -> dict[str, float]:
    import corenn
    from corenn import dispatch
    from corenn.autograd import node

    # The dispatcher without the observer test: same code, the `if _observers:` branch cut out.
    source = textwrap.dedent(inspect.getsource(node.run))
    cut = re.sub(r"(?P<indent> +)if _observers:\n(?P=indent)    out = _observed_forward\(.*?\)\n(?P=indent)else:\n"
                 r"(?P=indent)    (?P<body>out = kernel\.forward\(.*?\)\n)", r"\g<indent>\g<body>", source)
    assert cut != source and "_observers" not in cut, "the dispatcher changed shape; update this benchmark"
    namespace = dict(vars(node))
    exec(compile(cut.replace("def run(", "def run_unobserved(", 1), "<run without observer test>", "exec"), namespace)
    # ... and an unmodified copy compiled the same way, so the pair differs only by the test.
    exec(compile(source.replace("def run(", "def run_copy(", 1), "<run copy>", "exec"), namespace)
    run_unobserved, run_copy = namespace["run_unobserved"], namespace["run_copy"]

    a, b = corenn.ones(1), corenn.ones(1)

    def once_ns(run) -> float:
        t0 = time.perf_counter()
        for _ in range(ops):
            run("add", a, b)
        return (time.perf_counter() - t0) / ops * 1e9

    class NoOp:
        def op_start(self, op_name, device, arrays):
            pass

        def op_end(self, op_name, device, out):
            pass

    assert not dispatch.observers
    corenn.plugins.observe_ops(NoOp()).remove()  # leaves the list empty again: the "after remove" state
    observer = NoOp()

    variants = {"without": run_unobserved, "copy": run_copy, "shipped": node.run}
    best = {name: float("inf") for name in (*variants, "observed")}
    # Interleaved rounds, best of each: the machine is shared, the minimum is the least disturbed.
    for _ in range(rounds):
        for name, run in variants.items():
            best[name] = min(best[name], once_ns(run))
        with corenn.plugins.observe_ops(observer):
            best["observed"] = min(best["observed"], once_ns(node.run))
    without_test, with_test, shipped, observed = best["without"], best["copy"], best["shipped"], best["observed"]
    empty = []
    t0 = time.perf_counter()
    for _ in range(ops):
        if empty:
            pass
    truth_test = (time.perf_counter() - t0) / ops * 1e9
    print(f"dispatch of a 1-element add, best of {rounds} interleaved rounds x {ops} calls (ns per op; "
          "no-observer rows measured after an observe_ops handle was added and removed)")
    print(f"  copy of the dispatcher without the test   {without_test:8.0f}")
    print(f"  copy of the dispatcher with the test      {with_test:8.0f}  ({with_test / without_test:.3f}x)")
    print(f"  the dispatcher itself, no observer        {shipped:8.0f}  ({shipped / without_test:.3f}x)")
    print(f"  with one no-op observer active            {observed:8.0f}  ({observed / without_test:.3f}x)")
    print(f"  (an empty-list truthiness test in a loop: {truth_test:.0f} ns, loop included)")
    return {"without test": without_test, "with test": with_test, "shipped": shipped, "observed": observed}


def run(runs: int = 7, ops: int = 100_000, rounds: int = 5, venv: bool = True) -> list[dict]:
    """Rows for benchmarks/run.py: import times (ms) beside numpy's and torch's, dispatch cost (ns)."""
    imports = bench_import(runs, venv)
    rows = [{"name": f"import {label}", "unit": "ms", "corenn": value, "pytorch": imports["torch"],
             "numpy": imports["numpy"]}
            for label, value in imports.items() if label.startswith("corenn")]
    dispatch_ns = bench_dispatch(ops, rounds)
    for label, key in (("dispatcher without the observer test", "without test"),
                       ("dispatcher with the observer test", "with test"),
                       ("one no-op observer active", "observed")):
        rows.append({"name": f"1-element add, {label}", "unit": "ns", "corenn": dispatch_ns[key]})
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=9, help="fresh interpreters per import measurement")
    ap.add_argument("--ops", type=int, default=200_000, help="ops per dispatch measurement")
    ap.add_argument("--rounds", type=int, default=7, help="interleaved rounds per dispatch measurement")
    ap.add_argument("--no-venv", action="store_true", help="skip the first-party-plugins virtualenv")
    args = ap.parse_args()
    imports = bench_import(args.runs, not args.no_venv)
    print(f"import time, median of {args.runs} fresh interpreters, interleaved (ms, cumulative, -X importtime)")
    for label, value in imports.items():
        print(f"  {label:<32} {'n/a' if value is None else f'{value:8.1f}'}")
    bench_dispatch(args.ops, args.rounds)


if __name__ == "__main__":
    main()
