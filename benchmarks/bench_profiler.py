"""What corenn-profiler costs per op: installed and idle, and recording; against no plugin and against torch.profiler.

One run, ratios. The same workload -- a small MLP's training step (linear, relu,
cross-entropy, backward, SGD) plus an elementwise chain, both dominated by per-op
overhead, which is where a profiler's cost shows -- is timed in fresh interpreters:

- corenn with no plugin loaded (``CORENN_DISABLE_PLUGIN_AUTOLOAD=1``): the baseline;
- corenn with corenn-profiler loaded (``CORENN_PLUGINS=profiler``), no profile active (target:
  within noise). Other plugins stay out of both: corenn-numba's kernel choice measures while
  it runs, which would be noise here;
- corenn inside ``profile()`` (defaults) and inside ``profile(record_shapes=True,
  profile_memory=True, with_modules=True)``;
- torch==2.13 CPU, plain and inside ``torch.profiler.profile()`` (defaults) and with the same
  options, on the same workload.

Each variant runs ``--repeats`` times, interleaved, in its own process; the median of
the per-iteration times is reported. The noise is the spread (max/min) of the baseline's
repeats. On a machine shared with other work, slow repeats are the others' doing, so
the profiler ratios are also given from each variant's fastest repeat. Per-op overhead = (profiled - plain) / ops per iteration, where the op count is
what corenn's profiler recorded (torch's aten ops differ in count: its overhead is
reported per iteration and as a ratio).

    python benchmarks/bench_profiler.py [--repeats 5] [--iterations 200]
"""
from __future__ import annotations

import argparse
import importlib.metadata
import json
import os
import platform
import statistics
import subprocess
import sys
import time

WORKER = r'''
import json, sys, time
framework, mode, iterations = sys.argv[1], sys.argv[2], int(sys.argv[3])
if framework == "corenn":
    import corenn as lib
    import corenn.nn as nn
    import corenn.nn.functional as F
else:
    import torch as lib
    import torch.nn as nn
    import torch.nn.functional as F
    lib.set_num_threads(1)
lib.manual_seed(0)
model = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 10))
optimizer = lib.optim.SGD(model.parameters(), lr=0.01)
x, target = lib.randn(16, 32), lib.randint(0, 10, (16,))
chain = lib.randn(64)

def step():
    optimizer.zero_grad()
    F.cross_entropy(model(x), target).backward()
    optimizer.step()
    y = chain
    for _ in range(10):
        y = (y * 1.0001 + 0.5).relu()
    return y

def profiler(full):
    options = dict(record_shapes=True, profile_memory=True, with_modules=True) if full else {}
    if framework == "corenn":
        from corenn.profiler import profile
        return profile(**options)
    from torch.profiler import profile
    return profile(**options)

for _ in range(20):  # warm up (kernel tables, first-call checks, allocator)
    step()
ops = 0
if mode == "plain":
    start = time.perf_counter()
    for _ in range(iterations):
        step()
    elapsed = time.perf_counter() - start
else:
    prof = profiler(mode == "full")
    with prof:
        # The loop only: starting a profile and processing its events afterwards are paid once, not per op.
        start = time.perf_counter()
        for _ in range(iterations):
            step()
        elapsed = time.perf_counter() - start
    if framework == "corenn":
        ops = sum(1 for e in prof.events() if e.kind in ("op", "backward")) / iterations
print(json.dumps({"us_per_iteration": elapsed / iterations * 1e6, "ops": ops}))
'''


def installed_plugins() -> list[str]:
    return sorted({ep.name for ep in importlib.metadata.entry_points(group="corenn")})


