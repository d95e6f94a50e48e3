"""bfloat16 vs float32 inference of a matmul-heavy MLP, corenn and PyTorch in one run (medians, ratios).

MLP 1024 -> 2048 -> 2048 -> 1024 (GELU), batch 256, under no_grad. corenn's bfloat16 matmuls convert
to float32, run BLAS and round the result (numpy has no bfloat16 BLAS), so bfloat16 costs conversions
on top of the float32 work; PyTorch uses native bf16 kernels (oneDNN) where the CPU has avx512_bf16/AMX.

    python benchmarks/bench_bfloat16.py
"""
from __future__ import annotations


from timing import median_seconds

SIZES, BATCH, REPEATS = (1024, 2048, 2048, 1024), 256, 15


def _cpu_flags() -> str:
    try:
        flags = open("/proc/cpuinfo").read()
    except OSError:
        return "unknown"
    return ", ".join(f for f in ("avx512_bf16", "amx_bf16", "avx512f", "avx2") if f in flags) or "none"


def _float32_and_bfloat16(lib):
    """Median seconds of the MLP's inference in float32, then in bfloat16, built with ``lib``."""
    layers = []
    for a, b in zip(SIZES, SIZES[1:]):
        layers += [lib.nn.Linear(a, b), lib.nn.GELU()]
    model = lib.nn.Sequential(*layers[:-1])
    x = lib.randn(BATCH, SIZES[0])
    with lib.no_grad():
        f32 = median_seconds(lambda: model(x), REPEATS, warmup=2)
        model_bf16, x_bf16 = model.to(lib.bfloat16), x.to(lib.bfloat16)
        bf16 = median_seconds(lambda: model_bf16(x_bf16), REPEATS, warmup=2)
    return f32, bf16


def main():
    import corenn
    rows = [("corenn", *_float32_and_bfloat16(corenn))]
    try:
        import torch
    except ImportError:
        torch = None
    if torch is not None:
        rows.append(("pytorch", *_float32_and_bfloat16(torch)))
    print(f"MLP {'-'.join(map(str, SIZES))}, batch {BATCH}, inference; CPU flags: {_cpu_flags()}")
    print(f"{'framework':10} {'float32 ms':>11} {'bfloat16 ms':>12} {'bf16/f32':>9}")
    for name, a, b in rows:
        print(f"{name:10} {a * 1e3:11.2f} {b * 1e3:12.2f} {b / a:8.2f}x")
    if len(rows) == 2:
        print(f"corenn/pytorch: float32 {rows[0][1] / rows[1][1]:.2f}x, bfloat16 {rows[0][2] / rows[1][2]:.2f}x")


if __name__ == "__main__":
    main()
