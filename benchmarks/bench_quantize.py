"""int8 dynamic quantization against fp32, in corenn and PyTorch, in one run: an MLP 784-2048-2048-10.

Prints, per batch size (1, 8, 64), the median inference time of corenn fp32, corenn int8
(``quantize_dynamic``; also with every product on one thread, to show what the parallel
kernels give), PyTorch fp32 and PyTorch int8 (``torch.ao.quantization.quantize_dynamic``),
the ratios the issue sets targets for, the state-dict sizes, the CPU and the int8 kernel in use.
The contenders are timed in turn, call after call, in a new random order every round, so that
a neighbour's load on a shared machine, and what one contender leaves in the caches, fall on
all of them alike.

    python benchmarks/bench_quantize.py [--repeats 50] [--threads N]

``--threads N`` caps every library's threads (OpenBLAS, PyTorch, numba) at N; by default each
uses all CPUs.
"""
from __future__ import annotations

import argparse
import os
import platform
import random
import statistics
import sys
import tempfile
import time
import warnings


def _threads_from_argv() -> int | None:
    # Thread pools read their size when the libraries load, so it is set before the imports below.
    if "--threads" in sys.argv[:-1]:
        threads = sys.argv[sys.argv.index("--threads") + 1]
        for name in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "NUMBA_NUM_THREADS", "MKL_NUM_THREADS"):
            os.environ[name] = threads
        return int(threads)
    return None


THREADS = _threads_from_argv()

import corenn  # noqa: E402
from corenn import nn  # noqa: E402
import corenn_quantize as Q  # noqa: E402
from corenn_quantize import kernels  # noqa: E402



def cpu_name() -> str:
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip() + f" ({os.cpu_count()} CPUs)"
    except OSError:
        pass
    return platform.processor() or platform.machine()


def interleaved_medians_ms(functions: dict, repeats: int, warmup: int = 3) -> dict:
    """Median milliseconds of each function, timed one call of each after another, ``repeats`` rounds."""
    for function in functions.values():
        for _ in range(warmup):
            function()
    times = {name: [] for name in functions}
    order = list(functions.items())
    shuffler = random.Random(0)
    for _ in range(repeats):
        # a new order every round: a thread pool left spinning, or caches filled by the one before
        # (fp32's 23 MB of weights evict int8's), fall on every contender alike
        shuffler.shuffle(order)
        for name, function in order:
            start = time.perf_counter()
            function()
            times[name].append(time.perf_counter() - start)
    return {name: statistics.median(values) * 1e3 for name, values in times.items()}


def serial(function):
    """``function`` with every int8 product on one thread (none is timed for the thread choice)."""
    def run():
        saved, kernels.PARALLEL_MIN_MACS = kernels.PARALLEL_MIN_MACS, 1 << 62
        try:
            return function()
        finally:
            kernels.PARALLEL_MIN_MACS = saved
    return run


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=50)
    parser.add_argument("--threads", type=int, default=None, help="threads of every library (default: all CPUs)")
    args = parser.parse_args()
    corenn.manual_seed(0)
    model = nn.Sequential(nn.Linear(784, 2048), nn.ReLU(), nn.Linear(2048, 2048), nn.ReLU(), nn.Linear(2048, 10))
    model.eval()
    int8 = Q.quantize_dynamic(model, {nn.Linear}, dtype=corenn.qint8)
    try:
        import torch
        warnings.filterwarnings("ignore")
        torch.set_num_threads(THREADS or os.cpu_count())
        tmodel = torch.nn.Sequential(torch.nn.Linear(784, 2048), torch.nn.ReLU(), torch.nn.Linear(2048, 2048),
                                     torch.nn.ReLU(), torch.nn.Linear(2048, 10)).eval()
        with torch.no_grad():
            for ours, theirs in zip(model[::2], tmodel[::2]):
                theirs.weight.copy_(torch.from_numpy(ours.weight.detach().numpy()))
                theirs.bias.copy_(torch.from_numpy(ours.bias.detach().numpy()))
        tint8 = torch.ao.quantization.quantize_dynamic(tmodel, {torch.nn.Linear}, dtype=torch.qint8)
    except ImportError:
        torch = None
    kernel = kernels.backend() + (" with AVX-512 VNNI" if kernels.uses_vnni() else "")
    print(f"CPU: {cpu_name()}; int8 kernel: {kernel}; threads: {THREADS or os.cpu_count()}; "
          f"repeats: {args.repeats} (medians, shuffled rounds)")
    print(f"{'batch':>5} {'corenn fp32':>12} {'corenn int8':>12} {'int8 1 thread':>14} {'torch fp32':>11} "
          f"{'torch int8':>11} {'fp32/int8':>10} {'int8/torch int8':>16}")
    for batch in (1, 8, 64):
        x = corenn.randn(batch, 784)
        contenders = {"fp32": lambda x=x: model(x), "int8": lambda x=x: int8(x),
                      "int8 serial": serial(lambda x=x: int8(x))}
        if torch is not None:
            tx = torch.from_numpy(x.numpy())
            contenders.update({"torch fp32": lambda tx=tx: tmodel(tx), "torch int8": lambda tx=tx: tint8(tx)})
        with corenn.no_grad(), (torch.no_grad() if torch is not None else corenn.no_grad()):
            ms = interleaved_medians_ms(contenders, args.repeats)
        torch_fp32, torch_int8 = ms.get("torch fp32", float("nan")), ms.get("torch int8", float("nan"))
        print(f"{batch:>5} {ms['fp32']:>10.3f}ms {ms['int8']:>10.3f}ms {ms['int8 serial']:>12.3f}ms "
              f"{torch_fp32:>9.3f}ms {torch_int8:>9.3f}ms {ms['fp32'] / ms['int8']:>9.2f}x "
              f"{ms['int8'] / torch_int8:>15.2f}x")
    chosen = list(kernels.threads.choices().values())
    if chosen:
        print(f"int8 threads, chosen by timing each product shape: parallel for {chosen.count(True)}, one thread "
              f"for {chosen.count(False)}, still timing {chosen.count(None)}")
    with tempfile.TemporaryDirectory() as folder:
        corenn.save(model.state_dict(), os.path.join(folder, "fp32.safetensors"))
        corenn.save(int8.state_dict(), os.path.join(folder, "int8.safetensors"))
        fp32_size = os.path.getsize(os.path.join(folder, "fp32.safetensors"))
        int8_size = os.path.getsize(os.path.join(folder, "int8.safetensors"))
    print(f"state_dict: fp32 {fp32_size / 1e6:.1f} MB, int8 {int8_size / 1e6:.1f} MB "
          f"({fp32_size / int8_size:.2f}x smaller)")
    print("targets (issue 18): fp32/int8 >= 3x, int8 <= 1.5x torch int8, int8 never slower than fp32, 4x smaller")


if __name__ == "__main__":
    main()
