"""The compiled kernels on wide machines: jobs per CPU-second as the processor count grows.

Synthetic serial workloads (300,000 jobs, seed 1, offered load 1.0: Poisson arrivals, lognormal
run times, estimates 1-5 times the run time rounded up to a minute) on 500, 5,000 and 50,000
processors, and EASY on the real wide traces whole, unsplit (parallel jobs): CEA-Curie (93,312
cores) and LLNL-Atlas (9,216). With thousands of jobs running at once, the kernels' ordered sets of running jobs
(EASY's running jobs by estimated end, NPHB's running jobs by priority under the k-th price)
decide the speed. Each case runs in its own process; CPU seconds of the simulation only.

    python benchmarks/bench_wide.py                 # every case
    python benchmarks/bench_wide.py easy-50000      # one case
"""

from __future__ import annotations

import json
import subprocess
import sys

from harness import timed

JOBS = 300_000
WIDTHS = (500, 5_000, 50_000)
MECHANISMS = ("easy", "nphb", "hb")
TRACES = {"curie": "CEA-Curie-2011-2.1-cln", "atlas": "LLNL-Atlas-2006-2.1-cln"}
CASES = [f"{m}-{p}" for m in MECHANISMS for p in WIDTHS] + [f"easy-{t}" for t in TRACES]


def synthetic(capacity: int, n: int = JOBS, seed: int = 1):
    import numpy as np

    from marketsched.workloads.workload import Workload

    rng = np.random.default_rng(seed)
    runtime = np.ceil(rng.lognormal(mean=7.0, sigma=1.5, size=n))
    gaps = rng.exponential(runtime.mean() / capacity, size=n)  # offered load 1.0
    submit = np.floor(np.cumsum(gaps))
    estimate = np.ceil(runtime * rng.uniform(1.0, 5.0, size=n) / 60.0) * 60.0
    return Workload.from_columns(submit_time=submit, runtime=runtime, runtime_estimate=estimate,
                                 procs=np.ones(n, dtype=np.int64), capacity=capacity)


def measure(name: str) -> dict:
    from marketsched.scenario import WorkloadSpec, simulate, true_values

    mechanism, machine = name.split("-", 1)
    if machine in TRACES:
        workload = WorkloadSpec(trace=TRACES[machine], split=False).build()  # parallel jobs: EASY
    else:
        workload = synthetic(int(machine))
    values = true_values(workload, "bimodal", 1)
    _, _, cpu = timed(simulate, workload, mechanism, values, "kth")
    n = len(workload)
    return {"case": name, "jobs": n, "processors": workload.capacity, "cpu_s": cpu, "jobs_per_cpu_s": n / cpu}


def main(argv: list[str]) -> None:
    if argv and argv[0] == "--one":
        print(json.dumps(measure(argv[1])))
        return
    for name in argv or CASES:
        out = subprocess.run([sys.executable, __file__, "--one", name], capture_output=True, text=True, check=True)
        row = json.loads(out.stdout.strip().splitlines()[-1])
        print(f"{row['case']:>14} {row['jobs']:>10,} jobs {row['processors']:>7,} procs "
              f"{row['cpu_s']:8.2f} CPU s {row['jobs_per_cpu_s']:>12,.0f} jobs/CPU-s", flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
