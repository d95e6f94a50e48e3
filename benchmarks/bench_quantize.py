"""int8 dynamic quantization against fp32, in corenn and PyTorch, in one run: an MLP 784-2048-2048-10.

Prints, per batch size (1, 8, 64), the median inference time of corenn fp32, corenn int8
(``quantize_dynamic``), PyTorch fp32 and PyTorch int8 (``torch.ao.quantization.quantize_dynamic``),
the ratios the issue sets targets for, the state-dict sizes, the CPU and the int8 kernel in use.

    python benchmarks/bench_quantize.py [--repeats 50]
"""
from __future__ import annotations

import argparse
import os
import platform
import tempfile
import warnings

import corenn
from corenn import nn
import corenn_quantize as Q
from corenn_quantize import kernels

from timing import median_seconds


def cpu_name() -> str:
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip() + f" ({os.cpu_count()} CPUs)"
    except OSError:
        pass
    return platform.processor() or platform.machine()


def median_ms(function, repeats: int) -> float:
    return median_seconds(function, repeats) * 1e3


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=50)
    args = parser.parse_args()
    corenn.manual_seed(0)
    model = nn.Sequential(nn.Linear(784, 2048), nn.ReLU(), nn.Linear(2048, 2048), nn.ReLU(), nn.Linear(2048, 10))
    model.eval()
    int8 = Q.quantize_dynamic(model, {nn.Linear}, dtype=corenn.qint8)
    try:
        import torch
        warnings.filterwarnings("ignore")
        torch.set_num_threads(os.cpu_count())
        tmodel = torch.nn.Sequential(torch.nn.Linear(784, 2048), torch.nn.ReLU(), torch.nn.Linear(2048, 2048),
                                     torch.nn.ReLU(), torch.nn.Linear(2048, 10)).eval()
        with torch.no_grad():
            for ours, theirs in zip(model[::2], tmodel[::2]):
                theirs.weight.copy_(torch.from_numpy(ours.weight.detach().numpy()))
                theirs.bias.copy_(torch.from_numpy(ours.bias.detach().numpy()))
        tint8 = torch.ao.quantization.quantize_dynamic(tmodel, {torch.nn.Linear}, dtype=torch.qint8)
    except ImportError:
        torch = None
    print(f"CPU: {cpu_name()}; int8 kernel: {kernels.backend()}; repeats: {args.repeats} (medians)")
    print(f"{'batch':>5} {'corenn fp32':>12} {'corenn int8':>12} {'torch fp32':>11} {'torch int8':>11} "
          f"{'fp32/int8':>10} {'int8 vs torch int8':>19}")
    for batch in (1, 8, 64):
        x = corenn.randn(batch, 784)
        with corenn.no_grad():
            fp32_ms = median_ms(lambda: model(x), args.repeats)
            int8_ms = median_ms(lambda: int8(x), args.repeats)
        torch_fp32 = torch_int8 = float("nan")
        if torch is not None:
            tx = torch.from_numpy(x.numpy())
            with torch.no_grad():
                torch_fp32 = median_ms(lambda: tmodel(tx), args.repeats)
                torch_int8 = median_ms(lambda: tint8(tx), args.repeats)
        print(f"{batch:>5} {fp32_ms:>10.3f}ms {int8_ms:>10.3f}ms {torch_fp32:>9.3f}ms {torch_int8:>9.3f}ms "
              f"{fp32_ms / int8_ms:>9.2f}x {int8_ms / torch_int8:>18.2f}x")
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
