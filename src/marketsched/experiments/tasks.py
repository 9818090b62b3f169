"""Tasks of an experiment: declared, run once each, stored as they finish, resumed after a stop.

Every reproduction (``marketsched reproduce NAME``) declares its work as a list of
:class:`Task`: a stable ``key`` (a tuple of the task's parameters: text, numbers, booleans or
``None``; it names the task and orders the results), a top-level function ``fn`` and its
``args`` (both picklable: the ``"process"`` and ``"ray"`` executors send them to other
processes). :func:`run_tasks` then

1. drops the tasks whose result is already stored (**resume**: an interrupted run, or a run
   whose tasks partly failed, is continued by running it again on the same folder);
2. runs the rest on local processes (``executor="process"``, the default, ``workers`` of them:
   :func:`marketsched.experiments.processes.process_pool`), in this process (``"serial"``) or on
   Ray (``"ray"``; optional, ``pip install ray``), in the declared order (declare long tasks
   first), with a progress bar;
3. stores each result as it arrives, one pickle file per task in the store folder, written to
   a temporary name and then renamed (a crash never leaves half a file);
4. records a task that raises in ``failures.json`` (its key, error and traceback) without
   stopping the others; failed tasks are not stored, so the next run retries them, and
   :func:`run_tasks` raises :class:`TasksFailed` once the others are done;
5. returns the results of every declared task sorted by key, whatever the completion order,
   executor or worker count (**determinism**).

The grid runner (:func:`marketsched.experiments.runner.run_grid`) runs its batches of cells
with the same executors (:func:`execute`); it stores its rows as Parquet part files instead.
The store holds pickles of the experiment's own results: read it only from folders you wrote.
"""

from __future__ import annotations

import hashlib
import json
import os
import pickle
import time
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

EXECUTORS = ("process", "serial", "ray")
KEY_TYPES = (str, int, float, bool, type(None))


@dataclass(frozen=True)
class Task:
    """One unit of an experiment: ``fn(*args)``, named by ``key`` (a tuple of its parameters)."""

    key: tuple
    fn: Callable
    args: tuple = ()

    def __post_init__(self):
        if not isinstance(self.key, tuple) or not all(isinstance(k, KEY_TYPES) for k in self.key):
            raise ValueError(f"Task key {self.key!r}: must be a tuple of text, numbers, booleans or None")
        if not callable(self.fn):
            raise ValueError(f"Task {self.key!r}: fn {self.fn!r} is not callable")

    def name(self) -> str:
        """The task's file name in the store: a digest of its function and key."""
        text = json.dumps([f"{self.fn.__module__}.{self.fn.__qualname__}", list(self.key)])
        return hashlib.sha1(text.encode()).hexdigest()[:20]


class TasksFailed(RuntimeError):
    """Some tasks raised; the others are stored and a rerun retries the failed ones."""


@dataclass
class TaskRun:
    """What one :func:`run_tasks` call did; ``results``: key -> result, sorted by key."""

    store: Path
    results: dict = field(default_factory=dict)
    failures: list = field(default_factory=list)
    ran: int = 0  # finished in this call
    skipped: int = 0  # already stored (resume)
    seconds: float = 0.0  # wall time of the call

    def values(self) -> list:
        return list(self.results.values())


def atomic_write(path: Path, write: Callable[[Path], Any]) -> Path:
    """``write(tmp)`` then rename ``tmp`` to ``path``: readers never see half a file."""
    tmp = path.with_name(f".tmp-{path.name}-{os.getpid()}")
    write(tmp)
    os.replace(tmp, path)
    return path


def write_failures(out_dir: Path, failures: list) -> None:
    """``out_dir/failures.json`` with the failures of the last run (removed when there are none)."""
    path = Path(out_dir) / "failures.json"
    if failures:
        path.write_text(json.dumps(failures, indent=1))
    elif path.exists():
        path.unlink()


def error_text(exc: BaseException) -> tuple[str, str]:
    """``(error, traceback)`` of an exception (a worker's traceback is chained in as its cause)."""
    return f"{type(exc).__name__}: {exc}", "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))


def _sort_key(key: tuple) -> tuple:
    # None sorts first and numbers before text at the same position: declared keys of mixed
    # types at one position still sort, the same way every time
    return tuple((0, 0) if k is None else ((1, k) if isinstance(k, (int, float)) else (2, str(k))) for k in key)


def load_stored(store, tasks: Sequence[Task]) -> dict:
    """The stored results of ``tasks`` in ``store`` (key -> result), those found only."""
    out = {}
    for t in tasks:
        path = Path(store) / f"{t.name()}.pkl"
        if path.is_file():
            with path.open("rb") as fh:
                key, value = pickle.load(fh)
            if key == t.key:
                out[t.key] = value
    return out


