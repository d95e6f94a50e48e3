"""docs/kernels.md is the kernel registry, written out: regenerated here, it must match the committed file."""
from __future__ import annotations

import io
from pathlib import Path

import corenn
from corenn.__main__ import KERNELS_MD_COMMAND, kernels_markdown, main
from corenn.kernels import core_kernels

DOC = Path(__file__).resolve().parent.parent / "docs" / "kernels.md"


def test_docs_kernels_md_matches_the_registry():
    assert DOC.read_text() == kernels_markdown(), (
        f"docs/kernels.md differs from the kernel registry (a kernel's forward signature, outputs or docstring "
        f"changed): run `{KERNELS_MD_COMMAND}` and commit the result")


def test_the_reference_lists_every_core_op_with_its_forward_signature():
    text = kernels_markdown()
    for op in core_kernels():
        assert f"| `{op}` |" in text, op
    assert "| `conv` | `(x, weight, bias=None, *, stride, padding, dilation, groups)` | 1 | yes |" in text
    assert "| `eq` | `(a, b)` | 1 | no |" in text
    assert "| `split` | `(a, sizes, axis)` | n | yes |" in text


def test_kernels_command_prints_the_reference_and_who_runs_each_op():
    out = io.StringIO()
    assert main(["kernels", "--markdown"], out=out) == 0
    assert out.getvalue() == kernels_markdown()
    out = io.StringIO()
    assert main(["kernels"], out=out) == 0
    line = next(line for line in out.getvalue().splitlines() if line.startswith("relu("))
    assert line == f"relu(a)  outputs=1  cpu: {corenn.dispatch.kernels.source_of('relu', 'cpu')}"
