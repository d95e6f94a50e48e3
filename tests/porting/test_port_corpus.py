"""The porting corpus keeps its conventions: every program names what it mirrors, and docs/breadth.md lists it."""
from __future__ import annotations

import ast
from pathlib import Path

HERE = Path(__file__).resolve().parent
NOT_PROGRAMS = {"test_port_corpus.py", "test_port_regressions.py"}
PROGRAMS = sorted(path for path in HERE.glob("test_port_*.py") if path.name not in NOT_PROGRAMS)


def test_every_program_names_what_it_mirrors():
    assert len(PROGRAMS) >= 10
    for path in PROGRAMS:
        docstring = ast.get_docstring(ast.parse(path.read_text()))
        assert docstring and docstring.startswith(("Port of ", "Ports of ")), path.name


def test_docs_list_every_program():
    section = (HERE.parent.parent / "docs" / "breadth.md").read_text().split("**Porting corpus.**", 1)[1]
    listed = {line.split("`")[1] for line in section.splitlines() if line.startswith("| `test_port_")}
    assert listed == {path.stem for path in PROGRAMS}
