"""corenn.compile / corenn.jit against eager corenn and PyTorch, in one run (medians; ratios to PyTorch eager).

- per-op overhead: 200 elementwise ops (y + a, y * b, tanh, repeated) on a (64,) tensor that requires
  grad, then ``sum().backward()``: microseconds per op, forward and backward.
- seed 004's batch_gather on (64, 32, 8) with (64, 4) indices: the eager loop, ``@jit.script`` on the
  same loop, and the vectorised version; PyTorch's three alongside.
- MLP training step (784 -> 256 -> 10, batch 64, SGD with momentum): eager vs the whole step compiled.
- capture time: the first call of each compiled function (eager run plus recording).

``torch.compile`` runs only with ``--torch-compile`` (it needs a C compiler and takes minutes on
200 ops here); without it the table says it was not run.

    python benchmarks/bench_jit.py [--torch-compile]
"""
from __future__ import annotations

import platform
import random
import statistics
import sys
import time

import numpy as np

CHAIN_OPS = 200


def _cpu_name() -> str:
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def _wait_for_plugin_compiles() -> None:
    """corenn-numba compiles and times a new shape class in the background on its first calls: let
    that finish before timing, or the timed loop shares the CPU with it."""
    try:
        from corenn_numba import calibration
    except ImportError:
        return
    calibration.wait_for_compiles()


def _median_times(fns: dict, repeats: int, warmup: int = 3) -> dict:
    for _ in range(2):  # the second round runs what the plugin chose once its compiles are done
        for fn in fns.values():
            for _ in range(warmup):
                fn()
        _wait_for_plugin_compiles()
    samples = {name: [] for name in fns}
    order = list(fns)
    shuffle = random.Random(0).shuffle
    for _ in range(repeats):
        # Round-robin, so a shared machine's load falls on all alike, in a new order each round: the
        # variant that runs right after PyTorch pays for its intra-op threads still spinning.
        shuffle(order)
        for name in order:
            start = time.perf_counter()
            fns[name]()
            samples[name].append(time.perf_counter() - start)
    return {name: statistics.median(values) for name, values in samples.items()}


