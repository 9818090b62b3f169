"""marketsched.terminal: off a terminal a table is drawn as plain text exactly as rich draws it."""

import io
import subprocess
import sys

from hypothesis import given, settings
from hypothesis import strategies as st
from rich.console import Console

from marketsched import cli
from marketsched.terminal import TextTable

CELL = st.text(st.characters(min_codepoint=32, max_codepoint=126), max_size=12).map(str.strip)  # as labels and numbers
WORDS = st.lists(st.text(st.characters(min_codepoint=33, max_codepoint=126), min_size=1, max_size=40), max_size=25)
SPACES = st.lists(st.sampled_from([" ", "  ", "   "]), min_size=25, max_size=25)


def _rich(table: TextTable, width: int = 100) -> str:
    out = io.StringIO()
    Console(file=out, width=width, force_terminal=False).print(table.rich())
    return out.getvalue()


@st.composite
def tables(draw):
    n = draw(st.integers(1, 6))
    columns = [(draw(CELL), draw(st.sampled_from(["left", "right"])), draw(st.integers(0, 14))) for _ in range(n)]
    sections = []
    for _ in range(draw(st.integers(1, 3))):
        section = draw(st.lists(st.one_of(CELL, st.lists(CELL, min_size=n, max_size=n)), max_size=4))
        sections.append(section)
    words, spaces = draw(WORDS), draw(SPACES)
    title = draw(st.sampled_from(["", " ", "  "])) + "".join(w + s for w, s in zip(words, spaces))
    return TextTable(title.rstrip() if draw(st.booleans()) else title, columns, sections)


@settings(max_examples=300, deadline=None)
@given(tables())
def test_plain_table_is_rich_off_a_terminal(table):
    rows = [r for s in table.sections for r in s]
    widths = [max(m, len(h), *(len(r if isinstance(r, str) else r[i]) if (i == 0 or not isinstance(r, str)) else 0
                                for r in rows)) for i, (h, _, m) in enumerate(table.columns)]
    if 2 + sum(w + 2 for w in widths) - 1 > 100:
        return  # wider than the console: rich narrows columns, the plain table keeps every cell whole
    assert table.plain() == _rich(table)


def test_the_results_table_legend_and_skipped_as_rich_prints_them(monkeypatch):
    rows = [{"label": "hb/kth", "kind": "priority market", "completed": 54044, "mean_wait": 22860.0, "mean_bsd": 82.99,
             "ssj_share": 0.388, "utilization": 0.834, "preemptions": 12, "revenue": 8.98e10, "twft": 1.5e9,
             "mean_utility": -2.7e5, "cpu_seconds": 0.02},
            {"label": "ees(n_draws=20)", "kind": "queue auction", "completed": 281, "mean_wait": float("nan"),
             "mean_bsd": 3.6, "ssj_share": 0.165, "utilization": 0.655, "preemptions": 0, "revenue": 1e-9,
             "twft": 4.93e7, "mean_utility": 2.59e6, "cpu_seconds": 0.3}]
    title = ("synthetic(n=300, capacity=8, load=0.9, parallel=False, seed=0): 300 jobs on 8 processors, bimodal "
             "values, patience deadlines (seed 1), truthful bids")
    skipped = [("ps", "true values of at least 1 per CPU-second (ZIC bidders bid on {1, ..., v}): choose a value "
                "model that gives them, --values uniform; here 2 jobs have a value below 1 (row 234: 0.152)")]
    plain = io.StringIO()
    monkeypatch.setattr(sys, "stdout", plain)
    cli._print_table(rows, title, legend=True, skipped=skipped)
    drawn = io.StringIO()
    monkeypatch.setattr("marketsched.terminal.rich_console",
                        lambda *a, **k: Console(file=drawn, width=100, force_terminal=False))
    cli._print_table(rows, title, legend=True, skipped=skipped)
    assert plain.getvalue() == drawn.getvalue()
    assert " queue auction " in plain.getvalue() and " ees(n_draws=20) " in plain.getvalue()


def test_simulate_off_a_terminal_imports_neither_rich_nor_the_plugin_machinery():
    code = ("import sys; from marketsched.cli import main\n"
            "try:\n    main(['simulate', '--synthetic-jobs', '200', '--synthetic-nodes', '8', '--mechanism', 'easy'])\n"
            "except SystemExit:\n    pass\n"
            "print(sorted(m for m in sys.modules if m == 'rich' or m.startswith(('rich.', 'importlib.metadata'))))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert " easy " in out and out.splitlines()[-1] == "[]"
