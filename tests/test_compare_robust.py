"""``compare`` keeps what it has: a mechanism that raises becomes a row naming the failure while
the others print (exit status 1); each finished mechanism's rows are in ``--out`` before the
next one runs; Ctrl-C prints and stores the finished rows (exit status 130). The interruption is
a real SIGINT, sent by a mechanism to its own process when it runs (no timing involved)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from compare_plugins import register_misbehaving
from marketsched.cli import main
from marketsched.mechanisms.registry import unregister
from marketsched.results import read

SMALL = ["--synthetic-jobs", "200", "--synthetic-nodes", "8", "--no-legend"]
HERE = Path(__file__).resolve().parent


def split_count() -> int:
    """How many jobs HB runs on the SMALL built-in workload: its serial form (the jobs split)."""
    from marketsched.scenario import Scenario, in_form

    return len(in_form(Scenario.builtin(200, 8, 1).build(), "hb")[0].workload)


@pytest.fixture
def misbehaving():
    register_misbehaving()
    yield
    unregister("broken")
    unregister("stopper")


def test_a_failing_mechanism_is_a_row_naming_the_failure_and_the_others_print(misbehaving, tmp_path):
    out = tmp_path / "runs.parquet"
    r = CliRunner().invoke(main, ["compare", *SMALL, "--mechanisms", "fcfs,broken,hb", "--pricings", "kth",
                                  "--out", str(out)])
    assert r.exit_code == 1, r.output
    rows = {line.split()[0]: line.split()[1] for line in r.output.splitlines()
            if line.strip() and line.split()[0] in ("fcfs", "broken", "hb/kth")}
    assert rows == {"fcfs": "200", "broken": "failed", "hb/kth": str(split_count())}
    assert "broken: RuntimeError: the plugin's own bug at t=" in r.output
    assert "Error: 1 of 3 runs failed: broken (RuntimeError: the plugin's own bug" in r.output
    assert "Traceback" not in r.output
    table, meta = read(out)
    assert sorted(table["run"].unique()) == ["fcfs", "hb/kth"]
    assert [m["label"] for m in meta["runs"]] == ["fcfs", "hb/kth"]


def test_ctrl_c_prints_and_stores_the_finished_runs(tmp_path):
    out, seen = tmp_path / "runs.parquet", tmp_path / "seen"
    code = (f"import sys; sys.path.insert(0, {str(HERE)!r}); from compare_plugins import register_misbehaving; "
            f"register_misbehaving({str(out)!r}); from marketsched.cli import main; "
            f"main(['compare', *{SMALL!r}, '--mechanisms', 'fcfs,hb,stopper,easy', '--pricings', 'kth', "
            f"'--out', {str(out)!r}, '--events', {str(tmp_path / 'events.csv')!r}])")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600,
                       env={**os.environ, "COMPARE_SEEN": str(seen)})
    assert p.returncode == 130, p.stdout + p.stderr
    assert seen.read_text() == "fcfs,hb/kth"  # stored as each finished, before the next one ran
    labels = [line.split()[0] for line in p.stdout.splitlines() if line.strip()]
    assert "fcfs" in labels and "hb/kth" in labels and "easy" not in labels
    assert "interrupted (Ctrl-C): not finished: stopper, easy" in p.stdout
    assert "Traceback" not in p.stderr and "Aborted" not in p.stderr
    table, meta = read(out)
    assert table.groupby("run").size().to_dict() == {"fcfs": 200, "hb/kth": split_count()}
    events, _ = read(tmp_path / "events.csv")
    assert sorted(events["run"].unique()) == ["fcfs", "hb/kth"]
    assert not list(tmp_path.glob(".*partial*"))  # no file left half-written beside them


def test_the_title_names_the_workload_and_each_money_column_its_unit():
    r = CliRunner().invoke(main, ["compare", *SMALL, "--mechanisms", "hb", "--pricings", "kth"])
    assert r.exit_code == 0, r.output
    lines = r.output.splitlines()
    title = next(i for i, line in enumerate(lines) if line.startswith("built-in synthetic workload: 200 jobs on 8"))
    assert "synthetic(" not in r.output and "=" not in lines[title]  # no Python repr of the workload
    header = next(line for line in lines if " mechanism " in line)
    for head in ("revenue $", "TWFT $", "utility $", "wait h", "CPU s", "SSJ%", "util%"):
        assert head in header, head
