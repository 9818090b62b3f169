"""The tutorial docs/extending.md works as printed: its Python blocks run, in order."""

import re
from pathlib import Path

import pytest

DOC = Path(__file__).resolve().parents[1] / "docs" / "extending.md"


def python_blocks(text: str) -> list[str]:
    return re.findall(r"```python\n(.*?)```", text, flags=re.S)


def test_python_blocks_found():
    blocks = python_blocks(DOC.read_text())
    assert len(blocks) >= 4
    first = blocks[0].strip().splitlines()
    assert len(first) <= 40  # "your own mechanism in 30 lines" (plus imports and blank lines)


def test_tutorial_runs():
    from marketsched.mechanisms.registry import get, unregister

    ns: dict = {}
    try:
        for block in python_blocks(DOC.read_text()):
            exec(compile(block, str(DOC), "exec"), ns)
        assert get("edf").title.startswith("Earliest deadline first")
        edf = ns["edf"]
        assert edf.records.counts()["completed"] == len(ns["jobs"].workload)
    finally:
        unregister("edf")
    with pytest.raises(ValueError, match="unknown mechanism 'edf'"):
        get("edf")
