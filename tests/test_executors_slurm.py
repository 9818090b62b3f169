"""The grid runner as a Slurm job array (``executor="slurm"``) on the one-host CI cluster:
the same table as the local executor, cell by cell; failed cells named, the rest kept, and a
rerun that runs only the failed ones."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from executor_grids import small_grid, write_mini_trace
from marketsched.experiments.runner import CELL_COLUMNS, load_results, run_grid
from marketsched.experiments.tasks import Slurm, Task, TasksFailed, run_tasks

pytestmark = pytest.mark.usefixtures("cluster")


def test_a_grid_as_a_slurm_array_gives_the_local_table(tmp_path):
    grid = small_grid()
    local = run_grid(grid, tmp_path / "local", executor="process", workers=2, progress=False)
    slurm = run_grid(grid, tmp_path / "slurm", executor=Slurm(poll=0.3), max_batch=4, progress=False)
    assert local.ok and slurm.ok, slurm.failures[:1]
    assert slurm.ran == len(grid.cells()) == 16
    pd.testing.assert_frame_equal(load_results(tmp_path / "local"), load_results(tmp_path / "slurm"))
    assert not list((tmp_path / "slurm").glob("slurm-*"))  # the array's files are gone after a clean run


def test_failed_cells_are_named_the_rest_stored_and_a_rerun_runs_only_them(tmp_path):
    trace = tmp_path / "traces" / "mini.swf"  # not there yet: its cells fail
    grid = small_grid("synthetic:300:16", str(trace))
    first = run_grid(grid, tmp_path / "out", executor=Slurm(poll=0.3), workers=3, max_batch=4, progress=False)
    failed = {f["label"] for f in first.failures}
    assert first.ran == 16 and len(failed) == 16
    assert all(f["cell"]["trace"] == str(trace) and "TraceNotFoundError" in f["error"] for f in first.failures)
    assert {f["label"] for f in json.loads((tmp_path / "out" / "failures.json").read_text())} == failed
    assert set(load_results(tmp_path / "out")["trace"]) == {"synthetic:300:16"}

    write_mini_trace(trace)  # the fix
    again = run_grid(grid, tmp_path / "out", executor=Slurm(poll=0.3), max_batch=4, progress=False)
    assert (again.skipped, again.ran, again.failures) == (16, 16, [])
    assert not (tmp_path / "out" / "failures.json").exists()
    local = run_grid(grid, tmp_path / "local", executor="serial", progress=False)
    assert local.ok
    table = load_results(tmp_path / "out")
    assert len(table[list(CELL_COLUMNS)].drop_duplicates()) == 32
    pd.testing.assert_frame_equal(table, load_results(tmp_path / "local"))


def test_tasks_of_a_reproduction_on_slurm_name_their_failures(tmp_path):
    tasks = [Task(("square", x), square_or_fail, (x,)) for x in range(6)]
    with pytest.raises(TasksFailed, match=r"(?s)1 of 6 .*\('square', 4\): ValueError: 4 is refused"):
        run_tasks(tasks, tmp_path, executor=Slurm(poll=0.3), progress=False)
    failure = json.loads((tmp_path / "failures.json").read_text())[0]
    assert "square_or_fail" in failure["traceback"]  # the worker's traceback travels back
    done = run_tasks(tasks[:4] + tasks[5:], tmp_path, executor="serial", progress=False)
    assert (done.skipped, done.ran) == (5, 0)


def square_or_fail(x: int) -> int:
    if x == 4:
        raise ValueError("4 is refused")
    return x * x
