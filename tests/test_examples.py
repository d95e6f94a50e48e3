"""The example programs run as documented: ``python examples/<script>.py`` in a fresh interpreter.

The digits demo runs with a reduced epoch count (6) and must reach at least 95% test
accuracy, save a checkpoint that reloads to the same accuracy, and show its progress bar;
each seed program must print the result its document describes.
"""
from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import corenn

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


def _run(script: str, *args: str, cwd=None, timeout=300) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONWARNINGS="default")
    result = subprocess.run([sys.executable, str(EXAMPLES / script), *args], capture_output=True, text=True,
                            timeout=timeout, cwd=cwd, env=env)
    assert result.returncode == 0, f"{script} failed:\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
    return result


def test_train_digits_reaches_95_percent_and_reloads_to_the_same_accuracy(tmp_path):
    pytest.importorskip("sklearn")
    pytest.importorskip("tqdm")
    checkpoint = tmp_path / "digits.safetensors"
    result = _run("train_digits.py", "--epochs", "6", "--checkpoint", str(checkpoint), cwd=tmp_path)
    out = result.stdout
    epochs = re.findall(r"epoch +(\d+)/6 +loss ([0-9.]+) +test accuracy ([0-9.]+)%", out)
    assert [int(e[0]) for e in epochs] == [1, 2, 3, 4, 5, 6], out[-2000:]
    losses = [float(e[1]) for e in epochs]
    accuracies = [float(e[2]) for e in epochs]
    assert losses[-1] < 0.5 * losses[0]
    assert accuracies[-1] >= 95.0, f"test accuracy {accuracies[-1]}% after 6 epochs"
    assert "batch/s" in out or "s/batch" in out  # the tqdm progress bar was drawn
    reloaded = re.search(r"reloaded model: test accuracy ([0-9.]+)% \(equals the trained model's ([0-9.]+)%\)", out)
    assert reloaded and float(reloaded.group(1)) == accuracies[-1] == float(reloaded.group(2))
    # the checkpoint is a real safetensors file holding the network's weights
    state = corenn.load(checkpoint)
    assert sorted(state) == ["0.bias", "0.weight", "3.bias", "3.weight", "7.bias", "7.weight"]
    assert tuple(state["3.weight"].shape) == (32, 16, 3, 3) and tuple(state["7.weight"].shape) == (10, 128)
    safetensors = pytest.importorskip("safetensors.numpy")
    assert safetensors.load_file(str(checkpoint))["0.weight"].shape == (16, 1, 3, 3)


def test_train_digits_rejects_a_bad_epoch_count(tmp_path):
    result = subprocess.run([sys.executable, str(EXAMPLES / "train_digits.py"), "--epochs", "0"], capture_output=True,
                            text=True, timeout=120, cwd=tmp_path)
    assert result.returncode == 2
    assert "--epochs must be at least 1, got 0" in result.stderr


def _floats(text: str) -> list[float]:
    return [float(v) for v in re.findall(r"-?\d+\.\d+(?:e[-+]?\d+)?", text)]


def test_seed004_curve_fit_prints_minus_2_and_fits_5_0_3():
    out = _run("seed004_curve_fit.py").stdout
    assert out.splitlines()[0] == "tensor(-2.)"
    w = np.array(_floats(out.split("tensor(-2.)", 1)[1]))
    assert w.shape == (3,)
    # the document: "[4.9924135, 0.00040895029, 3.4504161] ... very close to our parameters" [5, 0, 3]
    assert abs(w[0] - 5) < 0.05 and abs(w[1]) < 0.05 and abs(w[2] - 3) < 0.5, w


def test_seed004_modules_fits_5_and_3():
    out = _run("seed004_modules.py").stdout
    fitted = re.search(r"tensor\(\[([-0-9.]+)\], requires_grad=True\) Parameter containing:\ntensor\(\[([-0-9.]+)\]", out)
    assert fitted, out
    a, b = float(fitted.group(1)), float(fitted.group(2))
    # "Should be close to 5 and 3": y = 5x + 3 + U[0, 0.3) noise, so b lands near 3 + 0.15
    assert abs(a - 5) < 0.1 and abs(b - 3.15) < 0.1, (a, b)
    linear = re.search(r"Linear: weight ([-0-9.]+), bias ([-0-9.]+)", out)
    assert abs(float(linear.group(1)) - 5) < 0.1 and abs(float(linear.group(2)) - 3.15) < 0.1
    assert "(1): ReLU()" in out and out.rstrip().endswith("corenn.Size([2, 10])")


def test_seed_modules_note_training_teaches_the_network_to_output_zero():
    out = _run("seed_modules_note_training.py").stdout
    found = re.search(r"mean \|output\| on 1000 random inputs: ([0-9.]+) before training, ([0-9.]+) after", out)
    assert found, out
    before, after = float(found.group(1)), float(found.group(2))
    assert after < 0.02 * before and after < 0.05, (before, after)
