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


def test_dropout2d_takes_other_ranks_with_pytorchs_warning(torch):
    # pytorch/examples mnist_rnn/main.py applies nn.Dropout2d to the (N, C) output of an LSTM.
    import warnings

    import numpy as np
    import pytest

    import corenn
    import corenn.nn.functional as F
    for lib_F, ones in ((F, corenn.ones), (torch.nn.functional, torch.ones)):
        with pytest.warns(UserWarning, match="Received a 2-D input to dropout2d, which is deprecated"):
            assert lib_F.dropout2d(ones(3, 4), p=1.0).abs().sum().item() == 0
        with pytest.warns(UserWarning, match="Received a 1-D input"), \
                pytest.raises(RuntimeError, match="Feature dropout requires at least 2 dimensions in the input"):
            lib_F.dropout2d(ones(4), p=0.5)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        corenn.manual_seed(0)
        matrix = F.dropout2d(corenn.ones(64, 64), p=0.5).numpy()
        five = F.dropout2d(corenn.ones(16, 16, 2, 2, 2), p=0.5).numpy()
        assert tuple(corenn.nn.Dropout2d(0.0)(corenn.ones(3, 4)).shape) == (3, 4)
    assert set(np.unique(matrix)) == {0.0, 2.0}
    assert 0 < (matrix == 0).sum(axis=1).min() and (matrix == 0).sum(axis=1).max() < 64  # one draw per entry
    per_channel = five.reshape(16, 16, -1)
    assert np.all(per_channel.min(axis=2) == per_channel.max(axis=2))  # one draw per (sample, channel)


def test_step_lr_takes_a_float_step_size(torch):
    # the torchtext classification tutorial: torch.optim.lr_scheduler.StepLR(optimizer, 1.0, gamma=0.1)
    import pytest

    import corenn
    for step_size in (1.0, 2.5):
        lrs = {}
        for lib in (corenn, torch):
            optimizer = lib.optim.SGD([lib.nn.Parameter(lib.zeros(2))], lr=5)
            scheduler = lib.optim.lr_scheduler.StepLR(optimizer, step_size, gamma=0.1)
            for _ in range(6):
                optimizer.step()
                scheduler.step()
                lrs.setdefault(lib.__name__, []).append(scheduler.get_last_lr()[0])
        assert lrs["corenn"] == pytest.approx(lrs["torch"])
    for bad in (0, -1, True, "1"):
        with pytest.raises(ValueError, match="step_size must be a positive"):
            corenn.optim.lr_scheduler.StepLR(corenn.optim.SGD([corenn.nn.Parameter(corenn.zeros(2))], lr=1), bad)


def test_autocast_at_the_top_level(torch):
    # the AMP recipe: with torch.autocast(device_type=device, dtype=torch.float16): ...
    import corenn
    assert corenn.autocast is corenn.amp.autocast and torch.autocast is torch.amp.autocast
    x, w = corenn.ones(2, 3), corenn.ones(4, 3)
    with corenn.autocast(device_type="cpu", dtype=corenn.bfloat16):
        assert corenn.nn.functional.linear(x, w).dtype is corenn.bfloat16
    assert corenn.nn.functional.linear(x, w).dtype is corenn.float32


def test_factories_take_size_as_a_keyword(torch):
    # pytorch/examples gat/main.py: nn.Parameter(torch.empty(size=(in_features, n_hidden * n_heads)))
    import pytest

    import corenn
    for name in ("empty", "zeros", "ones", "rand", "randn"):
        for size in ((2, 3), [4], ()):
            ours, theirs = getattr(corenn, name)(size=size), getattr(torch, name)(size=size)
            assert tuple(ours.shape) == tuple(theirs.shape) and str(ours.dtype)[7:] == str(theirs.dtype)[6:]
        assert tuple(getattr(corenn, name)(2, 3).shape) == (2, 3)
        for lib in (corenn, torch):
            with pytest.raises(TypeError):
                getattr(lib, name)(2, size=(3,))
    for lib in (corenn, torch):
        with pytest.raises(TypeError, match="argument 'size' must be tuple of ints, not int"):
            lib.zeros(size=2)
