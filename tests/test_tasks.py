"""The task layer every reproduction runs on: resume, failures retried, results sorted by key."""

from __future__ import annotations

import json

import pytest

from marketsched.experiments import tasks as T
from marketsched.experiments.tasks import Task, TasksFailed, run_tasks


def square(x: int) -> dict:
    return {"x": x, "y": x * x}


def fails_while(x: int, marker: str) -> int:
    from pathlib import Path

    if Path(marker).exists():
        raise RuntimeError(f"task {x}: the marker file is there")
    return -x


def declared(n: int = 6) -> list[Task]:
    # declared in an order other than the key order
    return [Task(("square", x), square, (x,)) for x in reversed(range(n))]


@pytest.mark.parametrize("executor", ["serial", "process"])
def test_results_sorted_by_key_whatever_the_order_of_completion(tmp_path, executor):
    run = run_tasks(declared(), tmp_path, executor=executor, workers=2, progress=False)
    assert list(run.results) == [("square", x) for x in range(6)]
    assert run.values() == [{"x": x, "y": x * x} for x in range(6)]
    assert (run.ran, run.skipped) == (6, 0)


def test_interrupted_run_resumes_with_the_remaining_tasks_only(tmp_path, monkeypatch):
    calls: list = []
    real = T._call

    def stop_after_three(fn, args):
        if len(calls) == 3:
            raise KeyboardInterrupt  # the run is stopped (as by Ctrl-C) after three tasks
        calls.append(args)
        return real(fn, args)

    monkeypatch.setattr(T, "_call", stop_after_three)
    with pytest.raises(KeyboardInterrupt):
        run_tasks(declared(), tmp_path / "a", executor="serial", progress=False)
    assert len(list((tmp_path / "a").glob("*.pkl"))) == 3
    monkeypatch.setattr(T, "_call", real)
    resumed = run_tasks(declared(), tmp_path / "a", executor="serial", progress=False)
    assert (resumed.ran, resumed.skipped) == (3, 3)
    fresh = run_tasks(declared(), tmp_path / "b", executor="serial", progress=False)
    assert resumed.results == fresh.results
    again = run_tasks(declared(), tmp_path / "a", executor="serial", progress=False)
    assert (again.ran, again.skipped) == (0, 6)


def test_a_run_on_processes_stopped_midway_resumes(tmp_path, monkeypatch):
    stored: list = []
    real = T.atomic_write

    def stop_after_two(path, write):
        if len(stored) == 2:
            raise KeyboardInterrupt  # stopped in the parent while the workers still have tasks
        stored.append(path)
        return real(path, write)

    monkeypatch.setattr(T, "atomic_write", stop_after_two)
    with pytest.raises(KeyboardInterrupt):
        run_tasks(declared(8), tmp_path, executor="process", workers=2, progress=False)
    monkeypatch.setattr(T, "atomic_write", real)
    assert len(list(tmp_path.glob("*.pkl"))) == 2
    resumed = run_tasks(declared(8), tmp_path, executor="process", workers=2, progress=False)
    assert (resumed.ran, resumed.skipped) == (6, 2)
    assert resumed.values() == [{"x": x, "y": x * x} for x in range(8)]


def test_failures_are_recorded_with_traceback_and_retried_on_the_next_run(tmp_path):
    marker = tmp_path / "fail"
    marker.touch()
    tasks = declared(3) + [Task(("flaky", 1), fails_while, (1, str(marker)))]
    with pytest.raises(TasksFailed, match=r"1 of 4 tasks failed.*\('flaky', 1\): RuntimeError: task 1"):
        run_tasks(tasks, tmp_path / "store", executor="process", workers=2, progress=False)
    failures = json.loads((tmp_path / "store" / "failures.json").read_text())
    assert [f["key"] for f in failures] == [["flaky", 1]]
    assert "the marker file is there" in failures[0]["traceback"]
    marker.unlink()
    run = run_tasks(tasks, tmp_path / "store", executor="process", workers=2, progress=False)
    assert (run.ran, run.skipped) == (1, 3)
    assert run.results[("flaky", 1)] == -1
    assert not (tmp_path / "store" / "failures.json").exists()


def test_a_stored_result_is_found_only_by_its_own_function_and_key(tmp_path):
    run_tasks(declared(2), tmp_path, executor="serial", progress=False)
    other = [Task(("square", 0), fails_while, (0, str(tmp_path / "absent")))]
    assert run_tasks(other, tmp_path, executor="serial", progress=False).results == {("square", 0): 0}


def test_bad_declarations_are_refused_naming_the_problem(tmp_path):
    with pytest.raises(ValueError, match="tuple of text, numbers"):
        Task(("x", [1, 2]), square, (1,))
    with pytest.raises(ValueError, match="two tasks have the key"):
        run_tasks(declared(2) + declared(1), tmp_path, progress=False)
    with pytest.raises(ValueError, match="unknown executor 'dask'"):
        run_tasks(declared(1), tmp_path, executor="dask", progress=False)
