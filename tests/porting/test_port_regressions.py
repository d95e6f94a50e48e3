"""Differences from PyTorch that porting the corpus found, each pinned where a program met it."""
from __future__ import annotations

import subprocess
import sys


def test_utils_data_and_hooks_are_reachable_after_a_plain_import():
    # pytorch/examples mnist/main.py reaches torch.utils.data.DataLoader with only ``import torch``.
    code = ("import corenn; "
            "print(corenn.utils.data.DataLoader.__name__, corenn.utils.hooks.RemovableHandle.__name__); "
            "print(hasattr(corenn.utils, 'no_such_module'))")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["DataLoader", "RemovableHandle", "False"]
