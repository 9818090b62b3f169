"""The command line on the built-in workload (no download)."""

import pytest
from click.testing import CliRunner

from marketsched.cli import main


def test_compare_default_prints_every_mechanism():
    r = CliRunner().invoke(main, ["compare", "--synthetic-jobs", "400", "--synthetic-nodes", "8"])
    assert r.exit_code == 0, r.output
    for name in ("hb", "nphb", "wspt", "wsept", "dlgm", "pdlgm", "fcfs", "easy"):
        assert f" {name} " in r.output


def test_simulate_writes_per_job_csv(tmp_path):
    out = tmp_path / "jobs.csv"
    r = CliRunner().invoke(main, ["simulate", "--synthetic-jobs", "300", "--synthetic-nodes", "8",
                                  "--mechanism", "nphb", "--pricing", "first", "--out", str(out)])
    assert r.exit_code == 0, r.output
    import pandas as pd

    t = pd.read_csv(out)
    assert len(t) == 300 and (t["state"] == "completed").all()
    assert {"payment", "utility", "bounded_slowdown", "true_value"} <= set(t.columns)


def test_clear_errors():
    runner = CliRunner()
    r = runner.invoke(main, ["compare", "--mechanisms", "hb,magic"])
    assert r.exit_code != 0 and "unknown mechanism 'magic'" in r.output
    r = runner.invoke(main, ["simulate", "--trace", "/nonexistent/file.swf"])
    assert r.exit_code != 0 and "Error" in r.output
    r = runner.invoke(main, ["simulate", "--out", "x.txt"])
    assert r.exit_code != 0 and ".parquet or .csv" in r.output
    # the market mechanisms need serial jobs: a parallel workload without --split says so
    r = runner.invoke(main, ["simulate", "--trace", "nothing-here-at-all"])
    assert r.exit_code != 0


def test_reproduce_without_name_says_how_to_run_one():
    from marketsched import experiments

    r = CliRunner().invoke(main, ["reproduce"])
    assert r.exit_code == 0, r.output
    lines = r.output.splitlines()
    assert lines[0].startswith("Usage: marketsched reproduce NAME [--quick]")
    for name, module in experiments.available().items():
        row = next(line for line in lines if line.startswith(name + " "))
        assert module.TITLE in row and getattr(module, "QUICK_TIME", "?") in row


def _swf(path, lines):
    path.write_text("; MaxProcs: 4\n" + "".join(line + "\n" for line in lines))
    return str(path)


def test_trace_without_usable_jobs_is_an_error_naming_the_file(tmp_path):
    runner = CliRunner()
    empty = _swf(tmp_path / "empty.swf", [])
    r = runner.invoke(main, ["simulate", "--trace", empty])
    assert r.exit_code == 1 and empty in r.output and "no job lines" in r.output
    assert "0 jobs on" not in r.output
    bad = _swf(tmp_path / "bad.swf", ["1 0 0 -1 1 -1 -1 1 -1 -1 0 1 1 -1 -1 -1 -1 -1",
                                      "2 5 0 10 0 -1 -1 -1 -1 -1 1 1 1 -1 -1 -1 -1 -1"])
    r = runner.invoke(main, ["compare", "--trace", bad])
    assert r.exit_code == 1 and bad in r.output and "all 2 job lines were rejected" in r.output
    assert "1 cancelled" in r.output and "1 processors <= 0" in r.output


@pytest.mark.parametrize("capacity", ["3", "1.5", "0", "-0.5"])
def test_capacity_outside_zero_one_is_rejected(capacity):
    r = CliRunner().invoke(main, ["simulate", "--synthetic-jobs", "50", "--capacity", capacity])
    assert r.exit_code == 2 and "--capacity" in r.output and "0<x<=1" in r.output


def test_capacity_fraction_is_applied():
    r = CliRunner().invoke(main, ["simulate", "--synthetic-jobs", "50", "--synthetic-nodes", "8", "--capacity", "0.5"])
    assert r.exit_code == 0, r.output
    assert "capacity 8 -> 4 processors" in r.stderr and "50 jobs on 4 processors" in r.stdout


def test_piped_run_prints_plain_progress_lines_on_stderr():
    r = CliRunner().invoke(main, ["compare", "--synthetic-jobs", "3000", "--synthetic-nodes", "8",
                                  "--mechanisms", "hb,fcfs", "--pricings", "kth"])
    assert r.exit_code == 0, r.output
    assert "hb/kth: 3,000/3,000 (100%) after" in r.stderr
    assert "fcfs/-: 3,000/3,000 (100%) after" in r.stderr
    assert "(100%)" not in r.stdout  # the table goes to stdout, progress to stderr


def test_reproduce_rejects_executor_for_experiments_without_runner():
    r = CliRunner().invoke(main, ["reproduce", "feldman2005", "--executor", "serial", "--quick"])
    assert r.exit_code != 0 and "takes no --executor" in r.output
