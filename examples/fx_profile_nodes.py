"""Per-node CPU timing with ``corenn.fx.Interpreter`` (the FX "CPU performance analysis" recipe).

Trace a model, run it through a ProfilingInterpreter that times every node, and
print a table of the slowest nodes and the share of the total each takes.

    python examples/fx_profile_nodes.py            # a small ResNet-style model
"""
from __future__ import annotations

import statistics
import time

import corenn
import corenn.fx as fx
from corenn import nn


class ProfilingInterpreter(fx.Interpreter):
    """An Interpreter that records how long each node took, over any number of runs.

    Example::

        >>> interp = ProfilingInterpreter(model)   # doctest: +SKIP
        >>> interp.run(x)                          # doctest: +SKIP
        >>> print(interp.summary())                # doctest: +SKIP
    """

    def __init__(self, module):
        # Accept a plain module: trace it so there is a graph to walk.
        gm = module if isinstance(module, fx.GraphModule) else fx.symbolic_trace(module)
        super().__init__(gm)
        self.total_runtimes: list[float] = []
        self.runtimes: dict = {}

    def run(self, *args):
        start = time.perf_counter()
        result = super().run(*args)
        self.total_runtimes.append(time.perf_counter() - start)
        return result

    def run_node(self, n):
        start = time.perf_counter()
        result = super().run_node(n)
        self.runtimes.setdefault(n, []).append(time.perf_counter() - start)
        return result

    def rows(self, should_sort: bool = True) -> list:
        """``(node name, opcode, target, mean seconds, % of total)`` per node."""
        total = statistics.mean(self.total_runtimes)
        rows = []
        for node, times in self.runtimes.items():
            mean = statistics.mean(times)
            target = node.target if isinstance(node.target, str) else getattr(node.target, "__name__", "?")
            rows.append((node.name, node.op, target, mean, 100.0 * mean / total))
        if should_sort:
            rows.sort(key=lambda row: row[3], reverse=True)
        return rows

    def summary(self, should_sort: bool = True, top: int | None = None) -> str:
        """A text table of the per-node timings (slowest first) and the mean total."""
        rows = self.rows(should_sort)[:top]
        header = ("Op", "Opcode", "Target", "Average runtime (ms)", "Pct total runtime")
        body = [(a, b, str(c), f"{d * 1e3:.4f}", f"{e:.2f}") for a, b, c, d, e in rows]
        widths = [max(len(str(r[i])) for r in [header] + body) for i in range(5)]
        lines = ["  ".join(str(cell).ljust(w) for cell, w in zip(header, widths)),
                 "  ".join("-" * w for w in widths)]
        lines += ["  ".join(str(cell).ljust(w) for cell, w in zip(row, widths)) for row in body]
        lines.append(f"Mean total runtime: {statistics.mean(self.total_runtimes) * 1e3:.3f} ms "
                     f"over {len(self.total_runtimes)} run(s)")
        return "\n".join(lines)


class BasicBlock(nn.Module):
    def __init__(self, channels):
        super().__init__()
        self.conv1 = nn.Conv2d(channels, channels, 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(channels)
        self.conv2 = nn.Conv2d(channels, channels, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(channels)

    def forward(self, x):
        out = corenn.relu(self.bn1(self.conv1(x)))
        return corenn.relu(self.bn2(self.conv2(out)) + x)


class SmallResNet(nn.Module):
    """A two-block ResNet-style network, small enough to profile in a second."""

    def __init__(self, channels=8, classes=10):
        super().__init__()
        self.stem = nn.Conv2d(3, channels, 3, padding=1, bias=False)
        self.bn = nn.BatchNorm2d(channels)
        self.layer1 = nn.Sequential(BasicBlock(channels), BasicBlock(channels))
        self.fc = nn.Linear(channels, classes)

    def forward(self, x):
        x = corenn.relu(self.bn(self.stem(x)))
        x = self.layer1(x)
        return self.fc(x.mean(dim=(2, 3)))


def main(runs: int = 3) -> ProfilingInterpreter:
    corenn.manual_seed(0)
    model = SmallResNet().eval()
    x = corenn.randn(2, 3, 16, 16)
    interp = ProfilingInterpreter(model)
    with corenn.no_grad():
        for _ in range(runs):
            interp.run(x)
    print(interp.summary(top=10))
    return interp


if __name__ == "__main__":
    main()