def run(framework: str, mode: str, iterations: int, env: dict) -> dict:
    environment = {k: v for k, v in os.environ.items() if not k.startswith("CORENN_")}
    environment.update(env)
    result = subprocess.run([sys.executable, "-c", WORKER, framework, mode, str(iterations)], capture_output=True,
                            text=True, env=environment)
    if result.returncode != 0:
        raise RuntimeError(f"{framework} {mode} failed:\n{result.stderr}")
    return json.loads(result.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--iterations", type=int, default=200)
    options = parser.parse_args()
    plugins = installed_plugins()
    if "profiler" not in plugins:
        sys.exit("corenn-profiler is not installed: pip install -e plugins/profiler")
    # Other plugins stay out of both (corenn-numba's kernel choice measures as it runs, which is noise here).
    without = {"CORENN_DISABLE_PLUGIN_AUTOLOAD": "1"}
    with_plugin = {"CORENN_PLUGINS": "profiler"}
    try:
        import torch  # noqa: F401
        have_torch = True
    except ImportError:
        have_torch = False
    variants = {
        "corenn, no profiler plugin": ("corenn", "plain", without),
        "corenn, plugin installed, idle": ("corenn", "plain", with_plugin),
        "corenn, profile()": ("corenn", "profile", with_plugin),
        "corenn, profile(shapes, memory, modules)": ("corenn", "full", with_plugin),
    }
    if have_torch:
        variants.update({"torch, plain": ("torch", "plain", {}), "torch, profile()": ("torch", "profile", {}),
                         "torch, profile(shapes, memory, modules)": ("torch", "full", {})})
    times = {label: [] for label in variants}
    ops = 0.0
    for _ in range(options.repeats):  # interleaved: drift on a shared machine hits every variant alike
        for label, (framework, mode, env) in variants.items():
            result = run(framework, mode, options.iterations, env)
            times[label].append(result["us_per_iteration"])
            ops = result["ops"] or ops
    median = {label: statistics.median(values) for label, values in times.items()}
    baseline = median["corenn, no profiler plugin"]
    # Noise: how far repeats of one variant spread (the larger of the two variants compared).
    noise = max(max(times[label]) / min(times[label])
                for label in ("corenn, no profiler plugin", "corenn, plugin installed, idle"))
    print(f"corenn-profiler overhead; {platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, "
          f"Python {platform.python_version()}")
    print(f"workload: MLP training step + 10-op elementwise chain x {options.iterations} iterations, "
          f"{options.repeats} interleaved repeats, median; corenn ops per iteration (forward + backward): {ops:.0f}")
    print(f"{'variant':44s} {'us/iter':>10s} {'ratio':>8s}")
    for label in variants:
        reference = median["torch, plain"] if label.startswith("torch") else baseline
        print(f"{label:44s} {median[label]:10.1f} {median[label] / reference:8.3f}")
    idle = median["corenn, plugin installed, idle"] / baseline
    print(f"\nidle plugin / no plugin: {idle:.3f} (noise: repeats span up to {noise:.3f}x) -> "
          f"{'within noise' if abs(idle - 1) <= noise - 1 else 'OUTSIDE noise'}")
    if ops:
        for mode in ("profile()", "profile(shapes, memory, modules)"):
            overhead = (median[f"corenn, {mode}"] - median["corenn, plugin installed, idle"]) / ops
            print(f"corenn {mode}: {overhead:.2f} us added per op")
    if have_torch:
        for mode in ("profile()", "profile(shapes, memory, modules)"):
            ours = median[f"corenn, {mode}"] / median["corenn, plugin installed, idle"]
            theirs = median[f"torch, {mode}"] / median["torch, plain"]
            ours_added = median[f"corenn, {mode}"] - median["corenn, plugin installed, idle"]
            theirs_added = median[f"torch, {mode}"] - median["torch, plain"]
            print(f"{mode}: slowdown corenn {ours:.2f}x vs torch.profiler {theirs:.2f}x; time added per iteration "
                  f"corenn {ours_added:.0f} us vs torch {theirs_added:.0f} us (ratio {ours_added / theirs_added:.2f})")
        fastest = {label: min(values) for label, values in times.items()}
        for mode in ("profile()", "profile(shapes, memory, modules)"):
            ours_added = fastest[f"corenn, {mode}"] - fastest["corenn, plugin installed, idle"]
            theirs_added = fastest[f"torch, {mode}"] - fastest["torch, plain"]
            print(f"{mode}, fastest repeats: time added per iteration corenn {ours_added:.0f} us vs torch "
                  f"{theirs_added:.0f} us (ratio {ours_added / theirs_added:.2f})")


if __name__ == "__main__":
    started = time.perf_counter()
    main()
    print(f"({time.perf_counter() - started:.0f} s)")
