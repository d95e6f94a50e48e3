"""docs/prune.md's examples run as written; examples/prune_digits.py shrinks without losing accuracy."""
from __future__ import annotations

import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]


def test_every_python_block_of_the_user_docs_runs(tmp_path, monkeypatch, capsys):
    blocks = re.findall(r"```python\n(.*?)```", (ROOT / "docs" / "prune.md").read_text(), re.S)
    assert len(blocks) >= 8
    monkeypatch.chdir(tmp_path)
    exec(compile("\n".join(blocks), str(ROOT / "docs" / "prune.md"), "exec"), {})
    printed = capsys.readouterr().out
    assert "['bias', 'weight_orig', 'weight_mask']" in printed
    assert "['L1Unstructured', 'LnStructured']" in printed
    assert "tensor([0., 1., 0., 1.])" in printed
    assert "\n56\n" in printed and "\n1898\n" in printed
    assert "SparseLinear 13107" in printed and "6.5x less weight memory" in printed
    assert "Conv2d(8, 16" in printed and "in_features=64" in printed


def test_the_digits_example_prunes_fine_tunes_and_shrinks(monkeypatch, capsys):
    monkeypatch.syspath_prepend(str(ROOT / "examples"))
    sys.modules.pop("prune_digits", None)
    import prune_digits
    results = prune_digits.main(["--epochs", "2", "--finetune-epochs", "1", "--no-progress"])
    assert results["shrunk"]["accuracy"] == results["fine-tuned (masked)"]["accuracy"] > 0.8
    assert results["shrunk"]["params"] * 2 <= results["trained"]["params"]
    assert results["shrunk"]["checkpoint"] * 2 <= results["trained"]["checkpoint"]
    assert "shrunk vs trained" in capsys.readouterr().out
