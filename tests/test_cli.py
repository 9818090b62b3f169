"""The command line on the built-in workload (no download)."""

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


def test_reproduce_lists_experiments():
    r = CliRunner().invoke(main, ["reproduce"])
    assert r.exit_code == 0


def test_reproduce_rejects_executor_for_experiments_without_runner():
    r = CliRunner().invoke(main, ["reproduce", "feldman2005", "--executor", "serial", "--quick"])
    assert r.exit_code != 0 and "takes no --executor" in r.output
