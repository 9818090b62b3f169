"""Tasks of an experiment: declared, run once each, stored as they finish, resumed after a stop.

Every reproduction (``marketsched reproduce NAME``) declares its work as a list of
:class:`Task`: a stable ``key`` (a tuple of the task's parameters: text, numbers, booleans or
``None``; it names the task and orders the results), a top-level function ``fn`` and its
``args`` (both picklable: every executor but ``"serial"`` sends them to other processes). :func:`run_tasks` then

1. drops the tasks whose result is already stored (**resume**: an interrupted run, or a run
   whose tasks partly failed, is continued by running it again on the same folder);
2. runs the rest on local processes (``executor="process"``, the default, ``workers`` of them:
   :func:`marketsched.experiments.processes.process_pool`), in this process (``"serial"``), on
   Ray (``"ray"`` or :class:`Ray` with a cluster's address; optional, ``pip install
   'marketsched[ray]'``) or as a Slurm job array (``"slurm"`` or :class:`Slurm` with sbatch's
   options; the store must be on a file system the nodes share), in the declared order
   (declare long tasks first), with a progress bar that counts the failed tasks. Ray and
   Slurm run the tasks in chunks (about four per CPU), each chunk one remote task, so that a
   remote task's overhead is paid once per chunk; their workers get the caller's
   ``MARKETSCHED_*`` variables (the traces folder) and refuse to run on another marketsched
   version than the caller's;
3. stores each result as it arrives, one pickle file per task in the store folder (the key,
   the result and the call ``(fn, args)``, so ``marketsched rerun`` can make it again), written
   to a temporary name and then renamed (a crash never leaves half a file), and records in
   ``provenance.json`` each stored task's function and what made it (marketsched version,
   source revision, engine path: :func:`write_provenance`);
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

EXECUTORS = ("process", "serial", "ray", "slurm")
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


PROVENANCE = "provenance.json"


def write_provenance(store: Path, made: dict) -> None:
    """Add the tasks ``made`` (file name -> key and function) to ``store/provenance.json``, each
    with what made it (:func:`marketsched.results.provenance`: version, source revision, engine
    path); tasks stored by earlier runs keep theirs."""
    from marketsched.results import FORMAT, provenance

    path = Path(store) / PROVENANCE
    doc: dict = (json.loads(path.read_text()) if path.is_file()
                 else {"format": FORMAT, "kind": "task store", "tasks": {}})
    stamp = provenance()
    for name, entry in made.items():
        doc["tasks"][name] = {**entry, **stamp}
    atomic_write(path, lambda tmp: tmp.write_text(json.dumps(doc, indent=1, sort_keys=True) + "\n"))


def rerun_store(store, progress=None) -> list[tuple[tuple, bool]]:
    """Call every task of ``store`` again (in this process) from its stored call, and compare each
    result with the stored one (:func:`marketsched.results.same`, leaving out the values that
    measure time or load: :data:`marketsched.results.VOLATILE`): ``[(key, identical), ...]`` in
    key order. A task stored before calls were kept cannot be rerun (``ValueError`` naming it)."""
    from marketsched.results import VOLATILE, same

    store = Path(store)
    path = store / PROVENANCE
    if not path.is_file():
        raise ValueError(f"{store}: no {PROVENANCE} (not a task store written by this marketsched)")
    tasks = json.loads(path.read_text())["tasks"]
    out = []
    for i, (name, entry) in enumerate(sorted(tasks.items(), key=lambda kv: _sort_key(tuple(kv[1]["key"])))):
        with (store / f"{name}.pkl").open("rb") as fh:
            _, stored, *call = pickle.load(fh)
        if not call:
            raise ValueError(f"{store}: task {tuple(entry['key'])} was stored without its call: cannot rerun it")
        fn, args = call[0]
        out.append((tuple(entry["key"]), same(fn(*args), stored, VOLATILE)))
        if progress is not None:
            progress(i + 1, len(tasks))
    return out


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
                key, value, *_ = pickle.load(fh)  # (key, result, call); stores written before kept no call
            if key == t.key:
                out[t.key] = value
    return out


def run_tasks(tasks: Sequence[Task], store, executor="process", workers: int | None = None,
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
    from marketsched.experiments.inputs import check_traces, traces_in

    check_traces(traces_in(t.args for t in todo))  # one message for every missing trace, before any task
    run = TaskRun(store, skipped=len(found))

    def on_done(task: Task, payload) -> None:
        if isinstance(payload, BaseException):
            error, tb = error_text(payload)
            run.failures.append({"key": list(task.key), "function": task.fn.__qualname__, "error": error,
                                 "traceback": tb})
            return

        def write(tmp: Path) -> None:  # with the call, which `marketsched rerun` makes again
            with tmp.open("wb") as fh:
                pickle.dump((task.key, payload, (task.fn, task.args)), fh, protocol=pickle.HIGHEST_PROTOCOL)

        atomic_write(store / f"{task.name()}.pkl", write)
        made[task.name()] = {"key": list(task.key), "function": f"{task.fn.__module__}.{task.fn.__qualname__}"}
        found[task.key] = payload
        run.ran += 1

    made: dict[str, dict] = {}
    try:
        execute([(t.fn, t.args) for t in todo], lambda i, payload: on_done(todo[i], payload), executor, workers,
                description if progress else None, folder=store)
    finally:  # an interrupted run keeps the provenance of what it stored
        if made:
            write_provenance(store, made)
    write_failures(store, run.failures)
    run.results = {k: found[k] for k in sorted(found, key=_sort_key)}
    run.seconds = time.perf_counter() - t_start
    if run.failures:
        listed = "; ".join(f"{tuple(f['key'])}: {f['error']}" for f in run.failures[:10])
        more = f"; and {len(run.failures) - 10} more" if len(run.failures) > 10 else ""
        raise TasksFailed(f"{len(run.failures)} of {len(tasks)} {description} failed (details in "
                          f"{store / 'failures.json'}; run again to retry them, the others are stored): {listed}{more}")
    return run


@dataclass(frozen=True)
class Ray:
    """The ``"ray"`` executor with its options. ``address``: a running Ray cluster to join
    (``"host:6379"``, ``"ray://host:10001"`` or ``"auto"``); None: ``$RAY_ADDRESS``, else a local
    Ray started for the run (with ``workers`` CPUs) and stopped after it."""

    address: str | None = None

    def __str__(self) -> str:
        return "ray"


@dataclass(frozen=True)
class Slurm:
    """The ``"slurm"`` executor with its options: the jobs become one ``sbatch --array`` whose
    tasks read their jobs from, and write their results to, a folder under the store (which
    must be on a file system the cluster's nodes share). ``partition``, ``time`` (per array
    task, sbatch's ``--time``, e.g. ``"30:00"``) and ``cpus`` (per array task) go to sbatch;
    ``poll``: seconds between two looks at the queue."""

    partition: str | None = None
    time: str | None = None
    cpus: int = 1
    poll: float = 1.0

    def __post_init__(self):
        if self.cpus < 1:
            raise ValueError(f"Slurm cpus = {self.cpus} must be >= 1")
        if self.poll <= 0:
            raise ValueError(f"Slurm poll = {self.poll} must be positive")

    def __str__(self) -> str:
        return "slurm"


def executor_spec(executor) -> str | Ray | Slurm:
    """``executor`` checked: a name of :data:`EXECUTORS` (``"ray"`` and ``"slurm"`` with their
    default options) or a :class:`Ray` / :class:`Slurm` with options."""
    if isinstance(executor, (Ray, Slurm)):
        return executor
    if executor not in EXECUTORS:
        raise ValueError(f"unknown executor {executor!r}; choose one of {', '.join(EXECUTORS)}")
    return Ray() if executor == "ray" else Slurm() if executor == "slurm" else str(executor)


def shipped_env() -> dict[str, str]:
    """The caller's ``MARKETSCHED_*`` environment variables (the traces folder, caches), which
    the Ray and Slurm executors set in their workers."""
    return {k: v for k, v in os.environ.items() if k.startswith("MARKETSCHED_")}


def execute(jobs: Sequence[tuple[Callable, tuple]], on_done: Callable[[int, Any], int | None], executor="process",
            workers: int | None = None, description: str | None = None, weights: Sequence[int] | None = None,
            folder=None) -> None:
    """Call ``fn(*args)`` for each ``(fn, args)`` of ``jobs`` on ``executor`` (a name or a
    :class:`Ray` / :class:`Slurm`) and pass each outcome to ``on_done(index, result)`` as it
    arrives (in this process), an exception the call raised (or a dead worker's error) in place
    of the result. ``on_done`` may return how many of the job's ``weights`` failed (an
    exception: all of them). ``description``: a progress bar of that name (None: no bar)
    advancing by the job's weight (default 1), its name followed by the count of failed ones.
    ``folder``: where the Slurm executor keeps its files (required for it)."""
    spec = executor_spec(executor)
    if workers is not None and workers < 1:
        raise ValueError(f"workers = {workers} must be >= 1")
    if isinstance(spec, Slurm) and folder is None:
        raise ValueError("executor 'slurm' needs a folder the cluster's nodes share (the store)")
    weights = list(weights) if weights is not None else [1] * len(jobs)
    from contextlib import nullcontext

    from marketsched.progress import BAR, COUNT, ELAPSED, REMAINING, Progress

    bar_ctx = (Progress("{task.description}", BAR, COUNT, ELAPSED, REMAINING)
               if description is not None and jobs else nullcontext(None))
    failed = 0
    with bar_ctx as bar:
        bar_task = bar.add_task(str(description), total=sum(weights)) if bar is not None else None

        def done(i: int, payload) -> None:
            nonlocal failed
            bad = on_done(i, payload)
            bad = weights[i] if isinstance(payload, BaseException) else min(bad or 0, weights[i])
            failed += bad
            if bar is not None and bar_task is not None:
                bar.update(bar_task, advance=weights[i],
                           description=f"{description} ({failed:,} failed)" if failed else str(description))

        if not jobs:
            return
        if spec == "serial":
            for i, (fn, args) in enumerate(jobs):
                done(i, _call(fn, args))
        elif spec == "process":
            _run_processes(jobs, workers, done)
        elif isinstance(spec, Ray):
            _run_ray(jobs, workers, done, spec)
        elif isinstance(spec, Slurm):
            _run_slurm(jobs, workers, done, spec, Path(folder))


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


# ------------------------------------------------------------------ remote workers (Ray, Slurm)
def _version() -> str:
    import marketsched

    return str(marketsched.__version__)


class _RemoteTraceback(Exception):
    def __str__(self) -> str:
        return str(self.args[0])


def _with_cause(exc: BaseException, tb: str) -> BaseException:
    exc.__cause__ = _RemoteTraceback(tb)
    return exc


class _Shipped:
    """An exception raised in a remote worker, pickled with its traceback text (which pickling
    an exception drops): unpickled, it is the exception with the traceback chained as its cause."""

    def __init__(self, exc: BaseException):
        self.tb = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
        try:
            pickle.loads(pickle.dumps(exc))
            self.exc = exc
        except Exception:  # an exception that does not survive pickling travels as text
            self.exc = RuntimeError(f"{type(exc).__name__}: {exc}")

    def __reduce__(self):
        return _with_cause, (self.exc, self.tb)


def run_chunk(version: str, jobs: Sequence[tuple[Callable, tuple]]) -> list:
    """Run a remote worker's share of the jobs: their results, an exception in place of each
    one that raised. Fails (every job) when this worker's marketsched differs from the caller's
    ``version``: results would not match the local executor's."""
    if _version() != version:
        raise RuntimeError(f"the worker runs marketsched {_version()} ({__file__}), the caller {version}: install "
                           "the same version on every node")
    out = []
    for fn, args in jobs:
        payload = _call(fn, args)
        out.append(_Shipped(payload) if isinstance(payload, BaseException) else payload)
    return out


def _chunks(n: int, slots: int, most: int | None = None) -> list[range]:
    """Consecutive ranges of ``range(n)``, about four per slot (so that slow ranges even out),
    at most ``most`` of them: a remote task runs several small jobs and pays its overhead once."""
    k = max(1, min(n, 4 * max(1, slots), most or n))
    size = -(-n // k)
    return [range(a, min(a + size, n)) for a in range(0, n, size)]


def _run_ray(jobs, workers, done, spec: Ray):
    """Chunks of the jobs as Ray tasks, at most ``workers`` of them at once (default: all
    queued); the caller's ``MARKETSCHED_*`` variables go to the workers in their runtime_env."""
    try:
        import ray
    except ImportError as exc:
        raise ImportError("executor='ray' needs Ray, which is optional and not installed: pip install ray "
                          "(or pip install 'marketsched[ray]')") from exc
    address = spec.address or os.environ.get("RAY_ADDRESS")
    started = not ray.is_initialized()
    auth_mode = os.environ.get("RAY_AUTH_MODE")  # a new local Ray sets it in this process: restored after
    if started:
        # joining a cluster takes no resource arguments (Ray refuses them): its nodes have theirs;
        # "local" starts a Ray of our own even when another runs here (ray.init() would join it)
        ray.init(address=address or "local", log_to_driver=False,
                 **({} if address or workers is None else {"num_cpus": workers}))
    try:
        slots = workers or int(ray.cluster_resources().get("CPU", 1))
        chunks = _chunks(len(jobs), slots)
        remote = ray.remote(run_chunk).options(runtime_env={"env_vars": shipped_env()}, max_retries=0)
        version = _version()
        queue = list(range(len(chunks)))[::-1]
        pending: dict = {}
        while queue or pending:
            while queue and len(pending) < (workers or len(chunks)):
                k = queue.pop()
                pending[remote.remote(version, [jobs[i] for i in chunks[k]])] = k
            ready, _ = ray.wait(list(pending), num_returns=1)
            for ref in ready:
                k = pending.pop(ref)
                try:
                    payloads = ray.get(ref)
                except Exception as exc:  # the chunk as a whole (version, worker died): each job fails
                    payloads = [exc] * len(chunks[k])
                for i, payload in zip(chunks[k], payloads):
                    done(i, payload)
    finally:
        if started:
            ray.shutdown()
            if auth_mode is None:
                os.environ.pop("RAY_AUTH_MODE", None)
            else:
                os.environ["RAY_AUTH_MODE"] = auth_mode


def _slurm(args: list[str], what: str) -> str:
    import subprocess

    try:
        proc = subprocess.run(args, capture_output=True, text=True, timeout=60)
    except FileNotFoundError:
        raise RuntimeError(f"executor 'slurm' needs the Slurm commands ({args[0]} is not on PATH)") from None
    if proc.returncode != 0:
        raise RuntimeError(f"{what}: `{' '.join(args)}` failed: {proc.stderr.strip() or proc.stdout.strip()}")
    return proc.stdout


def _slurm_cpus(partition: str | None) -> int:
    """CPUs of ``partition`` (default: every partition) from ``sinfo`` (its A/I/O/T column)."""
    out = _slurm(["sinfo", "-h", "-o", "%C", *(["-p", partition] if partition else [])], "counting the CPUs")
    return sum(int(line.split("/")[-1]) for line in out.split() if line.count("/") == 3) or 1


def _run_slurm(jobs, workers, done, spec: Slurm, folder: Path):
    """Chunks of the jobs as one Slurm job array (``workers``: at most that many array tasks at
    once); each task runs ``python -m marketsched.experiments.tasks RUN_DIR`` on its chunk."""
    import shlex
    import sys
    import tempfile

    folder.mkdir(parents=True, exist_ok=True)
    run_dir = Path(tempfile.mkdtemp(prefix="slurm-", dir=folder)).resolve()
    slots = workers or max(1, _slurm_cpus(spec.partition) // spec.cpus)
    chunks = _chunks(len(jobs), slots, most=1000)  # Slurm's default MaxArraySize is 1001
    # like a spawned local process, the array task gets the caller's import path (a shared file system)
    version, env = _version(), shipped_env()
    for k, chunk in enumerate(chunks):
        payload = (version, env, sys.path, pickle.dumps([jobs[i] for i in chunk]))
        atomic_write(run_dir / f"in-{k}.pkl", lambda tmp: tmp.write_bytes(pickle.dumps(payload)))
    script = run_dir / "task.sh"
    script.write_text(f"#!/bin/sh\nexec {shlex.quote(sys.executable)} -m marketsched.experiments.tasks "
                      f"{shlex.quote(str(run_dir))} \"$SLURM_ARRAY_TASK_ID\"\n")
    args = ["sbatch", "--parsable", "--job-name=marketsched", f"--array=0-{len(chunks) - 1}"
            + (f"%{workers}" if workers else ""), f"--cpus-per-task={spec.cpus}", f"--output={run_dir}/log-%a.txt",
            f"--chdir={run_dir}", *([f"--partition={spec.partition}"] if spec.partition else []),
            *([f"--time={spec.time}"] if spec.time else []), str(script)]
    job = _slurm(args, "submitting the job array").strip().split(";")[0]
    pending, lost = set(range(len(chunks))), False
    try:
        while pending:
            running = _slurm(["squeue", "-h", "-j", job, "-o", "%i"], "watching the job array").strip()
            for k in sorted(pending):
                out = run_dir / f"out-{k}.pkl"
                if out.is_file():
                    payloads = pickle.loads(out.read_bytes())
                    pending.discard(k)
                    for i, p in zip(chunks[k], payloads):
                        done(i, p)
            if pending and not running:  # the array has left the queue: the rest ended without results
                for k in sorted(pending):
                    log = run_dir / f"log-{k}.txt"
                    tail = log.read_text(errors="replace").strip().splitlines()[-1:] if log.is_file() else []
                    exc = RuntimeError(f"Slurm array task {job}_{k} ended without a result (log {log}): "
                                       + (" | ".join(tail) or "no output"))
                    for i in chunks[k]:
                        done(i, exc)
                pending.clear()
                lost = True
            elif pending:
                time.sleep(spec.poll)
    except BaseException:
        _slurm(["scancel", job], "cancelling the job array")
        raise
    if not lost:  # kept otherwise, with the array tasks' logs
        import shutil

        shutil.rmtree(run_dir, ignore_errors=True)


def slurm_task(run_dir: Path, k: int) -> None:
    """One Slurm array task: run chunk ``k`` of ``run_dir`` and store its results (atomically)."""
    import sys

    version, env, path, jobs = pickle.loads((run_dir / f"in-{k}.pkl").read_bytes())
    os.environ.update(env)
    sys.path[:0] = [p for p in path if p not in sys.path]
    jobs = pickle.loads(jobs)  # after the path: the jobs' functions may live in the caller's folders
    try:
        out = run_chunk(version, jobs)
    except Exception as exc:
        out = [_Shipped(exc)] * len(jobs)
    atomic_write(run_dir / f"out-{k}.pkl", lambda tmp: tmp.write_bytes(pickle.dumps(out)))


if __name__ == "__main__":  # python -m marketsched.experiments.tasks RUN_DIR INDEX (a Slurm array task)
    import sys

    from marketsched.experiments import tasks  # the module's own names, not __main__'s, in the pickles

    tasks.slurm_task(Path(sys.argv[1]), int(sys.argv[2]))
