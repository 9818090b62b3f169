"""Plugins that cannot break a run: a plugin that raises, one that starts no job, entry points
that name no mechanism, and the engine path when the compiled kernels are missing."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from click.testing import CliRunner

from marketsched.cli import main
from test_plugin import build_wheel, installed

BAD_PLUGIN = "marketsched-bad-plugins"

BAD_MODULE = textwrap.dedent('''
    from marketsched.mechanisms.registry import Mechanism


    class Boom:
        def __init__(self, jobs):
            self.n = 0

        def bind(self, sim):
            self.sim, self.queue = sim, []

        def step(self, t, arrived, completed):
            self.n += len(arrived)
            if self.n > 10:
                raise RuntimeError("boom at the eleventh arrival")
            self.queue += list(arrived)
            while self.sim.free and self.queue:
                self.sim.start(self.queue.pop(0))


    class Idle:
        def __init__(self, jobs):
            pass

        def bind(self, sim):
            pass

        def step(self, t, arrived, completed):
            pass


    BOOM = Mechanism("boom", "Raises", "queue", "a test plugin", Boom, needs=("bids",), market=True)
    IDLE = Mechanism("idle", "Starts nothing", "queue", "a test plugin", Idle, market=False)
''')

ENTRY_POINTS = textwrap.dedent('''
    [marketsched.mechanisms]
    boom = ms_bad:BOOM
    idle = ms_bad:IDLE
    a-class = ms_bad:Boom
    missing = ms_not_there:MECHANISM
''')


@pytest.fixture(scope="module")
def bad_plugins(tmp_path_factory):
    wheel = build_wheel(tmp_path_factory.mktemp("wheel"), BAD_PLUGIN, {"ms_bad.py": BAD_MODULE}, ENTRY_POINTS, "0.2")
    with installed(wheel, BAD_PLUGIN):
        yield


def _cli(*args):
    exe = Path(sys.executable).with_name("marketsched")
    return subprocess.run([str(exe), *args], capture_output=True, text=True, timeout=600)


SMALL = ("--synthetic-jobs", "60", "--synthetic-nodes", "4")


def test_a_plugin_that_raises_is_one_line_naming_it(bad_plugins):
    r = _cli("simulate", "--mechanism", "boom", *SMALL)
    assert r.returncode == 1
    assert (f"mechanism 'boom' from the plugin {BAD_PLUGIN} 0.2 failed: RuntimeError: boom at the eleventh arrival"
            in r.stderr)
    assert "Traceback" not in r.stderr
    r = _cli("--debug", "simulate", "--mechanism", "boom", *SMALL)
    assert r.returncode == 1 and "Traceback" in r.stderr and "boom at the eleventh arrival" in r.stderr


def test_audit_of_a_plugin_that_raises_is_one_line_naming_it(bad_plugins):
    r = _cli("audit", "--mechanism", "boom", "--per-band", "1", *SMALL)
    assert r.returncode == 1, r.stderr
    assert f"mechanism 'boom' from the plugin {BAD_PLUGIN} 0.2 failed: RuntimeError" in r.stderr
    assert "Traceback" not in r.stderr


def test_load_problems_are_one_line_warnings_and_listed_by_check(bad_plugins):
    r = _cli("mechanisms")
    assert r.returncode == 0
    warnings = [line for line in r.stderr.splitlines() if line.startswith("warning: mechanism plugin")]
    assert len(warnings) == 2, r.stderr
    assert "UserWarning" not in r.stderr and "warnings.warn" not in r.stderr
    assert any("'a-class'" in w and "not a mechanism: it names the class Boom" in w for w in warnings)
    assert "boom *" in r.stdout and "idle *" in r.stdout  # the good entry points still load
    r = _cli("mechanisms", "--check")
    assert r.returncode == 1
    assert "FAILED  a-class (ms_bad:Boom, from marketsched-bad-plugins): not a mechanism" in r.stdout
    assert "FAILED  missing (ms_not_there:MECHANISM, from marketsched-bad-plugins): ModuleNotFoundError" in r.stdout
    assert f"ok      boom: from {BAD_PLUGIN} 0.2" in r.stdout
    assert "warning:" not in r.stderr  # listed once, not warned about as well


def test_a_run_that_starts_no_job_warns(bad_plugins):
    r = _cli("simulate", "--mechanism", "idle", *SMALL)
    assert r.returncode == 0
    assert "warning: idle started none of the 60 jobs (60 killed)" in r.stderr


def test_a_run_that_starts_jobs_does_not_warn():
    r = CliRunner().invoke(main, ["simulate", "--mechanism", "fcfs", *SMALL])
    assert r.exit_code == 0 and "started none" not in r.output


KERNELS = ("marketsched.engine._priority", "marketsched.engine._backfilling",
           "marketsched.mechanisms.online._dlgm_kernel")


def test_engine_path_in_the_summary_and_the_notice_when_kernels_are_missing(monkeypatch, tmp_path):
    from marketsched.results import missing_kernels, read

    monkeypatch.delenv("MARKETSCHED_ENGINE", raising=False)  # auto, whatever the suite runs under

    if missing_kernels():
        pytest.skip("the compiled kernels are not built here")
    r = CliRunner().invoke(main, ["simulate", "--mechanism", "hb", *SMALL, "--out", str(tmp_path / "c.parquet")])
    assert r.exit_code == 0 and "engine: compiled" in r.output and "note:" not in r.output
    assert read(tmp_path / "c.parquet")[1]["runs"][0]["engine"] == "compiled"
    for k in KERNELS:
        monkeypatch.setitem(sys.modules, k, None)  # as if the install had no C compiler
    r = CliRunner().invoke(main, ["simulate", "--mechanism", "hb", *SMALL, "--out", str(tmp_path / "p.parquet")])
    assert r.exit_code == 0, r.output
    notes = [line for line in r.output.splitlines() if line.startswith("note: the compiled kernels are not built")]
    assert len(notes) == 1 and "engine: python" in r.output
    _, meta = read(tmp_path / "p.parquet")
    assert meta["engine"] == "python" and meta["runs"][0]["engine"] == "python"
    monkeypatch.setenv("MARKETSCHED_ENGINE", "compiled")
    r = CliRunner().invoke(main, ["simulate", "--mechanism", "hb", *SMALL])
    assert r.exit_code == 1 and "MARKETSCHED_ENGINE=compiled but the compiled kernels" in r.output
    assert r.exception is None or isinstance(r.exception, SystemExit)
    monkeypatch.setenv("MARKETSCHED_ENGINE", "python")
    r = CliRunner().invoke(main, ["simulate", "--mechanism", "hb", *SMALL])
    assert r.exit_code == 0 and "note:" not in r.output and "engine: python" in r.output


def test_a_result_of_an_uninstalled_plugin_says_which_package_to_install(tmp_path):
    from grid_files import SWEEP_PLUGIN, sweep_wheel

    out = tmp_path / "r.parquet"
    with installed(sweep_wheel(tmp_path), SWEEP_PLUGIN):
        r = _cli("simulate", "--mechanism", "weighted-bid", "--param", "alpha=2", *SMALL, "--out", str(out))
        assert r.returncode == 0, r.stderr
        r = _cli("rerun", str(out))
        assert r.returncode == 0 and "r.parquet: identical" in r.stdout
    r = _cli("rerun", str(out))
    assert r.returncode == 2
    assert (f"mechanism 'weighted-bid' came from the plugin {SWEEP_PLUGIN} 0.3, which is not installed here: "
            f"pip install '{SWEEP_PLUGIN}==0.3'") in r.stderr
