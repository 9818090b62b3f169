"""Engine throughput on real traces: prints seconds, jobs per second and peak memory.

Cases (issue 2 targets on a 2-core machine):

* ``hb-lpc``: HB + k-th price on LPC-EGEE (about 220k serial jobs, 105 = 75% of 140 nodes),
  target under 3 s;
* ``easy-sdsc``: EASY backfilling on SDSC-SP2 (59k parallel jobs, 128 processors), target
  under 1 s;
* ``hb-hpc2n``: HB + k-th price on HPC2N split into 1.29M serial jobs (240 nodes), target
  under 30 s and 2 GB.

Traces are found as everywhere in marketsched (MARKETSCHED_TRACES folder, cache, download).
Each case runs in its own process so that the peak resident memory it prints is its own;
"simulate" is the engine run alone, "total" adds reading and preparing the trace.

    python benchmarks/bench_engine.py            # all cases
    python benchmarks/bench_engine.py hb-lpc     # one case
"""

from __future__ import annotations

import sys

from harness import main, peak_mb, timed

CASES = {
    "hb-lpc": dict(trace="LPC-EGEE-2004-1.2-cln", split=False, capacity=0.75, mechanism="hb", target=3.0),
    "easy-sdsc": dict(trace="SDSC-SP2-1998-4.2-cln", split=False, capacity=1.0, mechanism="easy", target=1.0),
    "hb-hpc2n": dict(trace="HPC2N-2002-2.2-cln", split=True, capacity=1.0, mechanism="hb", target=30.0),
}


def measure(name: str) -> dict:
    from marketsched.scenario import WorkloadSpec, simulate, true_values

    case = CASES[name]
    spec = WorkloadSpec(trace=case["trace"], split=case["split"], capacity=case["capacity"])
    (workload, values), prepare_s, _ = timed(lambda: (w := spec.build(), true_values(w, "bimodal", 1)))
    records, wall, cpu = timed(simulate, workload, case["mechanism"], values, "kth")
    assert records.counts()["completed"] == len(workload)
    return {"case": name, "jobs": len(workload), "nodes": workload.capacity, "prepare_s": prepare_s,
            "simulate_s": wall, "cpu_s": cpu, "jobs_per_s": len(workload) / wall, "peak_mb": peak_mb()}


if __name__ == "__main__":
    main(sys.argv[1:], CASES, measure, __file__)
