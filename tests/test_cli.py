"""The command line on the built-in workload (no download)."""

import pytest
from click.testing import CliRunner

from marketsched.cli import main

BUILT_IN = ["hb", "nphb", "wspt", "wsept", "dlgm", "pdlgm", "ees", "relaxed-ees", "ps", "sh", "egg", "fcfs", "easy"]
SMALL = ["--synthetic-jobs", "300", "--synthetic-nodes", "8"]


def test_compare_default_shows_every_mechanism_that_fits_grouped_with_a_legend():
    r = CliRunner().invoke(main, ["compare", *SMALL])
    assert r.exit_code == 0, r.output
    for label in ("hb/kth", "hb/first", "nphb/kth", "wspt/first", "wsept/kth", "dlgm", "pdlgm", "ees", "relaxed-ees",
                  "egg", "fcfs", "easy"):
        assert f" {label} " in r.output, label
    for heading in ("priority", "compensation", "queue auction", "decentralized", "queue"):
        assert f" {heading} " in r.output
    # the built-in workload serves every mechanism: none is refused, and each row's form is named
    assert " ps " in r.output and " sh " in r.output and "not run" not in r.output
    assert "split (" in r.output and "whole machine (300 jobs): ees" in r.output
    assert "= every parallel job split into serial copies" in r.output  # what each form is
    assert "= every job holds the whole machine for its processor-seconds" in r.output
    legend = r.output[r.output.index("done     jobs that ran"):]
    for term in ("BSD", "SSJ", "TWFT", "negative", "sum to zero", "DLGM"):
        assert term in legend, term
    assert max(len(line) for line in r.output.splitlines() if not line.startswith(("note:", "built-in"))) <= 100


def test_the_default_compare_table_fits_100_columns(monkeypatch, capsys):
    """The cells as wide as the README's default run makes them (28,196 split jobs, a TWFT of
    1.15e10, a compiled kernel's 0.00075 CPU s, the priority markets' heading): every line of the
    table and its title fits 100 columns, off a terminal and drawn by rich on one."""
    import io

    from rich.console import Console

    from marketsched import cli

    wide = {"completed": 28196, "mean_wait": 27864.0, "mean_bsd": 102.9, "ssj_share": 0.754, "utilization": 0.874,
            "preemptions": 14709, "revenue": 4.03e9, "twft": 1.15e10, "mean_utility": -5.53e5}
    rows = [{"label": label, "kind": kind, **wide, "cpu_seconds": cpu}
            for label, kind, cpu in (("nphb/first", "priority market", 0.00075), ("pdlgm", "compensation market", 0.021),
                                     ("relaxed-ees", "queue auction", 0.44), ("sh", "share market", 9.96),
                                     ("egg", "decentralized auction", 1.4), ("easy", "queue", 0.00075))]
    title = ("built-in synthetic workload: 5,000 jobs on 64 processors, bimodal-1 values, patience deadlines "
             "(seed 1), truthful bids")
    cli._print_table(rows, title)
    plain = capsys.readouterr().out
    assert " <0.01 " in plain and " 9.96 " not in plain and " 10 " in plain and " 0.021 " in plain
    drawn = io.StringIO()
    monkeypatch.setattr("marketsched.terminal.rich_console",
                        lambda *a, **k: Console(file=drawn, width=100, force_terminal=False))
    cli._print_table(rows, title)
    assert drawn.getvalue() == plain  # rich did not have to narrow a column
    assert max(len(line) for line in plain.splitlines()) <= 100, plain


def test_the_serial_note_fits_100_columns():
    r = CliRunner().invoke(main, ["compare", "--synthetic-jobs", "100", "--synthetic-nodes", "2", "--mechanisms",
                                  "fcfs,easy"])
    assert r.exit_code == 0, r.output
    assert "note: every job is serial, so EASY has nothing to backfill" in r.output
    assert max(len(line) for line in r.output.splitlines()) <= 100, r.output


