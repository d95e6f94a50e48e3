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


def test_where_takes_two_numbers(torch):
    # pytorch/examples siamese_network/main.py: pred = torch.where(outputs > 0.5, 1, 0)
    import corenn
    condition = [True, False, True]
    for input, other in [(1, 0), (1, 0.5), (1.0, 0.0), (True, False), (True, 0)]:
        ours = corenn.where(corenn.tensor(condition), input, other)
        theirs = torch.where(torch.tensor(condition), input, other)
        assert str(ours.dtype).replace("corenn", "torch") == str(theirs.dtype), (input, other)
        assert ours.tolist() == theirs.tolist()
    try:
        corenn.where(corenn.tensor(condition), [1], 0)
    except TypeError as error:
        assert "where()" in str(error)
    else:
        raise AssertionError("a list is not a where() operand")