def _timed_first_call(fn):
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def chain(lib, x, a, b):
    y = x
    for i in range(CHAIN_OPS // 3):
        y = lib.tanh(y * b + a) if i % 2 else lib.tanh(y + a) * b
    return y.sum()


def batch_gather(lib):
    def batch_gather(tensor, indices):
        output = []
        for i in range(tensor.size(0)):
            output += [tensor[i][indices[i]]]
        return lib.stack(output)
    return batch_gather


def batch_gather_vec(lib):
    def batch_gather_vec(tensor, indices):
        shape = list(tensor.shape)
        flat_first = lib.reshape(tensor, [shape[0] * shape[1]] + shape[2:])
        offset = lib.reshape(lib.arange(shape[0]) * shape[1], [shape[0]] + [1] * (len(indices.shape) - 1))
        return flat_first[indices + offset]
    return batch_gather_vec


def main(argv):
    import corenn
    import torch
    torch.set_num_threads(1)
    run_torch_compile = "--torch-compile" in argv
    rows = []

    # -- per-op overhead --------------------------------------------------------------------------
    ops_per_call = 3 * (CHAIN_OPS // 3) + 1
    rng = np.random.default_rng(0)
    x_np, a_np, b_np = (rng.standard_normal(64).astype(np.float32) for _ in range(3))
    cx = corenn.tensor(x_np, requires_grad=True)
    ca, cb = corenn.tensor(a_np), corenn.tensor(b_np)
    tx = torch.tensor(x_np, requires_grad=True)
    ta, tb = torch.tensor(a_np), torch.tensor(b_np)

    def corenn_eager():
        cx.grad = None
        chain(corenn, cx, ca, cb).backward()

    compiled_chain = corenn.compile(lambda x, a, b: chain(corenn, x, a, b))

    def corenn_compiled():
        cx.grad = None
        compiled_chain(cx, ca, cb).backward()

    capture_chain = _timed_first_call(corenn_compiled)
    numba_backend = "numba" in corenn.compiler.list_backends()
    if numba_backend:
        fused_chain = corenn.compile(lambda x, a, b: chain(corenn, x, a, b), backend="numba")

        def corenn_fused():
            cx.grad = None
            fused_chain(cx, ca, cb).backward()
        capture_fused = _timed_first_call(corenn_fused)

    def torch_eager():
        tx.grad = None
        chain(torch, tx, ta, tb).backward()

    fns = {"corenn eager": corenn_eager, "corenn compiled (replay)": corenn_compiled, "pytorch eager": torch_eager}
    if numba_backend:
        fns["corenn compiled (numba)"] = corenn_fused
    torch_compile_note = "not run (pass --torch-compile)"
    if run_torch_compile:
        try:
            compiled_torch = torch.compile(lambda x, a, b: chain(torch, x, a, b))

            def torch_compiled():
                tx.grad = None
                compiled_torch(tx, ta, tb).backward()
            torch_compile_note = f"compile {_timed_first_call(torch_compiled):.1f} s"
            fns["pytorch torch.compile"] = torch_compiled
        except Exception as error:  # no C compiler, unsupported platform: say so
            torch_compile_note = f"failed: {type(error).__name__}: {str(error).splitlines()[0][:80]}"
    times = _median_times(fns, repeats=30)
    base = times["pytorch eager"]
    for name, seconds in times.items():
        rows.append(("per-op overhead", name, f"{seconds / ops_per_call * 1e6:.2f} us/op", seconds / base))
    rows.append(("per-op overhead", "capture (first call)", f"{capture_chain * 1e3:.1f} ms", None))
    if numba_backend:
        rows.append(("per-op overhead", "capture + numba compile (first call)", f"{capture_fused * 1e3:.0f} ms", None))
    else:
        rows.append(("per-op overhead", "corenn compiled (numba)", "not run (corenn-numba not installed)", None))
    rows.append(("per-op overhead", "torch.compile", torch_compile_note, None))

    # -- seed 004's batch_gather ------------------------------------------------------------------
    tensor_np = rng.standard_normal((64, 32, 8)).astype(np.float32)
    indices_np = rng.integers(0, 32, (64, 4))
    ct, ci = corenn.tensor(tensor_np), corenn.tensor(indices_np)
    tt, ti = torch.tensor(tensor_np), torch.tensor(indices_np)
    gather_jit = corenn.jit.script(batch_gather(corenn))
    capture_gather = _timed_first_call(lambda: gather_jit(ct, ci))
    fns = {"corenn eager loop": lambda: batch_gather(corenn)(ct, ci),
           "corenn jit.script loop": lambda: gather_jit(ct, ci),
           "corenn vectorised": lambda: batch_gather_vec(corenn)(ct, ci),
           "pytorch eager loop": lambda: batch_gather(torch)(tt, ti),
           "pytorch vectorised": lambda: batch_gather_vec(torch)(tt, ti)}
    try:
        torch_jit = torch.jit.script(batch_gather(torch))
        torch_jit(tt, ti)
        fns["pytorch jit.script loop"] = lambda: torch_jit(tt, ti)
    except Exception as error:
        rows.append(("batch_gather", "pytorch jit.script", f"failed: {type(error).__name__}", None))
    times = _median_times(fns, repeats=30)
    base = times["pytorch eager loop"]
    for name, seconds in times.items():
        rows.append(("batch_gather", name, f"{seconds * 1e6:.0f} us", seconds / base))
    rows.append(("batch_gather", "corenn jit / corenn eager", f"{times['corenn jit.script loop'] / times['corenn eager loop']:.2f}x", None))
    rows.append(("batch_gather", "capture (first call)", f"{capture_gather * 1e3:.1f} ms", None))

    # -- MLP training step ------------------------------------------------------------------------
    def make_step(lib, model, optimizer):
        def step(x, y):
            optimizer.zero_grad()
            loss = lib.nn.functional.cross_entropy(model(x), y)
            loss.backward()
            optimizer.step()
            return loss
        return step

    corenn.manual_seed(0)
    model = corenn.nn.Sequential(corenn.nn.Linear(784, 256), corenn.nn.ReLU(), corenn.nn.Linear(256, 10))
    eager_step = make_step(corenn, model, corenn.optim.SGD(model.parameters(), lr=0.01, momentum=0.9))
    model2 = corenn.nn.Sequential(corenn.nn.Linear(784, 256), corenn.nn.ReLU(), corenn.nn.Linear(256, 10))
    compiled_step = corenn.compile(make_step(corenn, model2, corenn.optim.SGD(model2.parameters(), lr=0.01,
                                                                              momentum=0.9)))
    tmodel = torch.nn.Sequential(torch.nn.Linear(784, 256), torch.nn.ReLU(), torch.nn.Linear(256, 10))
    torch_step = make_step(torch, tmodel, torch.optim.SGD(tmodel.parameters(), lr=0.01, momentum=0.9))
    xb_np = rng.standard_normal((64, 784)).astype(np.float32)
    yb_np = rng.integers(0, 10, 64)
    cxb, cyb = corenn.tensor(xb_np), corenn.tensor(yb_np)
    txb, tyb = torch.tensor(xb_np), torch.tensor(yb_np)
    capture_step = _timed_first_call(lambda: compiled_step(cxb, cyb))
    fns = {"corenn eager": lambda: eager_step(cxb, cyb), "corenn compiled step": lambda: compiled_step(cxb, cyb),
           "pytorch eager": lambda: torch_step(txb, tyb)}
    if numba_backend:
        model3 = corenn.nn.Sequential(corenn.nn.Linear(784, 256), corenn.nn.ReLU(), corenn.nn.Linear(256, 10))
        fused_step = corenn.compile(make_step(corenn, model3, corenn.optim.SGD(model3.parameters(), lr=0.01,
                                                                               momentum=0.9)), backend="numba")
        capture_fused_step = _timed_first_call(lambda: fused_step(cxb, cyb))
        fns["corenn compiled (numba)"] = lambda: fused_step(cxb, cyb)
    times = _median_times(fns, repeats=30)
    base = times["pytorch eager"]
    for name, seconds in times.items():
        rows.append(("MLP train step", name, f"{seconds * 1e3:.2f} ms", seconds / base))
    rows.append(("MLP train step", "capture (first call)", f"{capture_step * 1e3:.1f} ms", None))
    if numba_backend:
        rows.append(("MLP train step", "capture, numba (first call)", f"{capture_fused_step * 1e3:.1f} ms", None))

    print(f"CPU: {_cpu_name()}; python {platform.python_version()}; torch {torch.__version__} "
          f"(1 thread); corenn {corenn.__version__}")
    print(f"{'workload':<16} {'variant':<36} {'time':>16} {'/ pytorch eager':>16}")
    for workload, name, value, ratio in rows:
        print(f"{workload:<16} {name:<36} {value:>16} {'' if ratio is None else f'{ratio:.2f}x':>16}")


if __name__ == "__main__":
    main(sys.argv[1:])
