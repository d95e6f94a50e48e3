"""tools/api_coverage.py: names corenn has, lacks and excludes, against the installed PyTorch."""
from __future__ import annotations

import importlib.util
import pathlib
import subprocess
import sys

import pytest

TOOL = pathlib.Path(__file__).resolve().parents[1] / "tools" / "api_coverage.py"


def _tool():
    spec = importlib.util.spec_from_file_location("api_coverage", TOOL)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.torch
def test_the_report_sorts_every_name_into_present_missing_or_excluded(torch):
    import corenn
    tool = _tool()
    report = tool.report(torch, corenn)
    nn = report["nn"]
    assert "Linear" in nn["present"] and "Conv2d" in nn["present"]
    assert "LinearCrossEntropyOptions" in nn["missing"]  # not in corenn: it must be counted against it
    torch_functions = report["torch"]
    assert "matmul" in torch_functions["present"]
    assert "quantize_per_tensor" not in torch_functions["missing"]  # corenn-quantize's, never counted against
    assert any("quantized" in reason for reason in report["Tensor"]["excluded"])
    for entry in report.values():
        counted = len(entry["present"]) + len(entry["missing"])
        assert entry["coverage"] == pytest.approx(len(entry["present"]) / counted if counted else 1.0)
        assert not set(entry["present"]) & set(entry["missing"])


def test_without_torch_it_says_what_to_install(tmp_path):
    blocker = tmp_path / "torch.py"
    blocker.write_text("raise ImportError('no torch here')\n")
    run = subprocess.run([sys.executable, str(TOOL)], capture_output=True, text=True, timeout=120,
                         env={"PYTHONPATH": str(tmp_path), "PATH": ""})
    assert run.returncode == 2
    assert "needs torch (pip install torch==2.13.0)" in run.stderr


@pytest.mark.torch
def test_missing_lists_one_namespace_and_refuses_an_unknown_one(torch):
    run = subprocess.run([sys.executable, str(TOOL), "--missing", "nn"], capture_output=True, text=True, timeout=300)
    assert run.returncode == 0 and "LinearCrossEntropyOptions" in run.stdout.split()
    bad = subprocess.run([sys.executable, str(TOOL), "--missing", "nope"], capture_output=True, text=True, timeout=300)
    assert bad.returncode == 2 and "no namespace 'nope'" in bad.stderr
