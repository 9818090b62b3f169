"""The compiled FCFS and EASY loops against a plain C FCFS (the floor), on one workload.

Builds ``fcfs_floor.c`` (``cc -O3``), writes the workload's columns to it, and runs it and the
compiled kernel (``marketsched.engine._backfilling.run``, the call alone: no Python set-up)
``--repeat`` times each (default 10), printing the minimum CPU seconds of each loop, the ratio to
the floor, and whether the floor's end times sum to the kernel's (the same FCFS schedule).
``--before REV`` also builds the kernel of git revision REV (e.g. ``HEAD~3``) and times it the
same way. Workload: SDSC-SP2 cleaned, unsplit (from ``MARKETSCHED_TRACES`` or the cache), or the
built-in one with ``--builtin``.

    MARKETSCHED_TRACES=/path/to/traces python benchmarks/bench_fcfs.py
    python benchmarks/bench_fcfs.py --builtin --before HEAD~3
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import subprocess
import sys
import sysconfig
import tempfile
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
ENGINE = "src/marketsched/engine"


def workload(builtin: bool):
    if builtin:
        from marketsched.scenario import Scenario

        return Scenario.builtin().workload.build()
    from marketsched.workloads import load_trace, to_workload

    return to_workload(load_trace("SDSC-SP2-1998-4.2-cln"))[0]


def floor(w, repeat: int, tmp: Path) -> tuple[float, float]:
    exe = tmp / "fcfs_floor"
    subprocess.run(["cc", "-O3", "-o", str(exe), str(HERE / "fcfs_floor.c"), "-lm"], check=True)
    data = (np.array([len(w), w.capacity], dtype=np.int64).tobytes() + w.submit_time.astype(np.float64).tobytes()
            + w.runtime.astype(np.float64).tobytes() + w.procs.astype(np.int64).tobytes())
    runs = [subprocess.run([str(exe)], input=data, capture_output=True, check=True).stdout.split()
            for _ in range(repeat)]
    return float(runs[0][0]), min(float(r[1]) for r in runs)


def old_kernel(rev: str, tmp: Path):
    """The _backfilling kernel of git revision ``rev``, built into ``tmp`` and imported from there."""
    src = tmp / "old"
    src.mkdir()
    for name in ("_backfilling.c", "kernel_engine.h", "kernel_sorted.h", "kernel_rankset.h"):
        text = subprocess.run(["git", "-C", str(ROOT), "show", f"{rev}:{ENGINE}/{name}"], capture_output=True,
                              text=True, check=True).stdout
        (src / name).write_text(text)
    so = src / ("_backfilling" + sysconfig.get_config_var("EXT_SUFFIX"))
    subprocess.run(["cc", "-O3", "-fwrapv", "-DNDEBUG", "-ffp-contract=off", "-fPIC", "-shared",
                    f"-I{sysconfig.get_paths()['include']}", "-o", str(so), str(src / "_backfilling.c")], check=True)
    spec = importlib.util.spec_from_file_location("_backfilling", so)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def kernel_loop(kernel, w, backfill: bool, repeat: int) -> tuple[float, float]:
    """``(sum of end times, minimum CPU seconds)`` of the kernel's run call."""
    from marketsched.engine.records import empty_records

    est = np.ascontiguousarray(np.where(np.isnan(w.runtime_estimate), w.runtime, w.runtime_estimate))
    cols = (np.ascontiguousarray(w.submit_time, dtype=np.float64), np.ascontiguousarray(w.runtime, dtype=np.float64),
            np.ascontiguousarray(w.procs, dtype=np.int64), est)
    best, total = float("inf"), 0.0
    for _ in range(repeat):
        r = empty_records(len(w))
        t0 = time.process_time()
        kernel.run(*cols, w.capacity, backfill, r.first_start, r.end_time, r.preemptions, r.payment, r.state)
        best = min(best, time.process_time() - t0)
        total = float(r.end_time.sum())
    return total, best


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=10)
    ap.add_argument("--builtin", action="store_true")
    ap.add_argument("--before", metavar="REV")
    a = ap.parse_args()
    from marketsched.engine import _backfilling

    w = workload(a.builtin)
    print(f"{w.name}: {len(w):,} jobs on {w.capacity} processors (CPU seconds, minimum of {a.repeat})")
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        check, c = floor(w, a.repeat, tmp)
        print(f"{'plain C FCFS (floor)':<28} {c:9.4f} s   1.00x")
        kernels = [("kernel", _backfilling)] + ([(f"kernel at {a.before}", old_kernel(a.before, tmp))]
                                                if a.before else [])
        for name, k in kernels:
            for backfill in (False, True):
                total, cpu = kernel_loop(k, w, backfill, a.repeat)
                same = "" if backfill else ("  same schedule" if total == check else "  DIFFERENT end times")
                print(f"{name + (' EASY' if backfill else ' FCFS'):<28} {cpu:9.4f} s {cpu / c:6.2f}x{same}")


if __name__ == "__main__":
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    sys.exit(main())
