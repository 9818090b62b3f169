"""What the remote executors share, checked without a cluster: the version check, exceptions
with their worker's traceback, chunks, the failure count on the progress bar, the options."""

from __future__ import annotations

import pickle

import pytest
from click.testing import CliRunner

from executor_grids import small_grid, write_mini_trace
from marketsched.cli import main
from marketsched.experiments import tasks as T
from marketsched.experiments.runner import run_grid
from marketsched.experiments.tasks import Ray, Slurm, error_text, execute, executor_spec, run_chunk


def half(x: int) -> float:
    if x < 0:
        raise ValueError(f"x = {x} is negative")
    return x / 2


def test_a_worker_on_another_marketsched_version_refuses_to_run():
    with pytest.raises(RuntimeError, match=r"the worker runs marketsched .*, the caller 0\.0\.0-elsewhere"):
        run_chunk("0.0.0-elsewhere", [(half, (2,))])


def test_a_workers_exception_comes_back_with_its_traceback():
    ok, bad = run_chunk(T._version(), [(half, (4,)), (half, (-1,))])
    assert ok == 2.0
    back = pickle.loads(pickle.dumps(bad))  # as from a Slurm result file or Ray's object store
    error, tb = error_text(back)
    assert error == "ValueError: x = -1 is negative" and "in half" in tb


@pytest.mark.parametrize("n,slots,most", [(1, 8, None), (10, 1, None), (1000, 2, None), (1000, 400, 1000), (7, 3, 2)])
def test_chunks_cover_the_jobs_in_order(n, slots, most):
    chunks = T._chunks(n, slots, most)
    assert [i for c in chunks for i in c] == list(range(n))
    assert len(chunks) <= min(n, 4 * slots, most or n)


def test_the_progress_bar_counts_the_failed_cells(tmp_path, capsys):
    grid = small_grid("synthetic:300:16", str(tmp_path / "missing.swf"))
    res = run_grid(grid, tmp_path / "out", executor="serial", max_batch=4, description="cells")
    assert res.ran == 16 and len(res.failures) == 16
    err = capsys.readouterr().err
    assert "cells (16 failed): 32/32" in err  # plain lines off a terminal; the last one at the end
    write_mini_trace(tmp_path / "missing.swf")
    again = run_grid(grid, tmp_path / "out", executor="serial", max_batch=4, description="cells")
    assert again.ok and "failed" not in capsys.readouterr().err


def test_execute_counts_a_raised_job_as_all_its_weight():
    seen = []
    execute([(half, (1,)), (half, (-3,))], lambda i, p: seen.append((i, isinstance(p, BaseException))), "serial")
    assert seen == [(0, False), (1, True)]


def test_executor_names_and_options_are_checked():
    assert executor_spec("ray") == Ray() and executor_spec("slurm") == Slurm() and executor_spec("serial") == "serial"
    with pytest.raises(ValueError, match="unknown executor 'dask'"):
        executor_spec("dask")
    with pytest.raises(ValueError, match="cpus = 0"):
        Slurm(cpus=0)
    with pytest.raises(ValueError, match="needs a folder"):
        execute([(half, (1,))], lambda i, p: None, Slurm())


@pytest.mark.parametrize("args,flag", [(["--address", "auto"], "--address"), (["--executor", "ray", "--time", "5"], "--time"),
                                       (["--executor", "process", "--cpus", "2"], "--cpus")])
def test_cluster_options_belong_to_their_executor(tmp_path, args, flag):
    r = CliRunner().invoke(main, ["reproduce", "feldman2005", "--out", str(tmp_path), *args])
    assert r.exit_code == 2 and f"{flag} goes with --executor" in r.output


def test_a_report_whose_cells_all_failed_lists_them(tmp_path):
    import json

    from marketsched.experiments import shudler2010 as S

    results = tmp_path / "results"
    results.mkdir()
    (results / "plan.json").write_text(json.dumps({"quick": True, "plan": [[S.SETTINGS[0].tag, [1]]]}))
    failure = {"cell": {"trace": "LPC-EGEE-2004-1.2-cln"}, "label": "LPC-EGEE-2004-1.2-cln cap=0.75 hb/kth ft seed=1",
               "error": "TraceNotFoundError: not in the workers' traces folder", "traceback": ""}
    (results / "failures.json").write_text(json.dumps([failure]))
    text = S.write_report(results, tmp_path).read_text()
    assert "## Failed cells" in text and f"| {failure['label']} | {failure['error']} |" in text
