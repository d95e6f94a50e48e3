"""docs/parametrize.md's examples run as written (in a scratch directory: one writes a checkpoint)."""
from __future__ import annotations

import re
from pathlib import Path

DOC = Path(__file__).resolve().parents[3] / "docs" / "parametrize.md"


def test_every_python_block_of_the_user_docs_runs(tmp_path, monkeypatch, capsys):
    blocks = re.findall(r"```python\n(.*?)```", DOC.read_text(), re.S)
    assert len(blocks) >= 10
    monkeypatch.chdir(tmp_path)
    exec(compile("\n".join(blocks), str(DOC), "exec"), {})
    printed = capsys.readouterr().out
    assert "['bias', 'parametrizations.weight.original']" in printed
    assert "['bias', 'weight_mask', 'weight_orig']" in printed