def test_compare_with_values_at_least_one_runs_all_thirteen():
    r = CliRunner().invoke(main, ["compare", *SMALL, "--values", "uniform", "--param", "ees.n_draws=20",
                                  "--pricings", "kth", "--no-legend"])
    assert r.exit_code == 0, r.output
    rows = [line.split()[0] for line in r.output.splitlines() if line.strip()]
    for name in BUILT_IN:
        assert any(row == name or row.startswith(name + "/") or row.startswith(name + "(") for row in rows), name
    assert "ees(n_draws=20)" in r.output and "not run" not in r.output and "hb/first" not in r.output


@pytest.mark.parametrize("name", BUILT_IN)
def test_simulate_runs_every_mechanism(name):
    r = CliRunner().invoke(main, ["simulate", *SMALL, "--values", "uniform", "--mechanism", name])
    assert r.exit_code == 0, r.output
    assert f" {name}" in r.output


def test_refusals_name_what_is_missing():
    runner = CliRunner()
    r = runner.invoke(main, ["simulate", *SMALL, "--mechanism", "ees", "--deadlines", "none"])
    assert r.exit_code != 0 and "--deadlines patience" in r.output
    r = runner.invoke(main, ["simulate", *SMALL, "--mechanism", "sh", "--values", "bimodal"])
    assert r.exit_code != 0 and "--values uniform" in r.output
    r = runner.invoke(main, ["simulate", *SMALL, "--mechanism", "hb", "--param", "pricing=second"])
    assert r.exit_code != 0 and "must be one of kth, first" in r.output
    r = runner.invoke(main, ["simulate", *SMALL, "--mechanism", "dlgm", "--pricing", "first"])
    assert r.exit_code != 0 and "dlgm has no pricing" in r.output
    r = runner.invoke(main, ["simulate", *SMALL, "--mechanism", "ees", "--param", "draws=3"])
    assert r.exit_code != 0 and "no parameter 'draws'" in r.output
    r = runner.invoke(main, ["compare", *SMALL, "--mechanisms", "dlgm,fcfs", "--param", "pricing=first"])
    assert r.exit_code != 0 and "no compared mechanism has a parameter 'pricing'" in r.output
    r = runner.invoke(main, ["compare", *SMALL, "--mechanisms", "ees", "--deadlines", "none"])
    assert r.exit_code != 0 and "no mechanism can run" in r.output
    r = runner.invoke(main, ["simulate", *SMALL, "--deadlines", "soon"])
    assert r.exit_code != 0 and "unknown deadlines model 'soon'" in r.output


def test_mechanisms_lists_all():
    runner = CliRunner()
    r = runner.invoke(main, ["mechanisms"])
    assert r.exit_code == 0, r.output
    for name in BUILT_IN:
        assert f" {name} " in r.output
    assert "Shudler et al. (2010)" in r.output and "Kang & Parkes (2007)" in r.output
    r = runner.invoke(main, ["mechanisms", "egg"])
    assert "deadlines" in r.output and "price_level" in r.output
    assert "live market: yes, on the grid exchange" in r.output  # Egg mode (docs/exchange.md)
    for rule in ("ps", "sh"):  # the share markets run live (tests/test_tycoon_live_share.py)
        r = runner.invoke(main, ["mechanisms", rule])
        assert "live market: yes" in r.output and f"market share --rule {rule}" in r.output.replace("\n      ", " ")
        assert "pool of N CPUs with --cpus N" in r.output.replace("\n      ", " ")  # tests/test_live_share_cpus.py
    import json

    r = runner.invoke(main, ["mechanisms", "--json"])
    listed = json.loads(r.output)
    assert [m["name"] for m in listed][: len(BUILT_IN)] == BUILT_IN
    # the table's closing line names exactly the mechanisms that run live, and none that does not
    live = [m["name"] for m in listed if not m["live"].startswith("no")]
    closing = " ".join(runner.invoke(main, ["mechanisms"]).output.split())
    assert f"live: {', '.join(live)}." in closing
    assert {"fcfs", "easy"}.isdisjoint(live) and {"hb", "dlgm", "ees", "ps", "egg"} <= set(live)
    assert listed[0]["params"][0] == {"name": "pricing", "type": "str", "default": "kth", "choices": ["kth", "first", "kth-uncapped"],
                                      "help": listed[0]["params"][0]["help"]}


