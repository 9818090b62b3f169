"""DLGM / P-DLGM throughput on real traces: prints seconds, jobs per second and peak memory.

Cases (issue 4 target on a 2-core machine):

* ``pdlgm-hpc2n``: P-DLGM on HPC2N split into 1.29M serial jobs (240 nodes), target under 60 s;
* ``dlgm-hpc2n``: DLGM on the same workload (no stated target; reported beside it);
* ``pdlgm-lpc``, ``dlgm-lpc``: LPC-EGEE at 75% (220k jobs, 105 nodes), the thesis's setting.

Weights: uniform on {1..100}, seed 1 (seed 001 section 5.5.1). Traces are found as everywhere
in marketsched (``MARKETSCHED_TRACES`` folder, cache, download). Each case runs in its own
process so that the peak resident memory it prints is its own; "simulate" is the engine run
alone (wall clock; "cpu s" is its CPU time, the fairer figure on a shared machine), "prepare"
reading and splitting the trace. Jobs per second are per wall-clock second.

    MARKETSCHED_TRACES=/work/shared/data/traces python benchmarks/bench_dlgm.py
    python benchmarks/bench_dlgm.py pdlgm-hpc2n
"""

from __future__ import annotations

import json
import resource
import subprocess
import sys
import time

CASES = {
    "pdlgm-hpc2n": dict(trace="HPC2N-2002-2.2-cln", split=True, capacity=1.0, preemptive=True, target=60.0),
    "dlgm-hpc2n": dict(trace="HPC2N-2002-2.2-cln", split=True, capacity=1.0, preemptive=False, target=None),
    "pdlgm-lpc": dict(trace="LPC-EGEE-2004-1.2-cln", split=False, capacity=0.75, preemptive=True, target=None),
    "dlgm-lpc": dict(trace="LPC-EGEE-2004-1.2-cln", split=False, capacity=0.75, preemptive=False, target=None),
}


def run_case(name: str) -> dict:
    from marketsched.mechanisms.online.dlgm import run_dlgm
    from marketsched.scenario import WorkloadSpec, true_values

    case = CASES[name]
    t0 = time.perf_counter()
    workload = WorkloadSpec(trace=case["trace"], split=case["split"], capacity=case["capacity"]).build()
    weights = true_values(workload, "uniform", 1)
    t1 = time.perf_counter()
    c1 = time.process_time()
    records, policy = run_dlgm(workload, weights, preemptive=case["preemptive"])
    t2 = time.perf_counter()
    c2 = time.process_time()
    assert records.counts()["completed"] == len(workload)
    return {
        "case": name,
        "jobs": len(workload),
        "nodes": workload.capacity,
        "prepare_s": t1 - t0,
        "simulate_s": t2 - t1,
        "cpu_s": c2 - c1,
        "jobs_per_s": len(workload) / (t2 - t1),
        "preemptions": int(records.preemptions.sum()),
        "peak_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "target_s": case["target"],
    }


def main(argv: list[str]) -> None:
    if argv and argv[0] == "--child":
        print(json.dumps(run_case(argv[1])))
        return
    names = argv or list(CASES)
    for n in names:
        if n not in CASES:
            sys.exit(f"unknown case {n!r}; choose from {', '.join(CASES)}")
    print(f"{'case':12s} {'jobs':>10s} {'nodes':>6s} {'prepare s':>10s} {'simulate s':>11s} {'cpu s':>7s} {'jobs/s':>10s} "
          f"{'preempt':>9s} {'peak MB':>8s} {'target s':>9s}")
    for n in names:
        out = subprocess.run([sys.executable, __file__, "--child", n], capture_output=True, text=True)
        if out.returncode != 0:
            print(f"{n:12s} failed:\n{out.stderr}")
            continue
        r = json.loads(out.stdout.strip().splitlines()[-1])
        target = r["target_s"]
        verdict = "" if target is None else ("ok" if r["simulate_s"] <= target else "MISSED")
        print(f"{r['case']:12s} {r['jobs']:>10,d} {r['nodes']:>6d} {r['prepare_s']:>10.2f} {r['simulate_s']:>11.2f} {r['cpu_s']:>7.2f} "
              f"{r['jobs_per_s']:>10,.0f} {r['preemptions']:>9,d} {r['peak_mb']:>8.0f} "
              f"{'-' if target is None else f'{target:.0f}':>9s} {verdict}")


if __name__ == "__main__":
    main(sys.argv[1:])
