"""Profile a small CNN's training steps with corenn-profiler: op table, module tree, memory, trace, picture.

    pip install -e plugins/profiler[plot]
    python examples/profile_cnn.py [--out profile-cnn]

Writes <out>/trace.json (open it in https://ui.perfetto.dev), <out>/modules.png and
<out>/stacks.txt, and prints the tables. The same code runs on PyTorch with
``corenn`` renamed to ``torch`` (module_summary, memory_summary and plot are corenn's own).
"""
from __future__ import annotations

import argparse
import os

import corenn
import corenn.nn as nn
import corenn.nn.functional as F
from corenn.profiler import ProfilerActivity, profile, record_function, schedule


class SmallCNN(nn.Module):
    def __init__(self):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(1, 8, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(8, 16, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2))
        self.classifier = nn.Sequential(nn.Flatten(), nn.Linear(16 * 7 * 7, 64), nn.ReLU(), nn.Linear(64, 10))

    def forward(self, x):
        return self.classifier(self.features(x))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", default="profile-cnn")
    parser.add_argument("--steps", type=int, default=6)
    options = parser.parse_args()
    os.makedirs(options.out, exist_ok=True)

    corenn.manual_seed(0)
    model = SmallCNN()
    optimizer = corenn.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    images, labels = corenn.randn(32, 1, 28, 28), corenn.randint(0, 10, (32,))

    # Step 0 is skipped (first calls are slower), step 1 warms up, steps 2-4 are recorded.
    with profile(activities=[ProfilerActivity.CPU], schedule=schedule(wait=0, warmup=1, active=3, repeat=1, skip_first=1),
                 record_shapes=True, profile_memory=True, with_stack=True, with_modules=True) as prof:
        for _ in range(options.steps):
            with record_function("forward"):
                loss = F.cross_entropy(model(images), labels)
            with record_function("backward"):
                optimizer.zero_grad()
                loss.backward()
            with record_function("optimizer"):
                optimizer.step()
            prof.step()

    print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=12))
    print(prof.key_averages(group_by_input_shape=True).table(sort_by="cpu_time_total", row_limit=6))
    print(prof.module_summary())
    print(prof.memory_summary(top=5))
    prof.export_chrome_trace(os.path.join(options.out, "trace.json"))
    prof.export_stacks(os.path.join(options.out, "stacks.txt"))
    try:
        prof.plot(os.path.join(options.out, "modules.png"))
    except ImportError as missing:
        print(missing)
    print(f"wrote {options.out}/trace.json, stacks.txt, modules.png")


if __name__ == "__main__":
    main()