def test_simulate_writes_per_job_csv(tmp_path):
    out = tmp_path / "jobs.csv"
    r = CliRunner().invoke(main, ["simulate", "--synthetic-jobs", "300", "--synthetic-nodes", "8",
                                  "--mechanism", "nphb", "--pricing", "first", "--out", str(out)])
    assert r.exit_code == 0, r.output
    import pandas as pd

    t = pd.read_csv(out)
    assert len(t) == 511 and (t["state"] == "completed").all()  # nphb runs the 300 jobs split: 511 serial ones
    assert t.groupby("job_id").size().sum() == 511 and t["job_id"].nunique() == 300
    assert {"payment", "utility", "bounded_slowdown", "true_value"} <= set(t.columns)


def test_clear_errors():
    runner = CliRunner()
    r = runner.invoke(main, ["compare", "--mechanisms", "hb,magic"])
    assert r.exit_code != 0 and "unknown mechanism 'magic'" in r.output
    r = runner.invoke(main, ["simulate", "--mechanism", "magic"])
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
    # hb runs the built-in's 50 parallel jobs split into serial ones, on the 4 processors
    assert "capacity 8 -> 4 processors" in r.stderr and "built-in synthetic workload (split): 85 jobs on 4 processors" in r.stdout
    assert "synthetic(" not in r.stdout  # the workload named, not its Python repr


def test_piped_run_prints_plain_progress_lines_on_stderr():
    r = CliRunner().invoke(main, ["compare", "--synthetic-jobs", "3000", "--synthetic-nodes", "8",
                                  "--mechanisms", "hb,fcfs", "--pricings", "kth"])
    assert r.exit_code == 0, r.output
    assert "hb/kth: 5,090/5,090 (100%) after" in r.stderr  # the 3,000 jobs split into serial ones
    assert "fcfs: 3,000/3,000 (100%) after" in r.stderr  # run labels: a mechanism without pricing has no "/-"
    assert "(100%)" not in r.stdout  # the table goes to stdout, progress to stderr


TRACE_SLICE = ["--jobs", "25", "--split", "--capacity", "0.3", "--values", "uniform"]


@pytest.mark.trace
@pytest.mark.parametrize("name", BUILT_IN)
def test_simulate_runs_every_mechanism_on_a_trace_slice(name, trace_path):
    path = str(trace_path("KTH-SP2-1996-2.1-cln"))
    r = CliRunner().invoke(main, ["simulate", "--trace", path, *TRACE_SLICE, "--mechanism", name,
                                  *(["--param", "n_draws=20"] if "ees" in name else [])])
    assert r.exit_code == 0, r.output
    assert f" {name}" in r.output


@pytest.mark.trace
def test_compare_runs_every_mechanism_on_a_trace_slice(trace_path):
    path = str(trace_path("KTH-SP2-1996-2.1-cln"))
    r = CliRunner().invoke(main, ["compare", "--trace", path, *TRACE_SLICE, "--param", "n_draws=20", "--no-legend"])
    assert r.exit_code == 0, r.output
    assert "not run" not in r.output
    rows = [line.split()[0] for line in r.output.splitlines() if line.strip()]
    for name in BUILT_IN:
        assert any(row == name or row.startswith((name + "/", name + "(")) for row in rows), name
    # without --split the serial-only mechanisms are not run, and the reason names --split
    r = CliRunner().invoke(main, ["compare", "--trace", path, "--jobs", "60", "--values", "uniform",
                                  "--mechanisms", "hb,dlgm,egg,fcfs,easy"])
    assert r.exit_code == 0, r.output
    assert "hb: serial jobs" in r.output and "--split" in r.output and " easy " in r.output
    assert r.output.count("hb: serial jobs") == 1  # once, not once per pricing