def run_tasks(tasks: Sequence[Task], store, executor: str = "process", workers: int | None = None,
              progress: bool = True, description: str = "tasks") -> TaskRun:
    """Run every task of ``tasks`` whose result is not yet in the folder ``store``; see the module
    docstring. Returns a :class:`TaskRun` with the results of all of them sorted by key; raises
    :class:`TasksFailed` (after storing the others and writing ``store/failures.json``) if any
    task raised."""
    t_start = time.perf_counter()
    tasks = list(tasks)
    keys = [t.key for t in tasks]
    if len(set(keys)) != len(keys):
        dup = next(k for k in keys if keys.count(k) > 1)
        raise ValueError(f"two tasks have the key {dup!r}")
    store = Path(store)
    store.mkdir(parents=True, exist_ok=True)
    found = load_stored(store, tasks)
    todo = [t for t in tasks if t.key not in found]
    run = TaskRun(store, skipped=len(found))

    def on_done(task: Task, payload) -> None:
        if isinstance(payload, BaseException):
            error, tb = error_text(payload)
            run.failures.append({"key": list(task.key), "function": task.fn.__qualname__, "error": error,
                                 "traceback": tb})
            return

        def write(tmp: Path) -> None:
            with tmp.open("wb") as fh:
                pickle.dump((task.key, payload), fh, protocol=pickle.HIGHEST_PROTOCOL)

        atomic_write(store / f"{task.name()}.pkl", write)
        found[task.key] = payload
        run.ran += 1

    execute([(t.fn, t.args) for t in todo], lambda i, payload: on_done(todo[i], payload), executor, workers,
            description if progress else None)
    write_failures(store, run.failures)
    run.results = {k: found[k] for k in sorted(found, key=_sort_key)}
    run.seconds = time.perf_counter() - t_start
    if run.failures:
        first = run.failures[0]
        raise TasksFailed(f"{len(run.failures)} of {len(tasks)} {description} failed (details in "
                          f"{store / 'failures.json'}; run again to retry them, the others are stored); first: "
                          f"{tuple(first['key'])}: {first['error']}")
    return run


def execute(jobs: Sequence[tuple[Callable, tuple]], on_done: Callable[[int, Any], None], executor: str = "process",
            workers: int | None = None, description: str | None = None, weights: Sequence[int] | None = None) -> None:
    """Call ``fn(*args)`` for each ``(fn, args)`` of ``jobs`` on ``executor`` and pass each outcome to
    ``on_done(index, result)`` as it arrives (in this process), an exception the call raised (or
    a dead worker's error) in place of the result. ``description``: a progress bar of that name
    (None: no bar) advancing by ``weights[index]`` (default 1) per finished job."""
    if executor not in EXECUTORS:
        raise ValueError(f"unknown executor {executor!r}; choose one of {', '.join(EXECUTORS)}")
    if workers is not None and workers < 1:
        raise ValueError(f"workers = {workers} must be >= 1")
    weights = list(weights) if weights is not None else [1] * len(jobs)
    from contextlib import nullcontext

    from rich.progress import BarColumn, MofNCompleteColumn, TextColumn, TimeElapsedColumn, TimeRemainingColumn

    from marketsched.progress import Progress

    bar_ctx = (Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                        TimeRemainingColumn()) if description is not None and jobs else nullcontext(None))
    with bar_ctx as bar:
        bar_task = bar.add_task(str(description), total=sum(weights)) if bar is not None else None

        def done(i: int, payload) -> None:
            on_done(i, payload)
            if bar is not None and bar_task is not None:
                bar.advance(bar_task, weights[i])

        if not jobs:
            return
        if executor == "serial":
            for i, (fn, args) in enumerate(jobs):
                done(i, _call(fn, args))
        elif executor == "process":
            _run_processes(jobs, workers, done)
        else:
            _run_ray(jobs, workers, done)


def _call(fn: Callable, args: tuple):
    """``fn(*args)``, or the exception it raised (an interrupt, ``KeyboardInterrupt``, still stops the run)."""
    try:
        return fn(*args)
    except Exception as exc:
        return exc


def _run_processes(jobs, workers, done):
    from concurrent.futures import as_completed

    from marketsched.experiments.processes import process_pool

    workers = workers or os.cpu_count() or 1
    pool = process_pool(min(workers, len(jobs)))
    try:
        futures = {pool.submit(fn, *args): i for i, (fn, args) in enumerate(jobs)}
        for fut in as_completed(futures):
            try:
                payload = fut.result()
            except Exception as exc:  # raised in the worker, worker died (BrokenProcessPool) or not picklable
                payload = exc
            done(futures[fut], payload)
    except BaseException:  # interrupted (Ctrl-C): drop the queued tasks rather than wait for them
        pool.shutdown(wait=False, cancel_futures=True)
        raise
    pool.shutdown()


def _run_ray(jobs, workers, done):
    """Run the jobs as Ray tasks (``ray.init()`` joins ``RAY_ADDRESS`` or starts a local one)."""
    try:
        import ray
    except ImportError as exc:
        raise ImportError("executor='ray' needs Ray, which is optional and not installed: pip install ray") from exc
    if not ray.is_initialized():
        ray.init(ignore_reinit_error=True, **({"num_cpus": workers} if workers else {}))
    remotes: dict = {}
    pending = {}
    for i, (fn, args) in enumerate(jobs):
        if fn not in remotes:
            remotes[fn] = ray.remote(fn)
        pending[remotes[fn].remote(*args)] = i
    while pending:
        ready, _ = ray.wait(list(pending), num_returns=1)
        for ref in ready:
            i = pending.pop(ref)
            try:
                payload = ray.get(ref)
            except Exception as exc:
                payload = exc
            done(i, payload)
