"""benchmarks/bench_engine.py's command line: which cases run, in which order, and the 10%/100% line."""

import importlib.util
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parent.parent / "benchmarks"


@pytest.fixture
def bench(monkeypatch):
    """The script loaded as a module, its cases 'run' by a stand-in that records them (no process)."""
    monkeypatch.syspath_prepend(str(BENCH))  # it imports harness from its own folder
    spec = importlib.util.spec_from_file_location("bench_engine", BENCH / "bench_engine.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    ran: list[list[str]] = []
    per_job = {"hb-lpc-1.0": [1.0, 3.0, 2.0], "hb-lpc-0.1": [2.6, 2.4, 9.0]}  # CPU s per job, run by run

    def fake_run_cases(names):
        ran.append(list(names))
        return [{"case": n, "jobs": 1000, "cpu_s": 1000 * per_job.get(n, [1.0]).pop(0) if n in per_job else 1.0}
                for n in names]
    monkeypatch.setattr(module, "run_cases", fake_run_cases)
    module.ran = ran
    yield module
    sys.modules.pop("harness", None)


def test_cases_named_on_the_command_line_give_the_ratio_from_medians(bench, capsys):
    bench.main(["hb-lpc-1.0", "hb-lpc-0.1", "hb-lpc-1.0", "hb-lpc-0.1", "hb-lpc-1.0", "hb-lpc-0.1"])
    assert bench.ran == [["hb-lpc-1.0", "hb-lpc-0.1"] * 3]  # one table, alternated as given
    out = capsys.readouterr().out
    assert "10% of the nodes against 100%: 1.30x" in out  # median 2.6 / median 2.0
    assert "medians of 3 and 3 runs" in out and "load average" in out


def test_the_ratio_line_needs_both_cases(bench, capsys):
    bench.main(["hb-lpc-0.1", "easy-sdsc"])
    assert "against 100%" not in capsys.readouterr().out
    bench.main(["hb-lpc-1.0", "hb-lpc-0.1"])
    assert "one run each" in capsys.readouterr().out


def test_groups_and_named_cases_keep_their_order(bench, capsys):
    bench.main(["easy-sdsc", "main", "hb-lpc-0.1"])
    assert bench.ran == [["easy-sdsc"], bench.GROUPS["main"], ["hb-lpc-0.1"]]