def test_help_lists_the_lazy_groups_by_their_own_help_without_importing_them():
    import importlib
    import subprocess
    import sys

    import click

    from marketsched.cli import _Group

    for name, (module, attr, kept) in _Group.lazy.items():
        real = getattr(importlib.import_module(module), attr)
        assert kept == real.get_short_help_str(10**6), name
        for limit in range(10, 200):  # however wide the terminal
            assert click.Command(name, help=kept).get_short_help_str(limit) == real.get_short_help_str(limit), name
    code = ("import sys; from marketsched.cli import main\ntry:\n    main(['--help'])\nexcept SystemExit:\n    pass\n"
            "print(sorted(m for m in sys.modules if m.startswith(tuple(v[0] for v in main.lazy.values()))))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert " market " in out and " exchange " in out and out.splitlines()[-1] == "[]"

    def help_text(imports: str) -> str:
        code = f"{imports}\nfrom marketsched.cli import main\ntry:\n    main(['--help'])\nexcept SystemExit:\n    pass"
        return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout

    loaded = "from marketsched.cli import main\nfor name in main.lazy:\n    main.get_command(None, name)"
    assert help_text("") == help_text(loaded)  # the kept help stands in for the groups' own


#: The console command (``marketsched``, :func:`marketsched.cli.run`) in a fresh interpreter, with an
#: exit handler of its own that must still run.
CONSOLE = """
import atexit, sys
from marketsched.cli import run
atexit.register(lambda: print("exit handler ran"))
sys.argv = ["marketsched", *sys.argv[1:]]
run()
print("not reached")
"""


@pytest.mark.parametrize("args, status", [
    (["simulate", "--mechanism", "fcfs", *SMALL, "--out", "{out}"], 0),  # ends without the interpreter's teardown
    (["simulate", "--mechanism", "nope"], 2),  # a usage error ends as usual
], ids=["simulate", "usage-error"])
def test_the_console_command_ends_with_its_output_status_and_exit_handlers(args, status, tmp_path):
    import subprocess
    import sys

    out = tmp_path / "jobs.csv"
    r = subprocess.run([sys.executable, "-c", CONSOLE, *[a.format(out=out) for a in args]], capture_output=True,
                       text=True)
    assert r.returncode == status, r.stderr
    assert r.stdout.rstrip().endswith("exit handler ran") and "not reached" not in r.stdout
    if status == 0:
        assert " fcfs " in r.stdout  # the table, flushed before the end
        assert len(out.read_text().splitlines()) == 1 + 300  # the per-job results, complete
    else:
        assert "unknown mechanism 'nope'" in r.stderr


#: The installed command's entry point in a fresh interpreter, printing whether the cycle collector
#: runs when the simulation starts (and how many start-up objects it left behind) or, for another
#: command, when it ends.
ENTRY = """
import gc, sys
from marketsched import cli
from marketsched.console import run
before = cli._run_all
def spy(*args, **kwargs):
    print("collector at the run:", gc.isenabled(), gc.get_freeze_count() > 1000, file=sys.stderr)
    return before(*args, **kwargs)
cli._run_all = spy
sys.argv = ["marketsched", *sys.argv[1:]]
try:
    run()
except SystemExit:
    print("collector at the end:", gc.isenabled(), file=sys.stderr)
"""


@pytest.mark.parametrize("args, expect", [
    (["simulate", "--mechanism", "easy", *SMALL], "collector at the run: True True"),
    (["mechanisms", "--json"], "collector at the end: True"),
], ids=["simulate", "other-command"])
def test_the_console_command_holds_the_cycle_collector_only_during_start_up(args, expect):
    import gc
    import subprocess
    import sys

    r = subprocess.run([sys.executable, "-c", ENTRY, *args], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert expect in r.stderr
    assert gc.isenabled()  # importing the command line (this module did) leaves the collector alone


@pytest.mark.parametrize("mechanism", ["dlgm", "pdlgm", "ees", "relaxed-ees"])
def test_market_serve_refuses_a_payment_per_second_for_a_market_with_its_own_payments(tmp_path, mechanism):
    r = CliRunner().invoke(main, ["market", "serve", "--data", str(tmp_path / "m"), "--port", "0",
                                  "--mechanism", mechanism, "--pricing", "first"])
    assert r.exit_code == 1 and "--pricing is the priority markets' payment per second" in r.output, r.output
    assert f"{mechanism} has its own payments" in r.output
    assert not (tmp_path / "m" / "market.db").exists()  # refused before the broker opened anything
