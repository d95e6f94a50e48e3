"""What the benchmarks share: the median time of a call, after a warm-up."""
from __future__ import annotations

import statistics
import time


def median_seconds(fn, repeats: int, warmup: int = 3) -> float:
    """Median wall time of ``fn()`` over ``repeats`` calls, after ``warmup`` untimed ones.

    The warm-up absorbs first-call costs (plugin kernels compiling or being checked, caches
    filling, thread pools starting); the median keeps one disturbed call on a shared machine
    from moving the figure.
    """
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)
