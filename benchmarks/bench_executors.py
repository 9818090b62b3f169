"""Per-cell overhead of each executor: N tiny tasks (``abs(i)``, microseconds of work each)
through :func:`marketsched.experiments.tasks.run_tasks`, so that the wall time is the
executor's own cost: sending the task, running it remotely, storing its result (one pickle
per task, as in every reproduction), and for Ray and Slurm the chunking (about four chunks per
CPU, one remote task each).

Printed per executor: wall seconds of the run, milliseconds per cell, remote tasks used.
Ray joins ``--ray-address`` (or ``$RAY_ADDRESS``) or starts a local Ray first (its start-up
is printed apart, not counted). Slurm needs a cluster (``bash scripts/slurm-up.sh``).
``--unchunked`` adds Ray and Slurm runs with one cell per remote task (what chunking saves).

Usage: python benchmarks/bench_executors.py [--cells 1000] [--executors serial,process,ray,slurm] [--unchunked]
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

from marketsched.experiments import tasks as T


def one_per_task(n: int, slots: int, most: int | None = None) -> list[range]:
    return [range(i, i + 1) for i in range(min(n, most or n))]


def run(executor, cells: int, folder: Path, workers: int | None) -> tuple[float, int]:
    tasks = [T.Task(("tiny", i), abs, (-i,)) for i in range(cells)]
    t0 = time.perf_counter()
    out = T.run_tasks(tasks, folder, executor=executor, workers=workers, progress=False)
    wall = time.perf_counter() - t0
    assert out.values() == list(range(cells)) and out.ran == cells
    return wall, len(T._chunks(cells, workers or os.cpu_count() or 1, 1000 if str(executor) == "slurm" else None))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cells", type=int, default=1000)
    ap.add_argument("--executors", default="serial,process,ray,slurm")
    ap.add_argument("--workers", type=int, default=2, help="worker processes, Ray tasks or array tasks at once")
    ap.add_argument("--ray-address", default=None)
    ap.add_argument("--unchunked", action="store_true")
    args = ap.parse_args()
    names = args.executors.split(",")
    rows = []
    with tempfile.TemporaryDirectory(prefix="bench-executors-", dir=os.getcwd()) as tmp:
        if "ray" in names:
            import ray

            t0 = time.perf_counter()
            address = args.ray_address or os.environ.get("RAY_ADDRESS")
            ray.init(address=address or "local", log_to_driver=False, **({} if address else {"num_cpus": args.workers}))
            print(f"ray.init ({'joined ' + address if address else 'local Ray started'}): "
                  f"{time.perf_counter() - t0:.1f} s (not counted below)")
        for name in names:
            executor = T.Slurm(poll=0.2) if name == "slurm" else name
            cases = [(name, False)] + ([(name, True)] if args.unchunked and name in ("ray", "slurm") else [])
            for label, unchunked in cases:
                chunks = T._chunks
                if unchunked:
                    T._chunks = one_per_task
                try:
                    wall, tasks = run(executor, args.cells, Path(tmp) / f"{label}-{unchunked}", args.workers)
                finally:
                    T._chunks = chunks
                rows.append((label + (" (1 cell per task)" if unchunked else ""), wall,
                             args.cells if unchunked else (tasks if name in ("ray", "slurm") else None)))
    print(f"{args.cells:,} tiny cells, {args.workers} workers")
    print(f"{'executor':<28} {'wall s':>8} {'ms/cell':>8} {'remote tasks':>13}")
    for label, wall, tasks in rows:
        print(f"{label:<28} {wall:>8.2f} {1000 * wall / args.cells:>8.2f} {'-' if tasks is None else tasks:>13}")


if __name__ == "__main__":
    main()
