"""``python -m corenn_numba``: compile and measure ahead of time, and show what was chosen.

    python -m corenn_numba calibrate              # built-in workloads: dense layers, CNNs, norms, losses
    python -m corenn_numba calibrate train.py -- --epochs 1    # or your own program, run once
    python -m corenn_numba show                   # every choice on this machine, with its times
    python -m corenn_numba forget                 # drop this machine's choices: measured again on next use

``calibrate`` compiles each kernel in the foreground (numba's code is cached on disk too)
and times it against the core's path for every shape class the workload touches, so a
later program starts with its choices made and its kernels compiled -- in mode ``cached``
(``CORENN_NUMBA_CHOOSE=cached``) nothing is measured or compiled while it runs.
"""
from __future__ import annotations

import argparse
import runpy
import sys
import time

import corenn
import corenn.nn as nn
import corenn.nn.functional as F

from corenn_numba import calibration


def _train_steps(model, inputs, targets, optimizer, steps: int = 2) -> None:
    for _ in range(steps):
        loss = F.cross_entropy(model(inputs), targets)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    with corenn.no_grad():
        for _ in range(steps):
            model(inputs)


def builtin_workloads() -> dict:
    """Name -> function running it: the shapes of the README's benchmarks and of common small models."""
    def mlp(batch):
        def run():
            model = nn.Sequential(nn.Linear(784, 512), nn.ReLU(), nn.Linear(512, 512), nn.ReLU(), nn.Linear(512, 10))
            for optimizer in (corenn.optim.SGD(model.parameters(), lr=0.01, momentum=0.9),
                              corenn.optim.AdamW(model.parameters(), lr=1e-3)):
                _train_steps(model, corenn.randn(batch, 784), corenn.randint(0, 10, (batch,)), optimizer)
        return run

    def cnn(batch, side, width):
        def run():
            model = nn.Sequential(nn.Conv2d(1, width, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                                  nn.Conv2d(width, 2 * width, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                                  nn.Flatten(), nn.Linear(2 * width * (side // 4) ** 2, 10))
            for optimizer in (corenn.optim.SGD(model.parameters(), lr=0.01, momentum=0.9),
                              corenn.optim.Adam(model.parameters(), lr=1e-3)):
                _train_steps(model, corenn.randn(batch, 1, side, side), corenn.randint(0, 10, (batch,)), optimizer)
        return run

    def conv64():
        conv = nn.Conv2d(64, 64, 3, padding=1)
        x = corenn.randn(32, 64, 32, 32, requires_grad=True)
        conv(x).sum().backward()
        with corenn.no_grad():
            conv(x)

    def norms_and_pools():
        x = corenn.randn(32, 64, 16, 16, requires_grad=True)
        for layer in (nn.BatchNorm2d(64), nn.GroupNorm(8, 64), nn.AvgPool2d(2), nn.AdaptiveAvgPool2d(1)):
            layer(x).sum().backward()
        tokens = corenn.randn(32, 128, 256, requires_grad=True)
        nn.LayerNorm(256)(tokens).sum().backward()
        F.softmax(tokens, dim=-1).sum().backward()

    return {"mlp-128": mlp(128), "mlp-32": mlp(32), "cnn-digits": cnn(64, 8, 16), "cnn-28": cnn(64, 28, 16),
            "conv-64x64": conv64, "norms-and-pools": norms_and_pools}


def calibrate(script: str | None, script_args: list[str], out) -> int:
    calibration.set_mode("measure")
    calibration.foreground = True  # compile now, then time at once: no background thread
    before = set(calibration.choices())
    started = time.perf_counter()
    if script is None:
        corenn.manual_seed(0)
        for name, run in builtin_workloads().items():
            step_started = time.perf_counter()
            run()
            print(f"{name}: {time.perf_counter() - step_started:.1f} s", file=out)
    else:
        sys.argv = [script, *script_args]
        runpy.run_path(script, run_name="__main__")
    new = {key: choice for key, choice in calibration.choices().items() if key not in before}
    kernel = sum(choice.train for choice in new.values())
    print(f"{len(new)} new shape classes measured in {time.perf_counter() - started:.1f} s "
          f"(training: compiled kernel for {kernel}, core for {len(new) - kernel}); "
          f"saved in {calibration.cache_file()}", file=out)
    return 0


def show(out) -> int:
    print("\n".join(calibration.summary_lines()), file=out)
    for key, choice in sorted(calibration.choices().items()):
        print(calibration.describe(key, choice), file=out)
    return 0


def main(argv: list[str] | None = None, out=None) -> int:
    out = out or sys.stdout
    parser = argparse.ArgumentParser(prog="python -m corenn_numba", description=__doc__.split("\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    run = commands.add_parser("calibrate", help="compile and measure the built-in workloads, or a script")
    run.add_argument("script", nargs="?", help="a Python program to run once, measuring every shape class it uses")
    run.add_argument("script_args", nargs=argparse.REMAINDER, help="its arguments (after --)")
    commands.add_parser("show", help="print every choice saved for this machine, with its times")
    commands.add_parser("forget", help="delete this machine's choices: they are measured again on next use")
    arguments = parser.parse_args(argv)
    if arguments.command == "calibrate":
        script_args = arguments.script_args[1:] if arguments.script_args[:1] == ["--"] else arguments.script_args
        return calibrate(arguments.script, script_args, out)
    if arguments.command == "show":
        return show(out)
    calibration.forget(saved=True)
    print(f"deleted {calibration.cache_file()}", file=out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
