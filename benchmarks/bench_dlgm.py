"""DLGM / P-DLGM throughput on real traces: prints seconds, jobs per second and peak memory.

Cases (the target on a 2-core machine):

* ``pdlgm-hpc2n``: P-DLGM on HPC2N split into 1.29M serial jobs (240 nodes), target under 60 s;
* ``dlgm-hpc2n``: DLGM on the same workload (no stated target; reported beside it);
* ``pdlgm-lpc``, ``dlgm-lpc``: LPC-EGEE at 75% (220k jobs, 105 nodes), the thesis's setting.

Weights: uniform on {1..100}, seed 1 (Stößer 2009, section 5.5.1). Traces are found as everywhere
in marketsched (``MARKETSCHED_TRACES`` folder, cache, download). Each case runs in its own
process so that the peak resident memory it prints is its own; "simulate" is the engine run
alone (wall clock; "cpu s" is its CPU time, the fairer figure on a shared machine), "prepare"
reading and splitting the trace. Jobs per second are per wall-clock second.

    MARKETSCHED_TRACES=../shared/data/traces python benchmarks/bench_dlgm.py
    python benchmarks/bench_dlgm.py pdlgm-hpc2n
"""

from __future__ import annotations

import sys

from harness import main, peak_mb, timed

CASES = {
    "pdlgm-hpc2n": dict(trace="HPC2N-2002-2.2-cln", split=True, capacity=1.0, preemptive=True, target=60.0),
    "dlgm-hpc2n": dict(trace="HPC2N-2002-2.2-cln", split=True, capacity=1.0, preemptive=False, target=None),
    "pdlgm-lpc": dict(trace="LPC-EGEE-2004-1.2-cln", split=False, capacity=0.75, preemptive=True, target=None),
    "dlgm-lpc": dict(trace="LPC-EGEE-2004-1.2-cln", split=False, capacity=0.75, preemptive=False, target=None),
}


def measure(name: str) -> dict:
    from marketsched.mechanisms.online.dlgm import run_dlgm
    from marketsched.scenario import WorkloadSpec, true_values

    case = CASES[name]
    spec = WorkloadSpec(trace=case["trace"], split=case["split"], capacity=case["capacity"])
    (workload, weights), prepare_s, _ = timed(lambda: (w := spec.build(), true_values(w, "uniform", 1)))
    (records, policy), wall, cpu = timed(run_dlgm, workload, weights, preemptive=case["preemptive"])
    assert records.counts()["completed"] == len(workload)
    return {"case": name, "jobs": len(workload), "nodes": workload.capacity, "prepare_s": prepare_s,
            "simulate_s": wall, "cpu_s": cpu, "jobs_per_s": len(workload) / wall,
            "preemptions": int(records.preemptions.sum()), "peak_mb": peak_mb()}


if __name__ == "__main__":
    main(sys.argv[1:], CASES, measure, __file__)
