"""Jobs per CPU-second of each mechanism on the built-in workload, in the form it runs it.

Builds the command line's built-in scenario (``Scenario.builtin()``: 5,000 jobs on 64
processors, each mechanism in its paper's form: split, whole machine or node counts) and runs
every registered mechanism ``--repeat`` times (default 3), printing the jobs of its form, the
CPU seconds of the simulation (``Run.cpu_seconds``, minimum over the repeats) and jobs per
CPU-second. CPU seconds, not wall seconds: the machine is shared. ``--mechanisms`` picks some;
``--jobs`` and ``--nodes`` change the workload.

    python benchmarks/bench_mechanisms.py
    python benchmarks/bench_mechanisms.py --mechanisms ees,relaxed-ees,egg,ps,sh
"""

from __future__ import annotations

import argparse
import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")


def main() -> None:
    from marketsched.mechanisms.registry import names
    from marketsched.scenario import Scenario, in_form, run

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--jobs", type=int, default=5000)
    ap.add_argument("--nodes", type=int, default=64)
    ap.add_argument("--mechanisms", default="all")
    a = ap.parse_args()
    jobs = Scenario.builtin(a.jobs, a.nodes).build()
    chosen = names() if a.mechanisms == "all" else [m.strip() for m in a.mechanisms.split(",")]
    print(f"built-in workload: {len(jobs.workload):,} jobs on {jobs.workload.capacity} processors")
    print(f"{'mechanism':<12} {'form':<14} {'jobs':>7} {'CPU s':>8} {'jobs/CPU s':>11}")
    for m in chosen:
        formed, form = in_form(jobs, m)
        cpu = min(run(formed, m).cpu_seconds for _ in range(a.repeat))
        n = len(formed.workload)
        print(f"{m:<12} {form:<14} {n:>7,} {cpu:>8.3f} {n / cpu:>11,.0f}")


if __name__ == "__main__":
    main()
